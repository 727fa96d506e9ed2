package pggate

import (
	"io"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy/sqlfacts/analyst"
)

// TestAnalystCorpusThroughGate runs the analyst corpus through the gate as
// the read_only profile against a real PostgreSQL holding the corpus's
// schema: every query is allowed and runs without error.
func TestAnalystCorpusThroughGate(t *testing.T) {
	pg := sharedPG(t)
	admin := connect(t, pg.DSN("postgres"))
	if _, err := admin.Exec(ctxT(t), "DROP DATABASE IF EXISTS shop").ReadAll(); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctxT(t), "CREATE DATABASE shop").ReadAll(); err != nil {
		t.Fatal(err)
	}
	if _, err := connect(t, pg.DSN("shop")).Exec(ctxT(t), analyst.Schema).ReadAll(); err != nil {
		t.Fatalf("schema.sql: %v", err)
	}
	f := startGate(t, pg, nil)
	c := connect(t, f.dsn("agent-ro", passRO, "shop"))
	qs := analyst.Queries()
	if len(qs) < 100 {
		t.Fatalf("analyst corpus has %d queries; want at least 100", len(qs))
	}
	for _, q := range qs {
		var err error
		if strings.HasPrefix(q, "COPY") {
			_, err = c.CopyTo(ctxT(t), io.Discard, q)
		} else {
			_, err = c.Exec(ctxT(t), q).ReadAll()
		}
		if err != nil {
			t.Errorf("%s: %v", q, err)
		}
	}
}
