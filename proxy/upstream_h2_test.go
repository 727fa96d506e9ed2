package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/egressd/egressd/internal/identity"
)

// TestInspectClientConnectionCloseStaysOnItsHop (issue 21 item 19): one
// client's "Connection: close" (Python's urllib always sends it) ends its
// own hop only: the upstream request is built without it, so it neither
// reaches the upstream nor closes the identity's shared upstream
// connection, and concurrent requests of the identity over h2 never fail.
func TestInspectClientConnectionCloseStaysOnItsHop(t *testing.T) {
	t.Run("HTTP/1.1 upstream", func(t *testing.T) {
		f := startReuse(t)
		first, second := f.client(t, "sbx-a"), f.client(t, "sbx-a")
		f.do(t, first, "sbx-a", "GET", f.tlsURL("/public/1"), "", "Connection", "close")
		f.do(t, second, "sbx-a", "GET", f.tlsURL("/public/2"), "")
		f.finish(t, first, second)
		f.tlsUp.mu.Lock()
		defer f.tlsUp.mu.Unlock()
		for _, p := range f.tlsUp.parsed {
			if p.cnx != "" {
				t.Errorf("upstream got %s %s with Connection: %s; want the client's hop kept to itself", p.method, p.path, p.cnx)
			}
		}
		if len(f.tlsUp.parsed) != 2 || f.tlsUp.parsed[0].conn != f.tlsUp.parsed[1].conn {
			t.Errorf("upstream requests = %+v; want both on one kept-alive connection", f.tlsUp.parsed)
		}
	})
	t.Run("h2 upstream", func(t *testing.T) {
		up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			io.WriteString(w, r.URL.Path+" "+strconv.Itoa(len(b)))
		})
		f := startInspect(t, up, inspectOptions{ids: identity.Config{{ID: "sbx-a", TokenSHA256: hashHex("tok-a")}}})
		user := url.UserPassword("sbx-a", "tok-a")
		h2 := f.clientAs(t, true, "sbx-a", user)
		h1 := f.clientAs(t, false, "sbx-a", user)
		const workers, each = 6, 40
		errs := make(chan error, workers*each)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				c, closing := h2, w%3 == 0
				if closing {
					c = h1
				}
				for i := range each {
					path := fmt.Sprintf("/ok/%d/%d", w, i)
					req, _ := http.NewRequest("POST", f.url(path), strings.NewReader(strings.Repeat("x", 1000)))
					req.Close = closing
					resp, err := c.Do(req)
					if err != nil {
						errs <- err
						continue
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if want := path + " 1000"; resp.StatusCode != http.StatusOK || string(b) != want {
						errs <- fmt.Errorf("POST %s (close %v) = %d %q %s; want 200 %q", path, closing, resp.StatusCode, b, resp.Header.Get("X-Egressd-Decision"), want)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

// TestTLSUpstreamBodiesShareOnlyH2: inspected requests with a body share a
// connection only over h2; over HTTP/1.1 each has its own, sent with
// "Connection: close". An upstream remembered as speaking h2 that stops
// choosing it is forgotten, and a bodyless request meant to go alone is
// then sent over HTTP/1.1 by the same rule.
func TestTLSUpstreamBodiesShareOnlyH2(t *testing.T) {
	var h1Only atomic.Bool
	type seen struct {
		remote string
		proto  int
		close  bool
	}
	var mu sync.Mutex
	var got []seen
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		got = append(got, seen{r.RemoteAddr, r.ProtoMajor, r.Close})
		mu.Unlock()
	}))
	up.EnableHTTP2 = true
	up.TLS = &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		if !h1Only.Load() {
			return nil, nil
		}
		c := up.TLS.Clone()
		c.GetConfigForClient, c.NextProtos = nil, []string{"http/1.1"}
		return c, nil
	}}
	up.StartTLS()
	t.Cleanup(up.Close)
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	x := newTLSTransports(DefaultConfig(), &loopbackDialer{}, roots)
	t.Cleanup(x.closeIdle)
	send := func(u *tlsUpstream, method string, body io.Reader) {
		t.Helper()
		req, _ := http.NewRequest(method, "https://example.com:"+port+"/", body)
		resp, err := u.roundTrip(req, true, false)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// take returns what the upstream saw since the last call.
	take := func() []seen {
		mu.Lock()
		defer mu.Unlock()
		s := got
		got = nil
		return s
	}
	remotes := func(s []seen) map[string]bool {
		m := map[string]bool{}
		for _, r := range s {
			m[r.remote] = true
		}
		return m
	}

	for range 4 {
		send(x.get("sbx-a"), "POST", strings.NewReader("body"))
	}
	s := take()
	for _, r := range s {
		if r.proto != 2 {
			t.Fatalf("POST over HTTP/%d to an h2 upstream", r.proto)
		}
	}
	if n := len(remotes(s)); n != 1 {
		t.Errorf("4 POSTs to an h2 upstream used %d connections; want 1, shared", n)
	}

	// sbx-b remembers the upstream as speaking h2, which it no longer does.
	h1Only.Store(true)
	u := x.get("sbx-b")
	u.learn("example.com:"+port, true)
	send(u, "GET", nil)
	send(u, "POST", strings.NewReader("body"))
	send(u, "POST", strings.NewReader("body"))
	s = take()
	if len(s) != 3 || len(remotes(s)) != 3 {
		t.Fatalf("after the upstream dropped h2: requests %+v; want 3 on 3 connections", s)
	}
	for _, r := range s {
		if r.proto != 1 || !r.close {
			t.Errorf("request over HTTP/%d, Connection: close %v; want HTTP/1.1 with close", r.proto, r.close)
		}
	}
}

