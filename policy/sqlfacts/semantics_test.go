package sqlfacts

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy/sqlfacts/analyst"
	"github.com/egressd/egressd/policy/sqlparse"
)

// The tests of this file pin facts to what PostgreSQL does with the
// statement (issue 12: facts that match PostgreSQL's semantics).

func TestDMLTargetIsNeverACTE(t *testing.T) {
	tw := []Relation{{"public", "t", RoleWrite}}
	tests := []relationsCase{
		{"delete", "WITH t AS (SELECT 1) DELETE FROM t RETURNING *", tw, false},
		{"update", "WITH t AS (SELECT 1) UPDATE t SET a = 1 RETURNING *", tw, false},
		{"insert", "WITH t AS (SELECT 1) INSERT INTO t VALUES (1) RETURNING *", tw, false},
		{"merge", "WITH t AS (SELECT 1) MERGE INTO t USING (SELECT 1) s ON true WHEN MATCHED THEN DELETE", tw, false},
		{"copy delete", "COPY (WITH t AS (SELECT 1) DELETE FROM t RETURNING *) TO STDOUT", tw, false},
		{"copy update", "COPY (WITH orders AS (SELECT 1) UPDATE orders SET total = 0 RETURNING *) TO STDOUT", []Relation{{"public", "orders", RoleWrite}}, false},
		{"shadowed write list", "WITH secrets AS (SELECT 1) DELETE FROM secrets WHERE k = 'x'", []Relation{{"public", "secrets", RoleWrite}}, false},
		{"cte read is still not a table", "WITH t AS (SELECT 1) INSERT INTO u SELECT * FROM t", []Relation{{"public", "u", RoleWrite}}, false},
	}
	checkRelations(t, tests)
}

func TestCopyQueryIsTheEffectiveStatement(t *testing.T) {
	tests := []struct {
		sql, inner string
	}{
		{"COPY (SELECT * FROM a) TO STDOUT", "select"},
		{"COPY (DELETE FROM x RETURNING id) TO STDOUT", "delete"},
		{"COPY (UPDATE x SET a = 1 WHERE b RETURNING id) TO STDOUT", "update"},
		{"COPY (INSERT INTO x VALUES (1) RETURNING id) TO STDOUT", "insert"},
	}
	for _, tt := range tests {
		t.Run(tt.inner, func(t *testing.T) {
			st := parseOne(t, tt.sql)
			if st.Inner == nil || st.Inner.Command != tt.inner {
				t.Fatalf("Parse(%q).Inner = %+v; want command %s", tt.sql, st.Inner, tt.inner)
			}
		})
	}
	if st := parseOne(t, "COPY a TO STDOUT"); st.Inner != nil {
		t.Errorf("COPY of a table has an inner statement %+v; want none", st.Inner)
	}
}

func TestMissingWhere(t *testing.T) {
	tests := []struct {
		name string
		sql  string
		want bool
	}{
		{"update with where", "UPDATE t SET a = 1 WHERE id = 2", false},
		{"update without", "UPDATE t SET a = 1", true},
		{"delete without", "DELETE FROM t", true},
		{"copy delete", "COPY (DELETE FROM x RETURNING id) TO STDOUT", true},
		{"copy delete with where", "COPY (DELETE FROM x WHERE id = 1 RETURNING id) TO STDOUT", false},
		{"writable cte", "WITH d AS (DELETE FROM x RETURNING *) SELECT count(*) FROM d", true},
		{"writable cte under filtered update", "WITH d AS (UPDATE x SET a = 1 RETURNING *) DELETE FROM y WHERE id IN (SELECT id FROM d)", true},
		{"both filtered", "WITH d AS (UPDATE x SET a = 1 WHERE b RETURNING *) DELETE FROM y WHERE id IN (SELECT id FROM d)", false},
		{"explain", "EXPLAIN ANALYZE DELETE FROM t", true},
		{"prepare", "PREPARE p AS UPDATE t SET a = 1", true},
		{"merge on true", "MERGE INTO orders o USING (SELECT 1) s ON true WHEN MATCHED THEN UPDATE SET total = 0", true},
		{"merge delete", "MERGE INTO orders o USING src s ON o.id = s.id WHEN MATCHED THEN DELETE", true},
		{"merge with conditions", "MERGE INTO orders o USING src s ON o.id = s.id WHEN MATCHED AND s.gone THEN DELETE WHEN MATCHED AND s.x > 0 THEN UPDATE SET total = s.x", false},
		{"merge insert only", "MERGE INTO orders o USING src s ON o.id = s.id WHEN NOT MATCHED THEN INSERT VALUES (s.id)", false},
		{"merge do nothing", "MERGE INTO orders o USING src s ON o.id = s.id WHEN MATCHED THEN DO NOTHING", false},
		{"insert", "INSERT INTO t SELECT * FROM u", false},
		{"upsert of values", "INSERT INTO t VALUES (1), (2) ON CONFLICT (id) DO UPDATE SET a = 2", false},
		{"upsert of default values", "INSERT INTO t DEFAULT VALUES ON CONFLICT (id) DO UPDATE SET a = 2", false},
		{"upsert of a query", "INSERT INTO t SELECT * FROM t ON CONFLICT (id) DO UPDATE SET a = 2", true},
		{"upsert of a query with where", "INSERT INTO t SELECT * FROM t ON CONFLICT (id) DO UPDATE SET a = 2 WHERE t.a < 0", false},
		{"upsert of a query doing nothing", "INSERT INTO t SELECT * FROM u ON CONFLICT DO NOTHING", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseOne(t, tt.sql).MissingWhere; got != tt.want {
				t.Errorf("Parse(%q).MissingWhere = %v; want %v", tt.sql, got, tt.want)
			}
		})
	}
}

