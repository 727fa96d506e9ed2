package pggate

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/internal/metrics"
	"github.com/egressd/egressd/internal/pgtest"
)

// TestLoginsCounted: every login is counted by decision and reason (issue
// 17 item 6), a refusal the gate audits while deciding the database
// (sql_no_profile) by its own reason too.
func TestLoginsCounted(t *testing.T) {
	srv := sharedPG(t)
	t.Setenv("PGGATE_TEST_PASSWORD", pgtest.SuperPassword)
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Upstream = fmt.Sprintf("postgres://%s@%s/?sslmode=disable", pgtest.SuperUser, srv.Addr())
	cfg.PasswordEnv = "PGGATE_TEST_PASSWORD"
	reg := prometheus.NewRegistry()
	var d net.Dialer
	g, err := New(cfg, Deps{Engine: testEngine(t), Identities: testIdentities(t), Audit: &audittest.Recorder{},
		Dial: d.DialContext, Log: zap.NewNop(), Logins: metrics.NewLogins(reg)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln) //nolint:errcheck // ends with Shutdown below
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil {
			t.Errorf("gate shutdown: %v", err)
		}
	})
	f := &fixture{addr: ln.Addr().String()}
	logins := []struct {
		name, user, pass string
		ok               bool
	}{
		{"allowed", "agent-ro", passRO, true},
		{"wrong password", "agent-ro", "nope-" + passRO, false},
		{"database not allowed", "agent-none", passRO, false},
	}
	for _, l := range logins {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		c, err := pgconn.Connect(ctx, f.dsn(l.user, l.pass, "app"))
		if err == nil {
			c.Close(ctx)
		}
		cancel()
		if (err == nil) != l.ok {
			t.Fatalf("%s: Connect = %v; want ok %v", l.name, err, l.ok)
		}
	}
	// A refusal is counted before the client reads it; an allowed login
	// before the session starts, so before Connect returns.
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if v := m.GetCounter().GetValue(); v != 0 {
				got[labels["decision"]+" "+labels["reason"]] = v
			}
		}
	}
	want := map[string]float64{"allow allowed": 1, "deny authentication_failed": 1, "deny sql_no_profile": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("logins counted = %v; want %v", got, want)
	}
}
