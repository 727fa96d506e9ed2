package e2e

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/decisiontest"
)

// connect opens a tunnel through the proxy and returns the raw connection
// and the proxy's response to CONNECT.
func connect(t *testing.T, proxyAddr, target, auth string) (net.Conn, *http.Response) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if auth != "" {
		req += "Proxy-Authorization: " + auth + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	if resp.StatusCode == http.StatusOK && br.Buffered() > 0 {
		t.Fatalf("CONNECT %s: %d unexpected bytes after the response", target, br.Buffered())
	}
	return c, resp
}

func caPool(t *testing.T, file string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(b)
	return p
}

func TestConnectTLS(t *testing.T) {
	w := newWorld(t, nil)
	tp := itoa(w.HTTPS.Port)

	t.Run("allowed tunnel carries TLS end to end", func(t *testing.T) {
		c, resp := connect(t, w.E.ProxyAddr, "example.com:"+tp, "")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT = %d; want 200", resp.StatusCode)
		}
		tc := tls.Client(c, &tls.Config{ServerName: "example.com", RootCAs: caPool(t, w.HTTPS.CAFile)})
		if _, err := io.WriteString(tc, "GET /bytes/100000 HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp2, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp2.Body)
		if resp2.StatusCode != 200 || n != 100000 {
			t.Errorf("GET through tunnel = %d, %d bytes; want 200, 100000", resp2.StatusCode, n)
		}
		tc.Close()
		recs := w.E.WaitRecords(t, "connect_done", func(r audit.Record) bool {
			return r.Kind == "connect_done" && r.Host == "example.com" && r.BytesIn > 100000
		})
		if recs[0].IP != "127.0.0.1" || recs[0].BytesOut == 0 {
			t.Errorf("connect_done = %+v; want ip 127.0.0.1 and bytes both ways", recs[0])
		}
	})

	t.Run("sni mismatch", func(t *testing.T) {
		c, resp := connect(t, w.E.ProxyAddr, "example.com:"+tp, "")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT = %d; want 200", resp.StatusCode)
		}
		tc := tls.Client(c, &tls.Config{ServerName: "evil.test", InsecureSkipVerify: true})
		if err := tc.Handshake(); err == nil {
			t.Fatalf("handshake with SNI evil.test through a tunnel to example.com succeeded")
		}
		w.E.WaitRecords(t, "sni_mismatch", func(r audit.Record) bool {
			return r.Kind == "connect" && r.Decision == "deny" && r.Reason == "sni_mismatch" && r.Host == "example.com"
		})
	})

	t.Run("tls-only rule refuses plaintext", func(t *testing.T) {
		c, resp := connect(t, w.E.ProxyAddr, "example.com:"+tp, "")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT = %d; want 200", resp.StatusCode)
		}
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
		if n, _ := c.Read(make([]byte, 1)); n != 0 {
			t.Errorf("plaintext in a TLS-only tunnel got an answer")
		}
		w.E.WaitRecords(t, "tls_required", func(r audit.Record) bool {
			return r.Kind == "connect" && r.Reason == "tls_required"
		})
	})

	t.Run("non-tls rule carries plaintext", func(t *testing.T) {
		c, resp := connect(t, w.E.ProxyAddr, "upstream.test:"+itoa(w.HTTP.Port), "")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT = %d; want 200", resp.StatusCode)
		}
		io.WriteString(c, "GET /echo HTTP/1.1\r\nHost: upstream.test\r\nConnection: close\r\n\r\n")
		b, _ := io.ReadAll(c)
		if !strings.Contains(string(b), "GET /echo HTTP/1.1") {
			t.Errorf("plain tunnel response = %q; want the echo", b)
		}
	})

	t.Run("plaintext tunnel carries only its own host", func(t *testing.T) {
		c, resp := connect(t, w.E.ProxyAddr, "upstream.test:"+itoa(w.HTTP.Port), "")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT = %d; want 200", resp.StatusCode)
		}
		io.WriteString(c, "GET /echo HTTP/1.1\r\nHost: other-tenant.test\r\nConnection: close\r\n\r\n")
		if b, _ := io.ReadAll(c); len(b) != 0 {
			t.Errorf("request for another host through the tunnel got %q; want the tunnel closed", b)
		}
		w.E.WaitRecords(t, "tunnel_host_mismatch", func(r audit.Record) bool {
			return r.Kind == "connect" && r.Decision == "deny" && r.Reason == "tunnel_host_mismatch" && r.Host == "upstream.test"
		})
	})

	refusals := []struct {
		name, target, reason string
		status               int
	}{
		{"path-only rule cannot open a tunnel", "pathonly.test:" + tp, "tunnel_needs_host_wide_rule", 403},
		{"no rule", "other.test:" + tp, "no_matching_rule", 403},
		{"metadata", "169.254.169.254:80", "metadata_address", 403},
		{"loopback other port", "127.0.0.1:22", "internal_port_not_allowed", 403},
		{"malformed", "example.com", "", 400},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			_, resp := connect(t, w.E.ProxyAddr, tt.target, "")
			if resp.StatusCode != tt.status || (tt.reason != "" && decisiontest.Reason(resp.Header) != tt.reason) {
				t.Errorf("CONNECT %s = %d %q; want %d %q", tt.target, resp.StatusCode, decisiontest.Reason(resp.Header), tt.status, tt.reason)
			}
			id := resp.Header.Get("X-Egressd-Request")
			w.E.WaitRecords(t, "connect refusal", func(r audit.Record) bool {
				return r.Request == id && r.Kind == "connect" && r.Decision == "deny"
			})
		})
	}
}
