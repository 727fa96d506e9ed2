package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
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
	if err := rf.write(&b, "", "req-1"); err != nil {
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

// TestRefusalJSON: a client that asks for JSON reads the reason, its
// class, the request id and what it can do; nothing of the policy beyond
// the deciding rule, and the text line stays for everyone else.
func TestRefusalJSON(t *testing.T) {
	for _, tc := range []struct {
		name, accept string
		rf           refusal
		json         bool
		action       policy.Action
	}{
		{"text by default", "*/*", refusalFor(stagePolicy, policy.Deny(policy.ReasonNoMatchingRule, ""), nil), false, ""},
		{"no accept", "", refusalFor(stagePolicy, policy.Deny(policy.ReasonNoMatchingRule, ""), nil), false, ""},
		{"q=0 refuses json", "application/json;q=0, text/plain", refusalFor(stagePolicy, policy.Deny(policy.ReasonNoMatchingRule, ""), nil), false, ""},
		{"rule deny is grantable", "application/json", refusalFor(stagePolicy, policy.Deny(policy.ReasonRuleDeny, "no-paste"), nil), true, policy.ActionRequestGrant},
		{"among others", "text/html, application/json;q=0.5", refusalFor(stagePolicy, policy.Deny(policy.ReasonNoMatchingRule, ""), nil), true, policy.ActionRequestGrant},
		{"floor is not", "application/json", refusalFor(stageDial, policy.Decision{}, &policy.DenyError{Reason: policy.ReasonMetadataAddress, Detail: "169.254.169.254"}), true, policy.ActionNone},
		{"limit says retry", "application/json", refusal{status: 429, verdict: verdict{Verdict: audit.Verdict{Reason: policy.ReasonRateLimited}}, retryAfter: 1500 * time.Millisecond}, true, policy.ActionRetryLater},
		{"auth", "application/json", refusalFor(stagePolicy, policy.Deny(policy.ReasonProxyAuthRequired, ""), nil), true, policy.ActionAuthenticate},
		{"malformed", "application/json", refusalFor(stageParse, policy.Decision{}, &policy.DenyError{Reason: "encoded_separator"}), true, policy.ActionNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := tc.rf.write(&b, tc.accept, "req-7"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(b.String())), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if strings.Contains(string(body), "169.254") {
				t.Errorf("body %q names the address", body)
			}
			if !tc.json {
				if resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" || !strings.HasPrefix(string(body), "egressd: denied: ") {
					t.Errorf("answer %q %q; want the text line", resp.Header.Get("Content-Type"), body)
				}
				return
			}
			var d policy.Denial
			if err := json.Unmarshal(body, &d); err != nil || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("answer %q %q: %v; want JSON", resp.Header.Get("Content-Type"), body, err)
			}
			want := policy.DenialOf(tc.rf.Reason, tc.rf.Rule, "req-7", d.RetryAfter)
			if d != want || d.Action != tc.action || !d.Denied || d.Class == "" {
				t.Errorf("denial %+v; want %+v with action %s", d, want, tc.action)
			}
			if tc.rf.retryAfter > 0 && d.RetryAfter != 2 {
				t.Errorf("retry_after %d; want 2 (rounded up)", d.RetryAfter)
			}
		})
	}
}
