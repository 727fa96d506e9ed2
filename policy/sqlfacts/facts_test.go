package sqlfacts

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlparse"
)

func parseOne(t *testing.T, sql string) *Statement {
	t.Helper()
	sts, err := Parse(sql, Options{Database: "app"})
	if err != nil {
		t.Fatalf("Parse(%q) = %v; want nil error", sql, err)
	}
	if len(sts) != 1 {
		t.Fatalf("Parse(%q) = %d statements; want 1", sql, len(sts))
	}
	return sts[0]
}

// relationsCase is a statement, the relations its facts must list and
// whether they must say a name is dynamic.
type relationsCase struct {
	name    string
	sql     string
	want    []Relation
	dynamic bool
}

func checkRelations(t *testing.T, tests []relationsCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := parseOne(t, tt.sql)
			if !reflect.DeepEqual(st.Relations, tt.want) || st.DynamicName != tt.dynamic {
				t.Errorf("Parse(%q) = relations %v, dynamic %v; want %v, %v", tt.sql, st.Relations, st.DynamicName, tt.want, tt.dynamic)
			}
		})
	}
}

func TestRelations(t *testing.T) {
	tests := []relationsCase{
		{"select", "SELECT * FROM users", []Relation{{"public", "users", RoleRead}}, false},
		{"qualified", "SELECT * FROM billing.invoices", []Relation{{"billing", "invoices", RoleRead}}, false},
		{"catalog", "SELECT * FROM pg_shadow", []Relation{{"pg_catalog", "pg_shadow", RoleRead}}, false},
		{"insert select", "INSERT INTO a SELECT * FROM b", []Relation{{"public", "a", RoleWrite}, {"public", "b", RoleRead}}, false},
		{"update from", "UPDATE a SET x = b.x FROM b WHERE a.id = b.id", []Relation{{"public", "a", RoleWrite}, {"public", "b", RoleRead}}, false},
		{"delete using", "DELETE FROM a USING b WHERE a.id = b.id", []Relation{{"public", "a", RoleWrite}, {"public", "b", RoleRead}}, false},
		{"subquery in where", "SELECT 1 WHERE EXISTS (SELECT 1 FROM secret)", []Relation{{"public", "secret", RoleRead}}, false},
		{"lateral", "SELECT * FROM a, LATERAL (SELECT * FROM b WHERE b.id = a.id) s", []Relation{{"public", "a", RoleRead}, {"public", "b", RoleRead}}, false},
		{"cte name is not a table", "WITH t AS (SELECT 1) SELECT * FROM t", []Relation{}, false},
		{"non-recursive cte reads the table of its own name", "WITH t AS (SELECT * FROM t) SELECT * FROM t", []Relation{{"public", "t", RoleRead}}, false},
		{"cte scope ends with its statement", "SELECT * FROM secret, (WITH secret AS (SELECT 1) SELECT * FROM secret) s", []Relation{{"public", "secret", RoleRead}}, false},
		{"writable cte", "WITH d AS (DELETE FROM a RETURNING *) SELECT * FROM d", []Relation{{"public", "a", RoleWrite}}, false},
		{"select into", "SELECT * INTO newt FROM a", []Relation{{"public", "newt", RoleWrite}, {"public", "a", RoleRead}}, false},
		{"copy from", "COPY a FROM STDIN", []Relation{{"public", "a", RoleWrite}}, false},
		{"copy query", "COPY (SELECT * FROM a) TO STDOUT", []Relation{{"public", "a", RoleRead}}, false},
		{"lock", "LOCK TABLE a", []Relation{{"public", "a", RoleWrite}}, false},
		{"merge", "MERGE INTO a USING b ON a.id = b.id WHEN MATCHED THEN DELETE", []Relation{{"public", "a", RoleWrite}, {"public", "b", RoleRead}}, false},
		{"explain", "EXPLAIN SELECT * FROM a", []Relation{{"public", "a", RoleRead}}, false},
	}
	checkRelations(t, tests)
}

