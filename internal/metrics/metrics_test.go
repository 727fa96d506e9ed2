package metrics

import (
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/internal/version"
	"github.com/egressd/egressd/policy"
)

// gather returns every series of reg as `name{v1,v2,…}` (label values in
// label-name order) → value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var vals []string
			for _, lp := range m.GetLabel() {
				vals = append(vals, lp.GetValue())
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			out[mf.GetName()+"{"+strings.Join(vals, ",")+"}"] = v
		}
	}
	return out
}

// TestDecisionsZeroInitialised: before any decision each entry point's
// allow and each kind's deny by every declared reason it can be denied
// with is exported at zero, and no impossible pair is.
func TestDecisionsZeroInitialised(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewDecisions(reg)
	got := gather(t, reg)
	want := 0
	for _, c := range counted {
		if c.allows {
			want++
		}
		for _, r := range policy.Reasons() {
			if c.possible(r) {
				want++
			}
		}
	}
	n := 0
	for key := range got {
		if strings.HasPrefix(key, "egressd_decisions_total{") {
			n++
		}
	}
	if n != want {
		t.Errorf("series = %d; want %d (allows + possible kind × reason pairs)", n, want)
	}
	t.Logf("%d series", len(got))
	for _, key := range []string{
		"egressd_decisions_total{allow,dns,allowed}",
		"egressd_decisions_total{deny,dns,policy_denied}",
		"egressd_decisions_total{deny,sql,sql_parse_error}",
		"egressd_decisions_total{deny,http,audit_unavailable}",
		"egressd_decisions_total{deny,http,loopback_address}",
		"egressd_decisions_total{deny,http_done,upstream_unreachable}",
		"egressd_decisions_total{deny,connect,sni_mismatch}",
		"egressd_decisions_total{deny,connect,upstream_timeout}",
		"egressd_would_deny_total{http,bundle,no_matching_rule}",
		"egressd_would_deny_total{dns,identity,policy_denied}",
		"egressd_would_deny_total{connect,rule,rule_deny}",
		"egressd_would_deny_total{http,rule,mcp_tool_denied}",
	} {
		if v, ok := got[key]; !ok || v != 0 {
			t.Errorf("%s = %v, %v; want 0, present", key, v, ok)
		}
	}
	for _, key := range []string{
		"egressd_decisions_total{deny,dns,sql_parse_error}",
		"egressd_decisions_total{deny,sql,sni_mismatch}",
		"egressd_decisions_total{deny,http,client_closed}",
		"egressd_decisions_total{deny,http_done,client_closed}",
		"egressd_decisions_total{allow,http_done,allowed}",
		"egressd_decisions_total{deny,http,fd_exhausted}",
		"egressd_would_deny_total{http,bundle,metadata_address}",
		"egressd_would_deny_total{http,rule,secret_in_request}",
		"egressd_would_deny_total{http_done,rule,no_matching_rule}",
	} {
		if _, ok := got[key]; ok {
			t.Errorf("%s is exported; want no series for an impossible pair", key)
		}
	}
	for key := range got {
		if strings.Contains(key, "connect_done") {
			t.Errorf("%s is exported; want none: a tunnel's completion is counted under connect", key)
		}
	}
}

