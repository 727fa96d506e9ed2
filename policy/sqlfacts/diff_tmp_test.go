package sqlfacts

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/egressd/egressd/policy"
)

func diffOne(t *testing.T, sql string) bool {
	t.Helper()
	opt := Options{Database: "d", SearchPath: []string{"app"}}
	a, errA := oldParse(sql, opt)
	b, errB := Parse(sql, opt)
	if (errA == nil) != (errB == nil) {
		t.Errorf("%.200q: old err %v, new err %v", sql, errA, errB)
		return false
	}
	if errA != nil {
		var da, db *policy.DenyError
		errors.As(errA, &da)
		errors.As(errB, &db)
		if da.Reason != db.Reason {
			t.Errorf("%.200q: old reason %s, new %s", sql, da.Reason, db.Reason)
			return false
		}
		return true
	}
	if !reflect.DeepEqual(a, b) {
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		t.Errorf("%.200q:\nold %s\nnew %s", sql, ja, jb)
		return false
	}
	for i := range a {
		if a[i].Text != b[i].Text {
			t.Errorf("%.200q: text %q vs %q", sql, a[i].Text, b[i].Text)
			return false
		}
	}
	return true
}

func TestDiffCorpus(t *testing.T) {
	var inputs []string
	for _, f := range strings.Fields(os.Getenv("DIFF_CORPUS")) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var ss []string
		if err := json.Unmarshal(b, &ss); err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, ss...)
	}
	if lf := os.Getenv("DIFF_SQLFILES"); lf != "" {
		b, _ := os.ReadFile(lf)
		for _, p := range strings.Fields(string(b)) {
			src, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			inputs = append(inputs, string(src))
			parts, _ := pg_query.SplitWithScanner(string(src), true)
			inputs = append(inputs, parts...)
		}
	}
	inputs = append(inputs, limitInputs()...)
	ok, parsed := 0, 0
	for _, s := range inputs {
		if diffOne(t, s) {
			ok++
		}
		if _, err := Parse(s, Options{}); err == nil {
			parsed++
		}
	}
	t.Logf("%d inputs, %d equal, %d parsed without error", len(inputs), ok, parsed)
}

func limitInputs() []string {
	var out []string
	for _, n := range []int{10, 500, 1000, 1990, 1999, 2000, 2001} {
		out = append(out,
			"SELECT 1"+strings.Repeat("+1", n),
			"SELECT a"+strings.Repeat("+f(t.b)", n/2)+" FROM t",
			"SELECT "+strings.Repeat("NOT ", n)+"true",
			"SELECT 1"+strings.Repeat("::int", n),
			"SELECT 1"+strings.Repeat(" UNION SELECT x FROM t", n/3),
			"SELECT 1 WHERE "+strings.Repeat("a = 1 AND ", n/2)+"true",
			"SELECT CASE "+strings.Repeat("WHEN a THEN b ", n/3)+"END FROM t",
		)
	}
	for _, d := range []int{10, 100, 200, 255, 256, 257} {
		out = append(out,
			"SELECT "+strings.Repeat("(", d)+"1"+strings.Repeat(")", d),
			strings.Repeat("SELECT * FROM (", d)+"SELECT * FROM t"+strings.Repeat(") s", d),
			"SELECT "+strings.Repeat("(SELECT ", d)+"x FROM t"+strings.Repeat(")", d),
			"SELECT "+strings.Repeat("f(", d)+"1"+strings.Repeat(")", d),
			strings.Repeat("WITH c AS (", d)+"SELECT 1"+strings.Repeat(") SELECT * FROM c", d),
			"SELECT "+strings.Repeat("(SELECT 1+1+1+1+1+1+", d)+"1"+strings.Repeat(")", d),
			"SELECT ARRAY"+strings.Repeat("[", d)+"1"+strings.Repeat("]", d),
		)
		// Depth and operators both near the limits.
		out = append(out, "SELECT "+strings.Repeat("(SELECT ", d)+strings.Repeat("1+", 1990-d)+"x FROM t"+strings.Repeat(")", d))
	}
	return out
}

