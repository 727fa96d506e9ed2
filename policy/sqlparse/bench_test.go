package sqlparse

import (
	"context"
	"testing"
)

// benchQuery is a typical 200-byte application query (the same as the
// gate's and sqlfacts' benchmarks).
const benchQuery = "SELECT u.id, u.name, lower(u.name) AS lname, count(i.id) AS n FROM users u LEFT JOIN items i ON i.id = u.id " +
	"WHERE u.id > 10 AND u.name LIKE 'a%' GROUP BY u.id, u.name ORDER BY n DESC LIMIT 50"

// BenchmarkParseToJSON compares the in-process path (the bound's scan plus
// the parse) with the same parse through a worker (a pipe round trip to a
// warm worker process).
func BenchmarkParseToJSON(b *testing.B) {
	ctx := context.Background()
	b.Run("in-process", func(b *testing.B) {
		if !InProcess(benchQuery) {
			b.Fatal("benchQuery is not in-process")
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ParseToJSON(ctx, benchQuery); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("worker", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := workers.do(ctx, opJSON, benchQuery); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkScan is the work the containment and the redaction add to
// every parse: PostgreSQL's scanner (a cgo call), the bound (Levels) and
// the redaction.
func BenchmarkScan(b *testing.B) {
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Scan(benchQuery); err != nil {
				b.Fatal(err)
			}
		}
	})
	toks, err := Scan(benchQuery)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("levels", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			Levels(toks)
		}
	})
	b.Run("redact", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			RedactTokens(benchQuery, toks)
		}
	})
}
