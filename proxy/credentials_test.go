package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/egressd/egressd/internal/decisiontest"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/broker"
)

const testSecret = "ghp_SECRETvalue0123456789abcdef"

// credDecider allows the hosts it lists with their decisions and denies
// the rest.
type credDecider map[string]policy.Decision

func (c credDecider) Decide(_ context.Context, in policy.Input) policy.Decision {
	f, ok := in.Facts.(*policy.URLFacts)
	if !ok {
		return policy.Decision{Reason: "no_matching_rule"}
	}
	if d, ok := c[f.Host]; ok && in.Facts.Kind() == policy.KindHTTP {
		return d
	}
	if d, ok := c[f.Host]; ok {
		d.Credentials = nil // a redirect carries none
		return d
	}
	return policy.Decision{Reason: "no_matching_rule"}
}

func (credDecider) Digest() string { return "test" }

func testStore(t *testing.T) *broker.Store {
	t.Helper()
	s, err := broker.Load(broker.Config{{Name: "github", Env: "GH"}},
		func(k string) (string, bool) { return testSecret, k == "GH" })
	if err != nil {
		t.Fatal(err)
	}
	return broker.NewStore(s)
}

// credProxy runs a proxy with d, the test secret, dialer dial (nil: a
// plain one), a real audit log and a debug logger, and returns its address
// and readers of the log lines and the operational log.
func credProxy(t *testing.T, d policy.Decider, dial Dialer) (addr string, lines func() []string, logs *observer.ObservedLogs) {
	t.Helper()
	if dial == nil {
		dial = &net.Dialer{}
	}
	aw, lines := openLog(t)
	core, logs := observer.New(zapcore.DebugLevel)
	ids, _ := identity.New(nil)
	s, err := New(Options{Config: Config{}, Decider: d, Floor: openFloor{}, Identities: ids, Dialer: dial,
		Audit: aw, Metrics: NewMetrics(prometheus.NewRegistry()), Log: zap.New(core), Secrets: testStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln) //nolint:errcheck // ends with Shutdown below
	shutdownOnCleanup(t, s)
	return ln.Addr().String(), lines, logs
}

// echoUpstream listens on ip, records the Authorization and query it
// receives, and echoes both back in a header and a chunked body.
func echoUpstream(t *testing.T, ip string) (host string, got chan string, hits *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	got = make(chan string, 16)
	hits = new(atomic.Int64)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		seen := r.Header.Get("Authorization") + "|" + r.URL.RawQuery
		got <- seen
		w.Header().Set("X-Echo", seen)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"seen":"`)
		w.(http.Flusher).Flush()
		io.WriteString(w, seen+`"}`)
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return ln.Addr().String(), got, hits
}

func allowWith(rule string, creds ...policy.Credential) policy.Decision {
	return policy.Decision{Allow: true, Reason: "allowed", Rule: rule, Policy: "test", Credentials: creds}
}

// assertNoSecret fails if the audit log, the operational log or any of
// the texts hold the secret.
func assertNoSecret(t *testing.T, lines func() []string, logs *observer.ObservedLogs, texts ...string) {
	t.Helper()
	for _, l := range lines() {
		if strings.Contains(l, testSecret) {
			t.Errorf("audit line holds the secret: %s", l)
		}
	}
	for _, e := range logs.All() {
		if s := e.Message + " " + strings.Join(fieldStrings(e.ContextMap()), " "); strings.Contains(s, testSecret) {
			t.Errorf("log entry holds the secret: %s", s)
		}
	}
	for _, s := range texts {
		if strings.Contains(s, testSecret) {
			t.Errorf("response holds the secret: %q", s)
		}
	}
}

func fieldStrings(m map[string]any) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(fmtAny(v), "\n", " "), "\t", " ")))
	}
	return out
}

func fmtAny(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case error:
		return v.Error()
	}
	return ""
}

