package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/broker"
	"github.com/egressd/egressd/proxy/budget"
	"github.com/egressd/egressd/proxy/ca"
	"github.com/egressd/egressd/proxy/secretpat"
	defaultbundle "github.com/egressd/egressd/rego"
)

// testCA is the real authority (proxy/ca), with its independent root per
// identity, in a temporary directory; it counts what the proxy asks it to
// mint.
type testCA struct {
	a     *ca.Authority
	calls atomic.Int64
	mu    sync.Mutex
	hosts []string
}

func newTestCA(tb testing.TB) *testCA {
	a, err := ca.Open(tb.TempDir(), ca.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return &testCA{a: a}
}

// rootCert is identity's root.
func (c *testCA) rootCert(tb testing.TB, identity string) *x509.Certificate {
	r, err := c.a.Root(identity)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// pool is identity's root, for a client that trusts it.
func (c *testCA) pool(tb testing.TB, identity string) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.rootCert(tb, identity))
	return p
}

func (c *testCA) Leaf(identity, host string) (*tls.Certificate, error) {
	c.calls.Add(1)
	c.mu.Lock()
	c.hosts = append(c.hosts, identity+"/"+host)
	c.mu.Unlock()
	return c.a.Leaf(identity, host)
}

// loopbackDialer dials every host on 127.0.0.1, so tests can CONNECT to
// names (example.com, whose name httptest's certificate carries).
type loopbackDialer struct{ net.Dialer }

func (d *loopbackDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	_, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	return d.Dialer.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
}

// inspectFixture is a proxy with a real policy engine whose rules inspect
// example.com:<upstream port> (GET and POST under /ok/, GET /ws) and open
// an opaque tunnel to 127.0.0.1:<upstream port>, and a TLS upstream
// (HTTP/1.1 and h2) with its own certificate.
type inspectFixture struct {
	proxy string
	ca    *testCA
	audit *audittest.Recorder
	up    *httptest.Server
	port  string
	srv   *Server
}

// inspectOptions adjust the fixture's proxy.
type inspectOptions struct {
	noCA          bool
	untrustedRoot bool
	cfg           *Config
	// discardAudit drops the records (benchmarks).
	discardAudit bool
	// rules, if set, replace the fixture's data.json ("PORT" is the
	// upstream's port).
	rules string
	// ids are the identities; nil: none (everyone is anonymous).
	ids identity.Config
	// secrets are the brokered secrets; nil: none.
	secrets *broker.Store
	// budgets counts the identities' budgets; nil: none.
	budgets *budget.Ledger
	// patterns are the secret patterns looked for; nil: none.
	patterns *secretpat.Set
	// floor is the address floor; nil: every address passes.
	floor policy.Floor
}

func startInspect(tb testing.TB, h http.Handler, o inspectOptions) *inspectFixture {
	tb.Helper()
	up := httptest.NewUnstartedServer(h)
	up.EnableHTTP2 = true
	up.StartTLS()
	tb.Cleanup(up.Close)
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())
	rules := `{"rules": [
		{"id": "insp", "hosts": ["example.com"], "ports": [` + port + `], "methods": ["GET", "POST"], "paths": ["/ok/**", "/ws", "/grpc.health.v1.Health/Check"], "inspect": true},
		{"id": "opaque", "hosts": ["127.0.0.1"], "ports": [` + port + `]}
	]}`
	if o.rules != "" {
		rules = strings.ReplaceAll(o.rules, "PORT", port)
	}
	e := inspectEngine(tb, rules)
	f := &inspectFixture{ca: newTestCA(tb), audit: &audittest.Recorder{}, up: up, port: port}
	roots := x509.NewCertPool()
	if !o.untrustedRoot {
		roots.AddCert(up.Certificate())
	}
	cfg := DefaultConfig()
	if o.cfg != nil {
		cfg = *o.cfg
	}
	ids, err := identity.New(o.ids)
	if err != nil {
		tb.Fatal(err)
	}
	var a audit.Appender = f.audit
	if o.discardAudit {
		a = audittest.Sink{}
	}
	var floor policy.Floor = openFloor{}
	if o.floor != nil {
		floor = o.floor
	}
	opts := Options{Config: cfg, Decider: e, Floor: floor, Identities: ids, Dialer: &loopbackDialer{},
		Audit: a, Metrics: NewMetrics(prometheus.NewRegistry()), Log: zap.NewNop(), UpstreamRoots: roots, Secrets: o.secrets, Budgets: o.budgets,
		SecretPatterns: o.patterns}
	if !o.noCA {
		opts.Leaves = f.ca
	}
	s, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go s.Serve(ln) //nolint:errcheck // ends with Shutdown below
	shutdownOnCleanup(tb, s)
	f.proxy, f.srv = ln.Addr().String(), s
	return f
}

