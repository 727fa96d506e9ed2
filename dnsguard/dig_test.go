package dnsguard

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestServerWithDig asks the server with a real client: dig from Debian's
// dnsutils (installed by .ci/run).
func TestServerWithDig(t *testing.T) {
	dig, err := exec.LookPath("dig")
	if err != nil {
		t.Fatalf("dig not found (apt-get install dnsutils): %v", err)
	}
	ts := startServer(t, nil)
	host, port, _ := net.SplitHostPort(ts.addr)
	tests := []struct {
		name   string
		args   []string
		status string
		answer string
	}{
		{"A over udp", []string{"svc.test", "A"}, "NOERROR", "svc.test.\t\t60\tIN\tA\t192.0.43.10"},
		{"AAAA over tcp", []string{"+tcp", "svc.test", "AAAA"}, "NOERROR", "2001:500:88:200::10"},
		{"wildcard", []string{"x.wild.test", "A"}, "NOERROR", "192.0.43.11"},
		{"refused name", []string{"attacker.test", "A"}, "REFUSED", ""},
		{"txt tunnelling", []string{"svc.test", "TXT"}, "REFUSED", ""},
		{"any", []string{"svc.test", "ANY"}, "REFUSED", ""},
		{"metadata answer", []string{"meta.test", "A"}, "REFUSED", ""},
		{"nxdomain", []string{"gone.test", "A"}, "NXDOMAIN", ""},
		{"truncated then tcp", []string{"+ignore", "+bufsize=512", "big.test", "A"}, "NOERROR", "flags: qr tc rd ra"},
		{"big over tcp", []string{"+tcp", "big.test", "A"}, "NOERROR", "192.0.43.119"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			args := append([]string{"@" + host, "-p", port, "+tries=1", "+time=3"}, tt.args...)
			out, err := exec.CommandContext(ctx, dig, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("dig %v: %v\n%s", args, err, out)
			}
			if !strings.Contains(string(out), "status: "+tt.status) {
				t.Errorf("dig %v: want status %s in\n%s", tt.args, tt.status, out)
			}
			if tt.answer != "" && !strings.Contains(string(out), tt.answer) {
				t.Errorf("dig %v: want %q in\n%s", tt.args, tt.answer, out)
			}
		})
	}
}
