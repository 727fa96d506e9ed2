package broker

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/secretpat"
)

const leakValue = "Zq8-leak-VALUE_77x"

// awsKey is a default pattern's shape, not a loaded secret.
const awsKey = "AKIAIOSFODNN7EXAMPLE"

func leakScan(t testing.TB, refuse bool) *RequestScan {
	return &RequestScan{
		Secrets:        testSecrets(t, map[string]string{"deploy-key": leakValue}),
		Patterns:       secretpat.MustDefaults(),
		RefusePatterns: refuse,
	}
}

// leakOf is the LeakError in err, checking it comes as the one typed
// refusal.
func leakOf(t testing.TB, err error) *LeakError {
	t.Helper()
	var de *policy.DenyError
	if err == nil {
		return nil
	}
	if !errors.As(err, &de) || de.Reason != policy.ReasonSecretInRequest {
		t.Fatalf("error %v is not a secret_in_request refusal", err)
	}
	var le *LeakError
	if !errors.As(err, &le) {
		t.Fatalf("error %v holds no LeakError", err)
	}
	if strings.Contains(err.Error(), leakValue) || strings.Contains(err.Error(), awsKey) {
		t.Fatalf("error %q quotes what it found", err)
	}
	return le
}

func TestFind(t *testing.T) {
	s := testSecrets(t, map[string]string{"deploy-key": leakValue})
	for _, v := range []string{
		leakValue,
		"x=" + url.QueryEscape(leakValue),
		escapeAll(leakValue),
		strings.ToUpper(leakValue),
		`{"k":"` + strings.ReplaceAll(leakValue, "-", `\u002d`) + `"}`,
		"Basic " + base64.StdEncoding.EncodeToString([]byte("user:"+leakValue)),
		"hex:" + strings.ToUpper(hexOf(leakValue)),
	} {
		if got := s.Find(v); got != "deploy-key" {
			t.Errorf("Find(%q) = %q; want deploy-key", v, got)
		}
	}
	if got := s.Find("Zq8-leak-VALUE_7"); got != "" {
		t.Errorf("Find(a part) = %q; want none", got)
	}
	var none *Secrets
	if got := none.Find(leakValue); got != "" {
		t.Errorf("nil.Find = %q", got)
	}
}

func hexOf(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		b.WriteString(strings.ToLower(string("0123456789abcdef"[v[i]>>4]) + string("0123456789abcdef"[v[i]&15])))
	}
	return b.String()
}

func TestRequestHead(t *testing.T) {
	for _, tc := range []struct {
		name, target, host string
		h                  http.Header
		refuse             bool
		secret, where      string
		patterns           []string
	}{
		{name: "clean", target: "http://a.test/x?q=1", host: "a.test"},
		{name: "secret in query", target: "http://a.test/x?k=" + leakValue, secret: "deploy-key", where: "target"},
		{name: "secret percent-encoded", target: "/x?k=" + escapeAll(leakValue), secret: "deploy-key", where: "target"},
		{name: "secret in path", target: "/" + leakValue + "/y", secret: "deploy-key", where: "target"},
		{name: "secret in host", target: "/", host: leakValue + ".evil.test", secret: "deploy-key", where: "host"},
		{name: "secret in header", target: "/", h: http.Header{"X-Note": {"a", "b " + leakValue}}, secret: "deploy-key", where: "header X-Note"},
		{name: "secret as header name", target: "/", h: http.Header{http.CanonicalHeaderKey(leakValue): {"1"}}, secret: "deploy-key"},
		{name: "proxy credential not looked at", target: "/", h: http.Header{"Proxy-Authorization": {"Basic " + leakValue}}},
		{name: "pattern recorded", target: "/?k=" + awsKey, patterns: []string{"aws_access_key"}},
		{name: "pattern percent-encoded", target: "/?k=%41" + awsKey[1:], patterns: []string{"aws_access_key"}},
		{name: "pattern in header recorded", target: "/", h: http.Header{"Authorization": {"Bearer " + awsKey}}, patterns: []string{"aws_access_key"}},
		{name: "pattern refused", target: "/", h: http.Header{"Authorization": {"Bearer " + awsKey}}, refuse: true, patterns: []string{"aws_access_key"}, where: "header Authorization"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := leakScan(t, tc.refuse)
			found, err := c.Head(tc.target, tc.host, tc.h)
			le := leakOf(t, err)
			switch {
			case tc.secret != "":
				if le == nil || le.Secret != tc.secret || tc.where != "" && le.Where != tc.where {
					t.Fatalf("Head = %v, %v; want secret %s in %s", found, err, tc.secret, tc.where)
				}
			case tc.refuse && tc.patterns != nil:
				if le == nil || strings.Join(le.Patterns, ",") != strings.Join(tc.patterns, ",") || le.Where != tc.where {
					t.Fatalf("Head = %v, %v; want refused %v in %s", found, err, tc.patterns, tc.where)
				}
			default:
				if err != nil || strings.Join(found, ",") != strings.Join(tc.patterns, ",") {
					t.Fatalf("Head = %v, %v; want recorded %v", found, err, tc.patterns)
				}
			}
		})
	}
}

