package dnsguard

import (
	"context"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/dnsguard/dnstest"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/internal/testwait"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/rego"
)

// testRules are the bundle rules the server tests decide with.
const testRules = `{"rules": [
  {"id": "svc", "hosts": ["svc.test", "meta.test", "mixed.test", "alias.test", "gone.test", "big.test", "long.test", "metadata.google.internal"], "ports": [443]},
  {"id": "wild", "hosts": ["*.wild.test"], "ports": [443]}
]}`

// testEngine loads the real default bundle's modules with testRules as its
// data.
func testEngine(t testing.TB) *policy.Engine {
	t.Helper()
	return engineWithData(t, testRules)
}

// engineWithData loads the real default bundle's modules with data as its
// data.json.
func engineWithData(t testing.TB, data string) *policy.Engine {
	t.Helper()
	dir := t.TempDir()
	err := fs.WalkDir(rego.FS, ".", func(p string, d fs.DirEntry, err error) error {
		// The bundle's own Rego tests assert the default data, which
		// testRules replaces.
		if err != nil || d.IsDir() || strings.HasSuffix(p, "_test.rego") {
			return err
		}
		b, err := fs.ReadFile(rego.FS, p)
		if err != nil {
			return err
		}
		if p == "data.json" {
			b = []byte(data)
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, p), b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy bundle: %v", err)
	}
	e, err := policy.New(context.Background(), policy.Config{Dir: dir}, zap.NewNop())
	if err != nil {
		t.Fatalf("policy.New: %v", err)
	}
	return e
}

// testServer is a running sandbox-facing server in front of a dnstest
// upstream.
type testServer struct {
	srv      *Server
	addr     string
	upstream *dnstest.Server
	audit    *audittest.Recorder
	given    *Given
}

// fakeDecider allows the names of testRules the way egress.dns does, so the
// server tests do not depend on the bundle; TestServerWithPolicyEngine runs
// the real one.
type fakeDecider struct{}

func (fakeDecider) Decide(_ context.Context, in policy.Input) policy.Decision {
	f := in.Facts.(*Facts)
	switch f.QType {
	case "A", "AAAA", "CNAME":
	default:
		return policy.Decision{Reason: "qtype_not_allowed", Policy: "fake"}
	}
	if strings.HasSuffix(f.Name, ".wild.test") {
		return policy.Decision{Allow: true, Reason: "allowed", Rule: "wild", Policy: "fake"}
	}
	if strings.Contains(testRules, `"`+f.Name+`"`) {
		return policy.Decision{Allow: true, Reason: "allowed", Rule: "svc", Policy: "fake"}
	}
	return policy.Decision{Reason: "no_matching_rule", Policy: "fake"}
}

// Digest is empty, as the server tests' records of refusals made before
// the policy expect.
func (fakeDecider) Digest() string { return "" }

func startServer(t testing.TB, edit func(*Config)) *testServer {
	return startServerWith(t, fakeDecider{}, edit)
}

func startServerWith(t testing.TB, decider policy.Decider, edit func(*Config)) *testServer {
	t.Helper()
	return startServerLog(t, decider, edit, zap.NewNop(), nil)
}

// startServerLog starts a server logging to log; wrap, if set, puts an
// Appender (an audit.Meter) between the server and its recorder.
func startServerLog(t testing.TB, decider policy.Decider, edit func(*Config), log *zap.Logger, wrap func(audit.Appender) audit.Appender) *testServer {
	t.Helper()
	up := dnstest.Start(t)
	up.SetRR("svc.test", "svc.test. 3600 IN A 192.0.43.10", "svc.test. 3600 IN AAAA 2001:500:88:200::10")
	up.SetRR("x.wild.test", "x.wild.test. 30 IN A 192.0.43.11")
	up.SetRR("meta.test", "meta.test. 60 IN A 169.254.169.254")
	up.SetRR("mixed.test", "mixed.test. 60 IN A 192.0.43.10", "mixed.test. 60 IN A 127.0.0.1")
	up.SetRR("alias.test", "alias.test. 60 IN CNAME svc.test.")
	up.SetRR("attacker.test", "attacker.test. 60 IN TXT \"secret\"")
	up.SetRR("metadata.google.internal", "metadata.google.internal. 60 IN A 192.0.43.12")
	var big []string
	for i := range 120 {
		big = append(big, "big.test. 60 IN A 192.0.43."+strconv.Itoa(i))
	}
	up.SetRR("big.test", big...)

	cfg := testConfig(up.Addr())
	if edit != nil {
		edit(&cfg)
	}
	r, _ := newTestResolver(t, cfg, nil)
	rec := &audittest.Recorder{}
	var app audit.Appender = rec
	if wrap != nil {
		app = wrap(rec)
	}
	given := NewGiven(0, 0)
	s, err := NewServer(ServerOptions{Config: cfg, Decider: decider, Resolver: r, Audit: app, Log: log, Given: given})
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	pc, ln, err := dnstest.ListenPair()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, pc, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	ts := &testServer{srv: s, addr: pc.LocalAddr().String(), upstream: up, audit: rec, given: given}
	ts.waitReady(t)
	return ts
}

// waitReady polls until the UDP side answers: ActivateAndServe has no
// started signal once given a conn.
func (ts *testServer) waitReady(t testing.TB) {
	t.Helper()
	c := &dns.Client{Net: "udp", Timeout: 200 * time.Millisecond}
	m := new(dns.Msg)
	m.SetQuestion("ready.invalid.", dns.TypeA)
	testwait.For(t, "the dns server on "+ts.addr+" to answer", 10*time.Second, func() error {
		_, _, err := c.Exchange(m, ts.addr)
		return err
	})
}

func (ts *testServer) ask(t *testing.T, netw, name string, qtype uint16) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: netw, Timeout: 2 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	resp, _, err := c.Exchange(m, ts.addr)
	if err != nil {
		t.Fatalf("query %s %s over %s: %v", name, dns.TypeToString[qtype], netw, err)
	}
	return resp
}

