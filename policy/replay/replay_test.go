package replay

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/dnsguard"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlfacts"
	"github.com/egressd/egressd/policy/sqlfacts/analyst"
	"github.com/egressd/egressd/policy/sqlparse"
	defaultbundle "github.com/egressd/egressd/rego"
)

func TestMain(m *testing.M) { sqlparse.EnableWorkers(); os.Exit(m.Run()) }

// rules of the bundle the records were made with.
var ownRules = []map[string]any{
	{"id": "docs", "hosts": []string{"docs.test"}, "ports": []int{80}},
	{"id": "paths", "hosts": []string{"paths.test"}, "ports": []int{80}, "methods": []string{"GET"}, "paths": []string{"/ok/**"}},
	{"id": "api", "hosts": []string{"api.test"}, "ports": []int{443}, "methods": []string{"GET"}, "inspect": true},
	{"id": "tools", "hosts": []string{"mcp.test"}, "ports": []int{443}, "inspect": true, "mcp": map[string]any{"tools": []string{"search_*"}}},
	{"id": "tunnel", "hosts": []string{"tunnel.test"}, "ports": []int{443}},
	{"id": "uploads", "hosts": []string{"docs.test"}, "ports": []int{80}, "methods": []string{"POST"}, "action": "deny", "mode": "observe"},
}

// narrowed drops the path rule, the inspected API and the tunnel, makes
// the observed rule enforce, and adds a rule for wide.test.
func narrowed() []map[string]any {
	var out []map[string]any
	for _, r := range ownRules {
		switch r["id"] {
		case "paths", "api", "tunnel":
			continue
		case "uploads":
			r = maps.Clone(r)
			delete(r, "mode")
		}
		out = append(out, r)
	}
	return append(out, map[string]any{"id": "wide", "hosts": []string{"wide.test"}, "ports": []int{80}})
}

func engine(t testing.TB, rules []map[string]any) *policy.Engine {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bundle")
	if err := defaultbundle.Write(dir, false); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(map[string]any{"rules": rules})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := policy.New(context.Background(), policy.Config{Dir: dir, EvalTimeout: 10 * time.Second}, zap.NewNop())
	if err != nil {
		t.Fatalf("policy.New: %v", err)
	}
	return e
}

func env(t testing.TB) Env {
	t.Helper()
	floor, err := dnsguard.NewFloor(nil)
	if err != nil {
		t.Fatal(err)
	}
	return Env{Floor: floor, Identity: func(id string) (policy.Identity, bool) {
		switch id {
		case "anonymous":
			return policy.Identity{ID: id}, true
		case "sandbox-1":
			return policy.Identity{ID: id, Attributes: map[string]string{"sql_profile": "read_only"}}, true
		}
		return policy.Identity{}, false
	}}
}

// Records as the listeners write them (proxy/record.go, dnsguard's
// handler, pggate's session).
func httpRec(method, scheme, host string, port uint16, path, query string, allow bool, reason, rule string) audit.Record {
	return audit.Record{Kind: audit.KindHTTP, Identity: "anonymous", Method: method, Scheme: scheme, Host: host, Port: port,
		Path: path, Query: query, Decision: audit.DecisionOf(allow), Reason: reason, Rule: rule}
}

