package proxy

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/broker"
	"github.com/egressd/egressd/proxy/secretpat"
)

// leakSecrets are the loaded secrets of the leak tests, by name.
var leakSecrets = map[string]string{"github": testSecret, "db-pass": "pa55-Word_for.DB!"}

// patternSamples are a token of each default pattern's shape.
var patternSamples = map[string]string{
	"aws_access_key":    "AKIAIOSFODNN7EXAMPLE",
	"github_token":      "ghp_" + strings.Repeat("aB3d", 9),
	"gitlab_token":      "glpat-" + strings.Repeat("xY_9-", 4),
	"slack_token":       "xoxb-1234567890-abcdef",
	"openai_api_key":    "sk-proj-" + strings.Repeat("Ab_-", 6),
	"anthropic_api_key": "sk-ant-api03-" + strings.Repeat("Zz9_", 6),
	"google_api_key":    "AIza" + strings.Repeat("Sy-_1", 7),
	"private_key":       "-----BEGIN RSA PRIVATE KEY-----",
}

func leakStore(t testing.TB) *broker.Store {
	t.Helper()
	var c broker.Config
	for name := range leakSecrets {
		c = append(c, broker.Spec{Name: name, Env: strings.ReplaceAll(name, "-", "_")})
	}
	s, err := broker.Load(c, func(k string) (string, bool) {
		v, ok := leakSecrets[strings.ReplaceAll(k, "_", "-")]
		return v, ok
	})
	if err != nil {
		t.Fatal(err)
	}
	return broker.NewStore(s)
}

// upWitness is an upstream that logs every request it handled: its
// target, and its body if the body arrived whole.
type upWitness struct {
	*httptest.Server
	mu  sync.Mutex
	got []string
}

func newUpWitness(t *testing.T) *upWitness {
	w := &upWitness{}
	w.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		entry := r.RequestURI + " " + strings.Join(headerLines(r.Header), ";") + " body:"
		if err != nil {
			entry += "incomplete(" + string(b) + ")"
		} else {
			entry += "whole(" + string(b) + ")"
		}
		w.mu.Lock()
		w.got = append(w.got, entry)
		w.mu.Unlock()
		io.WriteString(rw, "ok")
	}))
	t.Cleanup(w.Close)
	return w
}

func headerLines(h http.Header) []string {
	var out []string
	for k, vs := range h {
		out = append(out, k+"="+strings.Join(vs, ","))
	}
	return out
}

// log closes the upstream, which waits for every request it is handling,
// and returns what it handled.
func (w *upWitness) log() []string {
	w.Close()
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.got...)
}

// leakProxy runs a proxy with the leak secrets and the default patterns
// that allows 127.0.0.1 with opts, identities ids (nil: anonymous).
func leakProxy(t *testing.T, opts *policy.RuleOptions, ids identity.Config) (string, *audittest.Recorder) {
	t.Helper()
	rec := &audittest.Recorder{}
	return startLeakProxy(t, Options{Audit: rec, Secrets: leakStore(t), SecretPatterns: secretpat.MustDefaults()}, opts, ids), rec
}

// startLeakProxy runs a proxy with o's config, audit, secrets and
// patterns that allows 127.0.0.1 with opts.
func startLeakProxy(t testing.TB, o Options, opts *policy.RuleOptions, ids identity.Config) string {
	t.Helper()
	d := credDecider{"127.0.0.1": policy.Decision{Allow: true, Reason: "allowed", Rule: "up", Policy: "test", Options: opts}}
	store, err := identity.New(ids)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Config: o.Config, Decider: d, Floor: openFloor{}, Identities: store, Dialer: &net.Dialer{},
		Audit: o.Audit, Metrics: NewMetrics(prometheus.NewRegistry()), Log: zap.NewNop(), Secrets: o.Secrets,
		SecretPatterns: o.SecretPatterns})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln) //nolint:errcheck // ends with Shutdown below
	shutdownOnCleanup(t, s)
	return ln.Addr().String()
}

// leakRequest is where a test puts a value: it builds the request.
type leakPlace struct {
	name string
	req  func(base, v string) *http.Request
}

func gzipBytes(s string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	io.WriteString(zw, s)
	zw.Close()
	return b.Bytes()
}

// chunkedBody streams parts as a chunked body, each written on its own.
func chunkedBody(parts ...string) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		for _, p := range parts {
			if _, err := io.WriteString(pw, p); err != nil {
				return
			}
		}
		pw.Close()
	}()
	return pr
}