func answerStrings(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		f := strings.Fields(rr.String())
		out = append(out, f[3]+" "+f[4])
	}
	return out
}

func TestServer(t *testing.T) {
	ts := startServer(t, nil)
	tests := []struct {
		name     string
		qname    string
		qtype    uint16
		rcode    int
		answer   []string
		decision audit.Decision
		reason   string
		rule     string
	}{
		{name: "allowed A", qname: "svc.test", qtype: dns.TypeA, answer: []string{"A 192.0.43.10"}, decision: "allow", reason: "allowed", rule: "svc"},
		{name: "allowed AAAA", qname: "svc.test", qtype: dns.TypeAAAA, answer: []string{"AAAA 2001:500:88:200::10"}, decision: "allow", reason: "allowed", rule: "svc"},
		{name: "case preserved", qname: "SVC.Test", qtype: dns.TypeA, answer: []string{"A 192.0.43.10"}, decision: "allow", reason: "allowed", rule: "svc"},
		{name: "wildcard", qname: "x.wild.test", qtype: dns.TypeA, answer: []string{"A 192.0.43.11"}, decision: "allow", reason: "allowed", rule: "wild"},
		{name: "cname flattened", qname: "alias.test", qtype: dns.TypeA, answer: []string{"A 192.0.43.10"}, decision: "allow", reason: "allowed", rule: "svc"},
		{name: "cname query", qname: "alias.test", qtype: dns.TypeCNAME, answer: []string{"CNAME svc.test."}, decision: "allow", reason: "allowed", rule: "svc"},
		{name: "refused name", qname: "attacker.test", qtype: dns.TypeA, rcode: dns.RcodeRefused, decision: "deny", reason: "no_matching_rule"},
		{name: "txt refused", qname: "svc.test", qtype: dns.TypeTXT, rcode: dns.RcodeRefused, decision: "deny", reason: "qtype_not_allowed"},
		{name: "any refused", qname: "svc.test", qtype: dns.TypeANY, rcode: dns.RcodeRefused, decision: "deny", reason: "qtype_not_allowed"},
		{name: "null refused", qname: "svc.test", qtype: dns.TypeNULL, rcode: dns.RcodeRefused, decision: "deny", reason: "qtype_not_allowed"},
		{name: "metadata answer", qname: "meta.test", qtype: dns.TypeA, rcode: dns.RcodeRefused, decision: "deny", reason: "metadata_address", rule: "svc"},
		{name: "mixed answer", qname: "mixed.test", qtype: dns.TypeA, rcode: dns.RcodeRefused, decision: "deny", reason: "loopback_address", rule: "svc"},
		{name: "metadata name despite rule", qname: "metadata.google.internal", qtype: dns.TypeA, rcode: dns.RcodeRefused, decision: "deny", reason: "metadata_name"},
		{name: "allowed but missing", qname: "gone.test", qtype: dns.TypeA, rcode: dns.RcodeNameError, decision: "deny", reason: "dns_nxdomain", rule: "svc"},
		{name: "ip as name", qname: "127.0.0.1", qtype: dns.TypeA, rcode: dns.RcodeRefused, decision: "deny", reason: "ip_literal_name"},
		{name: "binary label", qname: "a\\000b.test", qtype: dns.TypeA, rcode: dns.RcodeRefused, decision: "deny", reason: "malformed_name"},
	}
	for _, netw := range []string{"udp", "tcp"} {
		for _, tt := range tests {
			t.Run(netw+" "+tt.name, func(t *testing.T) {
				resp := ts.ask(t, netw, tt.qname, tt.qtype)
				if resp.Rcode != tt.rcode {
					t.Errorf("rcode = %s; want %s", dns.RcodeToString[resp.Rcode], dns.RcodeToString[tt.rcode])
				}
				if got := answerStrings(resp); strings.Join(got, ",") != strings.Join(tt.answer, ",") {
					t.Errorf("answer = %v; want %v", got, tt.answer)
				}
				rec := ts.audit.Last()
				if rec.Kind != "dns" || rec.Decision != tt.decision || rec.Reason != tt.reason || rec.Rule != tt.rule || rec.Identity != "anonymous" {
					t.Errorf("audit = %+v; want kind dns, decision %q, reason %q, rule %q, identity anonymous", rec, tt.decision, tt.reason, tt.rule)
				}
				if rec.Client != "127.0.0.1" || rec.QType != dns.TypeToString[tt.qtype] {
					t.Errorf("audit client, qtype = %q, %q; want 127.0.0.1, %s", rec.Client, rec.QType, dns.TypeToString[tt.qtype])
				}
			})
		}
	}
	if n := ts.upstream.Queries("attacker.test"); n != 0 {
		t.Errorf("upstream saw %d queries for a refused name; want 0", n)
	}
}

