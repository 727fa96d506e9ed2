package sqlparse

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestLevels(t *testing.T) {
	tests := []struct {
		name string
		sql  string
		want int
	}{
		{"literals and separators are free", "1, 'a', $1, E'x', $$y$$, 1.5e3; -- c\n/* d */", 0},
		{"words", "SELECT a FROM t", 4},
		{"keyword chain", "SELECT 1 ISNULL ISNULL ISNULL", 4},
		{"quoted identifier", `SELECT "a b"`, 2},
		{"every operator character", "1 +- 1", 2},
		{"cast and brackets", "a::int[1]", 4},
		{"closing brackets are free", "((1))", 2},
		{"quotes hide structure", "'((((' \"ISNULL\"", 1},
		{"U& string", "U&'\\0041 ((' ", 0},
		{"E string with escaped quote", `E'\' ((('`, 0},
		{"dollar tag", "$a$ ISNULL $a$", 0},
		{"numbers", "1e5 1_000 0x1F", 0},
		// PostgreSQL ends a -- comment at a lone CR: what follows is
		// structure, and counts (the old Go lexer hid it in the comment).
		{"comment ends at CR", "--x\r1 ISNULL ISNULL", 2},
		{"string continued on the next line", "E'x'\n'\\' ISNULL '", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			toks, err := Scan(tt.sql)
			if err != nil {
				t.Fatalf("Scan(%q) = %v", tt.sql, err)
			}
			if got := Levels(toks); got != tt.want {
				t.Errorf("Levels(%q) = %d; want %d", tt.sql, got, tt.want)
			}
		})
	}
}

// TestDepthBehindCRIsNotInProcess is the reported crasher's mechanism: a
// read_only query whose depth hid behind `--\r` was judged shallow and
// parsed in-process. PostgreSQL's scanner ends the comment at the CR.
func TestDepthBehindCRIsNotInProcess(t *testing.T) {
	sql := "SELECT 1 --\r" + strings.Repeat(" ISNULL", InProcessLevels+1)
	if len(sql) > InProcessBytes {
		t.Fatalf("test text is %d bytes, past the byte bound %d: it would not test the scan", len(sql), InProcessBytes)
	}
	if InProcess(sql) {
		t.Errorf("InProcess(SELECT 1 --\\r ISNULL × %d) = true; want a worker parse", InProcessLevels+1)
	}
}

func TestRedact(t *testing.T) {
	tests := []struct {
		name, sql, want string
	}{
		{"select", "SELECT 'a', 1, 1.5, -2 FROM t WHERE x = E'\\'' -- c", "SELECT $1, $2, $3, -$4 FROM t WHERE x = $5  "},
		{"after existing params", "SELECT $2, 'x'", "SELECT $2, $3"},
		{"execute", "EXECUTE p('secret', 42)", "EXECUTE p($1, $2)"},
		{"notify", "NOTIFY ch, 'payload'", "NOTIFY ch, $1"},
		{"role password", "CREATE ROLE r PASSWORD 'pw'", "CREATE ROLE r PASSWORD $1"},
		{"server options", "CREATE SERVER s FOREIGN DATA WRAPPER w OPTIONS (password 'pw')", "CREATE SERVER s FOREIGN DATA WRAPPER w OPTIONS (password $1)"},
		{"dollar quotes", "SELECT $$a$$, $q$b$q$", "SELECT $1, $2"},
		{"prefixed strings", "SELECT U&'a', B'1', X'1F', N'n', e'x'", "SELECT $1, $2, $3, N $4, $5"},
		{"U& string with its escape clause", "SELECT U&'d!0061ta' UESCAPE '!' , 1", "SELECT $1 UESCAPE $2 , $3"},
		{"quoted identifiers stay", `SELECT "col" FROM "t"`, `SELECT "col" FROM "t"`},
		{"U& identifier stays", `SELECT U&"c\0061l" FROM t`, `SELECT U&"c\0061l" FROM t`},
		{"nested comment", "SELECT /* a /* b */ c */ 1", "SELECT   $1"},
		// The reported leaks: PostgreSQL ends a -- comment at a lone
		// CR, and lexes a string continued on the next line in the
		// first part's state (here E'', where \' escapes the quote).
		{"comment ends at CR", "UPDATE o SET s = s --x\r, amount = -amount WHERE id = 1", "UPDATE o SET s = s  \r, amount = -amount WHERE id = $1"},
		{"continued E string", "CREATE ROLE r PASSWORD E'x'\n'\\' secret '", "CREATE ROLE r PASSWORD $1"},
		{"continued string after CR", "SELECT 'a'\r'secret'", "SELECT $1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := Redact(tt.sql); err != nil || got != tt.want {
				t.Errorf("Redact(%q) = %q, %v; want %q", tt.sql, got, err, tt.want)
			}
		})
	}
}

