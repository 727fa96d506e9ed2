package proxy

import (
	"bufio"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/internal/decisiontest"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
)

// auditedServer is a proxy with its own metrics registry and logger.
type auditedServer struct {
	addr    string
	metrics *Metrics
}

// startAudited runs a Server allowing everything, with identities ids (nil:
// none), audit log a and logger log.
func startAudited(t *testing.T, cfg Config, ids identity.Config, a audit.Appender, log *zap.Logger) auditedServer {
	t.Helper()
	store, err := identity.New(ids)
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(prometheus.NewRegistry())
	s, err := New(Options{Config: cfg, Decider: allowAll{}, Floor: openFloor{},
		Identities: store, Dialer: &net.Dialer{}, Audit: a, Metrics: m, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A fixture: the server's lifecycle tests check Serve and Shutdown.
	go func() { _ = s.Serve(ln) }()
	shutdownOnCleanup(t, s)
	return auditedServer{addr: ln.Addr().String(), metrics: m}
}

// openLog opens a real audit log in a temp dir; lines reads it back as
// written after closing it.
func openLog(t *testing.T) (*audit.Writer, func() []string) {
	t.Helper()
	c := audit.DefaultConfig()
	c.Dir = filepath.Join(t.TempDir(), "audit")
	c.Sync = "always"
	w, err := audit.Open(c, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	return w, func() []string {
		w.Close()
		b, err := os.ReadFile(filepath.Join(c.Dir, audit.SegmentName(1)))
		if err != nil {
			t.Fatal(err)
		}
		v := audit.NewVerifier()
		if err := v.Paths([]string{c.Dir}); err != nil {
			t.Errorf("audit verify = %v; want intact", err)
		}
		return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	}
}

var tokenIDs = func() identity.Config {
	sum := sha256.Sum256([]byte("s3cret"))
	return identity.Config{{ID: "sbx-1", TokenSHA256: hex.EncodeToString(sum[:])}}
}()

func basicAuth(user, token string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+token))
}

// TestUnauthenticatedFloodIsBounded is issue 11 item 5: 400 pipelined
// unauthenticated requests with 30 KiB paths wrote 12 MB of audit. The
// 407 closes the connection, so one record is written, capped.
func TestUnauthenticatedFloodIsBounded(t *testing.T) {
	w, lines := openLog(t)
	s := startAudited(t, DefaultConfig(), tokenIDs, w, zap.NewNop())
	c := dialProxy(t, s.addr)
	req := "GET http://h.test/" + strings.Repeat("p", 30<<10) + " HTTP/1.1\r\nHost: h.test\r\n\r\n"
	go func() {
		for range 400 {
			if _, err := io.WriteString(c, req); err != nil {
				return // closed by the proxy, as it should be
			}
		}
	}()
	responses := readRefusals(t, c, http.StatusProxyAuthRequired)
	if responses != 1 {
		t.Errorf("pipelined unauthenticated requests got %d responses on one connection; want 1, then close", responses)
	}
	total := 0
	for _, l := range lines() {
		total += len(l)
	}
	t.Logf("%d responses, %d audit bytes after 400 pipelined 30 KiB requests", responses, total)
	if total > 16<<10 {
		t.Errorf("audit log holds %d bytes after the flood; want at most 16 KiB", total)
	}
}

// TestSourceRefusalLimit is the other half of item 5: a client address
// refused before authentication past its budget is refused outright, its
// credentials unchecked, and its connection closed.
func TestSourceRefusalLimit(t *testing.T) {
	a := &audittest.Recorder{}
	cfg := DefaultConfig()
	cfg.PerSourceRefusalRate, cfg.PerSourceRefusalBurst = 0.001, 3
	s := startAudited(t, cfg, tokenIDs, a, zap.NewNop())
	var statuses []string
	for range 5 {
		c := proxyClient(s.addr)
		resp, err := c.Get("http://h.test/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		statuses = append(statuses, fmt.Sprint(resp.StatusCode, " ", decisiontest.Reason(resp.Header), " close=", resp.Close))
	}
	want := []string{
		"407 proxy_auth_required close=true", "407 proxy_auth_required close=true", "407 proxy_auth_required close=true",
		"429 source_rate_limited close=true", "429 source_rate_limited close=true",
	}
	if strings.Join(statuses, "; ") != strings.Join(want, "; ") {
		t.Errorf("responses = %q; want %q", statuses, want)
	}
	// Even a valid credential waits for the source's budget to refill:
	// its check would cost the same as a guess.
	pc := proxyClient(s.addr)
	req, _ := http.NewRequest(http.MethodGet, "http://h.test/", nil)
	req.Header.Set("Proxy-Authorization", basicAuth("sbx-1", "s3cret"))
	resp, err := pc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("valid credential from a limited source = %d; want 429", resp.StatusCode)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestAuthRefusalRecordsTarget is issue 11 item 14: a 407 record carried
// no host and no claimed user. Both are recorded; the token never is.
func TestAuthRefusalRecordsTarget(t *testing.T) {
	tests := []struct {
		name, method, url string
		want              []string
	}{
		{name: "http", method: http.MethodGet, url: "http://h.test:8080/p?q=1",
			want: []string{`"user":"sbx-1"`, `"host":"h.test"`, `"port":8080`, `"path":"/p"`, `"query":"q=1"`, `"reason":"proxy_auth_invalid"`}},
		{name: "connect", method: http.MethodConnect, url: "h.test:443",
			want: []string{`"user":"sbx-1"`, `"host":"h.test"`, `"port":443`, `"reason":"proxy_auth_invalid"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, lines := openLog(t)
			s := startAudited(t, DefaultConfig(), tokenIDs, w, zap.NewNop())
			c := dialProxy(t, s.addr)
			fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: h.test\r\nProxy-Authorization: %s\r\n\r\n",
				tt.method, tt.url, basicAuth("sbx-1", "wr0ngpassw0rd"))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusProxyAuthRequired {
				t.Fatalf("%s with a wrong token = %d; want 407", tt.method, resp.StatusCode)
			}
			got := lines()
			last := got[len(got)-1]
			for _, w := range tt.want {
				if !strings.Contains(last, w) {
					t.Errorf("407 record = %s; want it to contain %s", last, w)
				}
			}
			for _, l := range got {
				if strings.Contains(l, "wr0ngpassw0rd") {
					t.Errorf("the token reached the log: %s", l)
				}
			}
		})
	}
}

// TestQueryIsRecorded is issue 11 item 18: /x?q=secret-in-query was
// audited as path /x. The query is recorded; sensitive values are not.
func TestQueryIsRecorded(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	w, lines := openLog(t)
	s := startAudited(t, DefaultConfig(), nil, w, zap.NewNop())
	resp, err := proxyClient(s.addr).Get(up.URL + "/x?q=secret-in-query&access_token=hunter2hunter2")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	got := lines()
	want := `"path":"/x","query":"q=secret-in-query&access_token=[redacted:14]"`
	decision := ""
	for _, l := range got {
		if strings.Contains(l, `"decision":"allow"`) {
			decision = l
		}
		if strings.Contains(l, "hunter2") {
			t.Errorf("a sensitive query value reached the log: %s", l)
		}
	}
	if !strings.Contains(decision, want) {
		t.Errorf("decision record = %s; want it to contain %s", decision, want)
	}
}

// TestAuditOutageLogIsThrottled is issue 11 item 22: while the audit log
// refuses appends, every refused request wrote an error line (1,539 in
// 4 s). Now one line per interval says how many were suppressed.
func TestAuditOutageLogIsThrottled(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	a := &audittest.Recorder{}
	a.SetFail(true)
	s := startAudited(t, DefaultConfig(), nil, a, zap.New(core))
	c := proxyClient(s.addr)
	for range 200 {
		resp, err := c.Get("http://h.test/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("GET with the audit log down = %d; want 503", resp.StatusCode)
		}
	}
	if n := logs.FilterMessageSnippet("audit append failed").Len(); n > 2 {
		t.Errorf("200 refused requests during an outage wrote %d error lines; want at most 2", n)
	}
}

// TestAuditBudgetRefusesAllows is issue 11 item 19 at the proxy: an
// identity over its audit budget is refused with audit_budget_exceeded
// (429), its refusals are counted, and another identity is not affected.
func TestAuditBudgetRefusesAllows(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	a := &audittest.Recorder{}
	ac := audit.DefaultConfig()
	ac.IdentityRate, ac.IdentityBurst = 0.001, 4
	m := audit.NewMeter(a, ac)
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	ids := identity.Config{{ID: "flood", TokenSHA256: sum("f")}, {ID: "quiet", TokenSHA256: sum("q")}}
	s := startAudited(t, DefaultConfig(), ids, m, zap.NewNop())
	c := proxyClient(s.addr)
	get := func(user, token string) int {
		req, _ := http.NewRequest(http.MethodGet, up.URL+"/", nil)
		req.Header.Set("Proxy-Authorization", basicAuth(user, token))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests && decisiontest.Reason(resp.Header) != string(policy.ReasonAuditBudgetExceeded) {
			t.Errorf("429 reason = %q; want %s", decisiontest.Reason(resp.Header), policy.ReasonAuditBudgetExceeded)
		}
		return resp.StatusCode
	}
	var codes []int
	for range 4 {
		codes = append(codes, get("flood", "f"))
	}
	// Each allowed request writes a decision and a completion: 4 records
	// of budget pay for two.
	if fmt.Sprint(codes) != "[200 200 429 429]" {
		t.Errorf("flood statuses = %v; want [200 200 429 429]", codes)
	}
	if code := get("quiet", "q"); code != http.StatusOK {
		t.Errorf("quiet identity = %d while another is over budget; want 200", code)
	}
	m.Close()
	var folded int64
	for _, r := range a.Records() {
		if r.Reason == string(policy.ReasonAuditBudgetExceeded) {
			folded += max(1, r.Count)
		}
	}
	if folded != 2 {
		t.Errorf("audit_budget_exceeded refusals recorded = %d; want 2", folded)
	}
}

// TestBadRequestClosesConnection is the 400 half of item 5: requests
// pipelined after a 400 are not read, decided or audited.
func TestBadRequestClosesConnection(t *testing.T) {
	a := &audittest.Recorder{}
	s := startAudited(t, DefaultConfig(), nil, a, zap.NewNop())
	c := dialProxy(t, s.addr)
	io.WriteString(c, strings.Repeat("GET /not-a-proxy-request HTTP/1.1\r\nHost: h.test\r\n\r\n", 50))
	responses := readRefusals(t, c, http.StatusBadRequest)
	if responses != 1 {
		t.Errorf("50 pipelined origin-form requests got %d responses; want 1, then close", responses)
	}
}

// readRefusals reads responses from c until it closes (or 20s pass), each
// of which must have status want, and returns how many came.
func readRefusals(t *testing.T, c net.Conn, want int) int {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	responses := 0
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return responses
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		responses++
		if resp.StatusCode != want {
			t.Errorf("response %d = %d; want %d", responses, resp.StatusCode, want)
		}
	}
}

// TestRecordKindIsAuditKind checks every policy entry point's records
// carry the audit kind of the same name.
func TestRecordKindIsAuditKind(t *testing.T) {
	for _, tt := range []struct {
		kind policy.Kind
		want audit.Kind
	}{
		{policy.KindHTTP, audit.KindHTTP},
		{policy.KindConnect, audit.KindConnect},
		{policy.KindDNS, audit.KindDNS},
		{policy.KindSQL, audit.KindSQL},
		{policy.KindRedirect, audit.KindRedirect},
	} {
		t.Run(tt.kind.String(), func(t *testing.T) {
			if got := recordKind(tt.kind); got != tt.want {
				t.Errorf("recordKind(%v) = %q; want %q", tt.kind, got, tt.want)
			}
		})
	}
}

// TestPooledRecordsStayTheirRequests: the decision and completion records
// of concurrent keep-alive requests come from one pool (recordPool); each
// record the log gets names its own request's path and status, and every
// request has exactly one of each, so no record was reused while the log
// could still read it. -race watches the reuse itself.
func TestPooledRecordsStayTheirRequests(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, err := strconv.Atoi(r.URL.Query().Get("status"))
		if err != nil {
			status = http.StatusBadRequest
		}
		w.WriteHeader(status)
	}))
	defer up.Close()
	a := &audittest.Recorder{}
	addr := startProxy(t, DefaultConfig(), allowAll{}, a)
	const clients, each = 4, 25
	errs := make(chan error, clients)
	for c := range clients {
		go func() {
			hc := proxyClient(addr)
			for i := range each {
				resp, err := hc.Get(fmt.Sprintf("%s/c%d/r%d?status=%d", up.URL, c, i, 200+c*i%7))
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			errs <- nil
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	recs := a.Wait(t, func(recs []audit.Record) bool { return len(recs) >= 2*clients*each })
	type pair struct{ decided, done int }
	byRequest := map[string]*pair{}
	for _, r := range recs {
		var c, i int
		if _, err := fmt.Sscanf(r.Path, "/c%d/r%d", &c, &i); err != nil {
			t.Fatalf("record %+v: path %q names no request of this test", r, r.Path)
		}
		status := 200 + c*i%7
		if want := fmt.Sprintf("status=%d", status); r.Query != want {
			t.Errorf("record of %s: query = %q; want %q", r.Path, r.Query, want)
		}
		p := byRequest[r.Request]
		if p == nil {
			p = &pair{}
			byRequest[r.Request] = p
		}
		switch r.Kind {
		case audit.KindHTTP:
			p.decided++
			if r.Decision != audit.DecisionAllow || r.Status != 0 {
				t.Errorf("decision record of %s = %s status %d; want allow, no status", r.Path, r.Decision, r.Status)
			}
		case audit.KindHTTPDone:
			p.done++
			if r.Status != status || r.Error != "" {
				t.Errorf("completion record of %s: status %d, error %q; want %d, none", r.Path, r.Status, r.Error, status)
			}
		default:
			t.Errorf("record of %s has kind %s", r.Path, r.Kind)
		}
	}
	if len(byRequest) != clients*each {
		t.Errorf("records name %d requests; want %d", len(byRequest), clients*each)
	}
	for id, p := range byRequest {
		if p.decided != 1 || p.done != 1 {
			t.Errorf("request %s: %d decision and %d completion records; want one of each", id, p.decided, p.done)
		}
	}
}
