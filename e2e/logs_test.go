package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/dnsguard/dnstest"
	"github.com/egressd/egressd/internal/testport"
)

// logLines decodes the operational log as JSON lines; a line that is not
// JSON fails the test (log.format defaults to json).
func logLines(t testing.TB, e *Egressd) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(e.Log()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v\n%s", l, err, e.Log())
		}
		out = append(out, m)
	}
	return out
}

// FatalError waits for egressd to exit 2 and returns the error of its
// last log line, which must be the JSON "egressd cannot run" line.
func FatalError(t testing.TB, e *Egressd) string {
	t.Helper()
	err := e.Wait(30 * time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("egressd serve = %v; want exit 2\n%s", err, e.Log())
	}
	lines := logLines(t, e)
	last := lines[len(lines)-1]
	msg, _ := last["error"].(string)
	if last["level"] != "error" || last["msg"] != "egressd cannot run" || msg == "" {
		t.Fatalf("last log line %v; want level error, msg \"egressd cannot run\" and the error", last)
	}
	return msg
}

// TestStartupErrorsAreJSON: a start-up failure is the log's last line, in
// log.format (json by default, console when the file says so), not a
// plain line a JSON log collector would drop; a config that does not load
// still has its error logged as JSON.
func TestStartupErrorsAreJSON(t *testing.T) {
	// A UDP port held for the whole test: dns.listen on it cannot bind.
	hold, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	busy := hold.LocalAddr().String()
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{"config does not parse", Options{YAML: "proxy:\n\tlisten: 127.0.0.1:1\n"}, "tabs are not allowed"},
		{"duration without unit", Options{ProxyYAML: "idle_timeout: 60"}, "write 60s"},
		{"policy dir missing", Options{PolicyDir: "/nonexistent/egressd-policy"}, "policy.dir"},
		{"listener port in use", Options{DNSListen: busy}, "dns listen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.NotReady = true
			e := Start(t, tt.o)
			if msg := FatalError(t, e); !strings.Contains(msg, tt.want) {
				t.Errorf("fatal error %q; want it to contain %q", msg, tt.want)
			}
		})
	}
	t.Run("console format", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "egressd.yaml")
		if err := os.WriteFile(cfg, []byte("log:\n  format: console\nproxy:\n  idle_timeout: 60\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := RunCLI(t, "serve", "--config", cfg)
		if l := strings.TrimSpace(stderr); code != 2 || stdout != "" || strings.HasPrefix(l, "{") || !strings.Contains(l, "egressd cannot run") || !strings.Contains(l, "write 60s") {
			t.Errorf("serve = exit %d, stderr %q; want exit 2 and one console line saying egressd cannot run", code, stderr)
		}
	})
}

// TestServingLineListsEveryListener: the "serving" line names every
// listener egressd bound, with the address it is bound to, and the
// durations in log fields carry their unit.
func TestServingLineListsEveryListener(t *testing.T) {
	dnsPort, pgPort := ReservePort(t), ReservePort(t)
	dnsAddr, pgAddr := dnsPort.Addr(), pgPort.Addr()
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("upstream-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// An upstream that accepts, for /readyz; no login reaches it.
	up := gateUpstream(t)
	e := Start(t, Options{
		DNS:       dnstest.Start(t).Addr(),
		DNSListen: dnsAddr,
		Hold:      []*testport.Reservation{dnsPort, pgPort},
		YAML:      InternalAllow(up) + gateYAML(pgAddr, up, fmt.Sprintf("  password_file: %s\n", pw)),
	})
	var serving map[string]any
	for _, l := range logLines(t, e) {
		if l["msg"] == "serving" {
			serving = l
		}
	}
	want := map[string]string{"proxy": e.ProxyAddr, "admin": e.AdminAddr, "dns": dnsAddr, "postgres": pgAddr}
	for k, v := range want {
		if serving[k] != v {
			t.Errorf("serving line %v: %s = %v; want %s", serving, k, serving[k], v)
		}
	}
	if p, _ := serving["policy"].(string); !strings.HasPrefix(p, "sha256:") {
		t.Errorf("serving line %v lacks the policy digest", serving)
	}
	if err := e.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	var drained bool
	for _, l := range logLines(t, e) {
		if l["msg"] == "draining" {
			drained = true
			if l["deadline"] != "30s" {
				t.Errorf("draining line %v: deadline = %v; want \"30s\" (a duration with its unit)", l, l["deadline"])
			}
		}
	}
	if !drained {
		t.Errorf("no draining line after stop:\n%s", e.Log())
	}
}

// TestReloadAnswerNamesRestart: a reload that changes a section only a
// restart applies says so in the admin answer, not only in the log.
func TestReloadAnswerNamesRestart(t *testing.T) {
	o := Options{DNS: dnstest.Start(t).Addr()}
	e := Start(t, o)
	o.ProxyYAML = "max_conns: 77"
	e.WriteConfig(t, o)
	code, body, err := e.Admin(http.MethodPost, "/-/reload")
	if err != nil || code != http.StatusOK || !strings.Contains(body, "restart egressd to apply the changed sections: proxy") {
		t.Errorf("reload = %d %q, %v; want 200 naming the proxy section as needing a restart", code, body, err)
	}
	code, body, err = e.Admin(http.MethodPost, "/-/reload")
	if err != nil || code != http.StatusOK || !strings.Contains(body, "proxy") {
		t.Errorf("second reload = %d %q, %v; want the proxy section still named (it still differs from the running one)", code, body, err)
	}
}
