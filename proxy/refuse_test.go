package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/egressd/egressd/internal/decisiontest"
	"github.com/egressd/egressd/policy"
)

func TestRefusalFor(t *testing.T) {
	deny := &policy.DenyError{Reason: "private_address", Detail: "10.0.0.1 is private"}
	tests := []struct {
		name       string
		st         stage
		d          policy.Decision
		err        error
		wantStatus int
		wantReason policy.Reason
	}{
		{"policy deny", stagePolicy, policy.Deny("no_matching_rule", ""), nil, http.StatusForbidden, "no_matching_rule"},
		{"deny without reason", stagePolicy, policy.Decision{}, nil, http.StatusForbidden, "no_matching_rule"},
		{"auth", stagePolicy, policy.Deny(policy.ReasonProxyAuthRequired, ""), nil, http.StatusProxyAuthRequired, policy.ReasonProxyAuthRequired},
		{"parse", stageParse, policy.Decision{}, &policy.DenyError{Reason: "malformed_url"}, http.StatusBadRequest, "malformed_url"},
		{"floor at dial", stageDial, policy.Decision{}, fmt.Errorf("dial: %w", deny), http.StatusForbidden, "private_address"},
		{"timeout", stageDial, policy.Decision{}, context.DeadlineExceeded, http.StatusGatewayTimeout, policy.ReasonUpstreamTimeout},
		{"dns", stageDial, policy.Decision{}, &net.DNSError{Err: "no such host", Name: "x"}, http.StatusBadGateway, policy.ReasonDNSFailure},
		{"nxdomain from the guard", stageDial, policy.Decision{}, &policy.DenyError{Reason: "dns_nxdomain"}, http.StatusBadGateway, "dns_nxdomain"},
		{"guard resolver failure", stageDial, policy.Decision{}, &policy.DenyError{Reason: policy.ReasonDNSFailure}, http.StatusBadGateway, policy.ReasonDNSFailure},
		{"refused", stageDial, policy.Decision{}, errors.New("connection refused"), http.StatusBadGateway, policy.ReasonUpstreamUnreachable},
		{"audit", stagePolicy, policy.Deny(policy.ReasonAuditUnavailable, ""), nil, http.StatusServiceUnavailable, policy.ReasonAuditUnavailable},
		{"no address from the guard", stageDial, policy.Decision{}, &policy.DenyError{Reason: policy.ReasonDNSNoAddress}, http.StatusBadGateway, policy.ReasonDNSNoAddress},
		{"revoked identity", stagePolicy, policy.Deny(policy.ReasonIdentityRevoked, ""), nil, http.StatusForbidden, policy.ReasonIdentityRevoked},
		{"rate limited", stagePolicy, policy.Deny(policy.ReasonRateLimited, ""), nil, http.StatusTooManyRequests, policy.ReasonRateLimited},
		{"https absolute form", stageParse, policy.Decision{}, &policy.DenyError{Reason: policy.ReasonHTTPSRequiresConnect}, http.StatusBadRequest, policy.ReasonHTTPSRequiresConnect},
		{"unreadable address at dial", stageDial, policy.Decision{}, &policy.DenyError{Reason: policy.ReasonMalformedAddress}, http.StatusForbidden, policy.ReasonMalformedAddress},
		{"limit at parse keeps 429", stageParse, policy.Decision{}, &policy.DenyError{Reason: policy.ReasonIdentityConnLimit}, http.StatusTooManyRequests, policy.ReasonIdentityConnLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := refusalFor(tt.st, tt.d, tt.err)
			if got.status != tt.wantStatus || got.Reason != tt.wantReason {
				t.Errorf("refusalFor() = %d %q; want %d %q", got.status, got.Reason, tt.wantStatus, tt.wantReason)
			}
		})
	}
}

func TestRefusalBodyHidesDetail(t *testing.T) {
	rf := refusalFor(stageDial, policy.Decision{}, &policy.DenyError{Reason: "private_address", Detail: "10.0.0.1 is private"})
	var b strings.Builder
	if err := rf.write(&b, "req-1"); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	if strings.Contains(got, "10.0.0.1") {
		t.Errorf("refusal response = %q; want no internal address", got)
	}
	for _, want := range []string{"HTTP/1.1 403 Forbidden\r\n", "X-Egressd-Decision: deny; reason=private_address\r\n",
		"egressd: denied: private_address (rule none, request req-1)\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("refusal response = %q; want it to contain %q", got, want)
		}
	}
}

// The tests read X-Egressd-Decision with decisiontest: it must read what
// decisionHeader writes.
func TestDecisionHeaderReadsBack(t *testing.T) {
	for _, rule := range []string{"", "pypi"} {
		want := decisiontest.Decision{Verdict: "deny", Reason: string(policy.ReasonPrivateAddress), Rule: rule}
		if got := decisiontest.Parse(decisionHeader(policy.ReasonPrivateAddress, rule)); got != want {
			t.Errorf("decisiontest.Parse(decisionHeader(%s, %q)) = %+v; want %+v", policy.ReasonPrivateAddress, rule, got, want)
		}
	}
}
