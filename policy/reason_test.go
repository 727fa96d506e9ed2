package policy_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/egressd/egressd/policy"
)

// TestReasonCodes pins how each protocol refuses with the reasons whose
// codes matter to clients: a rename or a reclassification that turns a 502
// into a 403 fails here.
func TestReasonCodes(t *testing.T) {
	tests := []struct {
		name   policy.Reason
		class  policy.Class
		status int
		rcode  int
		state  string
	}{
		{policy.ReasonNoMatchingRule, policy.ClassPolicy, http.StatusForbidden, dns.RcodeRefused, "42501"},
		{"write_denied", policy.ClassPolicy, http.StatusForbidden, dns.RcodeRefused, "42501"},
		{policy.ReasonMetadataAddress, policy.ClassPolicy, http.StatusForbidden, dns.RcodeRefused, "42501"},
		{policy.ReasonMalformedURL, policy.ClassMalformed, http.StatusBadRequest, dns.RcodeRefused, "08004"},
		{policy.ReasonProxyAuthRequired, policy.ClassIdentity, http.StatusProxyAuthRequired, dns.RcodeRefused, "28P01"},
		{policy.ReasonAuthenticationFailed, policy.ClassIdentity, http.StatusProxyAuthRequired, dns.RcodeRefused, "28P01"},
		{policy.ReasonIdentityRevoked, policy.ClassIdentity, http.StatusForbidden, dns.RcodeRefused, "28000"},
		{policy.ReasonRateLimited, policy.ClassLimit, http.StatusTooManyRequests, dns.RcodeRefused, "53300"},
		{policy.ReasonAuditBudgetExceeded, policy.ClassLimit, http.StatusTooManyRequests, dns.RcodeRefused, "53300"},
		{policy.ReasonSessionLimit, policy.ClassLimit, http.StatusTooManyRequests, dns.RcodeRefused, "53300"},
		{policy.ReasonDNSFailure, policy.ClassUpstream, http.StatusBadGateway, dns.RcodeServerFailure, "08001"},
		{policy.ReasonDNSNXDomain, policy.ClassUpstream, http.StatusBadGateway, dns.RcodeNameError, "08001"},
		{policy.ReasonDNSNoAddress, policy.ClassUpstream, http.StatusBadGateway, dns.RcodeSuccess, "08001"},
		{policy.ReasonUpstreamTimeout, policy.ClassUpstream, http.StatusGatewayTimeout, dns.RcodeServerFailure, "08001"},
		{policy.ReasonUpstreamUnavailable, policy.ClassUpstream, http.StatusBadGateway, dns.RcodeServerFailure, "08001"},
		{policy.ReasonAuditUnavailable, policy.ClassUnavailable, http.StatusServiceUnavailable, dns.RcodeRefused, "42501"},
		{policy.ReasonShuttingDown, policy.ClassUnavailable, http.StatusServiceUnavailable, dns.RcodeRefused, "57P01"},
		{policy.ReasonClientClosed, policy.ClassClient, http.StatusBadGateway, dns.RcodeRefused, "08006"},
	}
	for _, tt := range tests {
		t.Run(tt.name.String(), func(t *testing.T) {
			if got := tt.name.Class(); got != tt.class {
				t.Errorf("%s.Class() = %s; want %s", tt.name, got, tt.class)
			}
			c := tt.name.Codes()
			if c.HTTP != tt.status || c.Rcode != tt.rcode || c.SQLState != tt.state {
				t.Errorf("%s.Codes() = %d %s %s; want %d %s %s", tt.name, c.HTTP, dns.RcodeToString[c.Rcode], c.SQLState,
					tt.status, dns.RcodeToString[tt.rcode], tt.state)
			}
		})
	}
}

// TestReasonsDeclaredOnce checks that every Reason constant of reasons.go
// is in the table, and the table holds nothing else.
func TestReasonsDeclaredOnce(t *testing.T) {
	declared := reasonConstants(t)
	for r, n := range declared {
		if !r.Declared() {
			t.Errorf("%s (%q) is not in the reason table", n, r)
		}
	}
	for _, r := range policy.Reasons() {
		if _, ok := declared[r]; !ok {
			t.Errorf("table reason %q is not a constant of reasons.go", r)
		}
	}
}

// TestReasonNamesFollowValues holds each constant's name to its value: the
// value's snake_case words in CamelCase after "Reason", an initialism in
// capitals or not (ReasonSQLParseError for sql_parse_error), so that
// reading a name tells the reason a client sees.
func TestReasonNamesFollowValues(t *testing.T) {
	for r, name := range reasonConstants(t) {
		t.Run(r.String(), func(t *testing.T) {
			if want := camelName(r); !strings.EqualFold(name, want) || !wordsStartUpper(name, r) {
				t.Errorf("constant for %q is %s; want %s (capitals of an initialism may differ)", r, name, want)
			}
		})
	}
}