func FuzzDiff(f *testing.F) {
	for _, s := range []string{
		"SELECT 1", "WITH t AS (DELETE FROM a RETURNING *) SELECT * FROM t",
		"COPY t FROM PROGRAM 'x'", "SELECT $a$ ( $a$", "SET ROLE x; BEGIN; END",
		"SELECT E'\\'' || (1+2)::text", "/* /* */ */ SELECT 1", "EXPLAIN ANALYZE UPDATE t SET a=1",
		"EXPLAIN (ANALYZE -1) DELETE FROM t", "SELECT \"a\"\"b\".\"c>d\\\" FROM \"x\ny\"",
		"WITH RECURSIVE r AS (SELECT 1 UNION SELECT * FROM r) SELECT * FROM r, s.t",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		diffOne(t, sql)
	})
}

func TestDiffMutate(t *testing.T) {
	secs, _ := strconv.Atoi(os.Getenv("DIFF_MUTATE_SECONDS"))
	if secs == 0 {
		return
	}
	var pool []string
	for _, f := range strings.Fields(os.Getenv("DIFF_CORPUS")) {
		b, _ := os.ReadFile(f)
		var ss []string
		json.Unmarshal(b, &ss)
		for _, s := range ss {
			if _, err := pg_query.Parse(s); err == nil && len(s) < 4000 {
				pool = append(pool, s)
			}
		}
	}
	toks := []string{" ", "(", ")", ",", ";", "'", "\"", "$$", "::", "+", "-1", "0", " AND ", " OR ", " NOT ", "SELECT ", " FROM ", " WHERE ",
		" WITH ", " RECURSIVE ", " AS ", "INSERT INTO ", "UPDATE ", "DELETE FROM ", "MERGE INTO ", " RETURNING *", " INTO ", " FOR UPDATE",
		"COPY ", " PROGRAM ", " TO ", " FROM STDIN", "EXPLAIN ", "(ANALYZE ", "ANALYZE", " false", " 'off'", "PREPARE p AS ", "DECLARE c CURSOR FOR ",
		"LOCK ", "TRUNCATE ", "SET ", "RESET ", "LOCAL ", "ROLE ", "BEGIN", "COMMIT", "LISTEN ", "NOTIFY ", "CALL ", "DO ", "LATERAL ",
		"pg_sleep(1)", "s.f(x)", "t", "pg_t", "s.t", "\\", "E'\\n'", "U&'\\0041'", "<>", ">", "\u00e9", "\"a\"\"b\"", "$1", "[1]", "*", "."}
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	deadline := time.Now().Add(time.Duration(secs) * time.Second)
	n, bad, parsed := 0, 0, 0
	for time.Now().Before(deadline) {
		s := pool[rng.IntN(len(pool))]
		for k := rng.IntN(4) + 1; k > 0; k-- {
			i := rng.IntN(len(s) + 1)
			switch rng.IntN(4) {
			case 0:
				s = s[:i] + toks[rng.IntN(len(toks))] + s[i:]
			case 1:
				j := i + rng.IntN(8)
				if j > len(s) {
					j = len(s)
				}
				s = s[:i] + s[j:]
			case 2:
				o := pool[rng.IntN(len(pool))]
				a := rng.IntN(len(o) + 1)
				b := a + rng.IntN(len(o)-a+1)
				s = s[:i] + o[a:b] + s[i:]
			case 3:
				s = s + "; " + pool[rng.IntN(len(pool))]
			}
		}
		n++
		if _, err := Parse(s, Options{}); err == nil {
			parsed++
		}
		if !diffOne(t, s) {
			bad++
			if bad > 20 {
				break
			}
		}
	}
	t.Logf("%d mutated inputs (%d parse), %d differences", n, parsed, bad)
}