func TestServerWithPolicyEngine(t *testing.T) {
	ts := startServerWith(t, testEngine(t), nil)
	for _, c := range []struct {
		qname  string
		qtype  uint16
		rcode  int
		reason string
		rule   string
	}{
		{"svc.test", dns.TypeA, dns.RcodeSuccess, "allowed", "svc"},
		{"x.wild.test", dns.TypeA, dns.RcodeSuccess, "allowed", "wild"},
		{"wild.test", dns.TypeA, dns.RcodeRefused, "no_matching_rule", ""},
		{"attacker.test", dns.TypeA, dns.RcodeRefused, "no_matching_rule", ""},
		{"svc.test", dns.TypeTXT, dns.RcodeRefused, "qtype_not_allowed", ""},
		{"metadata.google.internal", dns.TypeA, dns.RcodeRefused, "metadata_name", ""},
	} {
		resp := ts.ask(t, "udp", c.qname, c.qtype)
		rec := ts.audit.Last()
		if resp.Rcode != c.rcode || rec.Reason != c.reason || rec.Rule != c.rule || !strings.HasPrefix(rec.Policy, "sha256:") {
			t.Errorf("%s %s: rcode %s, audit %s/%s/%s; want %s, %s/%s/sha256:…", c.qname, dns.TypeToString[c.qtype],
				dns.RcodeToString[resp.Rcode], rec.Reason, rec.Rule, rec.Policy, dns.RcodeToString[c.rcode], c.reason, c.rule)
		}
	}
}

