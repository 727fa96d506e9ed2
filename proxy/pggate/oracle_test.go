package pggate

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlfacts"
)

// TestOracle checks the SQL facts against a real PostgreSQL. Statements
// from the repository's corpora (testdata/oracle/corpus.sql and the SQL
// string literals of the gate's and sqlfacts' tests) and from a seeded
// grammar (oracle_gen_test.go) are decided for the read_only and
// read_write profiles (and read_only with two user functions allowed) by
// the gate's own code (Gate.evaluate: pre-scan,
// pg_query, facts resolved against the database's catalog, the shipped
// egress.sql policy). Every statement the gate allows then runs in a
// scratch database, inside a transaction that is rolled back, as a role
// that holds only the privileges the facts name. The server is the
// witness:
//
//   - a permission error (42501) means the statement reached a relation,
//     schema, sequence or function its facts do not name;
//   - row and TRUNCATE triggers on every table record writes, which must
//     be to a relation in the write facts (a view's base table counts)
//     and, whatever the facts say, within the profile's write list;
//   - an event trigger records DDL, which no profile allows;
//   - pg_stat_xact_user_functions (track_functions = all) counts user
//     function calls, which must be in the facts by qualified name.
//
// A discrepancy fails the test unless testdata/oracle/known.txt lists it
// (the facts' known gaps, to be fixed and removed); with the default seed
// and count, a listed discrepancy that no longer occurs fails too, so the
// list only shrinks. Regenerate it with -oracle.update.
//
// The normal run is bounded (-oracle.n statements, stopping early after
// -oracle.time). The full run:
//
//	go test -run TestOracle -timeout 2h ./proxy/pggate/ -args -oracle.n=50000 -oracle.time=0
//
// or EGRESSD_ORACLE_FULL=1; -oracle.seed picks another reproducible run.
func TestOracle(t *testing.T) {
	n, limit := *oracleN, *oracleTime
	if os.Getenv("EGRESSD_ORACLE_FULL") != "" {
		n, limit = 50000, 0
	}
	o := newOracle(t)
	start := time.Now()
	texts := oracleCorpus(t)
	corpus := len(texts)
	gen := &sqlGen{r: rand.New(rand.NewPCG(uint64(*oracleSeed), 0x0e9e55d))}
	for range n {
		texts = append(texts, gen.respell(gen.statement()))
	}
	complete := true
	profiles := []policy.Identity{
		{ID: "agent-ro", Attributes: map[string]string{"sql_profile": "read_only"}},
		{ID: "agent-rw", Attributes: map[string]string{"sql_profile": "read_write"}},
		{ID: "agent-udf", Attributes: map[string]string{"sql_profile": udfProfile}},
	}
	for i, text := range texts {
		if limit > 0 && time.Since(start) > limit {
			t.Logf("time limit %v reached after %d of %d statements", limit, i, len(texts))
			complete = false
			break
		}
		for _, id := range profiles {
			o.check(id, text)
		}
	}
	o.stats.log(t, corpus, len(texts)-corpus, time.Since(start))
	o.judge(t, complete && o.stats.undecided == 0 && n == *oracleN && *oracleSeed == 1 && os.Getenv("EGRESSD_ORACLE_FULL") == "")
}

var (
	oracleN      = flag.Int("oracle.n", 2500, "TestOracle: generated statements (each decided for three profiles)")
	oracleSeed   = flag.Int64("oracle.seed", 1, "TestOracle: generator seed")
	oracleTime   = flag.Duration("oracle.time", 150*time.Second, "TestOracle: stop starting statements after this long (0: no limit)")
	oracleUpdate = flag.Bool("oracle.update", false, "TestOracle: rewrite testdata/oracle/known.txt with the discrepancies found")
)

const knownFile = "testdata/oracle/known.txt"

