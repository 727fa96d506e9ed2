package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/policy"
)

// headUpstream answers every request head it reads with a 200 and never
// reads a body, as upstreams that ignore GET bodies do: body bytes become
// the next request on the connection. It returns its address and the
// request lines it saw.
func headUpstream(t *testing.T) (string, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	addr, _ := serveRequests(t, func(c net.Conn, _ int, req *http.Request) bool {
		mu.Lock()
		seen = append(seen, req.Method+" "+req.RequestURI)
		mu.Unlock()
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	return addr, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// rawRoundTrip writes raw on a new connection to the proxy and reads one
// response.
func rawRoundTrip(t *testing.T, proxyAddr, method, raw string) *http.Response {
	t.Helper()
	c := dialProxy(t, proxyAddr)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, raw)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp
}

// A body on a method that has none is refused before anything goes
// upstream: an upstream that ignores it would run it as a request the
// policy never saw.
func TestBodyOnBodylessMethodRefused(t *testing.T) {
	smuggled := "POST /admin/delete HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
	tests := []struct {
		name       string
		method     string
		head       string
		body       string
		wantStatus int
		wantSeen   string
	}{
		{"GET with Content-Length", "GET", "Content-Length: " + strconv.Itoa(len(smuggled)) + "\r\n", smuggled, 400, ""},
		{"HEAD with Content-Length", "HEAD", "Content-Length: " + strconv.Itoa(len(smuggled)) + "\r\n", smuggled, 400, ""},
		{"OPTIONS chunked", "OPTIONS", "Transfer-Encoding: chunked\r\n", chunk(smuggled), 400, ""},
		{"TRACE with Content-Length", "TRACE", "Content-Length: " + strconv.Itoa(len(smuggled)) + "\r\n", smuggled, 400, ""},
		{"GET with Content-Length 0 is fine", "GET", "Content-Length: 0\r\n", "", 200, "GET /public/x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, seen := headUpstream(t)
			a := &audittest.Recorder{}
			addr := startProxy(t, DefaultConfig(), allowAll{}, a)
			resp := rawRoundTrip(t, addr, tt.method, tt.method+" http://"+up+"/public/x HTTP/1.1\r\nHost: "+up+"\r\n"+tt.head+"\r\n"+tt.body)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("%s with a body = %d; want %d", tt.method, resp.StatusCode, tt.wantStatus)
			}
			if got := strings.Join(seen(), ","); got != tt.wantSeen {
				t.Errorf("upstream saw %q; want %q", got, tt.wantSeen)
			}
			if tt.wantStatus == 400 {
				if got := resp.Header.Get("X-Egressd-Decision"); got != "deny; reason="+string(policy.ReasonRequestBodyNotAllowed) {
					t.Errorf("X-Egressd-Decision = %q; want reason %s", got, policy.ReasonRequestBodyNotAllowed)
				}
				waitRecords(t, a, "http:deny:"+string(policy.ReasonRequestBodyNotAllowed))
			}
		})
	}
}

// chunk frames s as one chunk and the last chunk.
func chunk(s string) string {
	return strconv.FormatInt(int64(len(s)), 16) + "\r\n" + s + "\r\n0\r\n\r\n"
}

// "OPTIONS *" is not answered by net/http: it reaches the handler, which
// refuses and audits it like any request that is not a proxy request.
func TestOptionsStarIsDecided(t *testing.T) {
	a := &audittest.Recorder{}
	resp := rawRoundTrip(t, startProxy(t, DefaultConfig(), allowAll{}, a), "OPTIONS", "OPTIONS * HTTP/1.1\r\nHost: example.test\r\n\r\n")
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("OPTIONS * = %d; want 400", resp.StatusCode)
	}
	waitRecords(t, a, "http:deny:"+string(policy.ReasonNotProxyRequest))
}

// captureUpstream records the Host, headers and trailers of every request
// it gets, after reading its body.
func captureUpstream(t *testing.T) (*httptest.Server, <-chan *http.Request) {
	t.Helper()
	got := make(chan *http.Request, 8)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		got <- r
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	return up, got
}

func nextRequest(t *testing.T, got <-chan *http.Request) *http.Request {
	t.Helper()
	select {
	case r := <-got:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no request reached the upstream")
		return nil
	}
}

// The upstream receives the host the policy decided, normalized, in the
// Host header, not the client's spelling of it.
func TestUpstreamHostIsNormalized(t *testing.T) {
	up, got := captureUpstream(t)
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())
	c := proxyClient(startProxy(t, DefaultConfig(), allowAll{}, &audittest.Recorder{}))
	for _, spelling := range []string{"LocalHost.", "LOCALHOST"} {
		resp, err := c.Get("http://" + spelling + ":" + port + "/x")
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		if r := nextRequest(t, got); r.Host != "localhost:"+port {
			t.Errorf("GET via %s: upstream Host = %q; want %q", spelling, r.Host, "localhost:"+port)
		}
	}
}

func TestHostHeader(t *testing.T) {
	tests := []struct {
		name, scheme, host string
		port               uint16
		want               string
	}{
		{"default http port", "http", "a.test", 80, "a.test"},
		{"other port", "http", "a.test", 8080, "a.test:8080"},
		{"https default", "https", "a.test", 443, "a.test"},
		{"IPv6 default port", "http", "2001:db8::1", 80, "[2001:db8::1]"},
		{"IPv6 other port", "http", "2001:db8::1", 81, "[2001:db8::1]:81"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hostHeader(tt.scheme, tt.host, tt.port); got != tt.want {
				t.Errorf("hostHeader(%q, %q, %d) = %q; want %q", tt.scheme, tt.host, tt.port, got, tt.want)
			}
		})
	}
}