// camelName is "Reason" and r's words, each capitalised.
func camelName(r policy.Reason) string {
	var b strings.Builder
	b.WriteString("Reason")
	for _, w := range strings.Split(r.String(), "_") {
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	return b.String()
}

// wordsStartUpper reports whether each word of r starts with a capital in
// name, which EqualFold with camelName already matched letter by letter.
func wordsStartUpper(name string, r policy.Reason) bool {
	i := len("Reason")
	for _, w := range strings.Split(r.String(), "_") {
		if i >= len(name) || name[i] < 'A' || name[i] > 'Z' {
			return false
		}
		i += len(w)
	}
	return i == len(name)
}

// reasonConstants maps each Reason constant of reasons.go to its name.
func reasonConstants(t *testing.T) map[policy.Reason]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "reasons.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[policy.Reason]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Reason" {
				continue
			}
			for i, n := range vs.Names {
				v, err := strconv.Unquote(vs.Values[i].(*ast.BasicLit).Value)
				if err != nil {
					t.Fatal(err)
				}
				if prev, dup := declared[policy.Reason(v)]; dup {
					t.Errorf("%q declared twice: %s and %s", v, prev, n.Name)
				}
				declared[policy.Reason(v)] = n.Name
			}
		}
	}
	return declared
}

const (
	readmeBegin = "<!-- reasons:begin (generated: go test ./policy -run TestReadmeReasons -update) -->\n"
	readmeEnd   = "<!-- reasons:end -->\n"
)

// TestReadmeReasons fails when README.md's list of reasons misses one the
// code declares, names one it does not, or gives other codes than the
// table's.
func TestReadmeReasons(t *testing.T) {
	const path = "../README.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, readmeBegin), strings.Index(doc, readmeEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no reasons list between %q and %q", path, readmeBegin, readmeEnd)
	}
	got, want := doc[i+len(readmeBegin):j], reasonsMarkdown()
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(doc[:i+len(readmeBegin)]+want+doc[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	// Code spans are the odd fields between backquotes.
	listed := map[string]bool{}
	for k, f := range strings.Split(got, "`") {
		if k%2 == 1 {
			listed[f] = true
		}
	}
	for _, r := range policy.Reasons() {
		if !listed[r.String()] {
			t.Errorf("%s does not list reason %s", path, r)
		}
		delete(listed, r.String())
	}
	for f := range listed {
		t.Errorf("%s lists reason %s, which no code declares", path, f)
	}
	t.Errorf("%s's reasons list differs from the table; rerun with -update:\n%s", path, want)
}

// reasonsMarkdown is README's list: one row per class and set of codes.
func reasonsMarkdown() string {
	type row struct {
		class   policy.Class
		codes   policy.Codes
		action  policy.Action
		reasons []string
	}
	var rows []*row
	for _, r := range policy.Reasons() {
		c, cl, a := r.Codes(), r.Class(), r.Action()
		var found *row
		for _, x := range rows {
			if x.class == cl && x.codes == c && x.action == a {
				found = x
			}
		}
		if found == nil {
			found = &row{class: cl, codes: c, action: a}
			rows = append(rows, found)
		}
		found.reasons = append(found.reasons, "`"+r.String()+"`")
	}
	// Classes in their declared order, rows of one class by first reason.
	var b strings.Builder
	b.WriteString("| class | HTTP | DNS | SQLSTATE | agent action | reasons |\n| --- | --- | --- | --- | --- | --- |\n")
	for cl := policy.ClassPolicy; cl <= policy.ClassClient; cl++ {
		for _, x := range rows {
			if x.class != cl {
				continue
			}
			b.WriteString("| " + cl.String() + " | " + strconv.Itoa(x.codes.HTTP) + " | " + dns.RcodeToString[x.codes.Rcode] +
				" | " + x.codes.SQLState + " | `" + string(x.action) + "` | " + strings.Join(x.reasons, ", ") + " |\n")
		}
	}
	return b.String()
}

// TestLiftable: rule decisions may be observed or granted; the refusals
// that protect the box never.
func TestLiftable(t *testing.T) {
	for r, want := range map[policy.Reason]bool{
		policy.ReasonNoMatchingRule: true, policy.ReasonRuleDeny: true, policy.ReasonPolicyDenied: true,
		policy.ReasonMCPToolDenied: true, policy.ReasonModelDenied: true,
		"tunnel_needs_host_wide_rule": true, "write_denied": true, "sql_database_denied": true,
		policy.ReasonMetadataAddress: false, policy.ReasonPrivateAddress: false, policy.ReasonMetadataName: false,
		policy.ReasonMalformedURL: false, policy.ReasonSecretInRequest: false, policy.ReasonAuditUnavailable: false,
		policy.ReasonPolicyError: false, policy.ReasonNoDecision: false, policy.ReasonHostMismatch: false,
		policy.ReasonProxyAuthRequired: false, policy.ReasonRateLimited: false, policy.ReasonTLSRequired: false,
		policy.ReasonTokenBudgetExceeded: false, policy.ReasonSQLParseError: false,
		"encoded_separator": false, "dot_segment": false, "invalid_utf8": false, "ip_obfuscated": false, "userinfo": false,
	} {
		if got := r.Liftable(); got != want {
			t.Errorf("%s.Liftable() = %v; want %v", r, got, want)
		}
	}
}
