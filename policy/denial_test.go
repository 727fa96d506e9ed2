package policy_test

import (
	"testing"

	"github.com/egressd/egressd/policy"
)

// TestActionOf: only a refusal no rule of the bundle made is a grant's to
// lift; a rule's own refusal and the box's are not.
func TestActionOf(t *testing.T) {
	for _, tc := range []struct {
		reason policy.Reason
		rule   string
		want   policy.Action
	}{
		{policy.ReasonNoMatchingRule, "", policy.ActionRequestGrant},
		{"tunnel_needs_host_wide_rule", "", policy.ActionRequestGrant},
		{policy.ReasonGrantExpired, "grant:g1", policy.ActionRequestGrant},
		{policy.ReasonRuleDeny, "no-admin", policy.ActionNone},
		{policy.ReasonMCPToolDenied, "tools", policy.ActionNone},
		{"write_denied", "ro", policy.ActionNone},
		{policy.ReasonMetadataAddress, "", policy.ActionNone},
		{"encoded_separator", "", policy.ActionNone},
		{policy.ReasonRateLimited, "", policy.ActionRetryLater},
		{policy.ReasonAuditUnavailable, "", policy.ActionRetryLater},
		{policy.ReasonProxyAuthRequired, "", policy.ActionAuthenticate},
		{policy.ReasonIdentityRevoked, "", policy.ActionNone},
		{policy.ReasonMalformedURL, "", policy.ActionFixRequest},
	} {
		if got := policy.ActionOf(tc.reason, tc.rule); got != tc.want {
			t.Errorf("ActionOf(%s, %q) = %s; want %s", tc.reason, tc.rule, got, tc.want)
		}
	}
}
