package policy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
)

// TestBundleCannotReachNetwork loads bundles whose decision module or Rego
// test calls an I/O built-in against a local server: start, reload,
// `policy check` and `policy test` each refuse them naming file:line, and
// the server, the witness, sees no request.
func TestBundleCannotReachNetwork(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, `{"type": "object"}`)
	}))
	t.Cleanup(srv.Close)
	testOf := func(body string) string {
		return "package egress.http_test\n\n" + body + "\n"
	}
	tests := []struct {
		name  string
		files map[string]string
		want  string // file:line and the built-in
	}{
		{"decision calls http.send", map[string]string{"http.rego": miniHTTP, "fetch.rego": fmt.Sprintf(`package egress.fetch

fetched := http.send({"method": "GET", "url": %q})
`, srv.URL)}, "fetch.rego:3: rego_type_error: undefined function http.send"},
		{"test calls http.send", map[string]string{"http.rego": miniHTTP, "http_test.rego": testOf(fmt.Sprintf(
			`test_fetch if http.send({"method": "GET", "url": %q}).status_code == 200`, srv.URL))},
			"http_test.rego:3: rego_type_error: undefined function http.send"},
		{"test resolves a name", map[string]string{"http.rego": miniHTTP, "http_test.rego": testOf(
			`test_lookup if count(net.lookup_ip_addr("localhost")) > 0`)},
			"http_test.rego:3: rego_type_error: undefined function net.lookup_ip_addr"},
		{"test reads the runtime", map[string]string{"http.rego": miniHTTP, "http_test.rego": testOf(
			`test_env if opa.runtime().env`)},
			"http_test.rego:3: rego_type_error: undefined function opa.runtime"},
		{"test loads a remote schema", map[string]string{"http.rego": miniHTTP, "http_test.rego": testOf(fmt.Sprintf(
			`test_schema if json.match_schema({}, {"$ref": %q})[0]`, srv.URL+"/schema.json"))},
			"http_test.rego:3: rego_type_error: undefined function json.match_schema"},
		{"test loads a local file as schema", map[string]string{"http.rego": miniHTTP, "http_test.rego": testOf(
			`test_schema if json.verify_schema({"$ref": "file:///etc/hostname"})[0]`)},
			"http_test.rego:3: rego_type_error: undefined function json.verify_schema"},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := hits.Load()
			dir := writeBundle(t, "", tt.files)
			loads := map[string]func() error{
				"start": func() error {
					_, err := New(ctx, Config{Dir: dir}, zap.NewNop())
					return err
				},
				"policy check": func() error { _, err := Check(ctx, os.DirFS(dir)); return err },
				"policy test":  func() error { _, err := Test(ctx, os.DirFS(dir)); return err },
				// A reload builds a new Engine from the changed directory.
				"reload": func() error {
					good := writeBundle(t, "", map[string]string{"http.rego": miniHTTP})
					if _, err := New(ctx, Config{Dir: good}, zap.NewNop()); err != nil {
						return fmt.Errorf("good bundle: %w", err)
					}
					writeBundle(t, good, tt.files)
					_, err := New(ctx, Config{Dir: good}, zap.NewNop())
					return err
				},
			}
			for name, load := range loads {
				if err := load(); err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("%s: error = %v; want one containing %q", name, err, tt.want)
				}
			}
			if n := hits.Load() - before; n != 0 {
				t.Errorf("the local server saw %d request(s) from the bundle; want 0", n)
			}
		})
	}
}
