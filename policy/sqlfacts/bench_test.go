package sqlfacts

import (
	"context"
	"errors"
	"slices"
	"syscall"
	"testing"
	"time"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	pgparser "github.com/pganalyze/pg_query_go/v5/parser"

	"github.com/egressd/egressd/policy/sqlfacts/analyst"
	"github.com/egressd/egressd/policy/sqlfacts/internal/jsontree"
	"github.com/egressd/egressd/policy/sqlparse"
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

// medianAnalyst is the analyst corpus's median statement by length.
func medianAnalyst() string {
	qs := analyst.Queries()
	slices.SortStableFunc(qs, func(a, b string) int { return len(a) - len(b) })
	return qs[len(qs)/2]
}

// cpuTime is the user+system CPU time this process has used: on a shared
// machine, CPU per operation is steadier than wall time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCold is everything the gate's SQL side does for a statement
// no cache knows (pggate's evaluate without the policy): the pre-scan,
// the cache key, the parse and facts, and the audit fingerprint of each
// statement, on the analyst corpus's median statement. cpu-ns/op counts
// every thread of the process (the GC's too).
func BenchmarkCold(b *testing.B) {
	q := medianAnalyst()
	ctx := context.Background()
	b.ReportAllocs()
	start := cpuTime(b)
	for b.Loop() {
		if err := coldDecide(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
}

// coldDecide is the SQL side of a cold decision, as pggate's evaluate
// makes it.
func coldDecide(ctx context.Context, q string) error {
	toks, err := PrescanTokens(q, Limits{})
	if err != nil {
		return err
	}
	if !sqlparse.InProcess(q) {
		return errors.New("median statement not parsed in-process")
	}
	sqlparse.Key(q, toks)
	sts, err := ParseContext(ctx, q, Options{Tokens: toks})
	if err != nil {
		return err
	}
	for _, st := range sts {
		if _, err := sqlparse.Fingerprint(ctx, st.AuditSQL); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkColdParts is each libpg_query route on the median analyst
// statement alone, with cpu-ns/op as BenchmarkCold reports it: the scan
// every text gets, the JSON parse the facts are read from, the protobuf
// parse (pg_query.Parse, the tree decoded into Go) and its C half alone,
// and the fingerprint of the redacted statement.
func BenchmarkColdParts(b *testing.B) {
	q := medianAnalyst()
	for _, bc := range []struct {
		name string
		f    func() error
	}{
		{"scan", func() error { _, err := sqlparse.Scan(q); return err }},
		{"json", func() error { _, err := pgparser.ParseToJSON(q); return err }},
		{"protobuf-c", func() error { _, err := pgparser.ParseToProtobuf(q); return err }},
		{"protobuf", func() error { _, err := pg_query.Parse(q); return err }},
		{"fingerprint", func() error { _, err := pgparser.FingerprintToHexStr(q); return err }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			start := cpuTime(b)
			for b.Loop() {
				if err := bc.f(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
		})
	}
}