var leakPlaces = []leakPlace{
	{"url query", func(base, v string) *http.Request {
		r, _ := http.NewRequest("GET", base+"/x?k="+url.QueryEscape(v), nil)
		return r
	}},
	{"url path percent-encoded", func(base, v string) *http.Request {
		var b strings.Builder
		for i := 0; i < len(v); i++ {
			b.WriteString("%" + strings.ToUpper(string("0123456789abcdef"[v[i]>>4])+string("0123456789abcdef"[v[i]&15])))
		}
		r, _ := http.NewRequest("GET", base+"/p/"+b.String(), nil)
		return r
	}},
	{"header", func(base, v string) *http.Request {
		r, _ := http.NewRequest("GET", base+"/x", nil)
		r.Header.Set("X-Debug", "token="+v)
		return r
	}},
	{"json body", func(base, v string) *http.Request {
		b, _ := json.Marshal(map[string]string{"note": "hi", "key": v})
		r, _ := http.NewRequest("POST", base+"/x", bytes.NewReader(b))
		r.Header.Set("Content-Type", "application/json")
		return r
	}},
	{"gzip body", func(base, v string) *http.Request {
		r, _ := http.NewRequest("POST", base+"/x", bytes.NewReader(gzipBytes(`{"key":"`+v+`"}`)))
		r.Header.Set("Content-Encoding", "gzip")
		return r
	}},
	{"chunked body split", func(base, v string) *http.Request {
		cut := len(v) / 2
		r, _ := http.NewRequest("POST", base+"/x", chunkedBody(`{"pad":"`+strings.Repeat("z", 40<<10), `","key":"`+v[:cut], v[cut:], `"}`))
		return r
	}},
}

// TestLeakLoadedSecret sends each loaded value in each place: every one is
// refused secret_in_request naming the secret, and the upstream never
// handles a whole request, nor any byte of the value.
func TestLeakLoadedSecret(t *testing.T) {
	for name, v := range leakSecrets {
		for _, pl := range leakPlaces {
			t.Run(name+"/"+pl.name, func(t *testing.T) {
				addr, rec := leakProxy(t, nil, nil)
				up := newUpWitness(t)
				resp, err := proxyClient(addr).Do(pl.req(up.URL, v))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusForbidden || !strings.Contains(resp.Header.Get("X-Egressd-Decision"), "secret_in_request") {
					t.Fatalf("status %d %q; want 403 secret_in_request", resp.StatusCode, resp.Header.Get("X-Egressd-Decision"))
				}
				r := rec.WaitRecord(t, func(r audit.Record) bool { return r.Reason == string(policy.ReasonSecretInRequest) })
				if r.Secret != name || r.Decision != audit.DecisionDeny {
					t.Errorf("record %+v; want a deny naming secret %s", r, name)
				}
				if d := rec.Records()[0]; d.Kind != audit.KindHTTP || d.Rule != "up" {
					t.Errorf("decision record %+v; want rule up", d)
				}
				for _, g := range up.log() {
					if strings.Contains(g, "whole(") || strings.Contains(g, v) {
						t.Errorf("upstream handled %q", g)
					}
				}
				assertRecordsClean(t, rec, v)
			})
		}
	}
}

func assertRecordsClean(t *testing.T, rec *audittest.Recorder, values ...string) {
	t.Helper()
	for _, r := range rec.Records() {
		b, _ := json.Marshal(r)
		for _, v := range values {
			if bytes.Contains(b, []byte(v)) {
				t.Errorf("record holds the value: %s", b)
			}
		}
	}
}