// Method-override headers never reach the upstream: a GET allowed by a
// GET-only rule must not run as a DELETE there.
func TestMethodOverrideHeadersStripped(t *testing.T) {
	up, got := captureUpstream(t)
	c := proxyClient(startProxy(t, DefaultConfig(), allowAll{}, &audittest.Recorder{}))
	req, _ := http.NewRequest(http.MethodGet, up.URL+"/x", nil)
	for _, h := range []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"} {
		req.Header.Set(h, "DELETE")
	}
	req.Header.Set("X-Kept", "1")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	r := nextRequest(t, got)
	for _, h := range []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"} {
		if v := r.Header.Get(h); v != "" {
			t.Errorf("upstream received %s: %q; want it stripped", h, v)
		}
	}
	if r.Header.Get("X-Kept") != "1" {
		t.Errorf("upstream headers = %v; want X-Kept kept", r.Header)
	}
}

// Request trailers lose their hop-by-hop and proxy-credential fields,
// declared or not; other trailers (gRPC's) still arrive.
func TestRequestTrailersStripped(t *testing.T) {
	tests := []struct {
		name     string
		declared string
	}{
		{"declared", "Proxy-Authorization, Grpc-Status, Connection"},
		{"undeclared credential", "Grpc-Status"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, got := captureUpstream(t)
			host := up.Listener.Addr().String()
			addr := startProxy(t, DefaultConfig(), allowAll{}, &audittest.Recorder{})
			resp := rawRoundTrip(t, addr, "POST", "POST http://"+host+"/x HTTP/1.1\r\nHost: "+host+
				"\r\nTransfer-Encoding: chunked\r\nTrailer: "+tt.declared+"\r\n\r\n"+
				"3\r\nabc\r\n0\r\nProxy-Authorization: Basic c2VjcmV0\r\nGrpc-Status: 0\r\nConnection: close\r\n\r\n")
			if resp.StatusCode != 200 {
				t.Fatalf("POST = %d; want 200", resp.StatusCode)
			}
			r := nextRequest(t, got)
			if v := r.Trailer.Get("Proxy-Authorization"); v != "" {
				t.Errorf("upstream trailer Proxy-Authorization = %q; want stripped", v)
			}
			if v := r.Trailer.Get("Connection"); v != "" {
				t.Errorf("upstream trailer Connection = %q; want stripped", v)
			}
			if v := r.Trailer.Get("Grpc-Status"); v != "0" {
				t.Errorf("upstream trailer Grpc-Status = %q; want 0 (trailers = %v)", v, r.Trailer)
			}
		})
	}
}

// A CONNECT authority with a userinfo part does not parse; its credential
// must not reach any audit record.
func TestConnectUserinfoNotRecorded(t *testing.T) {
	a := &audittest.Recorder{}
	addr := startProxy(t, DefaultConfig(), allowAll{}, a)
	resp := rawRoundTrip(t, addr, "CONNECT", "CONNECT user:s3cr3t-token@example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n")
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("CONNECT with userinfo = %d; want 400", resp.StatusCode)
	}
	waitRecords(t, a, "connect:deny:malformed_url")
	for _, r := range a.Records() {
		b, _ := json.Marshal(r)
		if strings.Contains(string(b), "s3cr3t") {
			t.Errorf("audit record %s holds the userinfo credential", b)
		}
		if r.Host != "example.test:443" {
			t.Errorf("audit host = %q; want %q", r.Host, "example.test:443")
		}
	}
}

// denyHost allows everything but the host evil.test.
type denyHost struct{}

func (denyHost) Decide(_ context.Context, in policy.Input) policy.Decision {
	if f, ok := in.Facts.(*policy.URLFacts); ok && f.Host == "evil.test" {
		return policy.Deny("no_matching_rule", "")
	}
	return policy.Decision{Allow: true, Reason: "allowed", Rule: "all", Policy: "test"}
}

func (denyHost) Digest() string { return "test" }

// Every 3xx with a Location is decided, and every Location it carries.
func TestRedirectEveryLocationChecked(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/two":
			w.Header().Add("Location", "http://ok.test/")
			w.Header().Add("Location", "http://evil.test/")
			w.WriteHeader(http.StatusFound)
		default:
			w.Header().Set("Location", "http://evil.test/")
			code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
			w.WriteHeader(code)
		}
	}))
	defer up.Close()
	for _, path := range []string{"/300", "/302", "/304", "/305", "/306", "/399", "/two"} {
		t.Run(path, func(t *testing.T) {
			a := &audittest.Recorder{}
			c := proxyClient(startProxy(t, DefaultConfig(), denyHost{}, a))
			c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			resp, err := c.Get(up.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Egressd-Decision") != "deny; reason="+string(policy.ReasonRedirectDenied) {
				t.Errorf("GET %s = %d %q; want 403 %s", path, resp.StatusCode, resp.Header.Get("X-Egressd-Decision"), policy.ReasonRedirectDenied)
			}
		})
	}
}
