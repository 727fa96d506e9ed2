package e2e

import (
	"bufio"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/dnsguard/dnstest"
	"github.com/egressd/egressd/internal/testwait"
)

// inspectWorld is egressd inspecting example.com (the HTTPS upstream, whose
// certificate its own CA signed: inspect.upstream_ca_file) for GET under
// /ok/, with identities sbx-a and sbx-b, each with its own CA exported to
// a PEM file a client trusts.
type inspectWorld struct {
	E       *Egressd
	HTTPS   *Upstream
	CAFiles map[string]string
}

// inspecting is what egressd needs to inspect example.com served by an
// HTTPS upstream: a DNS server naming it 127.0.0.1, a CA directory, and
// config that admits the upstream's loopback address and trusts its
// certificate (inspect.upstream_ca_file).
type inspecting struct {
	DNS   *dnstest.Server
	CADir string
	YAML  string
}

func newInspecting(t *testing.T, up *Upstream) inspecting {
	t.Helper()
	dns := dnstest.Start(t)
	dns.SetRR("example.com", "example.com. 60 IN A 127.0.0.1")
	caDir := filepath.Join(t.TempDir(), "ca")
	return inspecting{DNS: dns, CADir: caDir,
		YAML: InternalAllow(up.Addr) + "inspect:\n  ca_dir: " + caDir + "\n  upstream_ca_file: " + up.CAFile + "\n"}
}