// TestLeakPatterns sends each default pattern in each place: recorded and
// passed by default; refused where the rule or the identity says so.
func TestLeakPatterns(t *testing.T) {
	refuseRule := &policy.RuleOptions{SecretPatterns: policy.SecretPatternsRefuse}
	refuser := identity.Config{{ID: "strict", TokenSHA256: hashHex("tok-s"), Attributes: map[string]string{"secret_patterns": "refuse"}}}
	for name, v := range patternSamples {
		for _, pl := range leakPlaces {
			if name == "private_key" && strings.HasPrefix(pl.name, "url") {
				// Its spaces are escaped differently in a URL; the header and bodies cover it.
				continue
			}
			t.Run(name+"/"+pl.name+"/recorded", func(t *testing.T) {
				addr, rec := leakProxy(t, nil, nil)
				up := newUpWitness(t)
				resp, err := proxyClient(addr).Do(pl.req(up.URL, v))
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d %q; want 200", resp.StatusCode, resp.Header.Get("X-Egressd-Decision"))
				}
				r := rec.WaitRecord(t, func(r audit.Record) bool { return r.Kind == audit.KindHTTPDone })
				if r.SecretPattern != name || r.Reason != "" {
					t.Errorf("completion %+v; want pattern %s recorded, no reason", r, name)
				}
				if g := up.log(); len(g) != 1 || !strings.Contains(g[0], "whole(") && strings.Contains(pl.name, "body") {
					t.Errorf("upstream handled %q; want the request whole", g)
				}
				assertRecordsClean(t, rec, v)
			})
			for _, how := range []string{"rule", "identity"} {
				t.Run(name+"/"+pl.name+"/refused by "+how, func(t *testing.T) {
					var addr string
					var rec *audittest.Recorder
					c := func(a string) *http.Client { return proxyClient(a) }
					if how == "rule" {
						addr, rec = leakProxy(t, refuseRule, nil)
					} else {
						addr, rec = leakProxy(t, nil, refuser)
						c = func(a string) *http.Client {
							return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: a, User: url.UserPassword("strict", "tok-s")})}}
						}
					}
					up := newUpWitness(t)
					resp, err := c(addr).Do(pl.req(up.URL, v))
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					if resp.StatusCode != http.StatusForbidden {
						t.Fatalf("status %d %q; want 403", resp.StatusCode, resp.Header.Get("X-Egressd-Decision"))
					}
					r := rec.WaitRecord(t, func(r audit.Record) bool { return r.Reason == string(policy.ReasonSecretInRequest) })
					if r.SecretPattern != name || r.Secret != "" {
						t.Errorf("record %+v; want pattern %s", r, name)
					}
					for _, g := range up.log() {
						if strings.Contains(g, "whole(") || strings.Contains(g, v) {
							t.Errorf("upstream handled %q", g)
						}
					}
				})
			}
		}
	}
}

// TestLeakInspected: inside an inspected tunnel (h2 and HTTP/1.1 to the
// proxy), a loaded value in the URL, a header or the body is refused and
// the upstream never handles it; a pattern is recorded.
func TestLeakInspected(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		for _, pl := range leakPlaces {
			t.Run(pl.name+map[bool]string{false: "/h1", true: "/h2"}[h2], func(t *testing.T) {
				var mu sync.Mutex
				var got []string
				f := startInspect(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					b, err := io.ReadAll(r.Body)
					mu.Lock()
					got = append(got, r.RequestURI+" "+strings.Join(headerLines(r.Header), ";")+" "+string(b)+" "+map[bool]string{true: "whole", false: "incomplete"}[err == nil])
					mu.Unlock()
				}), inspectOptions{secrets: leakStore(t), patterns: secretpat.MustDefaults()})
				c := f.client(t, h2)
				req := pl.req(f.url("/ok"), testSecret)
				req.Header.Set("X-Case", "secret")
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusForbidden {
					t.Fatalf("status %d %q; want 403", resp.StatusCode, resp.Header.Get("X-Egressd-Decision"))
				}
				r := f.audit.WaitRecord(t, func(r audit.Record) bool { return r.Reason == string(policy.ReasonSecretInRequest) })
				if r.Secret != "github" || !r.Inspected {
					t.Errorf("record %+v; want inspected, naming github", r)
				}
				req = pl.req(f.url("/ok"), patternSamples["aws_access_key"])
				req.Header.Set("X-Case", "pattern")
				resp, err = c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("pattern: status %d; want 200", resp.StatusCode)
				}
				f.audit.WaitRecord(t, func(r audit.Record) bool {
					return r.Kind == audit.KindHTTPDone && r.SecretPattern == "aws_access_key"
				})
				f.up.Close()
				mu.Lock()
				// The refused request's handler logs when its cut body
				// fails, which may be after the pattern request's: look
				// the pattern request up, not at the last entry.
				whole := false
				for _, g := range got {
					whole = whole || strings.Contains(g, "X-Case=pattern") && strings.HasSuffix(g, " whole")
				}
				if !whole {
					t.Errorf("upstream handled %q; want the pattern request whole", got)
				}
				defer mu.Unlock()
				for _, g := range got {
					if strings.Contains(g, "SECRETvalue") || strings.Contains(g, "X-Case=secret") && strings.HasSuffix(g, " whole") {
						t.Errorf("upstream handled %q", g)
					}
				}
			})
		}
	}
}