func TestNamesResolvedFromValues(t *testing.T) {
	read := func(schema, name string) Relation { return Relation{schema, name, RoleRead} }
	tests := []relationsCase{
		{"row type of a catalog", "SELECT jsonb_populate_record(NULL::pg_authid, '{}')", []Relation{read("pg_catalog", "pg_authid")}, false},
		{"row type of a table", "SELECT NULL::vault.credentials", []Relation{read("vault", "credentials")}, false},
		{"row constructor", "SELECT ROW(1, 'x')::users", []Relation{read("public", "users")}, false},
		{"built-in types", "SELECT 1::int, 'x'::text, x::varchar(3)[], now()::timestamptz, '{}'::jsonb, 'a'::\"char\", NULL::_int4", []Relation{}, false},
		{"regclass", "SELECT 'vault.credentials'::regclass", []Relation{read("vault", "credentials")}, false},
		{"regclass function", "SELECT regclass('vault.credentials')", []Relation{read("vault", "credentials")}, false},
		{"to_regclass quoted", `SELECT to_regclass(' "Vault" . Creds ')`, []Relation{read("Vault", "creds")}, false},
		{"regclass unqualified", "SELECT 'Users'::regclass", []Relation{read("public", "users")}, false},
		{"regclass catalog", "SELECT 'pg_authid'::regclass", []Relation{read("pg_catalog", "pg_authid")}, false},
		{"regclass through text", "SELECT 'vault.c'::text::regclass", []Relation{read("vault", "c")}, false},
		{"regtype of a table", "SELECT 'vault.credentials'::regtype", []Relation{read("vault", "credentials")}, false},
		{"regtype built-in", "SELECT 'character varying(10)[]'::regtype, 'pg_catalog.int4'::regtype, to_regtype('double precision')", []Relation{}, false},
		{"regclass null", "SELECT NULL::regclass, '-'::regclass", []Relation{}, false},
		{"regclass of a column", "SELECT relname::regclass FROM t", []Relation{read("public", "t")}, true},
		{"regclass of a parameter", "SELECT $1::regclass", []Relation{}, true},
		{"regclass oid", "SELECT '1260'::regclass", []Relation{}, true},
		{"regclass of an array", "SELECT '{users,vault.credentials}'::regclass[]", []Relation{}, true},
		{"regclass bad syntax", `SELECT 'a..b'::regclass`, []Relation{}, true},
		{"regclass through a bounded cast", "SELECT 'vault.x'::varchar(3)::regclass", []Relation{}, true},
	}
	checkRelations(t, tests)
	st := parseOne(t, "SELECT 'pg_read_file'::regproc, 'pg_catalog.pg_ls_dir(text)'::regprocedure")
	want := []Function{{"", "pg_read_file"}, {"pg_catalog", "pg_ls_dir"}}
	if !reflect.DeepEqual(st.Functions, want) {
		t.Errorf("regproc functions = %v; want %v", st.Functions, want)
	}
}