func newInspectWorld(t *testing.T) *inspectWorld {
	t.Helper()
	w := &inspectWorld{HTTPS: StartHTTPS(t), CAFiles: map[string]string{}}
	in := newInspecting(t, w.HTTPS)
	for _, id := range []string{"sbx-a", "sbx-b"} {
		out, errOut, code := RunCLI(t, "ca", "export", "--ca-dir", in.CADir, "--identity", id)
		if code != 0 {
			t.Fatalf("ca export %s = %d (%s)", id, code, errOut)
		}
		w.CAFiles[id] = filepath.Join(t.TempDir(), id+".pem")
		if err := os.WriteFile(w.CAFiles[id], []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	policy := WritePolicy(t, []Rule{
		{ID: "inspected", Hosts: []string{"example.com"}, Ports: []int{w.HTTPS.Port}, Methods: []string{"GET"}, Paths: []string{"/ok/**", "/ws"}, Inspect: true},
	})
	var ids strings.Builder
	ids.WriteString("identities:\n")
	for _, id := range []string{"sbx-a", "sbx-b"} {
		sum := sha256.Sum256([]byte("tok-" + id))
		fmt.Fprintf(&ids, "  - id: %s\n    token_sha256: %s\n", id, hex.EncodeToString(sum[:]))
	}
	w.E = Start(t, Options{
		PolicyDir: policy,
		DNS:       in.DNS.Addr(),
		YAML:      in.YAML + ids.String(),
	})
	return w
}

func (w *inspectWorld) proxy(id string) string {
	return "http://" + id + ":tok-" + id + "@" + w.E.ProxyAddr
}

func (w *inspectWorld) url(path string) string {
	return fmt.Sprintf("https://example.com:%d%s", w.HTTPS.Port, path)
}

// TestInspectThroughBinary: curl (HTTP/1.1 and --http2) and Python's urllib,
// trusting their identity's CA, get an allowed path from the upstream and
// 403 with the reason inside TLS for a path the rule does not allow and for
// %2F; identity B trusting A's CA fails the handshake; every inner request
// has an inspected record and the log verifies.
func TestInspectThroughBinary(t *testing.T) {
	w := newInspectWorld(t)
	curl := func(id, caFile string, extra ...string) (string, error) {
		args := append([]string{"-sS", "-D", "-", "-o", "/dev/null", "-w", "code=%{http_code} version=%{http_version}\n",
			"--max-time", "20", "-x", w.proxy(id), "--cacert", caFile}, extra...)
		return run(t, "curl", args...)
	}
	tests := []struct {
		name   string
		args   []string
		want   string
		reason string
	}{
		{"http1.1 allowed", []string{"--http1.1", w.url("/ok/a")}, "code=200 version=1.1", ""},
		{"h2 allowed", []string{"--http2", w.url("/ok/a")}, "code=200 version=2", ""},
		{"path denied", []string{w.url("/admin")}, "code=403", "no_matching_rule"},
		{"method denied", []string{"-X", "DELETE", w.url("/ok/a")}, "code=403", "no_matching_rule"},
		{"encoded slash", []string{"--path-as-is", w.url("/ok%2F..%2Fadmin")}, "code=403", "encoded_separator"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := curl("sbx-a", w.CAFiles["sbx-a"], tt.args...)
			if err != nil || !strings.Contains(out, tt.want) || (tt.reason != "" && !strings.Contains(out, "reason="+tt.reason)) {
				t.Errorf("curl %v = %q, %v; want %s %s", tt.args, out, err, tt.want, tt.reason)
			}
		})
	}

	t.Run("python urllib", func(t *testing.T) {
		script := `import ssl, sys, urllib.request
ctx = ssl.create_default_context(cafile=sys.argv[2])
op = urllib.request.build_opener(urllib.request.ProxyHandler({"https": sys.argv[1]}), urllib.request.HTTPSHandler(context=ctx))
print(op.open(sys.argv[3], timeout=20).read().decode().splitlines()[0])`
		out, err := run(t, "python3", "-c", script, w.proxy("sbx-a"), w.CAFiles["sbx-a"], w.url("/ok/py"))
		if err != nil || strings.TrimSpace(out) != "GET /ok/py HTTP/2.0" && strings.TrimSpace(out) != "GET /ok/py HTTP/1.1" {
			t.Errorf("python urllib = %q, %v; want the upstream's echo of GET /ok/py", out, err)
		}
	})

	t.Run("go net/http h2", func(t *testing.T) {
		roots := caPool(t, w.CAFiles["sbx-a"])
		pu, _ := url.Parse(w.proxy("sbx-a"))
		tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr, Timeout: 20 * time.Second}
		for _, tt := range []struct {
			path   string
			status int
		}{{"/ok/go", 200}, {"/admin", 403}} {
			resp, err := c.Get(w.url(tt.path))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.status || resp.ProtoMajor != 2 {
				t.Errorf("GET %s = HTTP/%d %d; want HTTP/2 %d", tt.path, resp.ProtoMajor, resp.StatusCode, tt.status)
			}
		}
	})

	t.Run("websocket", func(t *testing.T) {
		roots := caPool(t, w.CAFiles["sbx-a"])
		c, err := net.DialTimeout("tcp", w.E.ProxyAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		target := fmt.Sprintf("example.com:%d", w.HTTPS.Port)
		auth := base64.StdEncoding.EncodeToString([]byte("sbx-a:tok-sbx-a"))
		io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\nProxy-Authorization: Basic "+auth+"\r\n\r\n")
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT = %v, %v; want 200", resp, err)
		}
		tc := tls.Client(c, &tls.Config{ServerName: "example.com", RootCAs: roots, NextProtos: []string{"http/1.1"}})
		io.WriteString(tc, "GET /ws HTTP/1.1\r\nHost: "+target+"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
			"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
		tbr := bufio.NewReader(tc)
		resp, err := http.ReadResponse(tbr, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("WebSocket handshake = %v, %v; want 101", resp, err)
		}
		io.WriteString(tc, "ping\n")
		if got, err := tbr.ReadString('\n'); got != "echo ping\n" {
			t.Errorf("relayed %q, %v; want %q", got, err, "echo ping\n")
		}
	})

	t.Run("identity B does not trust A's CA", func(t *testing.T) {
		out, err := curl("sbx-b", w.CAFiles["sbx-a"], w.url("/ok/a"))
		if err == nil || strings.Contains(out, "code=200") {
			t.Errorf("curl as sbx-b trusting sbx-a's CA = %q, %v; want a certificate failure", out, err)
		}
		if out, err := curl("sbx-b", w.CAFiles["sbx-b"], w.url("/ok/a")); err != nil || !strings.Contains(out, "code=200") {
			t.Errorf("curl as sbx-b trusting its own CA = %q, %v; want 200", out, err)
		}
	})

	// Two curl requests, python's, Go's and sbx-b's.
	testwait.For(t, "5 inspected completions with status 200", 10*time.Second, func() error {
		n := 0
		for _, r := range w.E.Records(t) {
			if r.Kind == audit.KindHTTPDone && r.Inspected && r.Status == 200 {
				n++
			}
		}
		if n < 5 {
			return fmt.Errorf("%d so far", n)
		}
		return nil
	})
	for _, r := range w.E.Records(t) {
		if r.Kind == audit.KindHTTP && (!r.Inspected || r.Scheme != "https" || r.Host != "example.com") {
			t.Errorf("http record %+v; want inspected https example.com", r)
		}
	}
	if out, errOut, code := RunCLI(t, "audit", "verify", w.E.AuditDir); code != 0 {
		t.Errorf("audit verify = %d\n%s%s", code, out, errOut)
	}
	out, _, _ := RunCLI(t, "audit", "show", "--table", "--kind", "http", w.E.AuditDir)
	if !strings.Contains(out, "(inspected)") {
		t.Errorf("audit show does not mark inspected requests:\n%s", out)
	}
}