// TestCredentialHeaderAddedAndScrubbed: the bound upstream receives the
// secret instead of the sandbox's own Authorization; its echo, in a header
// and a chunked body, reaches the sandbox scrubbed; the decision record
// names the secret and its place, and no log holds the value.
func TestCredentialHeaderAddedAndScrubbed(t *testing.T) {
	up, got, _ := echoUpstream(t, "127.0.0.1")
	d := credDecider{"127.0.0.1": allowWith("gh", policy.Credential{Secret: "github", Header: "Authorization", Format: "Bearer {}"})}
	addr, lines, logs := credProxy(t, d, nil)
	req, _ := http.NewRequest("GET", "http://"+up+"/repos", nil)
	req.Header.Set("Authorization", "Bearer sandbox-own")
	resp, err := proxyClient(addr).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if seen := <-got; seen != "Bearer "+testSecret+"|" {
		t.Errorf("upstream saw Authorization %q; want the brokered secret only", seen)
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "«egressd:redacted:github»") {
		t.Errorf("response %d %q; want 200 with the echo redacted", resp.StatusCode, body)
	}
	assertNoSecret(t, lines, logs, string(body), resp.Header.Get("X-Echo"))
	var decision string
	for _, l := range lines() {
		if strings.Contains(l, `"kind":"http"`) {
			decision = l
		}
	}
	if !strings.Contains(decision, `"credentials":{"github":"header:Authorization"}`) {
		t.Errorf("decision record %s; want credentials naming github at header:Authorization", decision)
	}
}

// TestCredentialPlaceholderWrongDestination: a placeholder sent to a host
// whose rule does not bind the secret is refused before anything reaches
// that host.
func TestCredentialPlaceholderWrongDestination(t *testing.T) {
	_, _, _ = echoUpstream(t, "127.0.0.1")
	other, _, hits := echoUpstream(t, "127.0.0.2")
	d := credDecider{
		"127.0.0.1": allowWith("gh", policy.Credential{Secret: "github", Placeholder: "header:Authorization"}),
		"127.0.0.2": allowWith("other"),
	}
	addr, lines, logs := credProxy(t, d, nil)
	req, _ := http.NewRequest("GET", "http://"+other+"/?q=1", nil)
	req.Header.Set("Authorization", "Bearer egressd:secret:github")
	resp, err := proxyClient(addr).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || decisiontest.Of(resp.Header) != (decisiontest.Decision{Verdict: "deny", Reason: string(policy.ReasonCredentialWrongDestination), Rule: "other"}) {
		t.Errorf("status %d reason %q; want 403 credential_wrong_destination", resp.StatusCode, decisiontest.Reason(resp.Header))
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the other host received %d requests; want none", n)
	}
	assertNoSecret(t, lines, logs)
}

// publicDialer dials the real address but reports a public one: the
// address the pinned dialer would have vetted for a public name.
type publicDialer struct{ net.Dialer }

func (d *publicDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := d.Dialer.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return publicConn{c}, nil
}

type publicConn struct{ net.Conn }

func (publicConn) RemoteAddr() net.Addr {
	return net.TCPAddrFromAddrPort(netip.MustParseAddrPort("140.82.112.3:80"))
}

// TestCredentialCleartextToPublicRefused: a plain-HTTP request carrying a
// secret whose connection leads to a public address is refused before a
// byte of it is written.
func TestCredentialCleartextToPublicRefused(t *testing.T) {
	up, _, hits := echoUpstream(t, "127.0.0.1")
	d := credDecider{"127.0.0.1": allowWith("gh", policy.Credential{Secret: "github", Header: "Authorization"})}
	addr, lines, logs := credProxy(t, d, &publicDialer{})
	resp, err := proxyClient(addr).Get("http://" + up + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.HasPrefix(decisiontest.Reason(resp.Header), string(policy.ReasonCredentialCleartext)) {
		t.Errorf("status %d reason %q; want 403 credential_cleartext", resp.StatusCode, decisiontest.Reason(resp.Header))
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("upstream received %d requests; want none", n)
	}
	assertNoSecret(t, lines, logs)
}

// TestCredentialUnscrubbableRefused: a textual response in an encoding the
// scrubber cannot read never reaches the sandbox.
func TestCredentialUnscrubbableRefused(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Encoding", "br")
		io.WriteString(w, "compressed "+r.Header.Get("Authorization"))
	}))
	t.Cleanup(up.Close)
	host := strings.TrimPrefix(up.URL, "http://")
	d := credDecider{"127.0.0.1": allowWith("gh", policy.Credential{Secret: "github", Header: "Authorization"})}
	addr, lines, logs := credProxy(t, d, nil)
	resp, err := proxyClient(addr).Get("http://" + host + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.HasPrefix(decisiontest.Reason(resp.Header), string(policy.ReasonCredentialUnscrubbable)) {
		t.Errorf("status %d reason %q; want 502 credential_unscrubbable", resp.StatusCode, decisiontest.Reason(resp.Header))
	}
	assertNoSecret(t, lines, logs, string(body))
}