func TestFunctions(t *testing.T) {
	tests := []struct {
		name string
		sql  string
		want []Function
	}{
		{"select list", "SELECT lower(name) FROM u", []Function{{"", "lower"}}},
		{"qualified", "SELECT pg_catalog.pg_read_file('/etc/passwd')", []Function{{"pg_catalog", "pg_read_file"}}},
		{"nested in subquery", "SELECT (SELECT max(x) FROM t WHERE y = abs(-1))", []Function{{"", "max"}, {"", "abs"}}},
		{"in cte", "WITH c AS (SELECT pg_sleep(1)) SELECT * FROM c", []Function{{"", "pg_sleep"}}},
		{"from clause", "SELECT * FROM query_to_xml('select 1', true, true, '')", []Function{{"", "query_to_xml"}}},
		{"in cast", "SELECT CAST(nextval('s') AS text)", []Function{{"", "nextval"}}},
		{"in default of insert", "INSERT INTO t VALUES (set_config('role', 'x', false))", []Function{{"", "set_config"}}},
		{"call", "CALL do_things()", []Function{{"", "do_things"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := parseOne(t, tt.sql)
			if !reflect.DeepEqual(st.Functions, tt.want) {
				t.Errorf("Parse(%q).Functions = %v; want %v", tt.sql, st.Functions, tt.want)
			}
		})
	}
}

func TestStatementFacts(t *testing.T) {
	tests := []struct {
		name  string
		sql   string
		check func(*Statement) bool
	}{
		{"select is not ddl", "SELECT 1", func(s *Statement) bool { return s.Command == "select" && !s.DDL }},
		{"create table is ddl", "CREATE TABLE x (a int)", func(s *Statement) bool { return s.Command == "create_table" && s.DDL }},
		{"alter system", "ALTER SYSTEM SET work_mem = '1GB'", func(s *Statement) bool { return s.Command == "alter_system" && s.DDL }},
		{"create extension", "CREATE EXTENSION dblink", func(s *Statement) bool { return s.Command == "create_extension" }},
		{"create server", "CREATE SERVER s FOREIGN DATA WRAPPER w", func(s *Statement) bool { return s.Command == "create_server" }},
		{"do", "DO $$BEGIN END$$", func(s *Statement) bool { return s.Command == "do" && !s.DDL }},
		{"update without where", "UPDATE t SET a = 1", func(s *Statement) bool { return s.Command == "update" && !s.HasWhere }},
		{"delete with where", "DELETE FROM t WHERE a = 1", func(s *Statement) bool { return s.HasWhere }},
		{"for update", "SELECT * FROM t FOR UPDATE", func(s *Statement) bool { return s.Locking }},
		{"copy program", "COPY t FROM PROGRAM 'id'", func(s *Statement) bool { return s.Copy.Program && s.Copy.File && s.Copy.Direction == "from" }},
		{"copy file", "COPY t TO '/tmp/x'", func(s *Statement) bool { return s.Copy.File && !s.Copy.Program && s.Copy.Table }},
		{"copy stdout", "COPY t TO STDOUT", func(s *Statement) bool { return !s.Copy.File && s.Copy.Table && s.Copy.Direction == "to" }},
		{"set role", "SET ROLE admin", func(s *Statement) bool { return s.Set.Name == "role" && s.Set.Action == "set" }},
		{"set session authorization", "SET SESSION AUTHORIZATION admin", func(s *Statement) bool { return s.Set.Name == "session_authorization" }},
		{"set names", "SET NAMES 'LATIN1'", func(s *Statement) bool { return s.Set.Name == "client_encoding" }},
		{"set quoted name", `SET "Standard_Conforming_Strings" = off`, func(s *Statement) bool { return s.Set.Name == "standard_conforming_strings" }},
		{"reset all", "RESET ALL", func(s *Statement) bool { return s.Set.Action == "reset_all" }},
		{"begin", "BEGIN", func(s *Statement) bool { return s.Transaction == "begin" }},
		{"end", "END", func(s *Statement) bool { return s.Transaction == "commit" }},
		{"prepare transaction", "PREPARE TRANSACTION 'x'", func(s *Statement) bool { return s.Transaction == "prepare" }},
		{"notify", "NOTIFY ch", func(s *Statement) bool { return s.Command == "notify" && s.Channel == "ch" }},
		{"explain analyze", "EXPLAIN ANALYZE DELETE FROM t", func(s *Statement) bool { return s.ExplainAnalyze && s.Inner.Command == "delete" }},
		{"explain analyze off", "EXPLAIN (ANALYZE false) SELECT 1", func(s *Statement) bool { return !s.ExplainAnalyze }},
		{"prepare", "PREPARE p AS DELETE FROM t", func(s *Statement) bool { return s.Inner.Command == "delete" && !s.Inner.HasWhere }},
		{"load", "LOAD 'x'", func(s *Statement) bool { return s.Command == "load" && s.DDL }},
		{"truncate", "TRUNCATE t", func(s *Statement) bool { return s.Command == "truncate" && s.DDL }},
		{"create subscription", "CREATE SUBSCRIPTION s CONNECTION 'x' PUBLICATION p", func(s *Statement) bool { return s.Command == "create_subscription" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := parseOne(t, tt.sql)
			if !tt.check(st) {
				b, _ := json.Marshal(st)
				t.Errorf("Parse(%q) = %s; check failed", tt.sql, b)
			}
		})
	}
}

func TestMultiStatementText(t *testing.T) {
	sts, err := Parse("SELECT 1; UPDATE t SET a = 2 WHERE b = 3 ;", Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := []string{sts[0].Text, sts[1].Text}
	want := []string{"SELECT 1", "UPDATE t SET a = 2 WHERE b = 3"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("statement texts = %q; want %q", got, want)
	}
}

func TestDenials(t *testing.T) {
	tests := []struct {
		name   string
		sql    string
		reason policy.Reason
	}{
		{"parse error", "SELEC 1", policy.ReasonSQLParseError},
		{"100k terms", "SELECT 1" + strings.Repeat("+1", 100000), policy.ReasonSQLTooComplex},
		{"deep parens", "SELECT " + strings.Repeat("(", 100000) + "1" + strings.Repeat(")", 100000), policy.ReasonSQLTooComplex},
		{"deep not", "SELECT " + strings.Repeat("NOT ", 5000) + "true", policy.ReasonSQLTooComplex},
		{"deep cast", "SELECT 1" + strings.Repeat("::int", 5000), policy.ReasonSQLTooComplex},
		{"deep union", "SELECT 1" + strings.Repeat(" UNION SELECT 1", 5000), policy.ReasonSQLTooComplex},
		{"too long", "SELECT '" + strings.Repeat("a", 2<<20) + "'", policy.ReasonSQLTooComplex},
		{"invalid utf8", "SELECT '\xff'", policy.ReasonSQLInvalidUTF8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.sql, Options{})
			var de *policy.DenyError
			if !errors.As(err, &de) || de.Reason != tt.reason {
				t.Errorf("Parse(%.40q…) = %v; want deny %s", tt.sql, err, tt.reason)
			}
		})
	}
}

