package proxy

import (
	"context"
	"net/http"
	"testing"

	"github.com/egressd/egressd/dnsguard"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
)

// countingEngine allows everything and counts evaluations.
type countingEngine struct{ n int }

func (e *countingEngine) Decide(context.Context, policy.Input) policy.Decision {
	e.n++
	return policy.Decision{Allow: true, Reason: "allowed", Rule: "r"}
}

func (e *countingEngine) Digest() string { return "" }

func TestDecider(t *testing.T) {
	floor, err := dnsguard.NewFloor(dnsguard.InternalConfig{{CIDR: "127.0.0.1", Ports: []uint16{8080}, Action: "allow"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		kind       policy.Kind
		target     string
		wantAllow  bool
		wantReason policy.Reason
		wantStatus int // of the refusal
		wantEval   bool
		wantHost   string
		wantPort   uint16
	}{
		{name: "name goes to policy", kind: policy.KindHTTP, target: "http://Example.COM./a%2Fb", wantAllow: true, wantEval: true, wantHost: "example.com", wantPort: 80},
		{name: "allowed internal literal", kind: policy.KindHTTP, target: "http://127.0.0.1:8080/", wantAllow: true, wantEval: true, wantHost: "127.0.0.1", wantPort: 8080},
		{name: "metadata literal never reaches policy", kind: policy.KindHTTP, target: "http://169.254.169.254/latest", wantReason: "metadata_address", wantStatus: http.StatusForbidden},
		{name: "loopback other port", kind: policy.KindHTTP, target: "http://127.0.0.1:9/", wantReason: "internal_port_not_allowed", wantStatus: http.StatusForbidden},
		{name: "malformed url", kind: policy.KindHTTP, target: "http://exa mple.com/", wantStatus: http.StatusBadRequest},
		{name: "connect name", kind: policy.KindConnect, target: "example.com:443", wantAllow: true, wantEval: true, wantHost: "example.com", wantPort: 443},
		{name: "connect metadata v6", kind: policy.KindConnect, target: "[fd00:ec2::254]:80", wantReason: "metadata_address", wantStatus: http.StatusForbidden},
		{name: "connect without port", kind: policy.KindConnect, target: "example.com", wantStatus: http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &countingEngine{}
			d := &policy.PreDial{Engine: e, Floor: floor}
			var o policy.Outcome
			if tt.kind == policy.KindConnect {
				o = d.DecideConnect(context.Background(), identity.Anonymous, tt.target)
			} else {
				o = d.DecideHTTP(context.Background(), identity.Anonymous, tt.kind, policy.HTTPRequest{Method: http.MethodGet, Target: tt.target})
			}
			if o.Decision.Allow != tt.wantAllow || (tt.wantReason != "" && o.Decision.Reason != tt.wantReason) {
				t.Errorf("decide(%q) = %+v; want allow %v reason %q", tt.target, o.Decision, tt.wantAllow, tt.wantReason)
			}
			if (e.n > 0) != tt.wantEval {
				t.Errorf("decide(%q) evaluated policy %d times; want evaluated %v", tt.target, e.n, tt.wantEval)
			}
			if tt.wantAllow && (targetOf(o.Facts).Host != tt.wantHost || targetOf(o.Facts).Port != tt.wantPort) {
				t.Errorf("decide(%q) target = %s:%d; want %s:%d", tt.target, targetOf(o.Facts).Host, targetOf(o.Facts).Port, tt.wantHost, tt.wantPort)
			}
			if !tt.wantAllow {
				if rf := outcomeRefusal(&o); rf.status != tt.wantStatus || rf.Reason == "" {
					t.Errorf("refusal(%q) = %d %q; want %d with a reason", tt.target, rf.status, rf.Reason, tt.wantStatus)
				}
			}
		})
	}
}
