package e2e

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/decisiontest"
	"github.com/egressd/egressd/internal/testwait"
)

func TestClientLimits(t *testing.T) {
	w := newWorld(t, func(w *world) {
		w.Opts.ProxyYAML = "read_header_timeout: 1s\nmax_header_bytes: 4096\ntunnel_idle_timeout: 2s\nper_identity_rate: 5\nper_identity_burst: 40"
	})

	t.Run("slow request head is cut off", func(t *testing.T) {
		c, err := net.Dial("tcp", w.E.ProxyAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET http://upstream.test/ HTTP/1.1\r\nX-Slow: ")
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		io.Copy(io.Discard, c)
		if d := time.Since(start); d > 8*time.Second {
			t.Errorf("connection with an unfinished head stayed open %v; want about read_header_timeout (1s)", d)
		}
		w.E.WaitRecords(t, "the incomplete request", func(r audit.Record) bool { return r.Reason == "incomplete_request" })
	})

	t.Run("oversized head refused", func(t *testing.T) {
		req := "GET " + w.url("upstream.test", "/echo") + " HTTP/1.1\r\nHost: upstream.test\r\nX-Big: " + strings.Repeat("a", 16<<10) + "\r\n\r\n"
		resp, _ := rawRequest(t, w.E.ProxyAddr, req)
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("16 KiB header = %d; want 431", resp.StatusCode)
		}
		// net/http answers this itself, before any handler; it is audited
		// all the same.
		w.E.WaitRecords(t, "the 431", func(r audit.Record) bool {
			return r.Reason == "headers_too_large" && r.Status == http.StatusRequestHeaderFieldsTooLarge && r.Decision == "deny"
		})
	})

	t.Run("idle tunnel closed, busy tunnel kept", func(t *testing.T) {
		target := fmt.Sprintf("upstream.test:%d", w.HTTP.Port)
		idle, resp := connect(t, w.E.ProxyAddr, target, "")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT = %d", resp.StatusCode)
		}
		busy, resp := connect(t, w.E.ProxyAddr, target, "")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT = %d", resp.StatusCode)
		}
		idle.SetDeadline(time.Now().Add(15 * time.Second))
		busy.SetDeadline(time.Now().Add(15 * time.Second))
		br := bufio.NewReader(busy)
		start := time.Now()
		for time.Since(start) < 4*time.Second {
			io.WriteString(busy, "GET /echo HTTP/1.1\r\nHost: upstream.test\r\n\r\n")
			r, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("busy tunnel failed after %v: %v", time.Since(start), err)
			}
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
			// The pacing is the behaviour under test: traffic spaced
			// below tunnel_idle_timeout keeps a tunnel open while the
			// idle one times out.
			time.Sleep(300 * time.Millisecond)
		}
		if n, err := idle.Read(make([]byte, 1)); err == nil {
			t.Errorf("idle tunnel read %d bytes; want it closed after tunnel_idle_timeout", n)
		}
	})

	t.Run("rate limit per identity", func(t *testing.T) {
		c := w.E.Client("", "")
		limited := 0
		for range 80 {
			resp, err := c.Get(w.url("upstream.test", "/echo"))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusTooManyRequests && decisiontest.Reason(resp.Header) == "rate_limited" {
				limited++
			}
		}
		if limited == 0 {
			t.Errorf("80 requests against a bucket of 40 at 5/s: none refused with 429 rate_limited")
		}
	})
}

func TestReloadIdentities(t *testing.T) {
	hash := func(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }
	w := newWorld(t, func(w *world) {
		w.Opts.YAML += "identities:\n  - id: sbx-a\n    token_sha256: " + hash("ta") + "\n"
	})
	get := func(user, token string) int {
		resp, err := w.E.Client(user, token).Get(w.url("upstream.test", "/echo"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get("sbx-b", "tb"); got != 407 {
		t.Fatalf("unknown identity before reload = %d; want 407", got)
	}
	o := w.Opts
	o.YAML += "  - id: sbx-b\n    token_sha256: " + hash("tb") + "\n"
	w.E.WriteConfig(t, o)
	w.E.Reload(t)
	if got := get("sbx-b", "tb"); got != 200 {
		t.Errorf("identity added by reload = %d; want 200", got)
	}
	if got := get("sbx-a", "ta"); got != 200 {
		t.Errorf("existing identity after reload = %d; want 200", got)
	}
}

func TestAdminEndpoints(t *testing.T) {
	w := newWorld(t, nil)
	resp, err := w.E.Client("", "").Get(w.url("other.test", "/"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	w.E.WaitRecords(t, "the deny", func(r audit.Record) bool { return r.Reason == "no_matching_rule" })
	m := w.E.Metrics(t)
	for _, want := range []string{
		`egressd_decisions_total{decision="deny",kind="http",reason="no_matching_rule"} 1`,
		"egressd_proxy_decision_seconds_count",
		"egressd_proxy_upstream_seconds_count",
		`egressd_proxy_active{what="connections"}`,
		"egressd_audit_queue_depth",
		"egressd_audit_refused_total 0",
		"egressd_audit_syncs_total",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if code, _, err := w.E.Admin(http.MethodGet, "/healthz"); err != nil || code != 200 {
		t.Errorf("/healthz = %d, %v; want 200", code, err)
	}
	if code, _, _ := w.E.Admin(http.MethodGet, "/-/reload"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /-/reload = %d; want 405", code)
	}
}

func TestNotReadyWithoutDNS(t *testing.T) {
	e := Start(t, Options{NotReady: true})
	testwait.For(t, "the admin listener to answer /healthz", 10*time.Second, func() error {
		code, body, err := e.Admin(http.MethodGet, "/healthz")
		if err == nil && code != 200 {
			err = fmt.Errorf("/healthz = %d %q", code, body)
		}
		return err
	})
	code, body, err := e.Admin(http.MethodGet, "/readyz")
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "dns:") {
		t.Errorf("/readyz with no DNS upstream = %d %q, %v; want 503 naming dns", code, body, err)
	}
}

// Removing an `internal:` allowance and reloading must cut the sandbox off at
// once: an operator revoking access relies on it. A change that needs a
// restart is named in the log rather than silently ignored.
func TestReloadInternal(t *testing.T) {
	w := newWorld(t, nil)
	get := func() (int, string) {
		resp, err := w.E.Client("", "").Get(w.url("upstream.test", "/echo"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, decisiontest.Reason(resp.Header)
	}
	if code, reason := get(); code != 200 {
		t.Fatalf("GET with the internal allowance = %d %s; want 200", code, reason)
	}
	o := w.Opts
	o.YAML = InternalAllow(w.HTTPS.Addr)
	o.ProxyYAML = "max_conns: 77"
	w.E.WriteConfig(t, o)
	w.E.Reload(t)
	if code, reason := get(); code != 403 || reason != "internal_port_not_allowed" {
		t.Errorf("GET after the allowance was removed = %d %s; want 403 internal_port_not_allowed", code, reason)
	}
	if log := w.E.Log(); !strings.Contains(log, "restart egressd to apply the changed sections: proxy") || !strings.Contains(log, `"sections":["proxy"]`) {
		t.Errorf("log does not name the proxy section as needing a restart:\n%s", log)
	}
	w.E.WriteConfig(t, w.Opts)
	w.E.Reload(t)
	if code, reason := get(); code != 200 {
		t.Errorf("GET after the allowance was restored = %d %s; want 200", code, reason)
	}
}