func TestServerAnswerDetails(t *testing.T) {
	ts := startServer(t, nil)
	t.Run("ttl capped", func(t *testing.T) {
		resp := ts.ask(t, "udp", "svc.test", dns.TypeA)
		if len(resp.Answer) != 1 || resp.Answer[0].Header().Ttl > 60 || resp.Answer[0].Header().Ttl < 50 {
			t.Errorf("answer = %v; want one record with TTL capped to 60", resp.Answer)
		}
	})
	t.Run("audit ip", func(t *testing.T) {
		ts.ask(t, "udp", "svc.test", dns.TypeAAAA)
		if got := ts.audit.Last().IP; got != "2001:500:88:200::10" {
			t.Errorf("audit ip = %q; want 2001:500:88:200::10", got)
		}
	})
	t.Run("truncated over udp, whole over tcp", func(t *testing.T) {
		resp := ts.ask(t, "udp", "big.test", dns.TypeA)
		if !resp.Truncated || len(resp.Answer) >= 120 {
			t.Errorf("udp answer: truncated %v with %d records; want truncated", resp.Truncated, len(resp.Answer))
		}
		resp = ts.ask(t, "tcp", "big.test", dns.TypeA)
		if resp.Truncated || len(resp.Answer) != 120 {
			t.Errorf("tcp answer: truncated %v with %d records; want 120", resp.Truncated, len(resp.Answer))
		}
	})
	t.Run("audit failure refuses", func(t *testing.T) {
		ts.audit.SetFail(true)
		defer ts.audit.SetFail(false)
		if resp := ts.ask(t, "udp", "svc.test", dns.TypeA); resp.Rcode != dns.RcodeRefused || len(resp.Answer) != 0 {
			t.Errorf("with audit down: rcode %s, %d answers; want REFUSED and none", dns.RcodeToString[resp.Rcode], len(resp.Answer))
		}
	})
}

// TestAuditOutageLogIsThrottled is issue 11 item 22 for the DNS server:
// while appends fail, each refused query wrote an error line.
func TestAuditOutageLogIsThrottled(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	ts := startServerLog(t, fakeDecider{}, func(c *Config) { c.RateLimit, c.Burst = 1e6, 1e6 }, zap.New(core), nil)
	ts.audit.SetFail(true)
	for range 50 {
		if resp := ts.ask(t, "udp", "svc.test", dns.TypeA); resp.Rcode != dns.RcodeRefused {
			t.Fatalf("with audit down: rcode %s; want REFUSED", dns.RcodeToString[resp.Rcode])
		}
	}
	if n := logs.FilterMessageSnippet("audit append failed").Len(); n > 2 {
		t.Errorf("50 refused queries during an outage wrote %d error lines; want at most 2", n)
	}
}

// TestAuditBudgetRefusesQueries: a client over its audit budget (issue 11
// item 19) is refused, and the refusal is recorded with its reason.
func TestAuditBudgetRefusesQueries(t *testing.T) {
	ac := audit.DefaultConfig()
	ac.IdentityRate, ac.IdentityBurst = 0.001, 3
	var m *audit.Meter
	ts := startServerLog(t, fakeDecider{}, func(c *Config) { c.RateLimit, c.Burst = 1e6, 1e6 }, zap.NewNop(),
		func(a audit.Appender) audit.Appender { m = audit.NewMeter(a, ac); return m })
	// waitReady's query spent at least one record of the budget of 3, so
	// at most two of these are answered, and the rest are refused.
	refused, answered := 0, 0
	for range 6 {
		switch rc := ts.ask(t, "udp", "svc.test", dns.TypeA).Rcode; {
		case rc == dns.RcodeRefused:
			refused++
		case refused > 0:
			t.Errorf("rcode %s after a refusal; want REFUSED while over budget", dns.RcodeToString[rc])
		default:
			answered++
		}
	}
	if answered > 2 || refused < 4 {
		t.Errorf("over budget: %d answered, %d refused; want at most 2 answered", answered, refused)
	}
	m.Close()
	var over int64
	for _, r := range ts.audit.Records() {
		if r.Reason == string(policy.ReasonAuditBudgetExceeded) && r.Decision == "deny" {
			over += max(1, r.Count)
		}
	}
	if over != int64(refused) {
		t.Errorf("%s refusals recorded = %d; want %d", string(policy.ReasonAuditBudgetExceeded), over, refused)
	}
}

func TestServerNXDOMAINMode(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.Refuse = "nxdomain" })
	if resp := ts.ask(t, "udp", "attacker.test", dns.TypeA); resp.Rcode != dns.RcodeNameError {
		t.Errorf("refused name rcode = %s; want NXDOMAIN", dns.RcodeToString[resp.Rcode])
	}
}

func TestServerRateLimit(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.RateLimit, c.Burst = 0.001, 3 })
	// waitReady spent at least one of the 3 tokens, so at most 2 of these
	// are answered and the rest refused.
	var refused int
	for range 5 {
		if ts.ask(t, "udp", "svc.test", dns.TypeA).Rcode == dns.RcodeRefused {
			refused++
		}
	}
	if refused < 3 {
		t.Errorf("%d of 5 queries refused with burst 3; want at least 3", refused)
	}
}

