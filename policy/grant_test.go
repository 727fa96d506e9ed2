package policy

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
	"go.uber.org/zap"
)

// testGrant is a valid request-line grant for anonymous.
func testGrant(id, method, host string, port int, path string) Grant {
	return Grant{ID: id, Identity: "anonymous", Method: method, Host: host, Port: port, Path: path,
		Inspect: port == 443, Expires: time.Now().Add(time.Hour), GrantedBy: "approver"}
}

func TestGrantValidate(t *testing.T) {
	ok := testGrant("g1", "GET", "granted.test", 443, "/x")
	tunnel := Grant{ID: "g2", Identity: "anonymous", Host: "granted.test", Port: 443, Tunnel: true, Expires: ok.Expires}
	tests := []struct {
		name string
		edit func(g *Grant)
		base Grant
		want string // "" valid, else a part of the error
	}{
		{"request line", func(*Grant) {}, ok, ""},
		{"tunnel", func(*Grant) {}, tunnel, ""},
		{"ip host", func(g *Grant) { g.Host = "192.0.2.7" }, ok, ""},
		{"upper-case id", func(g *Grant) { g.ID = "G1" }, ok, "id must be"},
		{"no identity", func(g *Grant) { g.Identity = "" }, ok, "identity is required"},
		{"wildcard host", func(g *Grant) { g.Host = "*.granted.test" }, ok, "not a wildcard or CIDR"},
		{"cidr host", func(g *Grant) { g.Host = "192.0.2.0/24" }, ok, "not a wildcard or CIDR"},
		{"upper-case host", func(g *Grant) { g.Host = "Granted.test" }, ok, "lower-case"},
		{"port 0", func(g *Grant) { g.Port = 0 }, ok, "port must be"},
		{"lower-case method", func(g *Grant) { g.Method = "get" }, ok, "upper-case HTTP method"},
		{"no method", func(g *Grant) { g.Method = "" }, ok, "upper-case HTTP method"},
		{"relative path", func(g *Grant) { g.Path = "x" }, ok, "starting with"},
		{"control in path", func(g *Grant) { g.Path = "/a\nb" }, ok, "control characters"},
		{"tunnel with path", func(g *Grant) { g.Path = "/x" }, tunnel, "host-wide"},
		{"no expiry", func(g *Grant) { g.Expires = time.Time{} }, ok, "expires is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := tt.base
			tt.edit(&g)
			err := g.Validate()
			if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate() = %v; want %q", err, tt.want)
			}
		})
	}
}

// A grant decides exactly its identity, method, host, port and path (glob
// characters in it literal), with its rule id; a request-line grant opens
// no tunnel, a tunnel grant does; and the default bundle's own tests
// (default_test.rego, which rebuilds the rule index in Rego) pass with
// grants in it.
func TestGrantDecides(t *testing.T) {
	ctx := context.Background()
	base := newTestEngine(t, Config{})
	e, err := base.WithGrants(ctx, []Grant{
		testGrant("g1", "GET", "granted.test", 80, "/files/a*b"),
		testGrant("g2", "POST", "granted.test", 443, "/api/{x}"),
		{ID: "g3", Identity: "anonymous", Host: "tunnel.test", Port: 443, Tunnel: true, Expires: time.Now().Add(time.Hour)},
	})
	if err != nil {
		t.Fatalf("WithGrants: %v", err)
	}
	if e.Digest() != base.Digest() {
		t.Errorf("Digest() = %s; want the bundle's %s: grants are not the bundle", e.Digest(), base.Digest())
	}
	anon, other := Identity{ID: "anonymous"}, Identity{ID: "sandbox-2"}
	tests := []struct {
		name   string
		id     Identity
		method string
		url    string
		rule   string // "" denied
	}{
		{"exact", anon, "GET", "http://granted.test/files/a*b", "grant:g1"},
		{"the query is no part of a grant", anon, "GET", "http://granted.test/files/a*b?q=1", "grant:g1"},
		{"star is literal", anon, "GET", "http://granted.test/files/aXb", ""},
		{"other path", anon, "GET", "http://granted.test/files/a", ""},
		{"other method", anon, "HEAD", "http://granted.test/files/a*b", ""},
		{"other port", anon, "GET", "http://granted.test:8080/files/a*b", ""},
		{"other identity", other, "GET", "http://granted.test/files/a*b", ""},
		{"braces literal", anon, "POST", "https://granted.test/api/{x}", "grant:g2"},
		{"braces not a choice", anon, "POST", "https://granted.test/api/x", ""},
		{"tunnel grant is host-wide", anon, "DELETE", "https://tunnel.test/any/thing", "grant:g3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := e.Decide(ctx, Input{Identity: tt.id, Facts: mustParse(t, tt.method, tt.url)})
			if d.Allow != (tt.rule != "") || d.Rule != tt.rule {
				t.Errorf("Decide(%s %s as %s) = %+v; want rule %q", tt.method, tt.url, tt.id.ID, d, tt.rule)
			}
		})
	}
	connectTests := []struct {
		authority string
		allow     bool
		inspect   bool
	}{
		{"granted.test:80", false, false},  // a path grant opens no tunnel
		{"granted.test:443", true, true},   // an https path grant is inspected
		{"tunnel.test:443", true, false},   // the tunnel grant opens one
		{"tunnel.test:8443", false, false}, // on its port only
	}
	for _, tt := range connectTests {
		f, err := ParseConnect(tt.authority)
		if err != nil {
			t.Fatal(err)
		}
		d := e.Decide(ctx, Input{Identity: anon, Facts: f})
		if d.Allow != tt.allow || d.Inspect != tt.inspect {
			t.Errorf("Decide(CONNECT %s) = %+v; want allow %v inspect %v", tt.authority, d, tt.allow, tt.inspect)
		}
	}
	if g, ok := e.GrantOf("grant:g2"); !ok || g.Path != "/api/{x}" {
		t.Errorf("GrantOf(grant:g2) = %+v, %v; want g2", g, ok)
	}
	if _, ok := base.GrantOf("grant:g2"); ok {
		t.Errorf("the engine WithGrants started from holds g2 too; want it unchanged")
	}
}