// readBody reads a scanned body to its end, in the source's chunking.
func readBody(c *RequestScan, src io.Reader, enc string) ([]byte, *BodyScan, error) {
	b := c.Body(io.NopCloser(src), enc)
	out, err := io.ReadAll(b)
	b.Close()
	return out, b, err
}

func TestRequestBodySecretSplitAtEveryOffset(t *testing.T) {
	body := `{"note":"hello","key":"` + leakValue + `","tail":"}"}`
	c := leakScan(t, false)
	for cut := 1; cut < len(body); cut++ {
		out, _, err := readBody(c, &chunkReader{data: []byte(body), sizes: []int{cut, 1, 3}}, "")
		le := leakOf(t, err)
		if le == nil || le.Secret != "deploy-key" || le.Where != "body" {
			t.Fatalf("cut %d: err %v; want deploy-key in body", cut, err)
		}
		if bytes.Contains(out, []byte(leakValue[:len(leakValue)-1])) || !strings.HasPrefix(body, string(out)) {
			t.Fatalf("cut %d: passed %q", cut, out)
		}
	}
}

func TestRequestBodyClean(t *testing.T) {
	body := strings.Repeat(`{"a":"b"} `, 10000)
	out, b, err := readBody(leakScan(t, true), &chunkReader{data: []byte(body), sizes: []int{7, 4096, 1}}, "")
	if err != nil || string(out) != body {
		t.Fatalf("clean body: %d bytes, %v; want all %d", len(out), err, len(body))
	}
	if leak, pats := b.Findings(); leak != nil || pats != nil {
		t.Fatalf("Findings = %v, %v; want none", leak, pats)
	}
}

// TestRequestBodyHoldsLastByte: a compressed body, searched behind the
// stream, keeps its last byte until the search has seen the end, so a body
// refused at its end never reached the upstream whole.
func TestRequestBodyHoldsLastByte(t *testing.T) {
	z := gzipped(t, strings.Repeat("clean ", 100))
	pr, pw := io.Pipe()
	b := leakScan(t, false).Body(pr, "gzip")
	defer b.Close()
	go pw.Write(z)
	buf := make([]byte, len(z)+16)
	n, err := io.ReadAtLeast(b, buf, len(z)-1)
	if err != nil || n != len(z)-1 {
		t.Fatalf("Read = %d bytes, %v; want all but the last of %d", n, err, len(z))
	}
	pw.Close()
	rest, err := io.ReadAll(b)
	if err != nil || !bytes.Equal(append(buf[:n], rest...), z) {
		t.Fatalf("Read at the end = %q, %v; want the last byte", rest, err)
	}
}

func TestRequestBodyPatterns(t *testing.T) {
	body := "data=" + awsKey + "&more=1"
	out, b, err := readBody(leakScan(t, false), &chunkReader{data: []byte(body), sizes: []int{9}}, "")
	if _, pats := b.Findings(); err != nil || string(out) != body || strings.Join(pats, ",") != "aws_access_key" {
		t.Fatalf("record mode: %q, %v, %v", out, err, pats)
	}
	out, _, err = readBody(leakScan(t, true), &chunkReader{data: []byte(body), sizes: []int{9}}, "")
	if le := leakOf(t, err); le == nil || strings.Join(le.Patterns, ",") != "aws_access_key" || bytes.Contains(out, []byte("AKIA")) {
		t.Fatalf("refuse mode: %q, %v", out, err)
	}
}