// TestCredentialScrubStreamsEvents: a server-sent event of a credential
// rule's response reaches the client while the upstream still holds the
// stream open; the scrubber does not wait for more.
func TestCredentialScrubStreamsEvents(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "data: "+r.Header.Get("Authorization")+"\n\n")
	}))
	t.Cleanup(up.Close)
	defer close(release)
	d := credDecider{"127.0.0.1": allowWith("gh", policy.Credential{Secret: "github", Header: "Authorization"})}
	addr, lines, logs := credProxy(t, d, nil)
	resp, err := proxyClient(addr).Get(up.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, len("data: one\n\n"))
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "data: one\n\n" {
		t.Fatalf("first event = %q, %v; want it before the upstream sends more", first, err)
	}
	release <- struct{}{}
	rest, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(rest), "«egressd:redacted:github»") {
		t.Errorf("second event = %q; want the secret redacted", rest)
	}
	resp.Body.Close()
	assertNoSecret(t, lines, logs, string(rest))
}

// TestCredentialHeaderListedInConnection: a sandbox that lists the header
// a placeholder is swapped into in Connection does not get it stripped as
// hop-by-hop: the upstream receives the secret the decision record names
// as sent. The header used to be dropped after the record claimed it.
func TestCredentialHeaderListedInConnection(t *testing.T) {
	up, got, _ := echoUpstream(t, "127.0.0.1")
	d := credDecider{"127.0.0.1": allowWith("gh", policy.Credential{Secret: "github", Placeholder: "header:Authorization"})}
	addr, lines, logs := credProxy(t, d, nil)
	req, _ := http.NewRequest("GET", "http://"+up+"/repos", nil)
	req.Header.Set("Authorization", "Bearer egressd:secret:github")
	req.Header.Set("Connection", "keep-alive, authorization")
	resp, err := proxyClient(addr).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if seen := <-got; seen != "Bearer "+testSecret+"|" {
		t.Errorf("upstream saw Authorization %q; want the swapped secret", seen)
	}
	var decision string
	for _, l := range lines() {
		if strings.Contains(l, `"kind":"http"`) {
			decision = l
		}
	}
	if !strings.Contains(decision, `"credentials":{"github":"header:Authorization"}`) {
		t.Errorf("decision record %s; want credentials naming github at header:Authorization", decision)
	}
	assertNoSecret(t, lines, logs, string(body))
}

// vetPublicDialer vets every name to a public address, as the pinned
// dialer would for a public name, and dials the real one.
type vetPublicDialer struct{ net.Dialer }

func (vetPublicDialer) Vet(_ context.Context, address string) ([]netip.Addr, uint16, error) {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return nil, 0, err
	}
	return []netip.Addr{netip.MustParseAddr("140.82.112.3")}, ap.Port(), nil
}

// TestCredentialCleartextDecidedBeforeDial: a plain-HTTP request carrying
// a secret to a name that resolves to a public address is refused
// credential_cleartext without a connection being opened: the upstream's
// listener accepts only the test's own later connection. The proxy used
// to connect first and refuse after.
func TestCredentialCleartextDecidedBeforeDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c.RemoteAddr().String()
			c.Close()
		}
	}()
	d := credDecider{"127.0.0.1": allowWith("gh", policy.Credential{Secret: "github", Header: "Authorization"})}
	addr, lines, logs := credProxy(t, d, &vetPublicDialer{})
	resp, err := proxyClient(addr).Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.HasPrefix(decisiontest.Reason(resp.Header), string(policy.ReasonCredentialCleartext)) {
		t.Errorf("status %d reason %q; want 403 credential_cleartext", resp.StatusCode, decisiontest.Reason(resp.Header))
	}
	// The listener accepts in arrival order: a connection the proxy
	// opened would come before this one.
	sentinel, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer sentinel.Close()
	if first := <-accepted; first != sentinel.LocalAddr().String() {
		t.Errorf("the upstream accepted a connection from %s before the test's own; want none from the proxy", first)
	}
	assertNoSecret(t, lines, logs)
}