// TestInspectH2ClientGETsShareConnection: net/http's h2 server gives a
// bodyless request a Body too; an h2 client's GETs are still bodyless
// upstream, and share the identity's kept-alive HTTP/1.1 connection.
func TestInspectH2ClientGETsShareConnection(t *testing.T) {
	f := startReuse(t)
	c := f.clientAs(t, true, "sbx-a", url.UserPassword("sbx-a", "tok-a"))
	for _, p := range []string{"/public/1", "/public/2", "/public/3"} {
		req, _ := http.NewRequest("GET", f.tlsURL(p), nil)
		req.Header.Set("X-Who", "sbx-a")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			t.Fatalf("GET %s = %d over HTTP/%d; want 200 over h2", p, resp.StatusCode, resp.ProtoMajor)
		}
	}
	f.finish(t, c)
	f.tlsUp.mu.Lock()
	defer f.tlsUp.mu.Unlock()
	for _, p := range f.tlsUp.parsed {
		if p.conn != 1 || p.cnx != "" {
			t.Errorf("upstream got %s %s on connection %d with Connection %q; want all on connection 1, kept alive", p.method, p.path, p.conn, p.cnx)
		}
	}
}

// TestInspectWebSocketCarryingSecret: a WebSocket handshake that carries a
// secret goes alone, and over HTTP/1.1 even to an upstream known to speak
// h2 (a WebSocket upgrade is HTTP/1.1's).
func TestInspectWebSocketCarryingSecret(t *testing.T) {
	auth := make(chan string, 1)
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			io.Copy(io.Discard, r.Body)
			return
		}
		auth <- r.Header.Get("Authorization")
		upgradeAndEchoLine(w)
	})
	rules := `{"rules": [
		{"id": "insp", "hosts": ["example.com"], "ports": [PORT], "methods": ["POST"], "paths": ["/ok/**"], "inspect": true},
		{"id": "ws", "hosts": ["example.com"], "ports": [PORT], "methods": ["GET"], "paths": ["/ws"], "inspect": true,
		 "credentials": [{"secret": "github", "header": "Authorization", "format": "Bearer {}"}]}
	]}`
	f := startInspect(t, up, inspectOptions{rules: rules, secrets: testStore(t)})
	// A POST first: the upstream is then known to speak h2.
	resp, err := f.client(t, true).Post(f.url("/ok/x"), "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("POST = %d over HTTP/%d; want 200 over h2", resp.StatusCode, resp.ProtoMajor)
	}
	tc := f.dialInner(t, "example.com:"+f.port, "example.com", "http/1.1")
	io.WriteString(tc, "GET /ws HTTP/1.1\r\nHost: example.com:"+f.port+"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	br := bufio.NewReader(tc)
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake = %v, %v; want 101", resp, err)
	}
	if got := <-auth; got != "Bearer "+testSecret {
		t.Errorf("upstream got Authorization %q; want the secret", got)
	}
	io.WriteString(tc, "hello\n")
	if got, err := br.ReadString('\n'); got != "echo hello\n" {
		t.Errorf("relayed %q, %v; want %q", got, err, "echo hello\n")
	}
}
