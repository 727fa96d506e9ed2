package broker

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy"
)

const (
	ghValue = "ghp_REALgithubTOKEN0123456789"
	oaValue = "sk-REALopenaiKEY0123456789"
)

// testSecrets loads name → value from a fake environment.
func testSecrets(t testing.TB, kv map[string]string) *Secrets {
	t.Helper()
	var c Config
	env := map[string]string{}
	for name, v := range kv {
		c = append(c, Spec{Name: name, Env: "E_" + strings.ReplaceAll(name, "-", "_")})
		env["E_"+strings.ReplaceAll(name, "-", "_")] = v
	}
	s, err := Load(c, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return s
}

func TestPrepare(t *testing.T) {
	secrets := testSecrets(t, map[string]string{"github": ghValue, "openai": oaValue})
	bearer := []policy.Credential{{Secret: "github", Header: "Authorization", Format: "Bearer {}"}}
	hdrPH := []policy.Credential{{Secret: "openai", Placeholder: "header:X-Api-Key"}}
	queryPH := []policy.Credential{{Secret: "openai", Placeholder: "query:api_key"}}
	required := []policy.Credential{{Secret: "openai", Placeholder: "header:X-Api-Key", Require: true}}
	basic := []policy.Credential{{Secret: "github", Basic: &policy.BasicAuth{User: "x-access-token"}}}
	tests := []struct {
		name    string
		actions []policy.Credential
		header  http.Header
		path    string
		query   string
		reason  policy.Reason
		// wantHeader and wantQuery are the upstream request's, when allowed.
		wantHeader http.Header
		wantQuery  string
		applied    map[string]string
	}{
		{name: "no actions, no placeholder", header: http.Header{"Accept": {"*/*"}}, wantHeader: http.Header{"Accept": {"*/*"}}},
		{name: "template replaces the sandbox's own Authorization", actions: bearer,
			header:     http.Header{"Authorization": {"Bearer sandbox-own-token"}},
			wantHeader: http.Header{"Authorization": {"Bearer " + ghValue}},
			applied:    map[string]string{"github": "header:Authorization"}},
		{name: "placeholder in the header a template sets is replaced whole", actions: bearer,
			header:     http.Header{"Authorization": {"Bearer egressd:secret:github"}},
			wantHeader: http.Header{"Authorization": {"Bearer " + ghValue}},
			applied:    map[string]string{"github": "header:Authorization"}},
		{name: "placeholder of another secret in the header a template sets", actions: bearer,
			header: http.Header{"Authorization": {"Bearer egressd:secret:openai"}}, reason: policy.ReasonCredentialWrongDestination},
		{name: "basic", actions: basic,
			wantHeader: http.Header{"Authorization": {"Basic " + basicToken("x-access-token", ghValue)}},
			applied:    map[string]string{"github": "header:Authorization"}},
		{name: "header placeholder swapped", actions: hdrPH,
			header:     http.Header{"X-Api-Key": {"egressd:secret:openai"}},
			wantHeader: http.Header{"X-Api-Key": {oaValue}},
			applied:    map[string]string{"openai": "header:X-Api-Key"}},
		{name: "header placeholder inside a value", actions: hdrPH,
			header:     http.Header{"X-Api-Key": {"Key egressd:secret:openai"}},
			wantHeader: http.Header{"X-Api-Key": {"Key " + oaValue}},
			applied:    map[string]string{"openai": "header:X-Api-Key"}},
		{name: "query placeholder swapped, other params kept byte for byte", actions: queryPH,
			query: "a=%7e1&api_key=egressd%3Asecret%3Aopenai&&b", wantQuery: "a=%7e1&api_key=" + oaValue + "&&b",
			applied: map[string]string{"openai": "query:api_key"}},
		{name: "placeholder-only rule without a placeholder sends nothing", actions: hdrPH,
			header: http.Header{"X-Api-Key": {"own"}}, wantHeader: http.Header{"X-Api-Key": {"own"}}},
		{name: "placeholder for a secret the rule does not bind", actions: hdrPH,
			header: http.Header{"X-Api-Key": {"egressd:secret:github"}}, reason: policy.ReasonCredentialWrongDestination},
		{name: "placeholder on a rule without credentials",
			header: http.Header{"Authorization": {"Bearer egressd:secret:github"}}, reason: policy.ReasonCredentialWrongDestination},
		{name: "placeholder of an unknown secret",
			query: "k=egressd:secret:nosuch", reason: policy.ReasonCredentialWrongDestination},
		{name: "placeholder in another header than the action's", actions: hdrPH,
			header: http.Header{"Authorization": {"egressd:secret:openai"}}, reason: policy.ReasonCredentialUnresolved},
		{name: "placeholder in the path", actions: hdrPH, path: "/v1/egressd:secret:openai", reason: policy.ReasonCredentialUnresolved},
		{name: "encoded placeholder in the path", actions: hdrPH, path: "/v1/egressd%3Asecret%3Aopenai", reason: policy.ReasonCredentialUnresolved},
		{name: "placeholder in a header name", actions: hdrPH,
			header: http.Header{"Egressd:secret:openai": {"x"}}, reason: policy.ReasonCredentialUnresolved},
		{name: "upper-case marker is not swapped", actions: hdrPH,
			header: http.Header{"X-Api-Key": {"EGRESSD:SECRET:openai"}}, reason: policy.ReasonCredentialUnresolved},
		{name: "double-encoded marker in the query", actions: queryPH,
			query: "api_key=egressd%253Asecret%253Aopenai", reason: policy.ReasonCredentialUnresolved},
		{name: "placeholder in another query parameter", actions: queryPH,
			query: "key=egressd:secret:openai", reason: policy.ReasonCredentialUnresolved},
		{name: "require: literal key refused", actions: required,
			header: http.Header{"X-Api-Key": {"sk-pasted-real-key"}}, reason: policy.ReasonCredentialLiteral},
		{name: "require: placeholder accepted", actions: required,
			header:     http.Header{"X-Api-Key": {"egressd:secret:openai"}},
			wantHeader: http.Header{"X-Api-Key": {oaValue}},
			applied:    map[string]string{"openai": "header:X-Api-Key"}},
		{name: "require: undecodable value in the query place refused", actions: []policy.Credential{{Secret: "openai", Placeholder: "query:key", Require: true}},
			query: "k%65y=sk-pasted%zz", reason: policy.ReasonCredentialLiteral},
		{name: "wrong destination outranks literal", actions: required,
			header: http.Header{"X-Api-Key": {"literal"}, "X-Other": {"egressd:secret:github"}}, reason: policy.ReasonCredentialWrongDestination},
		{name: "secret not loaded", actions: []policy.Credential{{Secret: "gone", Header: "X-Key"}}, reason: policy.ReasonCredentialUnresolved},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.header
			if h == nil {
				h = http.Header{}
			}
			path := tt.path
			if path == "" {
				path = "/"
			}
			plan, reason := Prepare(tt.actions, secrets, h, path, tt.query)
			if reason != tt.reason {
				t.Fatalf("Prepare reason = %q; want %q", reason, tt.reason)
			}
			if reason != "" {
				return
			}
			q := tt.query
			if plan != nil {
				q = plan.Apply(h, tt.query)
				if len(plan.Applied) != len(tt.applied) {
					t.Errorf("Applied = %v; want %v", plan.Applied, tt.applied)
				}
				for k, v := range tt.applied {
					if plan.Applied[k] != v {
						t.Errorf("Applied[%s] = %q; want %q", k, plan.Applied[k], v)
					}
				}
			}
			if q != tt.wantQuery && tt.wantQuery != "" {
				t.Errorf("query = %q; want %q", q, tt.wantQuery)
			}
			for k, want := range tt.wantHeader {
				if got := h[k]; strings.Join(got, "|") != strings.Join(want, "|") {
					t.Errorf("header %s = %q; want %q", k, got, want)
				}
			}
		})
	}
}