func TestInputOf(t *testing.T) {
	inspected := httpRec("GET", "https", "api.test", 443, "/v1/x", "", true, "allowed", "api")
	inspected.Inspected = true
	redirect := httpRec("GET", "http", "docs.test", 80, "/next", "", true, "allowed", "docs")
	redirect.Kind = audit.KindRedirect
	folded := httpRec("", "", "", 0, "", "", false, "no_matching_rule", "")
	folded.Count = 7
	capped := httpRec("GET", "http", "docs.test", 80, "/aaaa", "", true, "allowed", "docs")
	capped.Truncated = "path"
	cappedError := httpRec("GET", "http", "docs.test", 80, "/a", "", true, "allowed", "docs")
	cappedError.Truncated = "error"
	cappedQuery := httpRec("GET", "http", "docs.test", 80, "/a", "q=%4", true, "allowed", "docs")
	cappedQuery.Truncated = "query"
	noLocation := audit.Record{Kind: audit.KindRedirect, Identity: "anonymous", Method: "GET", Decision: audit.DecisionDeny, Reason: "redirect_denied"}
	mcp := httpRec("POST", "https", "mcp.test", 443, "/mcp", "", true, "allowed", "tools")
	mcp.Inspected, mcp.MCPMethod, mcp.Tool = true, "tools/call", "search_docs"
	tests := []struct {
		name string
		rec  audit.Record
		want Case
		fact Fact // the *Missing expected, "" for none
		not  bool // ErrNotDecision expected
	}{
		{name: "http", rec: httpRec("GET", "http", "docs.test", 80, "/a%2Fb", "q=1", true, "allowed", "docs"),
			want: Case{Kind: policy.KindHTTP, Identity: "anonymous", Request: policy.HTTPRequest{Method: "GET", Target: "http://docs.test:80/a%2Fb?q=1"}}},
		{name: "http ipv6 literal", rec: httpRec("GET", "http", "2001:db8::1", 8080, "/", "", false, "no_matching_rule", ""),
			want: Case{Kind: policy.KindHTTP, Identity: "anonymous", Request: policy.HTTPRequest{Method: "GET", Target: "http://[2001:db8::1]:8080/"}}},
		{name: "inspected", rec: inspected,
			want: Case{Kind: policy.KindHTTP, Identity: "anonymous", Inspected: true, Request: policy.HTTPRequest{Method: "GET", Target: "https://api.test:443/v1/x"}}},
		{name: "redirect", rec: redirect,
			want: Case{Kind: policy.KindRedirect, Identity: "anonymous", Request: policy.HTTPRequest{Method: "GET", Target: "http://docs.test:80/next"}}},
		{name: "connect", rec: audit.Record{Kind: audit.KindConnect, Identity: "anonymous", Host: "tunnel.test", Port: 443, Decision: audit.DecisionAllow},
			want: Case{Kind: policy.KindConnect, Identity: "anonymous", Authority: "tunnel.test:443"}},
		{name: "dns", rec: audit.Record{Kind: audit.KindDNS, Identity: "anonymous", Name: "docs.test", QType: "AAAA", Decision: audit.DecisionAllow},
			want: Case{Kind: policy.KindDNS, Identity: "anonymous", Name: "docs.test", QType: dns.TypeAAAA}},
		{name: "dns type without a name", rec: audit.Record{Kind: audit.KindDNS, Identity: "anonymous", Name: "docs.test", QType: "TYPE65", Decision: audit.DecisionDeny},
			want: Case{Kind: policy.KindDNS, Identity: "anonymous", Name: "docs.test", QType: 65}},
		{name: "dns qtype unreadable", rec: audit.Record{Kind: audit.KindDNS, Identity: "anonymous", Name: "docs.test", QType: "BOGUS", Decision: audit.DecisionDeny},
			fact: FactTarget},
		{name: "sql statement", rec: audit.Record{Kind: audit.KindSQL, Identity: "sandbox-1", Database: "app", SQL: "SELECT name FROM users WHERE id = $1", Decision: audit.DecisionAllow},
			want: Case{Kind: policy.KindSQL, Identity: "sandbox-1", Database: "app", SQL: "SELECT name FROM users WHERE id = $1"}},
		{name: "sql login", rec: audit.Record{Kind: audit.KindSQL, Identity: "sandbox-1", Database: "app", Decision: audit.DecisionAllow},
			want: Case{Kind: policy.KindSQL, Identity: "sandbox-1", Database: "app"}},
		{name: "sql redaction failed", rec: audit.Record{Kind: audit.KindSQL, Identity: "sandbox-1", SQL: sqlfacts.RedactionFailed, Decision: audit.DecisionDeny}, fact: FactSQLText},
		{name: "sql cut", rec: audit.Record{Kind: audit.KindSQL, Identity: "sandbox-1", SQL: "SELECT a, b, c…", Decision: audit.DecisionAllow}, fact: FactSQLText},
		{name: "completion", rec: audit.Record{Kind: audit.KindHTTPDone, Status: 200}, not: true},
		{name: "started", rec: audit.Record{Kind: audit.KindStarted}, not: true},
		{name: "accept", rec: audit.Record{Kind: audit.KindAccept, Decision: audit.DecisionDeny, Reason: "fd_exhausted"}, not: true},
		{name: "folded", rec: folded, fact: FactFolded},
		{name: "capped path", rec: capped, fact: FactCapped},
		{name: "capped error only", rec: cappedError,
			want: Case{Kind: policy.KindHTTP, Identity: "anonymous", Request: policy.HTTPRequest{Method: "GET", Target: "http://docs.test:80/a"}}},
		{name: "redacted query", rec: httpRec("GET", "http", "docs.test", 80, "/", "token=[redacted:12]&x=1", true, "allowed", "docs"),
			want: Case{Kind: policy.KindHTTP, Identity: "anonymous", Request: policy.HTTPRequest{Method: "GET", Target: "http://docs.test:80/?token=[redacted:12]&x=1"}}},
		{name: "capped query", rec: cappedQuery,
			want: Case{Kind: policy.KindHTTP, Identity: "anonymous", Request: policy.HTTPRequest{Method: "GET", Target: "http://docs.test:80/a"}}},
		{name: "redirect without a target", rec: noLocation, fact: FactTarget},
		{name: "mcp call", rec: mcp, fact: FactBody},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := InputOf(&tt.rec)
			var m *Missing
			switch {
			case tt.not:
				if !errors.Is(err, ErrNotDecision) {
					t.Errorf("InputOf = %+v, %v; want ErrNotDecision", got, err)
				}
			case tt.fact != "":
				if !errors.As(err, &m) || m.Fact != tt.fact {
					t.Errorf("InputOf = %+v, %v; want missing %s", got, err, tt.fact)
				}
			case err != nil:
				t.Errorf("InputOf: %v", err)
			case got != tt.want:
				t.Errorf("InputOf = %+v; want %+v", got, tt.want)
			}
		})
	}
}