func TestPrescanIgnoresLiterals(t *testing.T) {
	tests := []string{
		"SELECT '" + strings.Repeat("(", 1000) + "'",
		"SELECT E'\\'" + strings.Repeat("+", 3000) + "'",
		"SELECT $x$" + strings.Repeat("((", 1000) + "$x$",
		"SELECT 1 -- " + strings.Repeat("(", 1000),
		"SELECT /* /* " + strings.Repeat("(", 1000) + " */ */ 1",
		`SELECT "` + strings.Repeat("(", 1000) + `"`,
	}
	for _, sql := range tests {
		if err := Prescan(sql, Limits{}); err != nil {
			t.Errorf("Prescan(%.30q…) = %v; want nil", sql, err)
		}
	}
}

func TestAppendKeyDistinguishes(t *testing.T) {
	a := parseOne(t, "SELECT * FROM a WHERE x = 1")
	b := parseOne(t, "SELECT * FROM b WHERE x = 1")
	c := parseOne(t, "SELECT * FROM a WHERE x = 5")
	d := parseOne(t, "SELECT * FROM a WHERE x #!# 1")
	if string(a.AppendKey(nil)) == string(b.AppendKey(nil)) {
		t.Errorf("AppendKey equal for different tables")
	}
	if string(a.AppendKey(nil)) == string(d.AppendKey(nil)) {
		t.Errorf("AppendKey equal for different operators")
	}
	if string(a.AppendKey(nil)) != string(c.AppendKey(nil)) {
		t.Errorf("AppendKey differs for the same facts")
	}
	// The policy caches decisions by this key: facts read from constants
	// must be in it.
	for _, pair := range [][2]string{
		{"SET statement_timeout = '5s'", "SET statement_timeout = 0"},
		{"SET work_mem = '64MB'", "SET work_mem = '64GB'"},
		{"SET statement_timeout = '5s'", "SET statement_timeout = '5 s'"},
		{"MERGE INTO t USING s ON true WHEN MATCHED AND x THEN DELETE", "MERGE INTO t USING s ON true WHEN MATCHED THEN DELETE"},
		{"SELECT currval(NULL)", "SELECT currval($1)"},
	} {
		x, y := parseOne(t, pair[0]), parseOne(t, pair[1])
		if string(x.AppendKey(nil)) == string(y.AppendKey(nil)) {
			t.Errorf("AppendKey(%q) = AppendKey(%q); want different", pair[0], pair[1])
		}
	}
}

