package policy_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/egressd/egressd/dnsguard"
	"github.com/egressd/egressd/policy"
)

// A grant is a rule, and rules never reach the address floor: a grant for
// a metadata or loopback address allows the request in the policy, and
// the floor still refuses it before any dial.
func TestGrantNeverLiftsTheFloor(t *testing.T) {
	ctx := context.Background()
	exp := time.Now().Add(time.Hour)
	e, err := policy.New(ctx, policy.Config{EvalTimeout: 10 * time.Second, Grants: []policy.Grant{
		{ID: "meta", Identity: "anonymous", Method: "GET", Host: "169.254.169.254", Port: 80, Path: "/latest/meta-data/", Expires: exp},
		{ID: "loop", Identity: "anonymous", Host: "127.0.0.1", Port: 8080, Tunnel: true, Expires: exp},
	}}, zap.NewNop())
	if err != nil {
		t.Fatalf("New with grants: %v", err)
	}
	f, err := policy.ParseHTTP(policy.KindHTTP, "GET", "http://169.254.169.254/latest/meta-data/", "")
	if err != nil {
		t.Fatal(err)
	}
	if d := e.Decide(ctx, policy.Input{Identity: policy.Identity{ID: "anonymous"}, Facts: f}); !d.Allow || d.Rule != "grant:meta" {
		t.Fatalf("policy decision = %+v; want allowed by grant:meta (the floor is what refuses)", d)
	}
	floor, err := dnsguard.NewFloor(nil)
	if err != nil {
		t.Fatal(err)
	}
	pd := policy.PreDial{Engine: e, Floor: floor}
	anon := policy.Identity{ID: "anonymous"}
	for _, tt := range []struct {
		name   string
		out    policy.Outcome
		reason policy.Reason
	}{
		{"metadata", pd.DecideHTTP(ctx, anon, policy.KindHTTP, policy.HTTPRequest{Method: "GET", Target: "http://169.254.169.254/latest/meta-data/"}), policy.ReasonMetadataAddress},
		{"loopback tunnel", pd.DecideConnect(ctx, anon, "127.0.0.1:8080"), policy.ReasonLoopbackAddress},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.out.Decision.Allow || tt.out.Decision.Reason != tt.reason {
				t.Errorf("decision = %+v; want deny %s from the floor", tt.out.Decision, tt.reason)
			}
		})
	}
}
