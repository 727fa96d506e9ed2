package policy_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlfacts"
)

// analystQueries reads the analyst corpus: testdata/analyst/*.sql except
// schema.sql, one query per block of lines, blocks separated by blank
// lines. The corpus is what the read_only profile exists for: ordinary
// analysis (joins, windows, CTEs, JSON, date math, GROUPING SETS) that
// must never be denied.
func analystQueries(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "analyst", "*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	var qs []string
	for _, f := range files {
		if filepath.Base(f) == "schema.sql" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, block := range strings.Split(string(b), "\n\n") {
			var lines []string
			for _, l := range strings.Split(block, "\n") {
				if !strings.HasPrefix(l, "--") {
					lines = append(lines, l)
				}
			}
			if q := strings.TrimSpace(strings.Join(lines, "\n")); q != "" {
				qs = append(qs, q)
			}
		}
	}
	return qs
}

// TestAnalystCorpusReadOnly decides every corpus query with the default
// bundle as the read_only profile: zero denies. (proxy/pggate runs the
// same corpus through the gate against a real PostgreSQL, which also
// shows that each query is valid SQL.)
func TestAnalystCorpusReadOnly(t *testing.T) {
	qs := analystQueries(t)
	if len(qs) < 100 {
		t.Fatalf("analyst corpus has %d queries; want at least 100", len(qs))
	}
	e, err := policy.New(context.Background(), policy.Config{EvalTimeout: 10 * time.Second}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	id := policy.Identity{ID: "analyst", Attributes: map[string]string{"sql_profile": "read_only"}}
	denied := 0
	for _, q := range qs {
		sts, err := sqlfacts.Parse(q, sqlfacts.Options{Database: "shop"})
		if err != nil {
			t.Errorf("Parse(%q) = %v", q, err)
			denied++
			continue
		}
		for _, st := range sts {
			if d := e.Decide(context.Background(), policy.Input{Identity: id, Facts: st}); !d.Allow {
				b, _ := json.Marshal(st)
				t.Errorf("read_only denied %q: %s; facts %s", q, d.Reason, b)
				denied++
			}
		}
	}
	if denied > 0 {
		t.Errorf("%d of %d analyst queries denied; want 0", denied, len(qs))
	}
}