func TestServerRejectsNonQueries(t *testing.T) {
	ts := startServer(t, nil)
	c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
	notify := new(dns.Msg)
	notify.SetNotify("svc.test.")
	update := new(dns.Msg)
	update.SetUpdate("test.")
	two := new(dns.Msg)
	two.SetQuestion("svc.test.", dns.TypeA)
	two.Question = append(two.Question, dns.Question{Name: "x.wild.test.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	withAnswer := new(dns.Msg)
	withAnswer.SetQuestion("svc.test.", dns.TypeA)
	withAnswer.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "svc.test.", Rrtype: dns.TypeA, Class: dns.ClassINET}, A: net.IPv4(1, 2, 3, 4)}}
	chaos := new(dns.Msg)
	chaos.SetQuestion("version.bind.", dns.TypeTXT)
	chaos.Question[0].Qclass = dns.ClassCHAOS
	for _, c2 := range []struct {
		name  string
		msg   *dns.Msg
		rcode int
	}{
		{"notify", notify, dns.RcodeNotImplemented},
		{"update", update, dns.RcodeNotImplemented},
		{"two questions", two, dns.RcodeFormatError},
		{"answer section", withAnswer, dns.RcodeFormatError},
		{"chaos class", chaos, dns.RcodeRefused},
	} {
		t.Run(c2.name, func(t *testing.T) {
			resp, _, err := c.Exchange(c2.msg, ts.addr)
			if err != nil {
				t.Fatalf("exchange: %v", err)
			}
			if resp.Rcode != c2.rcode || len(resp.Answer) != 0 {
				t.Errorf("rcode = %s with %d answers; want %s and none", dns.RcodeToString[resp.Rcode], len(resp.Answer), dns.RcodeToString[c2.rcode])
			}
		})
	}
}

type denyAll struct{}

func (denyAll) Decide(context.Context, policy.Input) policy.Decision {
	return policy.Decision{Reason: "no_matching_rule", Policy: "v2"}
}

func (denyAll) Digest() string { return "v2" }

func TestServerReload(t *testing.T) {
	ts := startServer(t, nil)
	if r := ts.ask(t, "udp", "svc.test", dns.TypeA); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("before reload: rcode %s; want NOERROR", dns.RcodeToString[r.Rcode])
	}
	ts.srv.Reload(denyAll{}, nil)
	if r := ts.ask(t, "udp", "svc.test", dns.TypeA); r.Rcode != dns.RcodeRefused || ts.audit.Last().Policy != "v2" {
		t.Errorf("after policy reload: rcode %s, audit policy %q; want REFUSED by v2", dns.RcodeToString[r.Rcode], ts.audit.Last().Policy)
	}
	ids, err := identity.New(identity.Config{{ID: "sandbox-1", Sources: []string{"127.0.0.9/32"}}})
	if err != nil {
		t.Fatal(err)
	}
	ts.srv.Reload(fakeDecider{}, ids)
	if r := ts.ask(t, "udp", "svc.test", dns.TypeA); r.Rcode != dns.RcodeRefused || ts.audit.Last().Reason != "unknown_client" {
		t.Errorf("unmapped client: rcode %s, reason %q; want REFUSED, unknown_client", dns.RcodeToString[r.Rcode], ts.audit.Last().Reason)
	}
}

func TestNewServerRequiresDependencies(t *testing.T) {
	if _, err := NewServer(ServerOptions{}); err == nil {
		t.Error("NewServer(no dependencies) = nil error; want an error")
	}
}

// TestServeStopsServersThatStartLate: Serve returning means neither
// listener serves any more, even when it is told to stop before its
// servers have started (a Shutdown before the start is a no-op in
// miekg/dns, and the server then served on after Serve returned).
func TestServeStopsServersThatStartLate(t *testing.T) {
	ts := startServer(t, nil)
	for i := range 20 {
		pc, ln, err := dnstest.ListenPair()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := ts.srv.Serve(ctx, pc, ln); err != nil {
			t.Fatalf("Serve with a done context: %v", err)
		}
		if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
			c.Close()
			t.Fatalf("round %d: the TCP listener still accepts after Serve returned", i)
		}
	}
}