// judge fails the test on discrepancies known.txt does not list, and, on
// the default run (strict), on listed ones that did not occur.
func (o *oracle) judge(t *testing.T, strict bool) {
	keys := make([]string, 0, len(o.found))
	for k := range o.found {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if *oracleUpdate {
		var b strings.Builder
		b.WriteString("# TestOracle's known discrepancies (profile, kind, detail, statement), written by -oracle.update.\n")
		b.WriteString("# Each is a gap in the SQL facts; fix it and regenerate. See oracle_test.go.\n")
		for _, k := range keys {
			b.WriteString(k + "\n")
		}
		if err := os.WriteFile(knownFile, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %d discrepancies to %s", len(keys), knownFile)
		return
	}
	known := map[string]bool{}
	if f, err := os.Open(knownFile); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if line := sc.Text(); line != "" && !strings.HasPrefix(line, "#") {
				known[line] = true
			}
		}
		f.Close()
	} else if !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	summary := map[string]int{}
	for _, k := range keys {
		d := o.found[k]
		summary[d.profile+" "+d.kind+": "+d.detail]++
		if !known[k] {
			t.Errorf("oracle discrepancy (%s profile, %s: %s):\n\t%s", d.profile, d.kind, d.detail, d.sql)
		}
	}
	classes := make([]string, 0, len(summary))
	for c, n := range summary {
		classes = append(classes, fmt.Sprintf("%4d  %s", n, c))
	}
	slices.Sort(classes)
	t.Logf("oracle: %d discrepancies (%d known) by class:\n%s", len(keys), len(known), strings.Join(classes, "\n"))
	if !strict {
		return
	}
	for k := range known {
		if _, ok := o.found[k]; !ok {
			t.Errorf("known discrepancy no longer occurs (the facts improved: run with -oracle.update): %s", k)
		}
	}
}

// TestOracleWitnesses shows that each witness of TestOracle reports what
// it must: statements run with facts that leave out what they do.
func TestOracleWitnesses(t *testing.T) {
	o := newOracle(t)
	fn := func(name string) sqlfacts.Function { return sqlfacts.Function{Schema: "public", Name: name} }
	tests := []struct {
		name, sql    string
		facts        sqlfacts.Statement
		kind, detail string
	}{
		{"read outside the facts", "SELECT * FROM private.vault", sqlfacts.Statement{Command: "select"},
			"permission", "permission denied for schema private"},
		{"write outside the facts", "DELETE FROM x WHERE id = 1", sqlfacts.Statement{Command: "delete", Relations: []sqlfacts.Relation{{Schema: "public", Name: "x", Role: sqlfacts.RoleRead}}},
			"permission", "permission denied for table x"},
		{"write the permissions cannot see", "SELECT app_definer_purge()", sqlfacts.Statement{Command: "select", Functions: []sqlfacts.Function{fn("app_definer_purge")}},
			"write", "public.x delete"},
		{"function the permissions cannot see", "SELECT app_definer_fmt()", sqlfacts.Statement{Command: "select", Functions: []sqlfacts.Function{fn("app_definer_fmt")}},
			"function", "public.app_fmt"},
		{"ddl", "SELECT app_definer_ddl()", sqlfacts.Statement{Command: "select", Functions: []sqlfacts.Function{fn("app_definer_ddl")}},
			"ddl", "CREATE TABLE"},
		{"pinned setting", "SET search_path = private", sqlfacts.Statement{Command: "set"},
			"pinned_setting", `search_path "$user", public -> private`},
		{"policy function", "SELECT id FROM guarded", sqlfacts.Statement{Command: "select", Relations: []sqlfacts.Relation{{Schema: "public", Name: "guarded", Role: sqlfacts.RoleRead}}},
			"permission", "permission denied for function app_check"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clear(o.found)
			st := tt.facts
			o.run("test", tt.sql, []*sqlfacts.Statement{&st}, false)
			want := discrepancy{profile: "test", kind: tt.kind, detail: tt.detail, sql: tt.sql}
			if _, ok := o.found[want.key()]; !ok || len(o.found) != 1 {
				t.Errorf("run(%q) found %v; want exactly %v", tt.sql, o.found, want)
			}
		})
	}
	// With the facts that say it all, the same statements are clean.
	clear(o.found)
	st := sqlfacts.Statement{Command: "select", Relations: []sqlfacts.Relation{{Schema: "private", Name: "vault", Role: sqlfacts.RoleRead}}}
	o.run("test", "SELECT * FROM private.vault", []*sqlfacts.Statement{&st}, false)
	if len(o.found) != 0 {
		t.Errorf("run with complete facts found %v; want nothing", o.found)
	}
}