// TestLeakOffCostsNothing: with no secret loaded and no pattern, a request
// carries no search: the body the upstream reads is the client's.
func TestLeakOffCostsNothing(t *testing.T) {
	f := &httpFlow{s: &Server{secrets: broker.NewStore(nil)}}
	r := httptest.NewRequest("POST", "http://a.test/x?k="+testSecret, strings.NewReader("x"))
	if _, denied := f.checkLeaks(r, &policy.Decision{Allow: true}); denied || f.leak != nil {
		t.Fatalf("checkLeaks with nothing to find: denied %v, findings %v", denied, f.leak)
	}
	if b := f.leakBody(r.Body, r.Header); b != r.Body {
		t.Fatalf("leakBody wrapped the body with nothing to find")
	}
	allocs := testing.AllocsPerRun(100, func() { f.checkLeaks(r, &policy.Decision{Allow: true}) })
	if allocs != 0 {
		t.Errorf("checkLeaks with nothing to find allocates %v times; want 0", allocs)
	}
}

// TestLeakBodyAfterAnswer: an upstream that answers before it reads the
// body has the rest cut at the secret all the same, and the completion
// record says secret_in_request although the client had its head. Over
// h2 inside an inspected tunnel: net/http's HTTP/1.1 server would first
// wait to discard the client's unread body before passing the head on.
func TestLeakBodyAfterAnswer(t *testing.T) {
	got := make(chan string, 1)
	f := startInspect(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A first byte: the proxy passes a head on with the body's first
		// bytes.
		io.WriteString(w, "reading\n")
		w.(http.Flusher).Flush()
		b, err := io.ReadAll(r.Body)
		if err != nil {
			b = append(b, " (incomplete)"...)
		}
		got <- string(b)
	}), inspectOptions{secrets: leakStore(t), patterns: secretpat.MustDefaults()})
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", f.url("/ok/x"), pr)
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := f.client(t, true).Do(req)
		if err != nil {
			t.Errorf("Do: %v", err)
		}
		done <- resp
	}()
	io.WriteString(pw, `{"note":"clean so far",`)
	resp := <-done
	if resp == nil {
		return
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d; want the upstream's 200 head", resp.StatusCode)
	}
	io.WriteString(pw, `"key":"`+testSecret+`"}`)
	pw.Close()
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if b := <-got; strings.Contains(b, "SECRETvalue") || !strings.HasSuffix(b, "(incomplete)") {
		t.Errorf("upstream read %q; want an incomplete body without the secret", b)
	}
	r := f.audit.WaitRecord(t, func(r audit.Record) bool { return r.Kind == audit.KindHTTPDone })
	if r.Reason != string(policy.ReasonSecretInRequest) || r.Secret != "github" || r.Decision != audit.DecisionDeny {
		t.Errorf("completion %+v; want a deny, secret_in_request, naming github", r)
	}
}

// TestLeakPatternsRuleKey: a bundle rule's "secret_patterns": "refuse"
// refuses a request carrying a default pattern; the same request under a
// rule without the key is recorded and passes.
func TestLeakPatternsRuleKey(t *testing.T) {
	f := startInspect(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }),
		inspectOptions{patterns: secretpat.MustDefaults(), rules: `{"rules": [
		{"id": "strict", "hosts": ["example.com"], "ports": [PORT], "methods": ["POST"], "paths": ["/strict/**"], "inspect": true, "secret_patterns": "refuse"},
		{"id": "lax", "hosts": ["example.com"], "ports": [PORT], "methods": ["POST"], "paths": ["/lax/**"], "inspect": true}
	]}`})
	c := f.client(t, false)
	for _, tc := range []struct {
		path   string
		status int
	}{{"/strict/x", http.StatusForbidden}, {"/lax/x", http.StatusOK}} {
		resp, err := c.Post(f.url(tc.path), "application/json", strings.NewReader(`{"key":"`+patternSamples["aws_access_key"]+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d %q; want %d", tc.path, resp.StatusCode, resp.Header.Get("X-Egressd-Decision"), tc.status)
		}
	}
	f.audit.WaitRecord(t, func(r audit.Record) bool {
		return r.Kind == audit.KindHTTPDone && r.Path == "/lax/x" && r.SecretPattern == "aws_access_key"
	})
}