// A grant the bundle's own Rego tests contradict is refused, as a rule
// would be: the default bundle asserts example.com:443/ denied for
// anonymous.
func TestGrantRefusedByBundleTests(t *testing.T) {
	e := newTestEngine(t, Config{})
	_, err := e.WithGrants(context.Background(), []Grant{testGrant("g1", "GET", "example.com", 443, "/")})
	if err == nil || !strings.Contains(err.Error(), "test_default_http") {
		t.Fatalf("WithGrants(a grant default_test.rego denies) = %v; want the failing test named", err)
	}
}

// A bundle rule may not take a grant's rule id.
func TestGrantPrefixReserved(t *testing.T) {
	dir := writeBundle(t, "", map[string]string{"http.rego": miniHTTP,
		"data.json": `{"rules": [{"id": "grant:mine", "hosts": ["ok.test"], "ports": [443]}]}`})
	_, err := New(context.Background(), Config{Dir: dir}, zap.NewNop())
	if err == nil || !strings.Contains(err.Error(), "reserved for grants") {
		t.Fatalf("New(bundle with rule grant:mine) = %v; want the prefix reserved", err)
	}
}

func TestGrantFor(t *testing.T) {
	tests := []struct {
		method, url string
		want        Grant
		err         string
	}{
		{"GET", "https://h.test/a%20b?x=1", Grant{Identity: "i", Method: "GET", Host: "h.test", Port: 443, Path: "/a b", Inspect: true}, ""},
		{"PUT", "http://H.test:8080/x", Grant{Identity: "i", Method: "PUT", Host: "h.test", Port: 8080, Path: "/x"}, ""},
		{"GET", "http://h.test/a/../b", Grant{}, "dot_segment"},
		{"GET", "http://h.test/a%2Fb", Grant{}, "encoded_separator"},
		{"GET", "http://2130706433/", Grant{}, "ip_obfuscated"},
		{"GET", "http://u:p@h.test/", Grant{}, "userinfo"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			g, err := GrantFor("i", tt.method, mustParse(t, tt.method, tt.url))
			if (tt.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.err)) || g != tt.want {
				t.Errorf("GrantFor(%s %s) = %+v, %v; want %+v, %q", tt.method, tt.url, g, err, tt.want, tt.err)
			}
		})
	}
}

// A grant past its expiry stops allowing even while it is still in the
// bundle (the manager's timer late, or its rebuild failed), on a cached
// decision too.
func TestExpiredGrantStopsAllowing(t *testing.T) {
	g := testGrant("old", "GET", "granted.test", 80, "/x")
	g.Expires = time.Now().Add(-time.Second)
	e, err := newTestEngine(t, Config{}).WithGrants(context.Background(), []Grant{g})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		d := e.Decide(context.Background(), Input{Identity: Identity{ID: "anonymous"}, Facts: mustParse(t, "GET", "http://granted.test/x")})
		if d.Allow || d.Reason != ReasonGrantExpired || d.Rule != "grant:old" {
			t.Errorf("Decide #%d under an expired grant = %+v; want deny %s by grant:old", i+1, d, ReasonGrantExpired)
		}
	}
}

// FuzzGrantPathIsLiteral: a grant's path, compiled as the rule index
// compiles rule paths, matches that path and no other (the oracle is
// string equality): glob characters in a request path never widen a
// grant.
func FuzzGrantPathIsLiteral(f *testing.F) {
	for _, s := range [][2]string{{"/a*b", "/aXb"}, {"/x/**", "/x/y"}, {"/{a,b}", "/a"}, {"/[ab]", "/a"}, {"/a\\", "/a"}, {"/?", "/x"}, {"/p/**", "/p"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, p, q string) {
		if !strings.HasPrefix(p, "/") || !utf8.ValidString(p) || !utf8.ValidString(q) {
			return
		}
		g := Grant{Path: p, Method: "GET", Host: "h.test", Port: 80}
		x := newViewIndex([]*ast.Term{nil}, [][]string{{g.rule()["paths"].([]any)[0].(string)}}, []bool{false})
		if !x.pathMatches(0, p) {
			t.Fatalf("the grant for %q does not match it", p)
		}
		if q != p && x.pathMatches(0, q) {
			t.Fatalf("the grant for %q matches %q", p, q)
		}
	})
}
