package grants

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/policy"
)

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// fixture is a Manager on a temporary audit directory holding records,
// with a clock the test moves and an Apply that takes every set.
type fixture struct {
	m       *Manager
	reg     *prometheus.Registry
	rec     *audittest.Recorder
	dir     string
	mu      sync.Mutex
	now     time.Time
	applied [][]policy.Grant
	// refuse, when set, is what Apply answers before commit.
	refuse error
}

func newFixture(t *testing.T, records ...audit.Record) *fixture {
	t.Helper()
	f := &fixture{rec: &audittest.Recorder{}, reg: prometheus.NewRegistry(), dir: t.TempDir(), now: t0}
	ac := audit.Config{Dir: f.dir}
	ac.Provision()
	w, err := audit.Open(ac, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	for i := range records {
		if err := w.Append(&records[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	m, err := New(Options{Path: Path(f.dir), AuditDir: f.dir, Audit: f.rec, Apply: f.apply,
		Registerer: f.reg, Log: zap.NewNop(), Now: f.clock}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	f.m = m
	return f
}

func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fixture) set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = t
}

func (f *fixture) apply(_ context.Context, gs []policy.Grant, commit func() error) error {
	if f.refuse != nil {
		return f.refuse
	}
	if err := commit(); err != nil {
		return err
	}
	f.applied = append(f.applied, gs)
	return nil
}

func denied(id, kind, method, host string, port uint16, path string, reason policy.Reason) audit.Record {
	r := audit.Record{Kind: audit.Kind(kind), Request: id, Identity: "sbx", Method: method, Scheme: "http",
		Host: host, Port: port, Path: path, Decision: audit.DecisionDeny, Reason: string(reason)}
	if port == 443 {
		r.Scheme, r.Inspected = "https", true
	}
	return r
}

func statusOf(err error) int {
	var r *refusal
	if errors.As(err, &r) {
		return r.status
	}
	return 0
}

// A grant from a request takes exactly its identity, method, host, port
// and decoded path; refusals say why, with their status.
func TestCreateFromRequest(t *testing.T) {
	allowed := denied("r-allowed", "http", "GET", "a.test", 80, "/", "")
	allowed.Decision, allowed.Rule = audit.DecisionAllow, "docs"
	floorDone := denied("r-floor", "http", "GET", "meta.test", 80, "/", "")
	floorDone.Decision, floorDone.Rule = audit.DecisionAllow, "meta"
	denyRule := denied("r-deny", "http", "GET", "a.test", 80, "/admin", policy.ReasonRuleDeny)
	denyRule.Rule = "no-admin"
	tool := denied("r-tool", "http", "POST", "a.test", 443, "/mcp", policy.ReasonMCPToolDenied)
	tool.Rule = "tools"
	floorEnd := audit.Record{Kind: audit.KindHTTPDone, Request: "r-floor", Decision: audit.DecisionDeny, Reason: string(policy.ReasonMetadataAddress)}
	f := newFixture(t,
		denied("r-http", "http", "GET", "a.test", 80, "/files/a%20b", policy.ReasonNoMatchingRule),
		denied("r-https", "http", "POST", "a.test", 443, "/v1/x", policy.ReasonNoMatchingRule),
		denied("r-connect", "connect", "", "a.test", 443, "", policy.ReasonNoMatchingRule),
		denied("r-flag", "http", "GET", "a.test", 80, "/a/../b", "dot_segment"),
		denyRule, tool, allowed, floorDone, floorEnd,
	)
	ctx := context.Background()
	tests := []struct {
		name   string
		req    CreateRequest
		want   policy.Grant // without id, times, by
		status int
		msg    string
	}{
		{"http", CreateRequest{FromRequest: "r-http", TTL: "1h"},
			policy.Grant{Identity: "sbx", Method: "GET", Host: "a.test", Port: 80, Path: "/files/a b", FromRequest: "r-http"}, 0, ""},
		{"inspected https", CreateRequest{FromRequest: "r-https", TTL: "1h"},
			policy.Grant{Identity: "sbx", Method: "POST", Host: "a.test", Port: 443, Path: "/v1/x", Inspect: true, FromRequest: "r-https"}, 0, ""},
		{"connect as a tunnel", CreateRequest{FromRequest: "r-connect", TTL: "1h", Tunnel: true},
			policy.Grant{Identity: "sbx", Host: "a.test", Port: 443, Tunnel: true, FromRequest: "r-connect"}, 0, ""},
		{"connect without tunnel", CreateRequest{FromRequest: "r-connect", TTL: "1h"}, policy.Grant{}, 400, `"tunnel": true`},
		{"request fact", CreateRequest{FromRequest: "r-flag", TTL: "1h"}, policy.Grant{}, 409, "no grant lifts it"},
		{"allowed", CreateRequest{FromRequest: "r-allowed", TTL: "1h"}, policy.Grant{}, 409, "nothing to grant"},
		{"deny rule", CreateRequest{FromRequest: "r-deny", TTL: "1h"}, policy.Grant{}, 409, `by the rule "no-admin", which a grant does not override`},
		{"a rule's tool refusal", CreateRequest{FromRequest: "r-tool", TTL: "1h"}, policy.Grant{}, 409, `by the rule "tools", which a grant does not override`},
		{"floor at dial", CreateRequest{FromRequest: "r-floor", TTL: "1h"}, policy.Grant{}, 409, "metadata_address"},
		{"unknown", CreateRequest{FromRequest: "r-none", TTL: "1h"}, policy.Grant{}, 404, "no decision record"},
		{"no ttl", CreateRequest{FromRequest: "r-http"}, policy.Grant{}, 400, "ttl is required"},
		{"ttl too long", CreateRequest{FromRequest: "r-http", TTL: "169h"}, policy.Grant{}, 400, "longer than a grant may last"},
		{"negative ttl", CreateRequest{FromRequest: "r-http", TTL: "-1h"}, policy.Grant{}, 400, "positive"},
		{"both forms", CreateRequest{FromRequest: "r-http", URL: "http://a.test/", TTL: "1h"}, policy.Grant{}, 400, "not both"},
		{"explicit", CreateRequest{Identity: "sbx", Method: "DELETE", URL: "https://a.test/v1/x?y=1", TTL: "1h"},
			policy.Grant{Identity: "sbx", Method: "DELETE", Host: "a.test", Port: 443, Path: "/v1/x", Inspect: true}, 0, ""},
		{"explicit tunnel with a path", CreateRequest{Identity: "sbx", URL: "https://a.test/v1", Tunnel: true, TTL: "1h"}, policy.Grant{}, 400, "without a path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := f.m.Create(ctx, tt.req, "approver")
			if tt.status != 0 {
				if statusOf(err) != tt.status || !strings.Contains(err.Error(), tt.msg) {
					t.Errorf("Create(%+v) = %v (status %d); want %d saying %q", tt.req, err, statusOf(err), tt.status, tt.msg)
				}
				return
			}
			if err != nil {
				t.Fatalf("Create(%+v): %v", tt.req, err)
			}
			want := tt.want
			want.ID, want.GrantedBy, want.Created, want.Expires = g.ID, "approver", t0, t0.Add(time.Hour)
			if g != want {
				t.Errorf("Create(%+v) = %+v; want %+v", tt.req, g, want)
			}
		})
	}
}

// Grants expire in expiry order, each with its record, and the file
// always holds the set in force.
func TestExpiryOrder(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var ids []string
	for _, ttl := range []string{"3h", "1h", "2h"} {
		g, err := f.m.Create(ctx, CreateRequest{Identity: "sbx", Method: "GET", URL: "http://a.test/" + ttl, TTL: ttl}, "approver")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, g.ID)
	}
	expiredIDs := func() []string {
		var out []string
		for _, r := range f.rec.Records() {
			if r.Kind == audit.KindGrant && r.Detail["event"] == "expired" {
				out = append(out, r.Detail["id"])
			}
		}
		return out
	}
	f.set(t0.Add(90 * time.Minute))
	f.m.expire()
	if got := expiredIDs(); !slices.Equal(got, []string{ids[1]}) {
		t.Errorf("expired at +90m = %v; want the 1h grant %s", got, ids[1])
	}
	live, _, err := Load(Path(f.dir), f.now)
	if err != nil || len(live) != 2 || live[0].ID != ids[2] || live[1].ID != ids[0] {
		t.Errorf("file after one expiry = %+v, %v; want the 2h then the 3h grant", live, err)
	}
	f.set(t0.Add(5 * time.Hour))
	f.m.expire()
	if got := expiredIDs(); !slices.Equal(got, []string{ids[1], ids[2], ids[0]}) {
		t.Errorf("expired at +5h = %v; want %v in expiry order", got, []string{ids[1], ids[2], ids[0]})
	}
	if last := f.applied[len(f.applied)-1]; len(last) != 0 {
		t.Errorf("last set applied = %+v; want none", last)
	}
}

// A change the engine refuses, or whose record cannot be appended, is
// not made: the set in force and the file stay as they were.
func TestChangeNotMadeOnFailure(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	req := CreateRequest{Identity: "sbx", Method: "GET", URL: "http://a.test/x", TTL: "1h"}
	f.refuse = errors.New("1 rego test(s) failed")
	if _, err := f.m.Create(ctx, req, "approver"); statusOf(err) != 409 || !strings.Contains(err.Error(), "rego test") {
		t.Errorf("Create refused by the bundle = %v; want 409 naming the failure", err)
	}
	f.refuse = nil
	f.rec.SetFail(true)
	if _, err := f.m.Create(ctx, req, "approver"); err == nil || statusOf(err) != 0 {
		t.Errorf("Create with the audit log failing = %v (status %d); want an internal error", err, statusOf(err))
	}
	f.rec.SetFail(false)
	if got := f.m.List(); len(got) != 0 {
		t.Errorf("List() = %+v; want none", got)
	}
	if live, _, err := Load(Path(f.dir), f.now); err != nil || len(live) != 0 {
		t.Errorf("file = %+v, %v; want no grants", live, err)
	}
	g, err := f.m.Create(ctx, req, "approver")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.Revoke(ctx, g.ID, "operator"); err != nil {
		t.Fatal(err)
	}
	recs := f.rec.Records()
	if last := recs[len(recs)-1]; last.Detail["event"] != "revoked" || last.Detail["by"] != "operator" || last.Rule != "grant:"+g.ID {
		t.Errorf("revoke record = %+v; want revoked by operator", last)
	}
	if _, err := f.m.Revoke(ctx, g.ID, "operator"); statusOf(err) != 404 {
		t.Errorf("second Revoke = %v; want 404", err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := Path(dir)
	if live, expired, err := Load(p, t0); err != nil || live != nil || expired != nil {
		t.Fatalf("Load(missing) = %v, %v, %v; want none", live, expired, err)
	}
	g := func(id string, exp time.Duration) policy.Grant {
		return policy.Grant{ID: id, Identity: "sbx", Method: "GET", Host: "a.test", Port: 80, Path: "/", Expires: t0.Add(exp)}
	}
	if err := save(p, []policy.Grant{g("later", 2*time.Hour), g("gone", -time.Minute), g("sooner", time.Hour)}); err != nil {
		t.Fatal(err)
	}
	live, expired, err := Load(p, t0)
	if err != nil || len(live) != 2 || live[0].ID != "sooner" || live[1].ID != "later" || len(expired) != 1 || expired[0].ID != "gone" {
		t.Errorf("Load = %+v, %+v, %v; want sooner, later live and gone expired", live, expired, err)
	}
	if leftover, _ := filepath.Glob(filepath.Join(dir, ".*")); len(leftover) != 0 {
		t.Errorf("temporary files left: %v", leftover)
	}
	for name, body := range map[string]string{
		"unknown key": `{"grants": [], "extra": 1}`,
		"invalid":     `{"grants": [{"id": "x", "identity": "sbx", "host": "*.a.test", "port": 80, "tunnel": true, "expires": "2030-01-01T00:00:00Z"}]}`,
		"duplicate":   `{"grants": [{"id": "x", "identity": "sbx", "host": "a.test", "port": 80, "tunnel": true, "expires": "2030-01-01T00:00:00Z"}, {"id": "x", "identity": "sbx", "host": "a.test", "port": 81, "tunnel": true, "expires": "2030-01-01T00:00:00Z"}]}`,
	} {
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := Load(p, t0); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("Load(%s) = %v; want an error naming the file", name, err)
		}
	}
}

// The grant metrics pass promlint and move with the grants.
func TestMetrics(t *testing.T) {
	f := newFixture(t)
	m, reg := f.m, f.reg
	ctx := context.Background()
	for range 2 {
		if _, err := m.Create(ctx, CreateRequest{Identity: "sbx", Method: "GET", URL: "http://a.test/", TTL: "1h"}, "approver"); err != nil {
			t.Fatal(err)
		}
	}
	f.set(t0.Add(2 * time.Hour))
	m.expire()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v, %+v", err, problems)
	}
	for name, want := range map[string]float64{"egressd_grants_active": 0, "egressd_grants_created_total": 2, "egressd_grants_expired_total": 2, "egressd_grants_revoked_total": 0} {
		got := -1.0
		for _, mf := range mfs {
			if mf.GetName() == name {
				got = mf.GetMetric()[0].GetGauge().GetValue() + mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		if got != want {
			t.Errorf("%s = %v; want %v", name, got, want)
		}
	}
}

// A grant for an identity no request can come from is refused.
func TestUnknownIdentity(t *testing.T) {
	f := newFixture(t)
	f.m.o.Known = func(id string) bool { return id == "sbx" }
	_, err := f.m.Create(context.Background(), CreateRequest{Identity: "sbx-typo", Method: "GET", URL: "http://a.test/", TTL: "1h"}, "approver")
	if statusOf(err) != 400 || !strings.Contains(err.Error(), `"sbx-typo" is not one egressd knows`) {
		t.Errorf("Create for an unknown identity = %v; want 400 naming it", err)
	}
}