// TestRedactRefusesWhatDoesNotScan: a text PostgreSQL's scanner refuses
// has no redaction; none of it may reach a log.
func TestRedactRefusesWhatDoesNotScan(t *testing.T) {
	for _, sql := range []string{"SELECT 'unterminated", "SELECT 1 /* open", `SELECT "open`, "SELECT 123abc", "SELECT 'a'\x00'b'"} {
		if got, err := Redact(sql); !errors.Is(err, ErrScan) {
			t.Errorf("Redact(%q) = %q, %v; want ErrScan", sql, got, err)
		}
	}
}

// TestISNULLChainDoesNotCrash is the reported crasher: ` ISNULL` × 30,000
// segfaulted the whole process inside Normalize (and crashes the protobuf
// writer too). Now it is parsed in a worker, whose crash is an error, and
// the next parse works.
func TestISNULLChainDoesNotCrash(t *testing.T) {
	ctx := context.Background()
	for _, unit := range []string{" ISNULL", " NOTNULL"} {
		sql := "SELECT 1" + strings.Repeat(unit, 30000)
		if InProcess(sql) {
			t.Fatalf("InProcess(SELECT 1%s × 30000) = true; want false", unit)
		}
		if _, err := Parse(ctx, sql); err != nil && !errors.Is(err, ErrCrashed) {
			t.Errorf("Parse(SELECT 1%s × 30000) = %v; want success or ErrCrashed", unit, err)
		}
		if _, err := ParseToJSON(ctx, sql); err != nil && !errors.Is(err, ErrCrashed) {
			t.Errorf("ParseToJSON(SELECT 1%s × 30000) = %v; want success or ErrCrashed", unit, err)
		}
	}
	if tree, err := Parse(ctx, "SELECT 1"); err != nil || len(tree.Stmts) != 1 {
		t.Errorf("Parse(SELECT 1) after the crashers = %v, %v; want one statement", tree, err)
	}
}

func TestWorkerParses(t *testing.T) {
	ctx := context.Background()
	deep := "SELECT 1" + strings.Repeat("+1", 5000)
	if InProcess(deep) {
		t.Fatal("5,001-term sum is in-process; want a worker parse")
	}
	tests := []struct {
		name string
		sql  string
		fn   func(string) (string, error)
		want string
	}{
		{"fingerprint", deep, func(s string) (string, error) { return Fingerprint(ctx, s) }, ""},
		{"json", deep, func(s string) (string, error) { return ParseToJSON(ctx, s) }, `{"version":`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.fn(tt.sql)
			if err != nil || got == "" || !strings.HasPrefix(got, tt.want) {
				t.Errorf("%s = %.40q, %v; want prefix %q", tt.name, got, err, tt.want)
			}
		})
	}
	var pe *Error
	if _, err := ParseToJSON(ctx, "SELECT (("+strings.Repeat("a ISNULL ", 3000)); !errors.As(err, &pe) || pe.Message == "" {
		t.Errorf("ParseToJSON(invalid deep text) = %v; want a *sqlparse.Error from the worker", err)
	}
	// Wide rather than deep: Go's protobuf decoder stops at 10,000
	// levels (an error, not a crash).
	wide := "SELECT a" + strings.Repeat(", a", 5000)
	if InProcess(wide) {
		t.Fatal("5,001 columns are in-process; want a worker parse")
	}
	tree, err := Parse(ctx, wide)
	if err != nil || len(tree.Stmts) != 1 || len(tree.Stmts[0].GetStmt().GetSelectStmt().GetTargetList()) != 5001 {
		t.Errorf("Parse(5,001 columns) = %v; want one SELECT of 5,001 columns", err)
	}
}

// TestCancelKillsWorkerParse: when the caller's context ends while a worker
// parses (the client left), the worker is killed, not waited for.
func TestCancelKillsWorkerParse(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	testHookSent = cancel
	defer func() { testHookSent = nil }()
	// Long enough that the worker cannot have answered before the hook.
	sql := "SELECT 1" + strings.Repeat(",1", 100000)
	_, err := ParseToJSON(ctx, sql)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("ParseToJSON with the client gone = %v; want context.Canceled", err)
	}
	testHookSent = nil
	if _, err := ParseToJSON(context.Background(), sql[:len(sql)/2]); err != nil {
		t.Errorf("ParseToJSON after a cancelled parse = %v; want a fresh worker to answer", err)
	}
}

// TestOnlySqlparseCallsLibpgQuery: every call into libpg_query goes through
// this package, so none can crash the process.
func TestOnlySqlparseCallsLibpgQuery(t *testing.T) {
	call := regexp.MustCompile(`\bpg_query\.(Parse|ParseToJSON|ParseToProtobuf|Normalize|Fingerprint|FingerprintToUInt64|FingerprintToHexStr|Scan|Deparse|SplitWithParser|SplitWithScanner|ParsePlPgSqlToJSON)\(|"github.com/pganalyze/pg_query_go/v5/parser"`)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	here, _ := filepath.Abs(".")
	n := 0
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == here || strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		if m := call.Find(b); m != nil {
			t.Errorf("%s calls libpg_query directly (%s); go through package sqlparse", path, m)
		}
		return nil
	})
	if err != nil || n < 50 {
		t.Fatalf("scanned %d files under %s: %v; want the whole module", n, root, err)
	}
}
