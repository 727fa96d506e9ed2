// Package replay re-decides recorded decisions: it turns an audit record
// back into the request its listener decided (InputOf), decides it again
// with the listeners' own code against a bundle (Env.Decide), and, over a
// whole log, reports what a candidate bundle would change (Replayer).
// What a record does not hold exactly (a body, a DNS answer, a folded
// count) is classified by the missing fact, never guessed.
package replay

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/miekg/dns"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlfacts"
)

// Case is a recorded decision as its listener built the request: the
// arguments the listener handed the decision path, rebuilt from the
// record's fields. Which fields are set depends on Kind.
type Case struct {
	Kind policy.Kind
	// Identity is the record's identity id; Env.Identity adds its
	// attributes.
	Identity string
	// Request is an http or redirect record's request: its method and the
	// absolute URL the record names. No Host header (the record holds
	// none; a request refused for its Host is not re-decidable) and no
	// body (never recorded).
	Request policy.HTTPRequest
	// Inspected marks a request decided inside an inspected tunnel; it is
	// decided as `egressd check http` decides an https:// URL: the
	// tunnel's CONNECT, then the request inside it.
	Inspected bool
	// Authority is a connect record's "host:port".
	Authority string
	// Name and QType are a dns record's question.
	Name  string
	QType uint16
	// Database and SQL are a sql record's session database and statement,
	// as recorded: normalized, every literal a $n. SQL is empty for the
	// session's login decision.
	Database string
	SQL      string
}

// Missing says a record cannot be re-decided exactly, and which fact it
// lacks. It is the error of InputOf and the class of a Replayer entry.
type Missing struct {
	// Fact is the class of what is missing, a stable snake_case key
	// (one of the Fact constants).
	Fact Fact `json:"fact"`
	// Detail says what of this record.
	Detail string `json:"detail,omitempty"`
}

func (m *Missing) Error() string {
	if m.Detail == "" {
		return "not re-decidable: " + string(m.Fact)
	}
	return "not re-decidable: " + string(m.Fact) + ": " + m.Detail
}

// Fact is what a record lacks to be re-decided exactly.
type Fact string

// The facts a record may lack.
const (
	// FactFolded: an aggregate record counts refusals; it names no target.
	FactFolded Fact = "folded"
	// FactCapped: a target field was cut to audit.max_field_bytes.
	FactCapped Fact = "capped"
	// FactBody: the decision read (or may now read) the request's body,
	// which is never recorded.
	FactBody Fact = "body"
	// FactHostHeader: the request was refused for its Host header, which
	// is not recorded.
	FactHostHeader Fact = "host_header"
	// FactTarget: the target was refused while it was parsed, and the
	// record holds what was read of it, not the bytes sent.
	FactTarget Fact = "target_as_sent"
	// FactRequest: a check after the policy refused the request on what
	// it carried (headers, size, credentials, a ClientHello), and the new
	// bundle would allow it: whether that check passes is not known.
	FactRequest Fact = "request_after_policy"
	// FactDNSAnswer: the DNS answer decided after the policy; the new
	// bundle allows the name, and today's answer may differ.
	FactDNSAnswer Fact = "dns_answer"
	// FactSQLText: the statement's text is not recorded (none, a failed
	// redaction, capped), or facts were read from a literal the recorded
	// normalized text no longer holds.
	FactSQLText Fact = "sql_text"
	// FactOtherStatements: the statement was refused for another of its
	// query's statements, which the record does not link.
	FactOtherStatements Fact = "other_statements"
	// FactIdentity: the identity is not in the config's identities, so its
	// attributes are unknown.
	FactIdentity Fact = "identity"
	// FactGrant: a time-bound grant decided; grants are the replica's
	// state, not the bundle's, and are not replayed.
	FactGrant Fact = "grant"
	// FactOwnBundle: re-decided under the bundle that made it, the record
	// comes out otherwise than recorded (the config, identities or a
	// fact outside the record differ).
	FactOwnBundle Fact = "differs_under_own_bundle"
)

// ErrNotDecision is InputOf's error for a record that is no decision of an
// entry point: a completion, a writer record, a refused accept.
var ErrNotDecision = errors.New("not a decision record")