// inspectEngine is the embedded modules with data.json's rules replaced.
func inspectEngine(tb testing.TB, data string) *policy.Engine {
	tb.Helper()
	dir := tb.TempDir()
	if err := defaultbundle.Write(dir, false); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data.json"), []byte(data), 0o644); err != nil {
		tb.Fatal(err)
	}
	e, err := policy.New(context.Background(), policy.Config{Dir: dir, EvalTimeout: 10 * time.Second}, zap.NewNop())
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

// client is a Go client through the proxy trusting identity anonymous's
// CA; h2 says whether it offers h2 in ALPN.
func (f *inspectFixture) client(tb testing.TB, h2 bool) *http.Client {
	return f.clientAs(tb, h2, "anonymous", nil)
}

// clientAs is client for identity id, which authenticates with user
// (nil: no credentials).
func (f *inspectFixture) clientAs(tb testing.TB, h2 bool, id string, user *url.Userinfo) *http.Client {
	tr := &http.Transport{
		Proxy:             http.ProxyURL(&url.URL{Scheme: "http", Host: f.proxy, User: user}),
		TLSClientConfig:   &tls.Config{RootCAs: f.ca.pool(tb, id)},
		ForceAttemptHTTP2: h2,
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	tb.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// url is https://example.com:<port><path>.
func (f *inspectFixture) url(path string) string {
	return "https://example.com:" + f.port + path
}

// withExtension appends an empty extension of type typ to a ClientHello
// record (as clientHello captures it), fixing every enclosing length.
func withExtension(tb testing.TB, rec []byte, typ uint16) []byte {
	tb.Helper()
	return withExtensionData(tb, rec, typ, nil)
}

// withExtensionData is withExtension with the extension's data.
func withExtensionData(tb testing.TB, rec []byte, typ uint16, data []byte) []byte {
	tb.Helper()
	out := append([]byte(nil), rec...)
	p := tlsRecordHeaderLen + 4 + 34
	p += 1 + int(out[p])                           // session_id
	p += 2 + int(binary.BigEndian.Uint16(out[p:])) // cipher_suites
	p += 1 + int(out[p])                           // compression_methods
	extLen := int(binary.BigEndian.Uint16(out[p:]))
	if p+2+extLen != len(out) {
		tb.Fatalf("hello has bytes after its extensions")
	}
	out = binary.BigEndian.AppendUint16(out, typ)
	out = binary.BigEndian.AppendUint16(out, uint16(len(data)))
	out = append(out, data...)
	binary.BigEndian.PutUint16(out[p:], uint16(extLen+4+len(data)))
	hl := int(out[tlsRecordHeaderLen+1])<<16 | int(out[tlsRecordHeaderLen+2])<<8 | int(out[tlsRecordHeaderLen+3]) + 4 + len(data)
	out[tlsRecordHeaderLen+1], out[tlsRecordHeaderLen+2], out[tlsRecordHeaderLen+3] = byte(hl>>16), byte(hl>>8), byte(hl)
	binary.BigEndian.PutUint16(out[3:], uint16(len(out)-tlsRecordHeaderLen))
	return out
}