func TestSequences(t *testing.T) {
	tests := []relationsCase{
		{"nextval writes", "SELECT nextval('orders_id_seq')", []Relation{{"public", "orders_id_seq", RoleWrite}}, false},
		{"setval writes", "SELECT setval('private.s', 1)", []Relation{{"private", "s", RoleWrite}}, false},
		{"currval reads", "SELECT currval('private.s')", []Relation{{"private", "s", RoleRead}}, false},
		{"regclass argument", "SELECT nextval('private.s'::regclass)", []Relation{{"private", "s", RoleWrite}, {"private", "s", RoleRead}}, false},
		{"catalog-qualified", "SELECT pg_catalog.nextval('s')", []Relation{{"public", "s", RoleWrite}}, false},
		{"lastval reads a sequence no text names", "SELECT lastval()", []Relation{}, true},
		{"column", "SELECT nextval(seqname) FROM t", []Relation{{"public", "t", RoleRead}}, true},
		{"parameter", "SELECT nextval($1)", []Relation{}, true},
		{"user function of the same name", "SELECT app.nextval('s')", []Relation{}, false},
	}
	checkRelations(t, tests)
}

func TestShowAllReadsSettings(t *testing.T) {
	want := []Relation{{"pg_catalog", "pg_settings", RoleRead}}
	for _, sql := range []string{"SHOW ALL", `SHOW "ALL"`} {
		if st := parseOne(t, sql); !reflect.DeepEqual(st.Relations, want) {
			t.Errorf("Parse(%q).Relations = %v; want %v", sql, st.Relations, want)
		}
	}
	if st := parseOne(t, "SHOW work_mem"); len(st.Relations) != 0 {
		t.Errorf("SHOW work_mem relations = %v; want none", st.Relations)
	}
}

func TestSetValues(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		sql, value   string
		ms, kb       *float64
		constantFact bool
	}{
		{"SET statement_timeout = 0", "0", f(0), f(0), true},
		{"SET statement_timeout = -5", "-5", nil, nil, true},
		{"SET statement_timeout = 5000", "5000", f(5000), f(5000), true},
		{"SET statement_timeout = '5s'", "5s", f(5000), nil, true},
		{"SET LOCAL lock_timeout TO '1.5 min '", "1.5 min ", f(90000), nil, true},
		{"SET statement_timeout = 2.5", "2.5", f(2.5), f(2.5), true},
		{"SET statement_timeout = '5S'", "5S", nil, nil, true},
		{"SET statement_timeout = '0x10'", "0x10", nil, nil, true},
		{"SET statement_timeout = '1e3'", "1e3", nil, nil, true},
		{"SET work_mem = '64MB'", "64MB", nil, f(65536), true},
		{"SET search_path = a, b", "a, b", nil, nil, true},
		{"SET statement_timeout TO DEFAULT", "", nil, nil, false},
		{"RESET statement_timeout", "", nil, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.sql, func(t *testing.T) {
			st := parseOne(t, tt.sql)
			s := st.Set
			if s.Value != tt.value || !reflect.DeepEqual(s.TimeMS, tt.ms) || !reflect.DeepEqual(s.MemoryKB, tt.kb) || st.ConstantFacts != tt.constantFact {
				b, _ := json.Marshal(s)
				t.Errorf("Parse(%q).Set = %s, constant %v; want value %q, time_ms %v, memory_kb %v, constant %v",
					tt.sql, b, st.ConstantFacts, tt.value, deref(tt.ms), deref(tt.kb), tt.constantFact)
			}
		})
	}
}

func deref(f *float64) string {
	if f == nil {
		return "nil"
	}
	return fmt.Sprint(*f)
}

// TestExtractionIsLinear counts the walker's lookups, not time: a
// statement naming n relations (or n CTEs) costs O(n) lookups. The
// review's 549 KB `SELECT 1 FROM t0,…,t79999` took 22 s of CPU when every
// new relation was compared with every earlier one.
func TestExtractionIsLinear(t *testing.T) {
	gen := map[string]func(n int) string{
		"relations": func(n int) string {
			var b strings.Builder
			b.WriteString("SELECT 1 FROM t0")
			for i := 1; i < n; i++ {
				fmt.Fprintf(&b, ",t%d", i)
			}
			return b.String()
		},
		"functions": func(n int) string {
			var b strings.Builder
			b.WriteString("SELECT f0()")
			for i := 1; i < n; i++ {
				fmt.Fprintf(&b, ",f%d()", i)
			}
			return b.String()
		},
		"ctes": func(n int) string {
			var b strings.Builder
			b.WriteString("WITH c0 AS (SELECT 1)")
			for i := 1; i < n; i++ {
				// c0, the CTE deepest in the scope stack.
				fmt.Fprintf(&b, ", c%d AS (SELECT 1 FROM c0)", i)
			}
			b.WriteString(" SELECT * FROM c0")
			return b.String()
		},
	}
	for name, g := range gen {
		t.Run(name, func(t *testing.T) {
			const n = 20000
			var work int
			if _, err := Parse(g(n), Options{work: &work}); err != nil {
				t.Fatal(err)
			}
			// A few lookups per name; quadratic is n²/2 = 2e8.
			if work > 4*n {
				t.Errorf("extracting %d %s took %d lookups; want at most %d", n, name, work, 4*n)
			}
		})
	}
}

