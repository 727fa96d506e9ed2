package proxy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"slices"
	"testing"
	"time"
)

// clientHello captures the first flight a Go TLS client sends for sni.
func clientHello(t testing.TB, sni string) []byte {
	t.Helper()
	c, s := net.Pipe()
	defer s.Close()
	go func() {
		tc := tls.Client(c, &tls.Config{ServerName: sni, InsecureSkipVerify: sni == ""})
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		tc.Handshake()
		c.Close()
	}()
	buf := make([]byte, tlsRecordHeaderLen+tlsMaxRecordLen)
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := s.Read(buf[:tlsRecordHeaderLen])
	if err != nil || n != tlsRecordHeaderLen {
		t.Fatalf("read record header: %d, %v", n, err)
	}
	l, err := recordLen(buf[:tlsRecordHeaderLen])
	if err != nil {
		t.Fatalf("recordLen: %v", err)
	}
	if _, err := readFull(s, buf[tlsRecordHeaderLen:tlsRecordHeaderLen+l]); err != nil {
		t.Fatalf("read record: %v", err)
	}
	return buf[:tlsRecordHeaderLen+l]
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := c.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func TestParseClientHelloSNI(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		want    string
		wantErr bool
	}{
		{name: "go client with sni", in: clientHello(t, "example.com"), want: "example.com"},
		{name: "go client without sni", in: clientHello(t, ""), want: ""},
		{name: "plain http", in: []byte("GET / HTTP/1.1\r\n\r\n"), wantErr: true},
		{name: "truncated record", in: clientHello(t, "example.com")[:40], wantErr: true},
		{name: "empty", in: nil, wantErr: true},
		{name: "split over three records", in: splitRecords(t, clientHello(t, "example.com"), 2, 60), want: "example.com"},
		{name: "split, last record missing", in: splitRecords(t, clientHello(t, "example.com"), 2, 60)[:70], wantErr: true},
		{name: "split, then another content type", in: func() []byte {
			b := splitRecords(t, clientHello(t, "example.com"), 60)
			b[65] = 23 // the second record claims to be application data
			return b
		}(), wantErr: true},
		{name: "handshake longer than the flight allows", in: []byte{22, 3, 1, 0, 4, 1, 0xff, 0xff, 0xff}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseClientHelloSNI(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("parseClientHelloSNI() = %q, %v; want %q, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// splitRecords re-frames the one-record flight rec as several records, the
// first payload cut after each of the given sizes.
func splitRecords(t testing.TB, rec []byte, sizes ...int) []byte {
	t.Helper()
	hdr, payload := rec[:tlsRecordHeaderLen], rec[tlsRecordHeaderLen:]
	var out []byte
	for _, n := range append(sizes, len(payload)) {
		n = min(n, len(payload))
		out = append(out, hdr[0], hdr[1], hdr[2], byte(n>>8), byte(n))
		out = append(out, payload[:n]...)
		payload = payload[n:]
		if len(payload) == 0 {
			break
		}
	}
	return out
}

func TestSNIMatches(t *testing.T) {
	tests := []struct {
		name, sni, host string
		want            bool
	}{
		{"same", "example.com", "example.com", true},
		{"case", "EXAMPLE.com", "example.com", true},
		{"trailing dot", "example.com.", "example.com", true},
		{"other host", "evil.example", "example.com", false},
		{"suffix", "xexample.com", "example.com", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sniMatches(tt.sni, tt.host); got != tt.want {
				t.Errorf("sniMatches(%q, %q) = %v; want %v", tt.sni, tt.host, got, tt.want)
			}
		})
	}
}

func FuzzParseClientHelloSNI(f *testing.F) {
	f.Add(clientHello(f, "example.com"))
	f.Add(clientHello(f, ""))
	f.Add([]byte{22, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Add(splitRecords(f, clientHello(f, "example.com"), 2, 60))
	f.Fuzz(func(t *testing.T, b []byte) {
		sni, err := parseClientHelloSNI(b)
		if err != nil && sni != "" {
			t.Errorf("parseClientHelloSNI() = %q with error %v; want no name on error", sni, err)
		}
	})
}

func BenchmarkParseClientHelloSNI(b *testing.B) {
	hello := clientHello(b, "example.com")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseClientHelloSNI(hello); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzParseHello checks parseHello against crypto/tls as the witness: for
// a ClientHello both read, the server name and whether an Encrypted Client
// Hello (or draft ESNI) extension is present must agree, so a hello whose
// name or ECH the proxy misses is one the fuzzer finds.
func FuzzParseHello(f *testing.F) {
	f.Add(clientHello(f, "example.com"))
	f.Add(clientHello(f, ""))
	f.Add(withExtension(f, clientHello(f, "example.com"), tlsExtECH))
	f.Add(withExtension(f, clientHello(f, "a.example"), tlsExtESNI))
	f.Fuzz(func(t *testing.T, rec []byte) {
		var a helloAssembler
		msg, err := a.feed(rec)
		if err != nil || msg == nil {
			return
		}
		got, err := parseHello(msg)
		want, ok := stdlibHello(rec)
		if err != nil || !ok {
			return
		}
		ech := slices.Contains(want.Extensions, tlsExtECH) || slices.Contains(want.Extensions, tlsExtESNI)
		if got.sni != want.ServerName || got.ech != ech {
			t.Errorf("parseHello = sni %q ech %v; crypto/tls read sni %q extensions %v", got.sni, got.ech, want.ServerName, want.Extensions)
		}
	})
}

var errHelloSeen = errors.New("hello seen")

// stdlibHello is what a crypto/tls server reads of the first flight rec,
// if it reads a ClientHello at all.
func stdlibHello(rec []byte) (*tls.ClientHelloInfo, bool) {
	var info *tls.ClientHelloInfo
	srv := tls.Server(&flightConn{r: bytes.NewReader(rec)}, &tls.Config{GetConfigForClient: func(chi *tls.ClientHelloInfo) (*tls.Config, error) {
		info = chi
		return nil, errHelloSeen
	}})
	srv.Handshake()
	return info, info != nil
}

// flightConn is a client that sent r and reads nothing back.
type flightConn struct {
	net.Conn
	r *bytes.Reader
}

func (c *flightConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *flightConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *flightConn) Close() error                     { return nil }
func (c *flightConn) SetDeadline(time.Time) error      { return nil }
func (c *flightConn) SetReadDeadline(time.Time) error  { return nil }
func (c *flightConn) SetWriteDeadline(time.Time) error { return nil }
