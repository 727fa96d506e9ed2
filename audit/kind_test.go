package audit

import (
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy"
)

// TestKindWireNames pins the on-disk spelling of every kind and decision:
// old logs are read and verified with these, so a constant's value never
// changes.
func TestKindWireNames(t *testing.T) {
	for _, tt := range []struct {
		name string
		got  string
		want string
	}{
		{"http", KindHTTP.String(), "http"},
		{"connect", KindConnect.String(), "connect"},
		{"dns", KindDNS.String(), "dns"},
		{"sql", KindSQL.String(), "sql"},
		{"redirect", KindRedirect.String(), "redirect"},
		{"accept", KindAccept.String(), "accept"},
		{"http_done", KindHTTPDone.String(), "http_done"},
		{"connect_done", KindConnectDone.String(), "connect_done"},
		{"segment", KindSegment.String(), "segment"},
		{"checkpoint", KindCheckpoint.String(), "checkpoint"},
		{"resumed", KindResumed.String(), "resumed"},
		{"accepted_break", KindAcceptedBreak.String(), "accepted_break"},
		{"started", KindStarted.String(), "started"},
		{"allow", DecisionAllow.String(), "allow"},
		{"deny", DecisionDeny.String(), "deny"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("wire name = %q; want %q", tt.got, tt.want)
			}
		})
	}
}

func TestIsCompletion(t *testing.T) {
	for _, tt := range []struct {
		kind Kind
		want bool
	}{
		{KindHTTPDone, true},
		{KindConnectDone, true},
		{KindHTTP, false},
		{KindConnect, false},
		{KindSQL, false},
		{KindAccept, false},
		{KindSegment, false},
	} {
		t.Run(tt.kind.String(), func(t *testing.T) {
			if got := tt.kind.IsCompletion(); got != tt.want {
				t.Errorf("IsCompletion = %v; want %v", got, tt.want)
			}
		})
	}
}

// TestDecidedLine checks the builder's record encodes to the same line a
// hand-built record of the same decision did before it existed.
func TestDecidedLine(t *testing.T) {
	for _, tt := range []struct {
		name string
		got  *Record
		want *Record
	}{
		{
			name: "allow",
			got:  Decided(KindSQL, "agent", "10.0.0.2", Verdict{Allow: true, Reason: "allowed", Rule: "r1", Policy: "sha256:ab"}),
			want: &Record{Kind: "sql", Identity: "agent", Client: "10.0.0.2", Decision: "allow", Reason: "allowed", Rule: "r1", Policy: "sha256:ab"},
		},
		{
			name: "allow",
			got: Decided(KindHTTP, "agent", "10.0.0.4", VerdictOf(policy.Decision{Allow: true, Reason: "allowed", Rule: "watch", Policy: "sha256:ab",
				WouldDeny: &policy.Observed{Reason: policy.ReasonRuleDeny, By: policy.ObservedByRule}})),
			want: &Record{Kind: "http", Identity: "agent", Client: "10.0.0.4", Decision: "allow", Reason: "allowed", Rule: "watch", Policy: "sha256:ab",
				WouldDeny: "rule_deny", ObservedBy: "rule"},
		},
		{
			name: "deny",
			got:  Decided(KindHTTP, "", "10.0.0.3", Verdict{Reason: "unknown_client"}),
			want: &Record{Kind: "http", Client: "10.0.0.3", Decision: "deny", Reason: "unknown_client"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, want := encodeLine(tt.got), encodeLine(tt.want)
			if got != want {
				t.Errorf("line = %s\nwant %s", got, want)
			}
			if !strings.Contains(got, `"decision":"`+tt.name+`"`) {
				t.Errorf("line %s lacks decision %q", got, tt.name)
			}
		})
	}
}

// TestSetVerdictReplaces checks SetVerdict overwrites every verdict field,
// so turning an allow into a refusal leaves no allow's rule behind.
func TestSetVerdictReplaces(t *testing.T) {
	r := Decided(KindDNS, "agent", "10.0.0.2", Verdict{Allow: true, Reason: "allowed", Rule: "svc", Policy: "p"})
	r.SetVerdict(Verdict{Reason: "audit_budget", Policy: "p"})
	if r.Decision != DecisionDeny || r.Reason != "audit_budget" || r.Rule != "" || r.Policy != "p" {
		t.Errorf("after SetVerdict: %+v", r)
	}
	// An observed allow refused after all (over the audit budget) keeps
	// no would_deny: a deny would not have been.
	r = Decided(KindDNS, "agent", "10.0.0.2", Verdict{Allow: true, Reason: "allowed", WouldDeny: policy.ReasonNoMatchingRule, ObservedBy: policy.ObservedByBundle})
	if r.WouldDeny != "no_matching_rule" || r.ObservedBy != "bundle" {
		t.Errorf("observed allow: would_deny %q observed_by %q; want no_matching_rule by bundle", r.WouldDeny, r.ObservedBy)
	}
	r.SetVerdict(Verdict{Reason: "audit_budget", Policy: "p"})
	if r.WouldDeny != "" || r.ObservedBy != "" {
		t.Errorf("after SetVerdict of a deny: would_deny %q observed_by %q; want none", r.WouldDeny, r.ObservedBy)
	}
	// A deny never carries one, whatever its decision said.
	if v := VerdictOf(policy.Decision{Reason: "rule_deny", WouldDeny: &policy.Observed{Reason: "rule_deny", By: policy.ObservedByRule}}); v.WouldDeny != "" {
		t.Errorf("VerdictOf(deny) = %+v; want no would_deny", v)
	}
}

func encodeLine(r *Record) string {
	var prev [sha256.Size]byte
	b, _ := newEncoder().appendLine(nil, r, 1, &prev)
	return string(b)
}

// TestInternKind checks reading a common kind returns its constant without
// allocating, and an uncommon one as read.
func TestInternKind(t *testing.T) {
	for _, tt := range []struct {
		name string
		want Kind
	}{
		{"http", KindHTTP},
		{"connect_done", KindConnectDone},
		{"started", KindStarted},
		{"accept", KindAccept},
		{"resumed", KindResumed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := []byte(tt.name)
			if got := internKind(b); got != tt.want {
				t.Errorf("internKind(%q) = %q", b, got)
			}
		})
	}
	b := []byte("http_done")
	if n := testing.AllocsPerRun(100, func() { _ = internKind(b) }); n != 0 {
		t.Errorf("internKind allocates %v times per read of a common kind", n)
	}
}