// InputOf rebuilds the request rec's listener decided. A record that is
// no decision yields ErrNotDecision; one that cannot be re-decided exactly
// a *Missing naming the fact it lacks.
func InputOf(rec *audit.Record) (Case, error) {
	c := Case{Identity: rec.Identity}
	switch rec.Kind {
	case audit.KindHTTP:
		c.Kind = policy.KindHTTP
	case audit.KindRedirect:
		c.Kind = policy.KindRedirect
	case audit.KindConnect:
		c.Kind = policy.KindConnect
	case audit.KindDNS:
		c.Kind = policy.KindDNS
	case audit.KindSQL:
		c.Kind = policy.KindSQL
	default:
		return Case{}, ErrNotDecision
	}
	if rec.Decision == "" {
		return Case{}, ErrNotDecision
	}
	if rec.Count > 0 {
		return Case{}, &Missing{Fact: FactFolded, Detail: fmt.Sprintf("%d refusals (%s) in one record", rec.Count, rec.Reason)}
	}
	if cut := cappedTarget(rec.Truncated); cut != "" {
		return Case{}, &Missing{Fact: FactCapped, Detail: cut + " cut to the field cap"}
	}
	if strings.HasPrefix(rec.Rule, policy.GrantRulePrefix) {
		return Case{}, &Missing{Fact: FactGrant, Detail: "decided by " + rec.Rule}
	}
	switch c.Kind {
	case policy.KindHTTP, policy.KindRedirect:
		return httpCase(c, rec)
	case policy.KindConnect:
		c.Authority = authority(rec.Host, rec.Port)
		return c, nil
	case policy.KindDNS:
		t, err := qtypeOf(rec.QType)
		if err != nil {
			return Case{}, &Missing{Fact: FactTarget, Detail: err.Error()}
		}
		c.Name, c.QType = rec.Name, t
		return c, nil
	}
	return sqlCase(c, rec)
}

// targetFields are the record fields a Case is built from and the policy
// reads. The query is not one: no rule sees it (it is not in the Rego
// input; TestQueryNotInInput), so a redacted or capped query does not stop
// a re-decision. The checks after the policy that read it (credentials,
// secrets) are classified as FactRequest.
var targetFields = []string{"method", "scheme", "host", "path", "name", "qtype", "database", "sql", "identity"}

// cappedTarget names the target fields of a record's "truncated" mark.
func cappedTarget(truncated string) string {
	var cut []string
	for f := range strings.SplitSeq(truncated, ",") {
		for _, t := range targetFields {
			if f == t {
				cut = append(cut, f)
			}
		}
	}
	return strings.Join(cut, ",")
}

func httpCase(c Case, rec *audit.Record) (Case, error) {
	if rec.Host == "" {
		// A redirect whose Location did not parse names no target.
		return Case{}, &Missing{Fact: FactTarget, Detail: "no target recorded"}
	}
	if rec.MCPMethod != "" || rec.Tool != "" || rec.Model != "" || rec.RPCID != "" || rec.ArgsHMAC != "" {
		return Case{}, &Missing{Fact: FactBody, Detail: "a rule decided on the body"}
	}
	target := rec.Scheme + "://" + authority(rec.Host, rec.Port) + rec.Path
	// A capped query may end inside an escape the parser refuses; the
	// policy never reads it (see targetFields), so it is left out. A
	// redacted one stays: its markers parse as the value did.
	if rec.Query != "" && !slices.Contains(strings.Split(rec.Truncated, ","), "query") {
		target += "?" + rec.Query
	}
	c.Request = policy.HTTPRequest{Method: rec.Method, Target: target}
	c.Inspected = rec.Inspected
	return c, nil
}

func sqlCase(c Case, rec *audit.Record) (Case, error) {
	c.Database, c.SQL = rec.Database, rec.SQL
	switch {
	case rec.SQL == sqlfacts.RedactionFailed:
		return Case{}, &Missing{Fact: FactSQLText, Detail: "the statement's redaction failed; no text recorded"}
	case strings.HasSuffix(rec.SQL, "…"):
		return Case{}, &Missing{Fact: FactSQLText, Detail: "the statement's text was cut to 32 KiB"}
	}
	return c, nil
}

// authority is host and port as "host:port", an IPv6 literal bracketed.
func authority(host string, port uint16) string {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// qtypeOf reads a record's qtype: a type's name, or "TYPEn" for one
// miekg/dns has no name for (as dnsguard writes it).
func qtypeOf(s string) (uint16, error) {
	if t, ok := dns.StringToType[s]; ok {
		return t, nil
	}
	if n, ok := strings.CutPrefix(s, "TYPE"); ok {
		if v, err := strconv.ParseUint(n, 10, 16); err == nil {
			return uint16(v), nil
		}
	}
	return 0, fmt.Errorf("qtype %q is no record type", s)
}