// TestReplay re-decides records against a narrowed bundle, each first
// under its own bundle (the oracle), and checks every outcome.
func TestReplay(t *testing.T) {
	own, cand := engine(t, ownRules), engine(t, narrowed())
	unknown := "sha256:" + strings.Repeat("0", 64)
	d := own.Digest()
	rec := func(r audit.Record, digest string) audit.Record { r.Policy = digest; return r }
	dnsRec := func(name string, allow bool, reason, rule string) audit.Record {
		return audit.Record{Kind: audit.KindDNS, Identity: "anonymous", Name: name, QType: "A", Decision: audit.DecisionOf(allow), Reason: reason, Rule: rule, Policy: d}
	}
	sqlRec := func(sql string, allow bool, reason, rule string) audit.Record {
		return audit.Record{Kind: audit.KindSQL, Identity: "sandbox-1", Database: "app", SQL: sql, Decision: audit.DecisionOf(allow), Reason: reason, Rule: rule, Policy: d}
	}
	inspected := rec(httpRec("GET", "https", "api.test", 443, "/v1/x", "", true, "allowed", "api"), d)
	inspected.Inspected = true
	mcpPost := rec(httpRec("POST", "https", "mcp.test", 443, "/mcp", "", true, "allowed", "tools"), d)
	mcpPost.Inspected = true
	observed := rec(httpRec("POST", "http", "docs.test", 80, "/up", "", true, "allowed", "uploads"), d)
	observed.WouldDeny, observed.ObservedBy = "rule_deny", "rule"
	redirectDenied := rec(httpRec("GET", "http", "other.test", 80, "/", "", false, "redirect_denied", ""), d)
	redirectDenied.Kind = audit.KindRedirect
	mcpGet := rec(httpRec("GET", "https", "mcp.test", 443, "/mcp", "", true, "allowed", "tools"), d)
	mcpGet.Inspected = true

	sqlAllow := sqlParse(t, "SELECT name FROM users WHERE id = 42")
	sqlDeny := sqlParse(t, "DELETE FROM users WHERE id = 42")
	okSQL := own.Decide(context.Background(), policy.Input{Identity: policy.Identity{ID: "sandbox-1", Attributes: map[string]string{"sql_profile": "read_only"}}, Facts: sqlAllow.st})
	denySQL := own.Decide(context.Background(), policy.Input{Identity: policy.Identity{ID: "sandbox-1", Attributes: map[string]string{"sql_profile": "read_only"}}, Facts: sqlDeny.st})

	tests := []struct {
		name     string
		rec      audit.Record
		outcome  Outcome
		fact     Fact
		verified bool
	}{
		{"allowed, still allowed", rec(httpRec("GET", "http", "docs.test", 80, "/", "", true, "allowed", "docs"), d), Same, "", true},
		{"path rule dropped", rec(httpRec("GET", "http", "paths.test", 80, "/ok/a", "", true, "allowed", "paths"), d), NewlyDenied, "", true},
		{"denied, still denied", rec(httpRec("GET", "http", "paths.test", 80, "/no", "", false, "no_matching_rule", ""), d), Same, "", true},
		{"denied, now allowed", rec(httpRec("GET", "http", "wide.test", 80, "/", "", false, "no_matching_rule", ""), d), NewlyAllowed, "", true},
		{"floor refuses an IP literal either way", rec(httpRec("GET", "http", "10.0.0.1", 80, "/", "", false, "private_address", ""), d), Same, "", true},
		{"inspected request, CONNECT no longer inspected", inspected, NewlyDenied, "", true},
		{"opaque tunnel dropped", rec(audit.Record{Kind: audit.KindConnect, Identity: "anonymous", Host: "tunnel.test", Port: 443, Decision: audit.DecisionAllow, Reason: "allowed", Rule: "tunnel"}, d), NewlyDenied, "", true},
		{"body rule: a POST may carry one", mcpPost, NotRedecidable, FactBody, false},
		{"body rule: a GET carries none", mcpGet, Same, "", true},
		{"dns allowed, name dropped", dnsRec("paths.test", true, "allowed", "paths"), NewlyDenied, "", true},
		{"dns refused on its answer, name still allowed", dnsRec("docs.test", false, "dns_nxdomain", "docs"), NotRedecidable, FactDNSAnswer, true},
		{"dns allowed without addresses, still allowed", dnsRec("docs.test", true, "dns_no_address", "docs"), Same, "", true},
		{"dns refused on its answer, name now denied", dnsRec("paths.test", false, "private_address", "paths"), Same, "", true},
		{"sql statement allowed", sqlRec(sqlAllow.audit, true, string(okSQL.Reason), okSQL.Rule), Same, "", true},
		{"sql statement denied", sqlRec(sqlDeny.audit, false, string(denySQL.Reason), denySQL.Rule), Same, "", true},
		{"sql other statement", sqlRec(sqlAllow.audit, false, "other_statement_denied", ""), NotRedecidable, FactOtherStatements, false},
		{"oracle: recorded otherwise than its bundle decides", rec(httpRec("GET", "http", "docs.test", 80, "/", "", false, "no_matching_rule", ""), d), NotRedecidable, FactOwnBundle, false},
		{"own bundle not archived", rec(httpRec("GET", "http", "paths.test", 80, "/ok/a", "", true, "allowed", "paths"), unknown), NewlyDenied, "", false},
		{"host header", rec(httpRec("GET", "http", "docs.test", 80, "/", "", false, "host_mismatch", ""), d), NotRedecidable, FactHostHeader, false},
		{"body refusal", rec(httpRec("POST", "https", "mcp.test", 443, "/mcp", "", false, "mcp_tool_denied", "tools"), d), NotRedecidable, FactBody, false},
		{"refused after the policy, now denied", rec(httpRec("GET", "http", "paths.test", 80, "/ok/a", "", false, "credential_unresolved", ""), d), Same, "", true},
		{"refused after the policy, still allowed", rec(httpRec("GET", "http", "docs.test", 80, "/", "", false, "secret_in_request", ""), d), NotRedecidable, FactRequest, true},
		{"parse refusal", rec(httpRec("GET", "http", "docs.test", 0, "", "", false, "malformed_url", ""), d), NotRedecidable, FactTarget, false},
		{"unknown identity", audit.Record{Kind: audit.KindHTTP, Identity: "gone", Method: "GET", Scheme: "http", Host: "docs.test", Port: 80, Path: "/", Decision: audit.DecisionAllow, Rule: "docs", Policy: d}, NotRedecidable, FactIdentity, false},
		{"redirect refused: recorded redirect_denied", redirectDenied, Same, "", true},
		{"observed, now enforced", observed, NewlyDenied, "", true},
		{"allowed by a grant", rec(httpRec("GET", "http", "other.test", 80, "/x", "", true, "allowed", "grant:g1"), d), NotRedecidable, FactGrant, false},
		{"redacted query", rec(httpRec("GET", "http", "docs.test", 80, "/", "token=[redacted:3]", true, "allowed", "docs"), d), Same, "", true},
		{"refused before the policy", rec(httpRec("GET", "http", "docs.test", 80, "/", "", false, "proxy_auth_required", ""), d), Skipped, "", false},
		{"completion", audit.Record{Kind: audit.KindHTTPDone, Decision: audit.DecisionAllow}, Skipped, "", false},
	}
	rp := NewReplayer(Options{Env: env(t), New: cand, Examples: 2, Own: func(_ context.Context, digest string) (Engine, error) {
		if digest == d {
			return own, nil
		}
		return nil, policy.ErrNotArchived
	}})
	ctx := context.Background()
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.rec
			r.Seq = uint64(i + 1)
			e := rp.Add(ctx, &r)
			if e.Outcome != tt.outcome || e.Verified != tt.verified {
				t.Errorf("Add = %s (verified %v, missing %v, new %+v); want %s (verified %v)", e.Outcome, e.Verified, e.Missing, e.New, tt.outcome, tt.verified)
			}
			if tt.fact != "" && (e.Missing == nil || e.Missing.Fact != tt.fact) {
				t.Errorf("missing = %v; want %s", e.Missing, tt.fact)
			}
		})
	}
	rep := rp.Report()
	if !rep.Changed() || rep.NewlyAllowed != 1 || rep.NewlyDenied != 6 {
		t.Errorf("report: newly denied %d, newly allowed %d; want 6, 1", rep.NewlyDenied, rep.NewlyAllowed)
	}
	if len(rep.Changes) != 7 || len(rep.Unloaded) != 1 {
		t.Errorf("report: %d changes, unloaded %v; want 7 and the one unknown digest", len(rep.Changes), rep.Unloaded)
	}
	for _, g := range rep.Groups {
		if len(g.Examples) > 2 || len(g.Examples) > g.Count {
			t.Errorf("group %+v: %d examples; want at most 2", g, len(g.Examples))
		}
	}
	var b strings.Builder
	if err := rep.Write(&b); err != nil || !strings.Contains(b.String(), "7 changed: 6 newly denied, 1 newly allowed") ||
		!strings.Contains(b.String(), "newly denied: 3, identity anonymous, rule paths -> (none) (no_matching_rule)") {
		t.Errorf("Write = %v:\n%s", err, b.String())
	}
}

