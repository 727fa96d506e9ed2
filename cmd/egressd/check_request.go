package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
)

// checkRequest is one request to decide, whatever asked for it: a command
// line (its kind, flags and arguments), one line of `check --batch`, or one
// line of a POST /v1/check body. Every path decides it with decideRequest,
// so the three answer alike. The JSON names are the --batch line format
// (README, "Many checks at once").
type checkRequest struct {
	// Kind is http, redirect (an http request decided as a redirect
	// target, check http --redirect), connect, dns or sql.
	Kind string `json:"kind"`
	// Identity is the sandbox id; if empty, the run's default (--identity,
	// or the server's ?identity=), else "anonymous" where no identities
	// are configured.
	Identity string `json:"identity,omitempty"`

	// http and redirect: check http's METHOD and URL, --host-header,
	// --data (Body, its text), --content-type (default
	// application/json) and --content-encoding.
	Method          string  `json:"method,omitempty"`
	URL             string  `json:"url,omitempty"`
	HostHeader      string  `json:"host_header,omitempty"`
	Body            *string `json:"body,omitempty"`
	ContentType     string  `json:"content_type,omitempty"`
	ContentEncoding string  `json:"content_encoding,omitempty"`

	// connect: HOST:PORT.
	Target string `json:"target,omitempty"`
	// http and connect: --via, how the client reaches egressd (socks,
	// transparent); "" is the proxy listener.
	Via string `json:"via,omitempty"`

	// dns: the name and --qtype (default A).
	Name  string `json:"name,omitempty"`
	QType string `json:"qtype,omitempty"`

	// sql: the query, --database (default the identity id) and
	// --catalog (resolve calls against postgres.upstream's catalog,
	// dialling it; else built-ins only).
	SQL      string `json:"sql,omitempty"`
	Database string `json:"database,omitempty"`
	Catalog  bool   `json:"catalog,omitempty"`

	// stdin is the body of `check http --data -`: read only where a rule
	// decides on bodies, never sent anywhere.
	stdin io.Reader
}

// requestKinds maps a request's kind to the checkKind that decides it: a
// redirect is an http check.
func requestKind(name string) (checkKind, bool) {
	if name == "redirect" {
		name = "http"
	}
	k, ok := checkKinds[name]
	return k, ok
}

// parseRequest reads one request line: a JSON object with the fields of
// checkRequest and no others, whose kind names a check and which has the
// fields that kind needs.
func parseRequest(line []byte) (*checkRequest, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var req checkRequest
	if err := dec.Decode(&req); err != nil {
		return nil, fmt.Errorf("not a request object: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("more than one JSON value on the line")
	}
	if err := req.validate(); err != nil {
		return nil, err
	}
	return &req, nil
}

// validate checks that req's kind is known and that it has the fields the
// kind needs.
func (req *checkRequest) validate() error {
	var missing []string
	need := func(name, v string) {
		if v == "" {
			missing = append(missing, name)
		}
	}
	switch req.Kind {
	case "http", "redirect":
		need("method", req.Method)
		need("url", req.URL)
	case "connect":
		need("target", req.Target)
	case "dns":
		need("name", req.Name)
	case "sql":
		need("sql", req.SQL)
	case "":
		return fmt.Errorf(`"kind" is required: one of http, redirect, connect, dns, sql`)
	default:
		return fmt.Errorf("unknown kind %q: want one of http, redirect, connect, dns, sql", req.Kind)
	}
	if len(missing) > 0 {
		return fmt.Errorf("kind %s needs %s", req.Kind, strings.Join(missing, ", "))
	}
	switch {
	case req.Via == "":
	case req.Kind != "http" && req.Kind != "connect":
		return fmt.Errorf(`"via" is for kinds http and connect, got kind %s`, req.Kind)
	case req.Via != audit.ViaSOCKS && req.Via != audit.ViaTransparent && req.Via != audit.ViaProxy:
		return fmt.Errorf(`"via" must be proxy, socks or transparent, got %q`, req.Via)
	}
	return nil
}

// decideRequest decides req for the identity it names (else defaultID):
// the one decision function of a single check, --batch and POST
// /v1/check. An identity the config does not allow is an error (the
// request was not decided); everything else is an output, a deny among
// them.
func decideRequest(ctx context.Context, env *decideEnv, defaultID string, req *checkRequest) (checkOutput, error) {
	kind, ok := requestKind(req.Kind)
	if !ok {
		return checkOutput{}, fmt.Errorf("unknown kind %q", req.Kind)
	}
	id, err := resolveIdentity(env.ids, cmp.Or(req.Identity, defaultID))
	if err != nil {
		return checkOutput{}, err
	}
	renv := *env
	renv.identity = id
	return kind.decide(ctx, &renv, req), nil
}

// resolveIdentity mirrors the proxy: with no identities configured every
// client is "anonymous"; otherwise the id must be a configured one, and its
// attributes come along.
func resolveIdentity(store *identity.Store, id string) (policy.Identity, error) {
	if store.AllAnonymous() {
		if id == "" {
			return identity.Anonymous, nil
		}
		return policy.Identity{ID: id}, nil
	}
	if id == "" {
		return policy.Identity{}, usageErrorf("--identity is required: the config lists identities")
	}
	_, pid, ok := store.Lookup(id)
	if !ok {
		return policy.Identity{}, usageErrorf("--identity %q is not in the config's identities", id)
	}
	return pid, nil
}
