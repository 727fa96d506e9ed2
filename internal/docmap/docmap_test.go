package docmap

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var testPkgs = map[string]string{
	"proxy":   "github.com/egressd/egressd/proxy",
	"policy":  "github.com/egressd/egressd/policy",
	"goproxy": "github.com/elazarl/goproxy",
}

// TestCheck holds maps written against proxy's code: a true one passes,
// and each kind of untrue one is reported.
func TestCheck(t *testing.T) {
	m, err := Load(testPkgs)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		row  string
		want string // in an error reported; "" for none
	}{
		{name: "true", row: "proxy.Server.ServeHTTP → goproxy.ProxyHttpServer.ServeHTTP → proxy.Server.onRequest → proxy.authenticate → policy.PreDial.DecideHTTP (policy.ParseHTTP) → proxy.httpFlow.RoundTrip → proxy.responseBody.Close → proxy.httpFlow.complete"},
		{name: "back up the stack", row: "proxy.Server.connectHijack → proxy.authenticate → policy.PreDial.DecideConnect → proxy.Server.auditDecision"},
		{name: "out of order", row: "proxy.Server.onRequest → policy.PreDial.DecideHTTP → proxy.authenticate",
			want: "proxy.authenticate is not reached from policy.PreDial.DecideHTTP"},
		{name: "not called", row: "proxy.authenticate → policy.PreDial.DecideHTTP",
			want: "policy.PreDial.DecideHTTP is not reached from proxy.authenticate"},
		{name: "skips a named step", row: "proxy.direction.run → proxy.tunnel.firstFlight → proxy.tunnel.checkFirstFlight",
			want: "proxy.tunnel.firstFlight is not reached from proxy.direction.run"},
		{name: "call in parentheses not made", row: "proxy.Server.onRequest (policy.ParseConnect)",
			want: "proxy.Server.onRequest does not reach policy.ParseConnect"},
		{name: "library never handed it", row: "goproxy.ProxyHttpServer.ServeHTTP → proxy.Server.revalidate",
			want: "proxy.Server.revalidate is not reached"},
		{name: "undeclared", row: "proxy.Server.ServeHTTP → proxy.Server.serveCONNECT",
			want: "the doc names proxy.Server.serveCONNECT, which is not declared"},
		{name: "two steps in one", row: "proxy.Server.ServeHTTP → proxy.Server.serveConnect, proxy.Server.connectHijack",
			want: "names 2 functions outside parentheses"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "doc.go")
			src := "// Package x has a map.\n//\n//\tPATH " + tt.row + "\npackage x\n"
			if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
				t.Fatal(err)
			}
			var errs []error
			doc, err := ReadDoc(path, []string{"PATH"}, []string{"proxy", "policy", "goproxy"})
			if err != nil {
				errs = []error{err}
			} else {
				errs = m.Check(doc)
			}
			switch {
			case tt.want == "" && len(errs) > 0:
				t.Errorf("Check(%q) = %v; want no error", tt.row, errs)
			case tt.want != "" && !slices.ContainsFunc(errs, func(err error) bool { return strings.Contains(err.Error(), tt.want) }):
				t.Errorf("Check(%q) = %v; want an error containing %q", tt.row, errs, tt.want)
			}
		})
	}
}
