package grants

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy"
)

// maxSegments bounds the search for a request's record: the newest
// segments only, as a grant answers a refusal the operator just saw.
const maxSegments = 4

// errNotFound means no decision record names the request.
var errNotFound = errors.New("not found")

// findDecision returns the decision record of request id in the newest
// maxSegments segments of dir, newest segment first. Completions and
// writer records are skipped.
func findDecision(dir, id string) (*audit.Record, error) {
	segs, err := audit.ListSegments(dir)
	if err != nil {
		return nil, fmt.Errorf("read audit log %s: %w", dir, err)
	}
	for i := len(segs) - 1; i >= 0 && i >= len(segs)-maxSegments; i-- {
		rec, err := findIn(segs[i], id)
		if err != nil || rec != nil {
			return rec, err
		}
	}
	return nil, fmt.Errorf("request %q: no decision record in the newest %d segment(s) of %s: %w", id, min(len(segs), maxSegments), dir, errNotFound)
}

// findIn reads one segment for id's decision record. A refusal after the
// decision, in a completion (the address floor at dial), is the request's
// verdict: the record returned has the decision's target and the
// completion's verdict.
func findIn(path, id string) (*audit.Record, error) {
	rd, err := audit.NewReader([]string{path})
	if err != nil {
		return nil, fmt.Errorf("read audit log %s: %w", path, err)
	}
	defer rd.Close()
	var found *audit.Record
	for {
		r, err := rd.Next()
		if err == io.EOF {
			return found, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read audit log %s: %w", path, err)
		}
		switch {
		case r.Request != id || r.Decision == "":
		case !r.Kind.IsCompletion():
			cp := *r
			found = &cp
		case found != nil && r.Decision == audit.DecisionDeny:
			found.Decision, found.Reason, found.Rule = r.Decision, r.Reason, r.Rule
		}
	}
}

// refusal is a request the caller may not have, with the HTTP status that
// says so.
type refusal struct {
	status int
	err    error
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

func refuse(status int, format string, a ...any) error {
	return &refusal{status: status, err: fmt.Errorf(format, a...)}
}

// fromRecord is the grant that lifts the refusal rec records: exactly its
// identity, method, host, port and path, or, with tunnel, host-wide for
// its identity, host and port. The grant's id, expiry and provenance are
// the caller's to set.
func fromRecord(rec *audit.Record, tunnel bool) (policy.Grant, error) {
	id := rec.Request
	if rec.Decision != audit.DecisionDeny {
		return policy.Grant{}, refuse(409, "request %s was allowed (rule %q): there is nothing to grant", id, rec.Rule)
	}
	if rec.Count > 0 || rec.Identity == "" {
		return policy.Grant{}, refuse(409, "request %s was refused before its identity was known (%s): authenticate the sandbox; no grant lifts that", id, rec.Reason)
	}
	if reason := policy.Reason(rec.Reason); !reason.Liftable() {
		return policy.Grant{}, refuse(409, "request %s was denied %s, which protects the box (the address floor, a request fact, a secret leaving, the audit log or the engine), not a rule's decision: no grant lifts it", id, reason)
	}
	if !policy.Grantable(policy.Reason(rec.Reason), rec.Rule) {
		// A grant is an allow rule after the bundle's own: the rule
		// that refused matches first, and would refuse again.
		return policy.Grant{}, refuse(409, "request %s was refused %s by the rule %q, which a grant does not override: change that rule (and reload) instead", id, rec.Reason, rec.Rule)
	}
	g := policy.Grant{Identity: rec.Identity, Host: rec.Host, Port: int(rec.Port), FromRequest: id}
	switch rec.Kind {
	case audit.KindConnect:
		if !tunnel {
			return policy.Grant{}, refuse(400, "request %s is a CONNECT to %s: granting it opens an opaque tunnel, host-wide for identity %q; ask for that with \"tunnel\": true (egressd grant --tunnel)",
				id, net.JoinHostPort(rec.Host, strconv.Itoa(int(rec.Port))), rec.Identity)
		}
		g.Tunnel = true
		return g, nil
	case audit.KindHTTP, audit.KindRedirect:
		if tunnel {
			g.Tunnel = true
			return g, nil
		}
		u := rec.Scheme + "://" + net.JoinHostPort(rec.Host, strconv.Itoa(int(rec.Port))) + rec.Path
		f, err := policy.ParseHTTP(policy.KindHTTP, rec.Method, u, "")
		if err != nil {
			return policy.Grant{}, refuse(409, "request %s: its target %s cannot be granted: %v", id, u, err)
		}
		rg, err := policy.GrantFor(rec.Identity, rec.Method, f)
		if err != nil {
			return policy.Grant{}, refuse(409, "request %s: %v", id, err)
		}
		rg.FromRequest = id
		return rg, nil
	}
	return policy.Grant{}, refuse(409, "request %s is a %s decision: grants lift HTTP and CONNECT refusals only", id, rec.Kind)
}