func TestQualifiedName(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"users", []string{"users"}},
		{" Vault . Credentials ", []string{"vault", "credentials"}},
		{`"Vault"."a.b"`, []string{"Vault", "a.b"}},
		{`"a""b"`, []string{`a"b`}},
		{`a"b`, []string{`a"b`}},
		{"db.s.t", []string{"db", "s", "t"}},
		{strings.Repeat("x", 70), []string{strings.Repeat("x", 63)}},
		{strings.Repeat("é", 40), []string{strings.Repeat("é", 31)}},
		{"", nil},
		{"a..b", nil},
		{"a.", nil},
		{`"unterminated`, nil},
		{`""`, nil},
		{"a b", nil},
	}
	for _, tt := range tests {
		got, ok := qualifiedName(tt.in)
		if ok != (tt.want != nil) || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("qualifiedName(%q) = %q, %v; want %q", tt.in, got, ok, tt.want)
		}
	}
}

// TestConstantsDecideNothingUnmarked is the generated-input form of
// TestNormalizedTextDeterminesFacts: every literal of every corpus text
// (the drift corpus, the analyst corpus, the fact-bearing statements
// below) is replaced by other literals of its grammar token, and each
// variant with the original's sqlparse.Key must have the original's
// ConstantFacts, and, when that is not set, its facts. A fact read from a
// literal that the walker failed to mark would show as two variants with
// one Key and different facts.
func TestConstantsDecideNothingUnmarked(t *testing.T) {
	corpus := append([]string{
		"SELECT nextval('s'), currval('x.y')",
		"SELECT 'a.b'::regclass, to_regtype('int'), 'f(int)'::regprocedure",
		"SET statement_timeout = 5000",
		"SET work_mem TO '64MB'",
		"SELECT jsonb_populate_record(NULL::pg_authid, '{}')",
		"COPY (DELETE FROM t WHERE a = 1 RETURNING id) TO STDOUT",
		"MERGE INTO o USING s ON o.id = s.id WHEN MATCHED AND s.x = 1 THEN DELETE",
		"EXPLAIN (ANALYZE 0) DELETE FROM t",
		"EXPLAIN (ANALYZE 'off') DELETE FROM t",
		"COPY t TO '/tmp/x'",
		"SELECT x::varchar(10), y::float(5) FROM t",
	}, driftCorpus...)
	corpus = append(corpus, analyst.Queries()...)
	variants := 0
	for _, sql := range corpus {
		variants += checkKeyVariants(t, sql, true)
	}
	if variants < 200 {
		t.Errorf("%d variants checked; want at least 200", variants)
	}
}

// FuzzKeyDeterminesFacts is TestConstantsDecideNothingUnmarked on
// generated text: a variant of the text with the same sqlparse.Key (the
// gate's shared cache key) must have its ConstantFacts and, when that is
// not set, its facts.
func FuzzKeyDeterminesFacts(f *testing.F) {
	for _, s := range []string{
		"SELECT nextval('s'), currval('x.y')", "EXPLAIN (ANALYZE 0) DELETE FROM t", "COPY t TO '/tmp/x'",
		"SELECT x::varchar(10), y::float(5) FROM t WHERE a = -1 AND b = B'1' AND c = X'f'",
		"SELECT * FROM orders WHERE customer_id = ANY (ARRAY[1, 2]) ORDER BY id LIMIT 10 OFFSET 0;",
		"SET work_mem TO '64MB'; FETCH 5 FROM c", "SELECT interval '1' day, date '2020-01-01', 1.5e3",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		if len(sql) > 1024 {
			return
		}
		checkKeyVariants(t, sql, false)
	})
}