// TestCounting: the DNS server and the gate count what the client meets
// through the appender they write with.
func TestCounting(t *testing.T) {
	deny := audit.Decided(audit.KindSQL, "a", "c", audit.Verdict{Reason: "write_denied"})
	allow := audit.Decided(audit.KindDNS, "a", "c", audit.Verdict{Allow: true, Reason: "allowed"})
	observed := audit.Decided(audit.KindSQL, "a", "c", audit.Verdict{Allow: true, Reason: "allowed", WouldDeny: "write_denied", ObservedBy: policy.ObservedByIdentity})
	tests := []struct {
		name string
		fail error
		rec  *audit.Record
		want string // the one series counted; "" for none
	}{
		{"allow written", nil, allow, "egressd_decisions_total{allow,dns,allowed}"},
		{"deny written", nil, deny, "egressd_decisions_total{deny,sql,write_denied}"},
		{"observed allow written", nil, observed, "egressd_decisions_total{allow,sql,allowed} egressd_would_deny_total{sql,identity,write_denied}"},
		{"log unavailable", audittest.ErrFull, allow, "egressd_decisions_total{deny,dns,audit_unavailable}"},
		{"over budget: its refusal is appended next", audit.ErrOverBudget, allow, ""},
		{"writer record", nil, &audit.Record{Kind: audit.KindCheckpoint}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			d := NewDecisions(reg)
			if err := Counting(audittest.Sink{Err: tt.fail}, d).Append(tt.rec); !errors.Is(err, tt.fail) || (err == nil) != (tt.fail == nil) {
				t.Errorf("Append = %v; want %v passed through", err, tt.fail)
			}
			var counted []string
			for k, v := range gather(t, reg) {
				if v != 0 {
					counted = append(counted, k)
				}
			}
			sort.Strings(counted)
			want := []string{}
			if tt.want != "" {
				want = []string{tt.want}
			}
			if strings.Join(counted, " ") != strings.Join(want, " ") {
				t.Errorf("counted %q; want %q", counted, want)
			}
		})
	}
}

func TestLogins(t *testing.T) {
	reg := prometheus.NewRegistry()
	l := NewLogins(reg)
	l.Inc("")
	l.Inc(policy.ReasonAuthenticationFailed)
	l.Inc(policy.ReasonAuthenticationFailed)
	got := gather(t, reg)
	want := 1
	for _, r := range policy.Reasons() {
		if r.Refuses(policy.KindSQL) {
			want++
		}
	}
	if len(got) != want {
		t.Errorf("series = %d; want %d (allow + the reasons a Postgres decision can be denied with)", len(got), want)
	}
	if _, ok := got["egressd_postgres_logins_total{deny,sni_mismatch}"]; ok {
		t.Error("egressd_postgres_logins_total{deny,sni_mismatch} is exported; want no series for a reason no login has")
	}
	for key, want := range map[string]float64{
		"egressd_postgres_logins_total{allow,allowed}":              1,
		"egressd_postgres_logins_total{deny,authentication_failed}": 2,
		"egressd_postgres_logins_total{deny,unknown_identity}":      0,
	} {
		if got[key] != want {
			t.Errorf("%s = %v; want %v", key, got[key], want)
		}
	}
	var nilLogins *Logins
	nilLogins.Inc("") // counts nothing, does not panic
}

// TestPolicyInfo: one digest series for the running bundle, replaced (not
// added to) by a reload, and its load time.
func TestPolicyInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	p := NewPolicy(reg)
	if got := gather(t, reg); len(got) != 0 {
		t.Errorf("before Loaded: %v; want nothing", got)
	}
	p.Loaded("sha256:aaa", time.Unix(1000, 0))
	p.Loaded("sha256:bbb", time.Unix(2000, 500_000_000))
	got := gather(t, reg)
	want := map[string]float64{
		"egressd_policy_info{sha256:bbb}":           1,
		"egressd_policy_loaded_timestamp_seconds{}": 2000.5,
	}
	if len(got) != len(want) {
		t.Errorf("series %v; want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v; want %v", k, got[k], v)
		}
	}
}

func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	RegisterBuildInfo(reg, version.Info{Version: "v1", Commit: "c", GoVersion: "go1.26.0", PgQueryVersion: "v5.1.0"})
	// Label values in label-name order: commit, go_version, pg_query_version, version.
	if got := gather(t, reg)["egressd_build_info{c,go1.26.0,v5.1.0,v1}"]; got != 1 {
		t.Errorf("egressd_build_info = %v; want 1 with the build's labels (have %v)", got, gather(t, reg))
	}
}
