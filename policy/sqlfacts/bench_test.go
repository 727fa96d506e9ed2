package sqlfacts

import (
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/egressd/egressd/policy/sqlfacts/internal/jsontree"
)

const benchQuery = "SELECT u.id, u.name, lower(u.name) AS lname, count(i.id) AS n FROM users u LEFT JOIN items i ON i.id = u.id " +
	"WHERE u.id > 10 AND u.name LIKE 'a%' GROUP BY u.id, u.name ORDER BY n DESC LIMIT 50"

// BenchmarkParse is pre-scan + pg_query parse + facts for a 200-byte
// query; BenchmarkParseToJSON is pg_query's part alone, for comparison,
// and BenchmarkFacts the rest (JSON parse and walk).
func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(benchQuery, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseToJSON(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := pg_query.ParseToJSON(benchQuery); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFacts(b *testing.B) {
	tree, err := pg_query.ParseToJSON(benchQuery)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		d := jsontree.Acquire()
		if err := d.Parse(tree); err != nil {
			b.Fatal(err)
		}
		c := classifier{d: d, defSchema: "public"}
		if _, err := c.classify(d.Get(d.Get(0, keyStmts)+1, keyStmt)); err != nil {
			b.Fatal(err)
		}
		d.Release()
	}
}

func BenchmarkPrescan(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if err := Prescan(benchQuery, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseCatalog is BenchmarkParse with a database catalog that
// defines user functions, an operator and a cast to resolve against.
func BenchmarkParseCatalog(b *testing.B) {
	opt := Options{Catalog: testCatalog()}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(benchQuery, opt); err != nil {
			b.Fatal(err)
		}
	}
}
