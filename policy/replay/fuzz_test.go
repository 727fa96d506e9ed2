package replay

import (
	"bytes"
	"testing"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy"
)

// FuzzHTTPRoundTrip: a request the proxy decided, recorded as the proxy
// records it (the target fields of its facts), comes back from InputOf as
// a request whose facts are the ones decided: the same decision key, so
// the same decision from any bundle. The witness is policy.ParseHTTP, the
// parser the listener ran. Facts the record does not hold (userinfo, an
// obfuscated IP spelling) are left out: the oracle of the record's own
// bundle catches those.
func FuzzHTTPRoundTrip(f *testing.F) {
	for _, s := range [][2]string{
		{"GET", "http://docs.test/a/b?q=1"},
		{"POST", "http://docs.test:8080/a%2Fb/../c?x=%20"},
		{"GET", "http://[2001:db8::1]:8080/"},
		{"GET", "http://Docs.TEST./x;y"},
		{"GET", "http://xn--bcher-kva.example/%E2%82%AC"},
		{"GET", "http://10.0.0.1"},
		{"DELETE", "https://api.test/v1//x?"},
		{"GET", "http://docs.test/a\\b"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, method, target string) {
		want, err := policy.ParseHTTP(policy.KindHTTP, method, target, "")
		if err != nil || want.Userinfo || want.IPObfuscated {
			return
		}
		rec := audit.Record{Kind: audit.KindHTTP, Identity: "anonymous", Method: method, Scheme: want.Scheme,
			Host: want.Host, Port: want.Port, Path: want.Path, Query: want.Query, Decision: audit.DecisionDeny}
		c, err := InputOf(&rec)
		if err != nil {
			t.Fatalf("InputOf(%+v): %v", rec, err)
		}
		got, err := policy.ParseHTTP(c.Kind, c.Request.Method, c.Request.Target, c.Request.HostHeader)
		if err != nil {
			t.Fatalf("%s %q recorded as %+v re-parses as %q: %v", method, target, rec, c.Request.Target, err)
		}
		if k1, k2 := want.AppendKey(nil), got.AppendKey(nil); !bytes.Equal(k1, k2) || got.Query != want.Query {
			t.Fatalf("%s %q: facts %+v; re-built from the record (%q) %+v", method, target, want, c.Request.Target, got)
		}
	})
}
