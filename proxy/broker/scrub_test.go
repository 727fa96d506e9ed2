package broker

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// naiveScrub is the whole-text witness: a stage over the raw bytes, then
// one over the percent-decoded view of what it left, then one over the
// percent- and JSON-decoded view of what that left.
func naiveScrub(pats []pattern, in []byte) []byte {
	return naiveStage(pats, naiveStage(pats, naiveStage(pats, in, false, false), true, false), true, true)
}

// naiveStage decodes the input into units (with the escapes asked for, by
// its own reading of them: a percent escape; \uXXXX below 0x80, \/ \" \\), then
// at each unit replaces the longest pattern matching the decoded bytes
// there (folded for a fold pattern), spanning its raw bytes.
func naiveStage(pats []pattern, in []byte, percent, json bool) []byte {
	type u struct {
		c    byte
		raw  int
		size int
	}
	var units []u
	for i := 0; i < len(in); {
		c, n := in[i], 1
		if percent && c == '%' && i+2 < len(in) {
			if v, err := strconv.ParseUint(string(in[i+1:i+3]), 16, 8); err == nil && !strings.ContainsAny(string(in[i+1:i+3]), "+-") {
				c, n = byte(v), 3
			}
		} else if json && c == '\\' && i+1 < len(in) && strings.IndexByte(`/"\`, in[i+1]) >= 0 {
			c, n = in[i+1], 2
		} else if json && c == '\\' && i+5 < len(in) && in[i+1] == 'u' {
			if v, err := strconv.ParseUint(string(in[i+2:i+6]), 16, 16); err == nil && v < 0x80 && !strings.ContainsAny(string(in[i+2:i+6]), "+-") {
				c, n = byte(v), 6
			}
		}
		units = append(units, u{c: c, raw: i, size: n})
		i += n
	}
	matches := func(p pattern, at int) bool {
		if at+len(p.text) > len(units) {
			return false
		}
		for k, want := range p.text {
			c := units[at+k].c
			if p.fold {
				c, want = byte(unicode.ToLower(rune(c))), byte(unicode.ToLower(rune(want)))
			}
			if c != want {
				return false
			}
		}
		return true
	}
	var out []byte
	for i := 0; i < len(units); {
		best := -1
		for k, p := range pats {
			if matches(p, i) && (best < 0 || len(p.text) > len(pats[best].text)) {
				best = k
			}
		}
		if best < 0 {
			out = append(out, in[units[i].raw:units[i].raw+units[i].size]...)
			i++
			continue
		}
		out = append(out, pats[best].repl...)
		i += len(pats[best].text)
	}
	return out
}

func testPatterns(secrets ...string) []pattern {
	var ps []pattern
	for i, s := range secrets {
		ps = append(ps, pattern{text: []byte(s), repl: redacted(string(rune('a' + i)))})
	}
	return ps
}

// chunkReader returns its data in reads of the given sizes, then the rest.
type chunkReader struct {
	data  []byte
	sizes []int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := len(r.data)
	if len(r.sizes) > 0 {
		n, r.sizes = min(r.sizes[0], n), r.sizes[1:]
	}
	n = copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

func scrubAll(t testing.TB, s *Scrubber, src io.Reader) []byte {
	t.Helper()
	out, err := io.ReadAll(s.Reader(src, nil))
	if err != nil {
		t.Fatalf("read scrubbed: %v", err)
	}
	return out
}

func TestScrubSecretSplitAtEveryOffset(t *testing.T) {
	const secret = "ghp_0123456789abcdefABCDEF"
	pats := testPatterns(secret)
	s := newScrubber(pats)
	body := []byte(`{"echo":"Bearer ` + secret + `","again":"` + secret + `"}`)
	want := naiveScrub(pats, body)
	if bytes.Contains(want, []byte(secret)) {
		t.Fatalf("witness keeps the secret: %s", want)
	}
	for cut := 0; cut <= len(body); cut++ {
		for _, second := range []int{1, 3, len(secret)} {
			got := scrubAll(t, s, &chunkReader{data: body, sizes: []int{cut, second}})
			if !bytes.Equal(got, want) {
				t.Fatalf("split at %d then %d: got %s; want %s", cut, second, got, want)
			}
		}
	}
	// One byte per read: every boundary at once.
	sizes := make([]int, len(body))
	for i := range sizes {
		sizes[i] = 1
	}
	if got := scrubAll(t, s, &chunkReader{data: body, sizes: sizes}); !bytes.Equal(got, want) {
		t.Errorf("byte by byte: got %s; want %s", got, want)
	}
}

func TestScrubLeftmostLongest(t *testing.T) {
	tests := []struct {
		name    string
		secrets []string
		in      string
	}{
		{"overlapping, longer first", []string{"abcdefgh12", "cdefgh12"}, "xxabcdefgh12yy"},
		{"longer one starts later", []string{"abcdefgh", "cdefgh1234567"}, "abcdefgh1234567"},
		{"prefix of a secret at the end", []string{"abcdefgh"}, "zzzabcdef"},
		{"back to back", []string{"abcdefgh"}, "abcdefghabcdefgh"},
		{"no secret", []string{"abcdefgh"}, "nothing to see here"},
		{"escaped in JSON", []string{"abc/defgh"}, `{"k":"abc\/defgh"}`},
		{"escaped in part, either hex case", []string{"abc/defgh"}, `k=abc%2fdef%67h&j=%61bc%2Fdefgh`},
		{"an escape cut by the stream", []string{"abcdefgh"}, `x=abcdefg%68%6`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pats := testPatterns(tt.secrets...)
			s := newScrubber(pats)
			want := naiveScrub(pats, []byte(tt.in))
			for cut := 0; cut <= len(tt.in); cut++ {
				got := scrubAll(t, s, &chunkReader{data: []byte(tt.in), sizes: []int{cut}})
				if !bytes.Equal(got, want) {
					t.Fatalf("split at %d: got %q; want %q", cut, got, want)
				}
			}
			if got := s.String(tt.in); got != string(want) {
				t.Errorf("String(%q) = %q; want %q", tt.in, got, want)
			}
		})
	}
}

// TestScrubStreamsEvents: an event that ends in a newline (which no secret
// holds) leaves at once, before the source sends anything more; only a
// tail that could begin a secret is held back.
func TestScrubStreamsEvents(t *testing.T) {
	const secret = "sk-live-0123456789abcdef"
	s := newScrubber(testPatterns(secret))
	pr, pw := io.Pipe()
	r := s.Reader(pr, nil)
	go func() {
		pw.Write([]byte("data: one\n\n"))
		pw.Write([]byte("data: sk-live-01"))
		pw.Write([]byte("23456789abcdef\n\n"))
		pw.Close()
	}()
	buf := make([]byte, 1024)
	n, err := r.Read(buf)
	if err != nil || string(buf[:n]) != "data: one\n\n" {
		t.Fatalf("first Read = %q, %v; want the first event whole", buf[:n], err)
	}
	// "data: " is decided; "sk-live-01" may begin the secret and waits.
	n, err = r.Read(buf)
	if err != nil || string(buf[:n]) != "data: " {
		t.Fatalf("second Read = %q, %v; want %q (the possible secret prefix held back)", buf[:n], err, "data: ")
	}
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if want := string(redacted("a")) + "\n\n"; string(rest) != want {
		t.Errorf("rest = %q; want %q", rest, want)
	}
}

// TestScrubErrorDropsHeldBytes: when the source fails, the bytes held
// because they may begin a secret are not sent.
func TestScrubErrorDropsHeldBytes(t *testing.T) {
	const secret = "sk-live-0123456789abcdef"
	s := newScrubber(testPatterns(secret))
	r := s.Reader(io.MultiReader(strings.NewReader("ok sk-live-0123"), iotestErr{}), nil)
	got, err := io.ReadAll(r)
	if err == nil {
		t.Fatalf("ReadAll error = nil; want the source's")
	}
	if string(got) != "ok " {
		t.Errorf("ReadAll = %q; want %q (the held prefix dropped)", got, "ok ")
	}
}

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

// FuzzScrub: for any text, secrets and read sizes, the stream equals the
// whole-text witness (non-secret bytes kept exactly) with every variant
// Load makes, and holds no secret; a secret put into the text in one of
// the encodings an upstream may apply (percent-escaping of any subset in
// either hex case, upper case, hex, base64 or base64url at any alignment
// inside a longer encoded text) does not survive in that form.
func FuzzScrub(f *testing.F) {
	f.Add([]byte("hello abcdefgh world"), "abcdefgh", "cdefgh12", uint8(3), uint8(5))
	f.Add([]byte("abcdefgabcdefgh"), "abcdefgh", "gabcdefg", uint8(1), uint8(1))
	f.Add([]byte("data: x\n\nabcdefg"), "abcdefgh", "bcdefghi", uint8(7), uint8(2))
	f.Add([]byte("k=%61bc%2Fdefgh&x"), "abc/defgh", "s3cr%41et!", uint8(9), uint8(4))
	f.Fuzz(func(t *testing.T, in []byte, s1, s2 string, c1, c2 uint8) {
		var secrets []string
		for _, s := range []string{s1, s2} {
			if checkValue(s) == nil && !strings.Contains(strings.ToLower(string(redacted("a"))), strings.ToLower(s)) &&
				!strings.Contains(strings.ToLower(string(redacted("b"))), strings.ToLower(s)) {
				secrets = append(secrets, s)
			}
		}
		if len(secrets) == 0 {
			return
		}
		// The secret, encoded one way, inside the text: set apart by
		// spaces, as a stray '%' or '\\' before it would make it read
		// otherwise (to the sandbox too).
		enc := encodeSecret(secrets[0], c1, c2)
		at := int(c1) % (len(in) + 1)
		mid := append(append([]byte{' '}, enc...), ' ')
		in = append(append(append([]byte(nil), in[:at]...), mid...), in[at:]...)
		var pats []pattern
		for i, sec := range secrets {
			for _, p := range variants(sec) {
				p.repl = redacted(string(rune('a' + i)))
				pats = append(pats, p)
			}
		}
		s := newScrubber(pats)
		want := naiveScrub(pats, in)
		var sizes []int
		for i := 0; i < 64; i++ {
			sizes = append(sizes, 1+int(c1)%17, 1+int(c2)%5)
		}
		got := scrubAll(t, s, &chunkReader{data: append([]byte(nil), in...), sizes: sizes})
		if !bytes.Equal(got, want) {
			t.Fatalf("stream = %q; witness %q", got, want)
		}
		for _, sec := range secrets {
			if bytes.Contains(got, []byte(sec)) {
				t.Fatalf("output %q holds secret %q", got, sec)
			}
		}
		if bytes.Contains(got, enc) {
			t.Fatalf("output %q holds the secret encoded as %q", got, enc)
		}
	})
}

// encodeSecret is v in one of the encodings the scrubber finds, chosen
// and varied by a and b; for base64 it is the part of a longer encoded
// text that v alone decides.
func encodeSecret(v string, a, b uint8) []byte {
	switch a % 5 {
	case 0: // percent-escape a subset ('%' always: else it does not decode), hex in either case
		var out []byte
		for i := 0; i < len(v); i++ {
			if (int(b)>>(i%8))&1 == 1 || v[i] == '%' {
				h := fmt.Sprintf("%%%02x", v[i])
				if i%2 == 0 {
					h = strings.ToUpper(h)
				}
				out = append(out, h...)
			} else {
				out = append(out, v[i])
			}
		}
		return out
	case 1:
		return []byte(strings.ToUpper(v))
	case 2:
		h := hex.EncodeToString([]byte(v))
		if b%2 == 1 {
			h = strings.ToUpper(h)
		}
		return []byte(h)
	default:
		align := int(b) % 3
		src := append(bytes.Repeat([]byte{b}, align), v...)
		src = append(src, b, b)
		e := base64.StdEncoding
		if a%5 == 4 {
			e = base64.URLEncoding
		}
		return []byte(e.EncodeToString(src))
	}
}

// TestScrubEncodings: a secret echoed in the encodings upstreams apply is
// scrubbed from a textual body, whatever part of it is escaped and in
// which case; the old variant list (as is, query-escaped, JSON-escaped)
// let each of these through.
func TestScrubEncodings(t *testing.T) {
	const v = "sk+live/Key=0123456789"
	s := testSecrets(t, map[string]string{"k": v})
	b64 := func(e *base64.Encoding, prefix string) string {
		return e.EncodeToString([]byte(prefix + v + `","n":1}`))
	}
	tests := []struct{ name, echo, form string }{
		{"Python quote()", "x=sk%2Blive/Key%3D0123456789", "sk%2Blive/Key%3D0123456789"},
		{"lower-case escapes", "x=sk%2blive%2fKey%3d0123456789", "sk%2blive%2fKey%3d0123456789"},
		{"every byte escaped", "x=" + escapeAll(v), escapeAll(v)},
		{"upper case", "X=SK+LIVE/KEY=0123456789", "SK+LIVE/KEY=0123456789"},
		{"after a stray percent", "100%" + v, v},
		{"hex", "id=" + hex.EncodeToString([]byte(v)), hex.EncodeToString([]byte(v))},
		{"upper-case hex", "id=" + strings.ToUpper(hex.EncodeToString([]byte(v))), strings.ToUpper(hex.EncodeToString([]byte(v)))},
		{"base64, aligned", "t=" + b64(base64.StdEncoding, `{"k":`), b64(base64.StdEncoding, `{"k":`)},
		{"base64, one byte off", "t=" + b64(base64.StdEncoding, `{"k":"`), b64(base64.StdEncoding, `{"k":"`)},
		{"base64, two bytes off", "t=" + b64(base64.StdEncoding, `{"ka":"`), b64(base64.StdEncoding, `{"ka":"`)},
		{"base64url", "t=" + b64(base64.URLEncoding, `{"k":"`), b64(base64.URLEncoding, `{"k":"`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := s.scrub.String(tt.echo)
			if strings.Contains(got, tt.form) || strings.Contains(got, v) || !strings.Contains(got, string(redacted("k"))) {
				t.Errorf("String(%q) = %q; want the secret's %s form replaced", tt.echo, got, tt.name)
			}
		})
	}
}

func escapeAll(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		fmt.Fprintf(&b, "%%%02X", v[i])
	}
	return b.String()
}