// TestNormalizedTextDeterminesFacts is the soundness argument for the
// gate's verdict caches keyed by sqlparse.Key (and by shape): texts with
// one Key must have equal facts, so the policy (a function of the facts)
// decides them alike — unless their facts were or could have been read
// from literals (ConstantFacts), which the gate keeps out of those caches.
// ConstantFacts itself must depend on the tree's form only, never on a
// literal's value (two strings, two integers have one Key), or one text
// of a Key could be cached and decide another. Function names are facts;
// arguments are not, except the sequence of nextval, a string cast to a
// reg* type and a SET value. A literal the tree does not keep as a
// constant (EXPLAIN's ANALYZE option, COPY's file name, a type modifier,
// FETCH's count) marks ConstantFacts: the Key replaces it, so it must.
func TestNormalizedTextDeterminesFacts(t *testing.T) {
	tests := []struct {
		name, a, b string
		sameKey    bool
		// constant: the facts of both were read from constants.
		constant bool
	}{
		{"numbers", "SELECT abalance FROM pgbench_accounts WHERE aid = 1", "SELECT abalance FROM pgbench_accounts WHERE aid = 2147483647", true, false},
		{"integer vs integer past int32", "SELECT abalance FROM pgbench_accounts WHERE aid = 1", "SELECT abalance FROM pgbench_accounts WHERE aid = 99999999999", false, false},
		{"string vs number", "SELECT * FROM users WHERE name = 'x'", "SELECT * FROM users WHERE name = -4.2e1", false, false},
		{"string forms", "SELECT * FROM users WHERE name = 'x'", "SELECT * FROM users WHERE name = $$it's$$", true, false},
		{"set_config", "SELECT set_config('application_name', 'x', false)", "SELECT set_config('role', 'postgres', false)", true, true},
		{"current_setting", "SELECT current_setting('search_path')", "SELECT current_setting('is_superuser')", true, false},
		{"nextval", "SELECT nextval('users_id_seq')", "SELECT nextval('private.secret_seq')", true, true},
		{"regclass cast", "SELECT 'users'::regclass", "SELECT 'private.secrets'::regclass", true, true},
		{"query_to_xml", "SELECT query_to_xml('select 1', true, true, '')", "SELECT query_to_xml('delete from users', true, true, '')", true, false},
		{"set value", "SET application_name = 'a'", "SET application_name = 'b'", true, true},
		{"set role", "SET ROLE 'nobody'", "SET ROLE 'postgres'", true, true},
		{"session authorization", "SET SESSION AUTHORIZATION 'nobody'", "SET SESSION AUTHORIZATION 'postgres'", true, true},
		{"copy query", "COPY (SELECT 1) TO STDOUT", "COPY (SELECT 2) TO STDOUT", true, false},
		{"copy file name", "COPY users TO ''", "COPY users TO '/tmp/x'", true, true},
		{"explain analyze string", "EXPLAIN (ANALYZE 'off') DELETE FROM users", "EXPLAIN (ANALYZE 'on') DELETE FROM users", true, true},
		{"explain analyze number", "EXPLAIN (ANALYZE 0) DELETE FROM users", "EXPLAIN (ANALYZE 1) DELETE FROM users", true, true},
		{"type modifier", "SELECT name::float(5) FROM users", "SELECT name::float(50) FROM users", true, true},
		{"fetch count", "FETCH 5 FROM c", "FETCH 6 FROM c", true, true},
		{"unicode string", "SELECT * FROM users WHERE name = U&'x'", "SELECT * FROM users WHERE name = U&'y'", true, true},
		{"parameter", "SELECT * FROM users WHERE id = $1", "SELECT * FROM users WHERE id = 7", false, false},
		{"parameter vs literal numbered alike", "SELECT $1, 2", "SELECT $1, $2", false, false},
		{"regclass null vs name", "SELECT NULL::regclass", "SELECT 'private.secrets'::regclass", false, true},
		{"sequence number vs name", "SELECT currval(1)", "SELECT currval('private.s')", false, true},
		{"set number vs string", "SET statement_timeout = 0", "SET statement_timeout = '5s'", false, true},
		{"set integer shape", "SET statement_timeout = 5000", "SET statement_timeout = 0", true, true},
		{"row type", "SELECT 'y'::users", "SELECT 'x'::users", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ka, kb := keyOf(t, tt.a), keyOf(t, tt.b)
			if (ka == kb) != tt.sameKey {
				t.Fatalf("Key(%q) = %q, Key(%q) = %q; want equal = %v", tt.a, ka, tt.b, kb, tt.sameKey)
			}
			if !tt.sameKey {
				return
			}
			sa, sb := parseAll(t, tt.a), parseAll(t, tt.b)
			for i := range sa {
				if sa[i].ConstantFacts != tt.constant || sb[i].ConstantFacts != tt.constant {
					t.Fatalf("ConstantFacts of %q, %q = %v, %v; want %v", tt.a, tt.b, sa[i].ConstantFacts, sb[i].ConstantFacts, tt.constant)
				}
				ka, kb := string(sa[i].AppendKey(nil)), string(sb[i].AppendKey(nil))
				if ka != kb && !tt.constant {
					t.Errorf("facts of %q and %q differ: %+v vs %+v", tt.a, tt.b, sa[i], sb[i])
				}
			}
		})
	}
}

// keyOf is sqlparse.Key of sql.
func keyOf(t *testing.T, sql string) string {
	t.Helper()
	toks, err := sqlparse.Scan(sql)
	if err != nil {
		t.Fatalf("Scan(%q) = %v; want nil error", sql, err)
	}
	return sqlparse.Key(sql, toks)
}

func parseAll(t *testing.T, sql string) []*Statement {
	t.Helper()
	sts, err := Parse(sql, Options{Database: "app"})
	if err != nil {
		t.Fatalf("Parse(%q) = %v; want nil error", sql, err)
	}
	return sts
}
