package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/identity"
)

// parsedRequest is one request an upstream parsed: the connection it came
// on (numbered from 1), its method, host (without port), path, the
// identity it claims (X-Who) and its Connection header.
type parsedRequest struct {
	conn                         int
	method, host, path, who, cnx string
}

// parsingUpstream is an HTTP/1.1 upstream that behaves as Python's
// http.server does with a handler that ignores bodies: it parses requests
// one after another on each connection and answers each without reading
// its body, so a body it was sent is parsed as the next request. Only
// POST /public/store reads its body (Content-Length bytes) and keeps it.
// It honours "Connection: close", as Python does. Every request it parses
// is logged; each response's body is the request's path.
type parsingUpstream struct {
	ln   net.Listener
	port string
	wg   sync.WaitGroup

	mu     sync.Mutex
	conns  int
	parsed []parsedRequest
	stored []string
}

func listenUpstream(t *testing.T) *parsingUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return &parsingUpstream{ln: ln, port: port}
}

// serve starts serving, over TLS with cfg when it is not nil.
func (u *parsingUpstream) serve(t *testing.T, cfg *tls.Config) {
	t.Helper()
	ln := u.ln
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	t.Cleanup(func() { u.ln.Close() })
	u.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.conns++
			n := u.conns
			u.mu.Unlock()
			u.wg.Go(func() { u.serveConn(c, n) })
		}
	})
}

func (u *parsingUpstream) serveConn(c net.Conn, n int) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		host, _, err := net.SplitHostPort(req.Host)
		if err != nil {
			host = req.Host
		}
		body := req.URL.Path
		u.mu.Lock()
		u.parsed = append(u.parsed, parsedRequest{conn: n, method: req.Method, host: host, path: req.URL.Path,
			who: req.Header.Get("X-Who"), cnx: req.Header.Get("Connection")})
		u.mu.Unlock()
		if req.Method == http.MethodPost && req.URL.Path == "/public/store" {
			b, _ := io.ReadAll(req.Body)
			u.mu.Lock()
			u.stored = append(u.stored, string(b))
			u.mu.Unlock()
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		if req.Close {
			return
		}
	}
}

// stop closes the listener and waits until every connection has ended.
func (u *parsingUpstream) stop(t *testing.T) {
	t.Helper()
	u.ln.Close()
	done := make(chan struct{})
	go func() { u.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("upstream connections still open 20s after the proxy shut down")
	}
}

// checkEveryParsedRequestRecorded fails for every request u parsed that no
// allowing audit record names (method, host, path, identity), and for a
// connection that carried requests of two identities.
func (u *parsingUpstream) checkEveryParsedRequestRecorded(t *testing.T, recs []audit.Record) {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	byConn := map[int]string{}
	for _, p := range u.parsed {
		found := false
		for _, r := range recs {
			if r.Kind == audit.KindHTTP && r.Decision == audit.DecisionAllow &&
				r.Method == p.method && r.Host == p.host && r.Path == p.path && r.Identity == p.who {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("upstream parsed %s %s%s (claiming %q) on connection %d; no allowing record names it", p.method, p.host, p.path, p.who, p.conn)
		}
		if w, ok := byConn[p.conn]; ok && w != p.who {
			t.Errorf("upstream connection %d carried requests of %q and %q", p.conn, w, p.who)
		}
		byConn[p.conn] = p.who
	}
	if len(u.parsed) == 0 {
		t.Error("upstream parsed no request")
	}
}

// reuseFixture is a proxy with identities sbx-a and sbx-b, the test
// secret, and rules for a plain and a TLS parsing upstream: GET, HEAD,
// POST and DELETE under /public/**, and POST (plain) and GET (inspected)
// under /cred/** with the secret as a bearer token.
type reuseFixture struct {
	*inspectFixture
	plain, tlsUp *parsingUpstream
}

func startReuse(t *testing.T) *reuseFixture {
	t.Helper()
	plain, tlsUp := listenUpstream(t), listenUpstream(t)
	rules := `{"rules": [
		{"id": "plain", "hosts": ["127.0.0.1"], "ports": [` + plain.port + `], "methods": ["GET", "HEAD", "POST", "DELETE"], "paths": ["/public/**"]},
		{"id": "plain-cred", "hosts": ["127.0.0.1"], "ports": [` + plain.port + `], "methods": ["POST"], "paths": ["/cred/**"],
		 "credentials": [{"secret": "github", "header": "Authorization", "format": "Bearer {}"}]},
		{"id": "insp", "hosts": ["example.com"], "ports": [` + tlsUp.port + `], "methods": ["GET", "HEAD", "POST", "DELETE"], "paths": ["/public/**"], "inspect": true},
		{"id": "cred", "hosts": ["example.com"], "ports": [` + tlsUp.port + `], "methods": ["GET"], "paths": ["/cred/**"], "inspect": true,
		 "credentials": [{"secret": "github", "header": "Authorization", "format": "Bearer {}"}]}
	]}`
	ids := identity.Config{
		{ID: "sbx-a", TokenSHA256: hashHex("tok-a")},
		{ID: "sbx-b", TokenSHA256: hashHex("tok-b")},
	}
	f := startInspect(t, http.NotFoundHandler(), inspectOptions{rules: rules, ids: ids, secrets: testStore(t)})
	plain.serve(t, nil)
	tlsUp.serve(t, &tls.Config{Certificates: f.up.TLS.Certificates, NextProtos: []string{"http/1.1"}})
	return &reuseFixture{inspectFixture: f, plain: plain, tlsUp: tlsUp}
}

// client is identity id's HTTP/1.1 client through the proxy.
func (f *reuseFixture) client(t *testing.T, id string) *http.Client {
	return f.clientAs(t, false, id, url.UserPassword(id, "tok-"+id[len(id)-1:]))
}

// do sends method url as id (X-Who: id) with body and returns the response
// body; the response must be 200.
func (f *reuseFixture) do(t *testing.T, c *http.Client, id, method, u, body string, hdr ...string) string {
	t.Helper()
	var rb io.Reader
	if body != "" {
		rb = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rb)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Who", id)
	req.Header.Set("User-Agent", "")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if req.Header.Get("Connection") == "close" {
		req.Close = true
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s as %s: %v", method, u, id, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s as %s = %d %s", method, u, id, resp.StatusCode, resp.Header.Get("X-Egressd-Decision"))
	}
	return string(b)
}

