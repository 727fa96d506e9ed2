package broker

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// naiveScrub is the witness the streaming scrubber must equal: at each
// position the longest pattern that starts there is replaced, else the
// byte is kept. It sees the whole text at once.
func naiveScrub(pats []pattern, in []byte) []byte {
	var out []byte
	for i := 0; i < len(in); {
		best := -1
		for k, p := range pats {
			if bytes.HasPrefix(in[i:], p.text) && (best < 0 || len(p.text) > len(pats[best].text)) {
				best = k
			}
		}
		if best < 0 {
			out = append(out, in[i])
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
		{"escaped variant", []string{"abc/defgh", `abc\/defgh`}, `{"k":"abc\/defgh"}`},
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
// whole-text witness (non-secret bytes kept exactly), and holds no secret.
func FuzzScrub(f *testing.F) {
	f.Add([]byte("hello abcdefgh world"), "abcdefgh", "cdefgh12", uint8(3), uint8(5))
	f.Add([]byte("abcdefgabcdefgh"), "abcdefgh", "gabcdefg", uint8(1), uint8(1))
	f.Add([]byte("data: x\n\nabcdefg"), "abcdefgh", "bcdefghi", uint8(7), uint8(2))
	f.Fuzz(func(t *testing.T, in []byte, s1, s2 string, c1, c2 uint8) {
		var secrets []string
		for _, s := range []string{s1, s2} {
			if checkValue(s) == nil && !bytes.Contains(redacted("a"), []byte(s)) && !bytes.Contains(redacted("b"), []byte(s)) {
				secrets = append(secrets, s)
			}
		}
		if len(secrets) == 0 {
			return
		}
		pats := testPatterns(secrets...)
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
	})
}