type parsedSQL struct {
	st    *sqlfacts.Statement
	audit string
}

// sqlParse parses one statement as the gate does, returning its facts and
// the text its record holds.
func sqlParse(t *testing.T, text string) parsedSQL {
	t.Helper()
	sts, err := sqlfacts.ParseContext(context.Background(), text, sqlfacts.Options{Database: "app"})
	if err != nil || len(sts) != 1 {
		t.Fatalf("parse %q: %v", text, err)
	}
	return parsedSQL{st: sts[0], audit: sts[0].AuditSQL}
}

// TestRecordedSQLKeepsFacts: a statement's recorded text (every literal a
// $n) has the facts the gate decided the statement on, unless the gate
// marks them as read from a constant (which replay classifies sql_text).
// The corpus is the analyst workload and a few writes and utilities.
func TestRecordedSQLKeepsFacts(t *testing.T) {
	texts := append(analyst.Queries(),
		"INSERT INTO users (name) VALUES ('x') RETURNING id",
		"UPDATE users SET name = 'y' WHERE id = 3",
		"DELETE FROM users WHERE created < now() - interval '1 day'",
		"SELECT nextval('users_id_seq')",
		"SET statement_timeout = '5s'",
		"COPY (SELECT 1) TO STDOUT",
	)
	ctx := context.Background()
	checked := 0
	for _, text := range texts {
		sts, err := sqlfacts.ParseContext(ctx, text, sqlfacts.Options{Database: "app"})
		if err != nil {
			continue
		}
		for _, st := range sts {
			if st.ConstantFacts || st.AuditSQL == sqlfacts.RedactionFailed {
				continue
			}
			again, err := sqlfacts.ParseContext(ctx, st.AuditSQL, sqlfacts.Options{Database: "app"})
			if err != nil || len(again) != 1 {
				t.Errorf("recorded %q (of %q) re-parses as %d statements: %v", st.AuditSQL, st.Text, len(again), err)
				continue
			}
			if k1, k2 := st.AppendKey(nil), again[0].AppendKey(nil); string(k1) != string(k2) {
				t.Errorf("recorded %q has other facts than %q", st.AuditSQL, st.Text)
			}
			checked++
		}
	}
	if checked < 20 {
		t.Fatalf("only %d statements checked", checked)
	}
}

// TestQueryNotInInput pins what InputOf relies on to re-decide a record
// whose query was redacted or capped: no rule reads the query, so two
// requests that differ only in it have the same Rego input.
func TestQueryNotInInput(t *testing.T) {
	e := engine(t, ownRules)
	var inputs []string
	for _, q := range []string{"", "?token=abc", "?token=[redacted:3]&x=%4"} {
		f, err := policy.ParseHTTP(policy.KindHTTP, "GET", "http://docs.test/a"+q, "")
		if err != nil {
			t.Fatal(err)
		}
		in, err := e.RegoInput(policy.Input{Identity: policy.Identity{ID: "anonymous"}, Facts: f})
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, string(b))
	}
	for _, in := range inputs[1:] {
		if in != inputs[0] {
			t.Fatalf("the query reached the Rego input:\n%s\n%s\nInputOf keeps redacted and capped queries re-decidable on the premise that it does not", inputs[0], in)
		}
	}
}