// finish closes the clients' connections, drains the proxy (which closes
// its idle upstream connections) and waits for both upstreams to see every
// connection end, so that everything they were sent has been parsed.
func (f *reuseFixture) finish(t *testing.T, clients ...*http.Client) {
	t.Helper()
	for _, c := range clients {
		c.Transport.(*http.Transport).CloseIdleConnections()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := f.srv.Shutdown(ctx); err != nil {
		t.Fatalf("proxy shutdown: %v", err)
	}
	f.plain.stop(t)
	f.tlsUp.stop(t)
}

func (f *reuseFixture) plainURL(path string) string {
	return "http://127.0.0.1:" + f.plain.port + path
}

func (f *reuseFixture) tlsURL(path string) string {
	return "https://example.com:" + f.tlsUp.port + path
}

// TestNoRequestUpstreamWithoutRecord is the witness of the connection
// invariant (issue 21 item 10): against upstreams that parse a body they
// did not read as the next request, every request an upstream parses is
// one an allowing record names, for the identity that sent it, and no
// connection carries two identities' requests.
func TestNoRequestUpstreamWithoutRecord(t *testing.T) {
	f := startReuse(t)
	a, b := f.client(t, "sbx-a"), f.client(t, "sbx-b")
	smuggleGET := func(host string) string {
		return "GET /admin/secret HTTP/1.1\r\nHost: " + host + "\r\nX-Who: sbx-a\r\n\r\n"
	}
	// A prefix whose body the upstream reads: the next request sent on the
	// connection would be stored as it.
	capture := func(host string) string {
		return "POST /public/store HTTP/1.1\r\nHost: " + host + "\r\nX-Who: sbx-a\r\nContent-Length: 90\r\n\r\n"
	}

	// A POST allowed by /public/** whose body is a GET /admin/secret.
	if got := f.do(t, a, "sbx-a", "POST", f.plainURL("/public/x"), smuggleGET("127.0.0.1")); got != "/public/x" {
		t.Errorf("plain POST got %q", got)
	}
	if got := f.do(t, a, "sbx-a", "POST", f.tlsURL("/public/x"), smuggleGET("example.com")); got != "/public/x" {
		t.Errorf("inspected POST got %q", got)
	}
	// sbx-a primes a capture; sbx-b's next request, with its private
	// header, must not become its body.
	f.do(t, a, "sbx-a", "POST", f.plainURL("/public/y"), capture("127.0.0.1"))
	if got := f.do(t, b, "sbx-b", "POST", f.plainURL("/public/b"), "hello", "X-Private", "b-private"); got != "/public/b" {
		t.Errorf("sbx-b's POST got %q; want its own response", got)
	}
	if got := f.do(t, b, "sbx-b", "DELETE", f.plainURL("/public/b"), "", "X-Private", "b-private"); got != "/public/b" {
		t.Errorf("sbx-b's DELETE got %q; want its own response", got)
	}
	// A request egressd adds the secret to, over plain HTTP to an
	// internal address, whose body is a request.
	if got := f.do(t, a, "sbx-a", "POST", f.plainURL("/cred/p"), smuggleGET("127.0.0.1")); got != "/cred/p" {
		t.Errorf("plain credential POST got %q", got)
	}
	// Inside an inspected tunnel: sbx-a primes a capture, then asks for a
	// request egressd adds the secret to.
	f.do(t, a, "sbx-a", "POST", f.tlsURL("/public/y"), capture("example.com"))
	if got := f.do(t, a, "sbx-a", "GET", f.tlsURL("/cred/x"), ""); got != "/cred/x" {
		t.Errorf("credential GET got %q; want its own response", got)
	}
	f.finish(t, a, b)

	recs := f.audit.Records()
	f.plain.checkEveryParsedRequestRecorded(t, recs)
	f.tlsUp.checkEveryParsedRequestRecorded(t, recs)
	for _, u := range []*parsingUpstream{f.plain, f.tlsUp} {
		for _, s := range u.stored {
			t.Errorf("upstream stored a request body it was never sent as one: %q", s)
		}
	}
}

// TestLateBytesNeverReachAnotherIdentity (issue 21 item 11): an upstream
// that sends a response nobody asked for on a connection, once the next
// request arrives on it, must never have it read as another identity's
// response: the second identity gets a connection of its own.
func TestLateBytesNeverReachAnotherIdentity(t *testing.T) {
	for _, method := range []string{"GET", "DELETE"} {
		t.Run(method, func(t *testing.T) {
			addr, _ := serveRequests(t, func(c net.Conn, n int, req *http.Request) bool {
				if n > 1 {
					io.WriteString(c, plantedResponse)
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(req.URL.Path))+"\r\n\r\n"+req.URL.Path)
				return true
			})
			_, port, _ := net.SplitHostPort(addr)
			rules := `{"rules": [{"id": "plain", "hosts": ["127.0.0.1"], "ports": [` + port + `], "methods": ["GET", "DELETE"], "paths": ["/public/**"]}]}`
			ids := identity.Config{{ID: "sbx-a", TokenSHA256: hashHex("tok-a")}, {ID: "sbx-b", TokenSHA256: hashHex("tok-b")}}
			f := &reuseFixture{inspectFixture: startInspect(t, http.NotFoundHandler(), inspectOptions{rules: rules, ids: ids})}
			for _, id := range []string{"sbx-a", "sbx-b"} {
				path := "/public/" + id
				if got := f.do(t, f.client(t, id), id, method, "http://"+addr+path, ""); got != path {
					t.Errorf("%s %s as %s got %q; want its own response", method, path, id, got)
				}
			}
		})
	}
}

