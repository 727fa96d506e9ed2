package policy_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlfacts"
	"github.com/egressd/egressd/policy/sqlfacts/analyst"
)

// TestAnalystCorpusReadOnly decides every query of the analyst corpus
// (ordinary analysis the read_only profile exists for) with the default
// bundle as the read_only profile: zero denies. (proxy/pggate runs the
// same corpus through the gate against a real PostgreSQL, which also
// shows that each query is valid SQL.)
func TestAnalystCorpusReadOnly(t *testing.T) {
	qs := analyst.Queries()
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
