package bodyfacts

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func gz(t testing.TB, parts ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, p := range parts { // one member each
		w := gzip.NewWriter(&b)
		if _, err := w.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

func TestRead(t *testing.T) {
	body := `{"a":1}`
	zbody := gz(t, body)
	bomb := gz(t, strings.Repeat("0", 1<<20))
	tests := []struct {
		name     string
		in       []byte
		encoding string
		max      int64
		want     string
		err      error
	}{
		{"identity", []byte(body), "", 100, body, nil},
		{"identity named", []byte(body), "Identity", 100, body, nil},
		{"empty", nil, "", 100, "", nil},
		{"exactly max", []byte(body), "", int64(len(body)), body, nil},
		{"max plus one", []byte(body), "", int64(len(body) - 1), "", ErrTooLarge},
		{"negative max", []byte("x"), "", -1, "", ErrTooLarge},
		{"negative max empty", nil, "", -1, "", nil},
		{"gzip", zbody, "gzip", 100, body, nil},
		{"x-gzip any case", zbody, " X-GZIP ", 100, body, nil},
		{"gzip members", gz(t, `{"a":`, `1}`), "gzip", 100, body, nil},
		{"gzip compressed over max", zbody, "gzip", int64(len(zbody) - 1), "", ErrTooLarge},
		{"gzip decoded over max", gz(t, strings.Repeat("a", 200)), "gzip", 100, "", ErrTooLarge},
		{"gzip decoded exactly max", gz(t, strings.Repeat("a", 100)), "gzip", 100, strings.Repeat("a", 100), nil},
		{"gzip bomb", bomb, "gzip", 64 << 10, "", ErrTooLarge},
		{"gzip empty body", nil, "gzip", 100, "", ErrUnparseable},
		{"gzip not gzip", []byte(body), "gzip", 100, "", ErrUnparseable},
		{"gzip truncated", zbody[:len(zbody)-4], "gzip", 100, "", ErrUnparseable},
		{"gzip bad crc", flipByte(zbody, len(zbody)-6), "gzip", 100, "", ErrUnparseable},
		{"gzip trailing garbage", append(append([]byte(nil), zbody...), "xyz"...), "gzip", 100, "", ErrUnparseable},
		{"gzip trailing zero byte", append(append([]byte(nil), zbody...), 0), "gzip", 100, "", ErrUnparseable},
		{"deflate", zbody, "deflate", 100, "", ErrUnparseable},
		{"br", zbody, "br", 100, "", ErrUnparseable},
		{"zstd", zbody, "zstd", 100, "", ErrUnparseable},
		{"two codings", gz(t, string(zbody)), "gzip, gzip", 100, "", ErrUnparseable},
		{"gzip then identity", zbody, "gzip, identity", 100, "", ErrUnparseable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Read(iotest.HalfReader(bytes.NewReader(tt.in)), tt.encoding, tt.max)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("Read(%q, %d) = %q, %v; want %v", tt.encoding, tt.max, got, err, tt.err)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("Read(%q, %d) = %q, %v; want %q", tt.encoding, tt.max, got, err, tt.want)
			}
		})
	}
}

func flipByte(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 0xff
	return c
}

// TestReadStopsAtBound pins that Read reads no more than max+1 bytes of a
// body that never ends.
func TestReadStopsAtBound(t *testing.T) {
	r := &countReader{}
	if _, err := Read(r, "", 1000); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Read(endless) error %v; want ErrTooLarge", err)
	}
	if r.n != 1001 {
		t.Fatalf("Read(endless, 1000) read %d bytes; want 1001", r.n)
	}
}

type countReader struct{ n int }

func (r *countReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	r.n += len(p)
	return len(p), nil
}

// TestReadError pins that the reader's own error is neither sentinel.
func TestReadError(t *testing.T) {
	boom := errors.New("boom")
	_, err := Read(iotest.ErrReader(boom), "", 10)
	if !errors.Is(err, boom) || errors.Is(err, ErrTooLarge) || errors.Is(err, ErrUnparseable) {
		t.Fatalf("Read(failing reader) error %v; want boom only", err)
	}
}

// FuzzRead checks Read against compress/gzip reading the whole body
// without a bound: equal bytes within the bound, ErrTooLarge past it
// (compressed or decoded), ErrUnparseable where gzip fails within it.
func FuzzRead(f *testing.F) {
	f.Add(gz(f, `{"a":1}`), uint16(100), true)
	f.Add(gz(f, strings.Repeat("ab", 500)), uint16(300), true)
	f.Add(gz(f, "x", "y"), uint16(30), true)
	f.Add(append(gz(f, "x"), 0x1f, 0x8b), uint16(30), true)
	f.Add([]byte("plain"), uint16(3), false)
	f.Fuzz(func(t *testing.T, in []byte, max uint16, isGzip bool) {
		enc := ""
		if isGzip {
			enc = "gzip"
		}
		got, err := Read(bytes.NewReader(in), enc, int64(max))
		var want []byte
		var werr error
		switch {
		case len(in) > int(max):
			werr = ErrTooLarge
		case !isGzip:
			want = in
		default:
			zr, zerr := gzip.NewReader(bytes.NewReader(in))
			if zerr == nil {
				want, zerr = io.ReadAll(zr)
			}
			switch {
			case len(want) > int(max):
				werr = ErrTooLarge
			case zerr != nil:
				werr = ErrUnparseable
			}
		}
		if werr != nil {
			if !errors.Is(err, werr) {
				t.Fatalf("Read(%q, gzip %v, %d) = %q, %v; want %v", in, isGzip, max, got, err, werr)
			}
			return
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("Read(%q, gzip %v, %d) = %q, %v; want %q", in, isGzip, max, got, err, want)
		}
	})
}