// TestBodylessResponseDeclaringBodyClosesConnection (issue 21 item 16): a
// response to HEAD, or a 204 or 304, that declares a body leaves its
// connection closed on every transport: the body the upstream sends
// anyway (here, once the next request arrives) would be read as the next
// request's response.
func TestBodylessResponseDeclaringBodyClosesConnection(t *testing.T) {
	head := func(status string) string {
		return "HTTP/1.1 " + status + "\r\nContent-Length: " + strconv.Itoa(len(plantedResponse)) + "\r\n\r\n"
	}
	tests := []struct {
		name, method, status string
		next                 string // the method of the request after
		tls                  bool
	}{
		{name: "inspected HEAD", method: "HEAD", status: "200 OK", next: "GET", tls: true},
		{name: "inspected 204", method: "GET", status: "204 No Content", next: "GET", tls: true},
		{name: "inspected 304", method: "GET", status: "304 Not Modified", next: "GET", tls: true},
		{name: "plain DELETE 204", method: "DELETE", status: "204 No Content", next: "DELETE"},
		{name: "plain GET 304", method: "GET", status: "304 Not Modified", next: "GET"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			_, port, _ := net.SplitHostPort(ln.Addr().String())
			rules := `{"rules": [
				{"id": "plain", "hosts": ["127.0.0.1"], "ports": [` + port + `], "methods": ["GET", "HEAD", "DELETE"], "paths": ["/public/**"]},
				{"id": "insp", "hosts": ["example.com"], "ports": [` + port + `], "methods": ["GET", "HEAD", "DELETE"], "paths": ["/public/**"], "inspect": true}
			]}`
			ids := identity.Config{{ID: "sbx-a", TokenSHA256: hashHex("tok-a")}}
			f := &reuseFixture{inspectFixture: startInspect(t, http.NotFoundHandler(), inspectOptions{rules: rules, ids: ids})}
			l := net.Listener(ln)
			if tt.tls {
				l = tls.NewListener(ln, &tls.Config{Certificates: f.up.TLS.Certificates, NextProtos: []string{"http/1.1"}})
			}
			// The first request of the test gets the bodyless head; a
			// later request on its connection first gets the declared
			// body, late, as a whole response.
			var total atomic.Int32
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					go func() {
						defer c.Close()
						br := bufio.NewReader(c)
						first := false
						for {
							req, err := http.ReadRequest(br)
							if err != nil {
								return
							}
							if total.Add(1) == 1 {
								first = true
								io.WriteString(c, head(tt.status))
								continue
							}
							if first {
								io.WriteString(c, plantedResponse)
							}
							io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(req.URL.Path))+"\r\n\r\n"+req.URL.Path)
						}
					}()
				}
			}()
			base := "http://127.0.0.1:" + port
			if tt.tls {
				base = "https://example.com:" + port
			}
			c := f.client(t, "sbx-a")
			req, _ := http.NewRequest(tt.method, base+"/public/first", nil)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if got := f.do(t, c, "sbx-a", tt.next, base+"/public/second", ""); got != "/public/second" {
				t.Errorf("the request after %s %s got %q; want its own response", tt.method, tt.status, got)
			}
		})
	}
}
