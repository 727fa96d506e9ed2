package pggate

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlfacts"
	"github.com/egressd/egressd/policy/sqlparse"
)

func TestShapeOf(t *testing.T) {
	tests := []struct {
		name, text, want string
		ok               bool
	}{
		{"pgbench select", "SELECT abalance FROM pgbench_accounts WHERE aid = 12345;", "SELECT abalance FROM pgbench_accounts WHERE aid = $1;", true},
		{"pgbench update", "UPDATE pgbench_tellers SET tbalance = tbalance + -17 WHERE tid = 3;", "UPDATE pgbench_tellers SET tbalance = tbalance + -$1 WHERE tid = $2;", true},
		{"digits in identifiers kept", "SELECT c1 FROM t2 WHERE x_3 = 4", "SELECT c1 FROM t2 WHERE x_3 = $1", true},
		{"decimal kept", "SELECT 1.5", "SELECT 1.5", true},
		{"exponent kept", "SELECT 1e5", "SELECT 1e5", true},
		{"hex kept", "SELECT 0x1F", "SELECT 0x1F", true},
		{"underscore kept", "SELECT 1_000", "SELECT 1_000", true},
		{"cast", "SELECT 7::int", "SELECT $1::int", true},
		{"string", "SELECT 'a'", "", false},
		{"quoted identifier", `SELECT "1" FROM t`, "", false},
		{"dollar", "SELECT $1", "", false},
		{"line comment", "SELECT 1 -- 2", "", false},
		{"block comment", "SELECT 1 /* 2 */", "", false},
		{"explain", "EXPLAIN (ANALYZE 1) DELETE FROM t", "", false},
		{"explain any case", "eXpLaIn (analyze 0) DELETE FROM t", "", false},
		{"non-ascii", "SELECT 1 AS é", "", false},
		{"backslash", `SELECT 1 \g`, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := shapeOf(tt.text, nil)
			if ok != tt.ok || string(got) != tt.want {
				t.Errorf("shapeOf(%q) = %q, %v; want %q, %v", tt.text, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// intToken matches the integer tokens shapeOf replaces.
var intToken = regexp.MustCompile(`(^|[^A-Za-z0-9_.])([0-9]+)($|[^A-Za-z0-9_.])`)

// checkShape asserts shapeOf's soundness on text: when the gate would
// cache text's verdict under its shape (its sqlparse.Key agrees with the
// shape, and no fact was or could have been read from a literal), a text
// differing only in those integers must have the same facts, statement by
// statement, or fail to parse.
func checkShape(t *testing.T, text string) {
	shape, ok := shapeOf(text, nil)
	if !ok {
		return
	}
	toks, err := sqlparse.Scan(text)
	if err != nil || !shapeMatches(string(shape), sqlparse.Key(text, toks)) {
		return
	}
	sts, err := sqlfacts.Parse(text, sqlfacts.Options{Database: "app"})
	if err != nil {
		return
	}
	for _, st := range sts {
		if st.ConstantFacts {
			return
		}
	}
	for _, digits := range []string{"0", "7", "99999999999999999999999"} {
		other := intToken.ReplaceAllString(text, "${1}"+digits+"${3}")
		other = intToken.ReplaceAllString(other, "${1}"+digits+"${3}") // adjacent tokens
		if s2, _ := shapeOf(other, nil); string(s2) != string(shape) {
			t.Fatalf("shapeOf(%q) = %q; want %q", other, s2, shape)
		}
		sts2, err := sqlfacts.Parse(other, sqlfacts.Options{Database: "app"})
		if err != nil {
			continue
		}
		if len(sts2) != len(sts) {
			t.Fatalf("%q has %d statements, %q %d; want equal (one shape)", text, len(sts), other, len(sts2))
		}
		for i := range sts {
			if a, b := string(sts[i].AppendKey(nil)), string(sts2[i].AppendKey(nil)); a != b {
				t.Errorf("facts of %q and %q differ (one shape, cached): %q vs %q", text, other, a, b)
			}
		}
	}
}

func TestShapeSound(t *testing.T) {
	for _, text := range []string{
		"SELECT abalance FROM pgbench_accounts WHERE aid = 12345;",
		"UPDATE pgbench_accounts SET abalance = abalance + 5 WHERE aid = 6;",
		"UPDATE pgbench_accounts SET abalance = abalance + -5 WHERE aid = 6;",
		"SELECT 5 -3, -2, a-1, -(-4) FROM t",
		"SELECT -1 - -2",
		"INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1, 2, 3, 4, CURRENT_TIMESTAMP);",
		"SELECT * FROM users ORDER BY 1 LIMIT 10 OFFSET 2",
		"FETCH 5 FROM c",
		"SELECT x::varchar(10) FROM t",
		"SELECT a[1] FROM t",
		"SELECT 1, 2; SELECT 3",
		"SET statement_timeout = 5000",
	} {
		t.Run(text, func(t *testing.T) { checkShape(t, text) })
	}
}

func FuzzShapeOf(f *testing.F) {
	for _, s := range []string{"SELECT abalance FROM pgbench_accounts WHERE aid = 1;", "FETCH 5 FROM c", "SELECT 1e5, 0x1F, 1_0, -1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > 512 {
			return
		}
		checkShape(t, text)
	})
}

// cachingSession is a read_only session of a gate with both verdict
// caches on, auditing to the returned recorder.
func cachingSession(t *testing.T) (*session, *audittest.Recorder) {
	g := fuzzGate(t)
	g.verdicts = newVerdictCache(100)
	a := &audittest.Recorder{}
	g.deps.Audit = a
	id := policy.Identity{ID: "agent-ro", Attributes: map[string]string{"sql_profile": "read_only"}}
	return &session{g: g, identity: id, database: "app", remote: "test", keyPrefix: cacheKeyPrefix(id, "app")}, a
}

// TestShapeCacheVerdicts: texts of one shape get the verdict and audit
// SQL their own evaluation would give, from the cache.
func TestShapeCacheVerdicts(t *testing.T) {
	s, a := cachingSession(t)
	g := s.g
	tests := []struct {
		name, text, sql string
		allow           bool
	}{
		{"first select", "SELECT name FROM users WHERE id = 1", "SELECT name FROM users WHERE id = $1", true},
		{"same shape", "SELECT name FROM users WHERE id = 22", "SELECT name FROM users WHERE id = $1", true},
		{"first delete", "DELETE FROM users WHERE id = 1", "DELETE FROM users WHERE id = $1", false},
		{"delete of same shape stays denied", "DELETE FROM users WHERE id = 3", "DELETE FROM users WHERE id = $1", false},
		{"negative", "SELECT name FROM users WHERE id = -5", "SELECT name FROM users WHERE id = -$1", true},
		{"negative, same shape", "SELECT name FROM users WHERE id = -6", "SELECT name FROM users WHERE id = -$1", true},
		{"other table", "SELECT name FROM private.secrets WHERE id = 22", "SELECT name FROM private.secrets WHERE id = $1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := len(a.Records())
			if v := s.decide(tt.text); v.allow != tt.allow {
				t.Fatalf("decide(%q).allow = %v; want %v (reason %s)", tt.text, v.allow, tt.allow, v.reason)
			}
			recs := a.Records()
			if len(recs) != n+1 || recs[n].SQL != tt.sql {
				t.Fatalf("decide(%q) audited %+v; want one record with SQL %q", tt.text, recs[n:], tt.sql)
			}
		})
	}
	for _, shape := range []string{"DELETE FROM users WHERE id = $1", "SELECT name FROM users WHERE id = -$1"} {
		skey := cacheScope{prefix: s.keyPrefix, digest: g.engine().Digest()}.key(keyShape, shape)
		if _, ok := g.verdicts.shared.get(skey); !ok {
			t.Errorf("no shape entry for %q", skey.text)
		}
	}
}

// TestAuditSQLIsTheTextsOwn is the reported leak: a string continued on
// the next line (lexed by PostgreSQL in the first part's E-string state) put
// its literal in the audit SQL, and the normalized and shape caches then
// logged that text for every later statement of the same form. Audit SQL
// now comes from PostgreSQL's scanner, and from the exact text decided.
func TestAuditSQLIsTheTextsOwn(t *testing.T) {
	s, a := cachingSession(t)
	tests := []struct{ text, sql string }{
		{"SELECT name FROM users WHERE name = E'x'\n'\\' secret-one '", "SELECT name FROM users WHERE name = $1"},
		{"SELECT name FROM users WHERE name = 'y'", "SELECT name FROM users WHERE name = $1"},
		{"SELECT name FROM users WHERE id = 7 --x\r+ 1", "SELECT name FROM users WHERE id = $1  \r+ $2"},
		{"SELECT name FROM users WHERE id = 8 /* c */ + 1", "SELECT name FROM users WHERE id = $1   + $2"},
		{"SELECT name FROM users WHERE id = 9", "SELECT name FROM users WHERE id = $1"},
		{"SELECT name FROM users WHERE id = -9", "SELECT name FROM users WHERE id = -$1"},
	}
	for _, tt := range tests {
		n := len(a.Records())
		if v := s.decide(tt.text); !v.allow {
			t.Fatalf("decide(%q) = deny %s; want allow", tt.text, v.reason)
		}
		recs := a.Records()
		if len(recs) != n+1 || recs[n].SQL != tt.sql {
			t.Errorf("decide(%q) audited %d records, SQL %q; want one, %q", tt.text, len(recs)-n, recs[len(recs)-1].SQL, tt.sql)
		}
	}
	for _, r := range a.Records() {
		if strings.Contains(r.SQL, "secret") {
			t.Errorf("audit SQL %q holds a literal", r.SQL)
		}
	}
}

// TestVerdictCacheBoundedInBytes is the reported growth: 1,000 distinct
// 60 KB denied queries held 287 MB. Texts past cacheMaxTextBytes are not
// kept, and the cache starts over before it passes cacheMaxBytes.
func TestVerdictCacheBoundedInBytes(t *testing.T) {
	c := newVerdictMap(10000)
	v := &verdict{stmts: []stmtAudit{{sql: strings.Repeat("x", 4<<10)}}}
	big := strings.Repeat("a", 60<<10)
	for i := range 1000 {
		c.add(cacheKey{prefix: "p", text: big + strconv.Itoa(i)}, v)
	}
	if len(c.m) != 0 {
		t.Errorf("after 1,000 distinct 60 KB texts the cache holds %d; want none", len(c.m))
	}
	mid := strings.Repeat("b", cacheMaxTextBytes-8)
	for i := range 5000 {
		c.add(cacheKey{prefix: "p", text: mid + strconv.Itoa(i)}, v)
		if c.bytes > c.maxBytes {
			t.Fatalf("after %d texts of %d bytes the cache counts %d bytes; bound %d", i+1, len(mid), c.bytes, c.maxBytes)
		}
	}
	held := 0
	for k, v := range c.m {
		held += entryBytes(k, v)
	}
	if held != c.bytes || held > cacheMaxBytes {
		t.Errorf("cache holds %d bytes, counts %d; want equal and at most %d", held, c.bytes, cacheMaxBytes)
	}
}

// TestForShapeIsTheTextsRedaction: a shape hit's audit SQL, made without
// a scan, is what PostgreSQL's scanner makes of the text, statement by
// statement.
func TestForShapeIsTheTextsRedaction(t *testing.T) {
	for _, text := range []string{
		"SELECT abalance FROM pgbench_accounts WHERE aid = 12345",
		"SELECT abalance FROM pgbench_accounts WHERE aid = 12345;",
		"UPDATE pgbench_accounts SET abalance = abalance + -17 WHERE aid = 3; SELECT abalance FROM pgbench_accounts WHERE aid = 3",
		"SELECT 1, 2;; SELECT 3 , t.c1 FROM t WHERE x IN (4, 5)",
	} {
		var buf [256]byte
		shape, ok := shapeOf(text, buf[:0])
		if !ok {
			t.Fatalf("shapeOf(%q) not ok", text)
		}
		toks, err := sqlparse.Scan(text)
		if err != nil {
			t.Fatal(err)
		}
		stmts := sqlfacts.Statements(text, toks)
		v := &verdict{allow: true, stmts: make([]stmtAudit, len(stmts))}
		got := forShape(v, string(shape))
		if got == nil {
			t.Fatalf("forShape(%q) = nil; want a verdict", shape)
		}
		for i, st := range stmts {
			red, err := sqlparse.Redact(st.Text)
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.TrimSpace(red); got.stmts[i].sql != want {
				t.Errorf("forShape(%q) statement %d = %q; the scanner's redaction is %q", shape, i, got.stmts[i].sql, want)
			}
		}
	}
	if got := forShape(&verdict{stmts: make([]stmtAudit, 1)}, "SELECT $1; SELECT $2"); got != nil {
		t.Errorf("forShape of two statements for a one-statement verdict = %+v; want nil", got)
	}
	if got := forShape(&verdict{stmts: make([]stmtAudit, 1), effects: []effect{{kind: effPrepare}}}, "PREPARE p AS SELECT $1"); got != nil {
		t.Errorf("forShape of a verdict with effects = %+v; want nil (the scanner reads names)", got)
	}
}