func TestRequestBodyGzip(t *testing.T) {
	for _, tc := range []struct {
		name, text, enc string
		refuse          bool
		secret          string
		patterns        []string
	}{
		{name: "secret labelled", text: `{"k":"` + leakValue + `"}`, enc: "gzip", secret: "deploy-key"},
		{name: "secret unlabelled", text: "x " + leakValue, secret: "deploy-key"},
		{name: "pattern recorded", text: "k=" + awsKey, enc: "gzip", patterns: []string{"aws_access_key"}},
		{name: "pattern refused", text: "k=" + awsKey, enc: "gzip", refuse: true, patterns: []string{"aws_access_key"}},
		{name: "clean", text: strings.Repeat("clean text ", 5000), enc: "gzip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			z := gzipped(t, tc.text)
			out, b, err := readBody(leakScan(t, tc.refuse), &chunkReader{data: z, sizes: []int{5, 5}}, tc.enc)
			le := leakOf(t, err)
			_, pats := b.Findings()
			switch {
			case tc.secret != "":
				if le == nil || le.Secret != tc.secret || bytes.Equal(out, z) {
					t.Fatalf("got %d of %d bytes, %v; want refused", len(out), len(z), err)
				}
			case tc.refuse:
				if le == nil || bytes.Equal(out, z) {
					t.Fatalf("got %d of %d bytes, %v; want refused", len(out), len(z), err)
				}
			default:
				if err != nil || !bytes.Equal(out, z) || strings.Join(pats, ",") != strings.Join(tc.patterns, ",") {
					t.Fatalf("got %d of %d bytes, %v, patterns %v; want all, %v", len(out), len(z), err, pats, tc.patterns)
				}
			}
		})
	}
}

// FuzzRequestBody streams a body in the chunking the fuzzer picks and
// compares with whole-text witnesses: the naive scrubber for the loaded
// values (it rewrites the text iff a value is there) and the pattern set
// over the whole text. A refused body passes a strict prefix of itself
// with no secret and no refused pattern in it; a body that passes passes
// whole, with the whole text's patterns recorded.
func FuzzRequestBody(f *testing.F) {
	f.Add(`{"k":"`+leakValue+`"}`, uint8(3), uint8(9), false)
	f.Add("k="+awsKey+"&x="+escapeAll(leakValue), uint8(1), uint8(200), true)
	f.Add("plain text", uint8(0), uint8(0), false)
	f.Fuzz(func(t *testing.T, text string, a, b uint8, refuse bool) {
		c := leakScan(t, refuse)
		sizes := []int{int(a%31) + 1, int(b) + 1, 1}
		out, bs, err := readBody(c, &chunkReader{data: []byte(text), sizes: sizes}, "identity")
		le := leakOf(t, err)
		hasSecret := !bytes.Equal(naiveScrub(c.Secrets.patterns, []byte(text)), []byte(text))
		pats := c.Patterns.FindString(text)
		want := hasSecret || refuse && pats != 0
		if (le != nil) != want {
			t.Fatalf("%q: refused %v (%v); witnesses: secret %v, patterns %v", text, le != nil, err, hasSecret, c.Patterns.Names(pats))
		}
		if !strings.HasPrefix(text, string(out)) {
			t.Fatalf("%q: passed %q, not a prefix", text, out)
		}
		if le == nil {
			if string(out) != text {
				t.Fatalf("%q: passed %q", text, out)
			}
			if _, got := bs.Findings(); strings.Join(got, ",") != strings.Join(c.Patterns.Names(pats), ",") {
				t.Fatalf("%q: recorded %v; whole text has %v", text, got, c.Patterns.Names(pats))
			}
			return
		}
		if len(out) >= len(text) {
			t.Fatalf("%q: refused but passed whole", text)
		}
		if !bytes.Equal(naiveScrub(c.Secrets.patterns, out), out) {
			t.Fatalf("%q: passed %q, which holds a secret", text, out)
		}
		if refuse && c.Patterns.FindString(string(out)) != 0 {
			t.Fatalf("%q: passed %q, which holds a refused pattern", text, out)
		}
		if le.Secret != "" && !hasSecret {
			t.Fatalf("%q: named %q without a secret", text, le.Secret)
		}
	})
}

func BenchmarkRequestBody(b *testing.B) {
	body := bytes.Repeat([]byte(`{"key":"value","n":12345,"s":"task-1"} `), 1<<15)
	for _, tc := range []struct {
		name string
		c    *RequestScan
	}{
		{"secrets+patterns", leakScan(b, false)},
		{"secrets", &RequestScan{Secrets: testSecrets(b, map[string]string{"k": leakValue})}},
		{"patterns", &RequestScan{Patterns: secretpat.MustDefaults()}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				bs := tc.c.Body(io.NopCloser(bytes.NewReader(body)), "")
				if _, err := io.Copy(io.Discard, bs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