// checkKeyVariants parses variants of sql with its literals replaced
// (replaceLiterals) and checks that each with sql's Key has sql's
// ConstantFacts and, when that is not set, its facts; it returns how many
// it checked. strict: a variant must have sql's Key (the corpus's texts
// are ordinary enough that a replacement never changes a token).
func checkKeyVariants(t *testing.T, sql string, strict bool) int {
	t.Helper()
	toks, err := sqlparse.Scan(sql)
	if err != nil {
		return 0
	}
	key := sqlparse.Key(sql, toks)
	orig, err := Parse(sql, Options{Database: "app"})
	if err != nil {
		return 0
	}
	variants := 0
	for k := range 4 {
		v := replaceLiterals(sql, toks, k)
		if v == sql {
			continue
		}
		vt, err := sqlparse.Scan(v)
		if err != nil || sqlparse.Key(v, vt) != key {
			if strict {
				t.Errorf("Key(%q) != Key(%q); want equal (literals of the same token replaced)", v, sql)
			}
			continue
		}
		sts, err := Parse(v, Options{Database: "app"})
		if err != nil || len(sts) != len(orig) {
			continue
		}
		variants++
		for i := range sts {
			a, b := orig[i], sts[i]
			if a.ConstantFacts != b.ConstantFacts {
				t.Errorf("ConstantFacts of %q = %v, of %q = %v; want equal (one Key)", sql, a.ConstantFacts, v, b.ConstantFacts)
			} else if !a.ConstantFacts && string(a.AppendKey(nil)) != string(b.AppendKey(nil)) {
				ja, _ := json.Marshal(a)
				jb, _ := json.Marshal(b)
				t.Errorf("facts of %q and %q differ without ConstantFacts:\n%s\n%s", sql, v, ja, jb)
			}
		}
	}
	return variants
}

// literalsOf are replacement literals by the scanner token their first
// byte and form give: a string, an integer, another number, a bit string
// and a hex string.
var literalsOf = map[string][]string{
	"s": {"'private.secrets'", "'5s'", "''", "'1260'"},
	"i": {"0", "7", "1260", "2147483647"},
	"f": {"2.5", "1e3", "99999999999", ".5"},
	"b": {"B'1'", "B''", "B'0101'", "B'1'"},
	"x": {"X'f'", "X''", "X'00ff'", "X'f'"},
}

// replaceLiterals replaces every literal token of sql (toks) by the k-th
// replacement of its kind. A U&'…' string is kept (its escapes are
// decoded after the scanner; see sqlparse.Key's test).
func replaceLiterals(sql string, toks []sqlparse.Token, k int) string {
	var b strings.Builder
	prev := 0
	for _, t := range toks {
		if t.Kind != sqlparse.String && t.Kind != sqlparse.Number {
			continue
		}
		text := t.Text(sql)
		var class string
		switch {
		case t.Kind == sqlparse.Number && strings.Trim(text, "0123456789") == "" && len(text) < 10:
			class = "i"
		case t.Kind == sqlparse.Number:
			if strings.Trim(text, "0123456789") == "" || strings.ContainsAny(text, "_xXoObB") {
				continue
			}
			class = "f"
		case text[0] == 'b' || text[0] == 'B':
			class = "b"
		case text[0] == 'x' || text[0] == 'X':
			class = "x"
		case text[0] == 'u' || text[0] == 'U':
			continue
		default:
			class = "s"
		}
		b.WriteString(sql[prev:t.Start])
		b.WriteString(literalsOf[class][k])
		prev = t.End
	}
	b.WriteString(sql[prev:])
	return b.String()
}

// TestCopyToEmptyFileName: pg_query writes COPY t TO an empty string like
// COPY t TO STDOUT (the oracle saw the server take it as a file), so the file fact
// is read from the text.
func TestCopyToEmptyFileName(t *testing.T) {
	tests := []struct {
		sql  string
		file bool
	}{
		{"COPY users TO ''", true},
		{"COPY users FROM ''", true},
		{"COPY users TO '/tmp/x'", true},
		{"COPY users TO STDOUT", false},
		{"COPY users (id, name) TO stdout WITH (FORMAT csv)", false},
		{"COPY (SELECT 'to', id FROM t WHERE a = 'from') TO STDOUT", false},
		{"COPY (SELECT 1) TO ''", true},
		{"COPY users FROM STDIN", false},
		{"COPY users TO PROGRAM 'cat'", true},
	}
	for _, tt := range tests {
		if st := parseOne(t, tt.sql); st.Copy == nil || st.Copy.File != tt.file {
			t.Errorf("Parse(%q).Copy = %+v; want file %v", tt.sql, st.Copy, tt.file)
		}
	}
}