func TestApplyFiltersAcceptEncoding(t *testing.T) {
	secrets := testSecrets(t, map[string]string{"github": ghValue})
	h := http.Header{"Accept-Encoding": {"br, gzip;q=0.9, zstd, deflate"}}
	plan, reason := Prepare([]policy.Credential{{Secret: "github", Header: "Authorization"}}, secrets, h, "/", "")
	if reason != "" {
		t.Fatal(reason)
	}
	plan.Apply(h, "")
	if got := h.Get("Accept-Encoding"); got != "gzip;q=0.9, deflate" {
		t.Errorf("Accept-Encoding = %q; want %q (only codings the scrubber reads)", got, "gzip;q=0.9, deflate")
	}
}

// FuzzPrepare: whatever the sandbox sends, an allowed request leaves with
// no placeholder anywhere, and a secret value appears only where an
// action of its rule put it.
func FuzzPrepare(f *testing.F) {
	f.Add("egressd:secret:openai", "api_key=egressd%3Asecret%3Aopenai", "/p", "x")
	f.Add("Bearer egressd:secret:github", "k=EGRESSD%3ASECRET%3Agithub", "/egressd:secret:x", "egressd%253Asecret")
	f.Add("egressd:secret:openaiegressd:secret:openai", "api_key=egressd:secret:openai&api_key=x", "/", "")
	secrets := testSecrets(f, map[string]string{"github": ghValue, "openai": oaValue})
	actions := []policy.Credential{
		{Secret: "openai", Placeholder: "header:X-Api-Key"},
		{Secret: "openai", Placeholder: "query:api_key"},
		{Secret: "github", Header: "Authorization", Format: "token {}"},
	}
	f.Fuzz(func(t *testing.T, hv, query, path, other string) {
		if all := hv + query + path + other; strings.Contains(all, ghValue) || strings.Contains(all, oaValue) {
			return // the sandbox's own bytes, not egressd's doing
		}
		h := http.Header{"X-Api-Key": {hv}, "X-Other": {other}, "Authorization": {other}}
		plan, reason := Prepare(actions, secrets, h, path, query)
		if reason != "" {
			return
		}
		q := plan.Apply(h, query)
		if h.Get("Authorization") != "token "+ghValue {
			t.Fatalf("Authorization = %q; want the template's", h.Get("Authorization"))
		}
		for _, s := range append([]string{q, path}, h.Get("X-Other"), h.Get("X-Api-Key"), h.Get("Authorization")) {
			if i := markerAt(s, 0); i >= 0 {
				t.Fatalf("allowed request still carries a placeholder in %q", s)
			}
		}
		if strings.Contains(q+path+h.Get("X-Other"), ghValue) || strings.Contains(path+h.Get("X-Other"), oaValue) {
			t.Fatalf("a secret left through a place no action names: query %q path %q other %q", q, path, h.Get("X-Other"))
		}
	})
}

// BenchmarkPrepareNoCredentials is the cost every allowed request pays:
// a scan of a typical request for placeholders when its rule binds none.
func BenchmarkPrepareNoCredentials(b *testing.B) {
	h := http.Header{
		"Accept":          {"application/vnd.github+json"},
		"User-Agent":      {"python-requests/2.32"},
		"Accept-Encoding": {"gzip, deflate"},
		"Authorization":   {"Bearer sandbox-own-token-0123456789"},
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, reason := Prepare(nil, nil, h, "/repos/egressd/egressd/pulls", "state=open&per_page=100"); reason != "" {
			b.Fatal(reason)
		}
	}
}

// BenchmarkScrubStream is the scrubber's cost per byte of a textual body.
func BenchmarkScrubStream(b *testing.B) {
	s := testSecrets(b, map[string]string{"github": ghValue, "openai": oaValue}).scrub
	body := []byte(strings.Repeat(`{"id":12345,"name":"egressd","full_name":"egressd/egressd","private":false},`, 1000))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := io.Copy(io.Discard, s.Reader(bytes.NewReader(body), nil)); err != nil {
			b.Fatal(err)
		}
	}
}
