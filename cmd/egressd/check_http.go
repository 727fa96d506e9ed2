package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"strings"

	"github.com/egressd/egressd/policy"
)

// The http and connect checks go through policy.PreDial, the proxy's own
// pre-dial path: facts, the address floor for IP-literal hosts, then the
// policy. A check therefore answers what the proxy would; an https:// URL
// whose CONNECT the proxy would inspect is decided as a request inside
// the tunnel ("inspected": true).

// checkHTTP is `egressd check http METHOD URL`.
var checkHTTP = checkKind{
	args:  "METHOD URL",
	nargs: 2,
	about: "Decide an HTTP request (or, with --redirect, a redirect target) as the proxy would: facts, the address floor for an IP-literal host, then the policy.",
	argHelp: [][2]string{
		{"METHOD", "the request method as the client sends it (GET, POST, …)"},
		{"URL", "the absolute URL, e.g. http://deb.debian.org/debian/ (quote it in the shell)"},
	},
	prepare: func(args []string, _ io.Reader) ([]string, error) {
		// A URL where the method goes is a swapped command line, not a
		// request the proxy would see.
		if strings.Contains(args[0], "://") {
			return nil, usageErrorf("usage: egressd check http [flags] METHOD URL: the method comes first, got the URL %q first (write: egressd check http %s %s)", args[0], args[1], args[0])
		}
		return args, nil
	},
	setup: func(fs *flag.FlagSet) requestFunc {
		hostHeader := fs.String("host-header", "", "`HOST` header as the client would send it (default: none)")
		redirect := fs.Bool("redirect", false, "decide URL as a redirect target (kind redirect)")
		var data *string
		fs.Func("data", "the request `BODY`: @FILE, - for standard input, or the text itself; read (and its facts printed) only where a rule decides on bodies", func(v string) error {
			if name, ok := strings.CutPrefix(v, "@"); ok {
				b, err := os.ReadFile(name)
				if err != nil {
					return err
				}
				v = string(b)
			}
			data = &v
			return nil
		})
		ctype := fs.String("content-type", "application/json", "the body's `TYPE` (with --data)")
		encoding := fs.String("content-encoding", "", "the body's `CODING`, e.g. gzip (with --data)")
		via := viaFlag(fs)
		return func(args []string, req *checkRequest) {
			req.Via = requestVia(*via)
			req.Kind = "http"
			if *redirect {
				req.Kind = "redirect"
			}
			req.Method, req.URL, req.HostHeader = args[0], args[1], *hostHeader
			req.Body, req.ContentType, req.ContentEncoding = data, *ctype, *encoding
		}
	},
	decide: func(ctx context.Context, env *decideEnv, req *checkRequest) checkOutput {
		kind := policy.KindHTTP
		if req.Kind == "redirect" {
			kind = policy.KindRedirect
		}
		hr := policy.HTTPRequest{Method: req.Method, Target: req.URL, HostHeader: req.HostHeader}
		if req.Body != nil {
			hr.Body, hr.ContentType, hr.ContentEncoding = strings.NewReader(*req.Body), cmp.Or(req.ContentType, "application/json"), req.ContentEncoding
			if *req.Body == "-" && req.stdin != nil {
				hr.Body = req.stdin
			}
		}
		if out, ok := viaTunnel(ctx, env, req); ok {
			return out
		}
		d := policy.PreDial{Engine: env.engine, Floor: env.floor}
		out := outcomeOutput(kind, env, d.DecideRequest(ctx, env.identity, kind, hr))
		out.Via = req.Via
		return out
	},
}

// checkConnect is `egressd check connect HOST:PORT`.
var checkConnect = checkKind{
	args:  "HOST:PORT",
	nargs: 1,
	about: "Decide a CONNECT tunnel as the proxy would; only a host-wide rule opens one.",
	argHelp: [][2]string{
		{"HOST:PORT", "the CONNECT target, e.g. pypi.org:443 ([v6]:443 for an IPv6 literal)"},
	},
	setup: func(fs *flag.FlagSet) requestFunc {
		via := viaFlag(fs)
		return func(args []string, req *checkRequest) {
			req.Kind, req.Target, req.Via = "connect", args[0], requestVia(*via)
		}
	},
	decide: func(ctx context.Context, env *decideEnv, req *checkRequest) checkOutput {
		d := policy.PreDial{Engine: env.engine, Floor: env.floor}
		out := outcomeOutput(policy.KindConnect, env, d.DecideConnect(ctx, env.identity, req.Target))
		out.Via = req.Via
		return out
	},
}

// outcomeOutput prints a decider outcome: a refusal before the policy
// (parse or floor) keeps the facts known so far and the deny's detail.
func outcomeOutput(kind policy.Kind, env *decideEnv, o policy.Outcome) checkOutput {
	var facts any
	if o.Facts != nil {
		facts = o.Facts
	}
	if o.Err == nil {
		out := decided(kind, env, facts, o.Decision)
		out.Inspected = o.Inspected
		return out
	}
	out := refusedBeforePolicy(kind, env, o.Err)
	out.Facts, out.Inspected, out.refused.facts = facts, o.Inspected, o.Facts
	var de *policy.DenyError
	if !errors.As(o.Err, &de) {
		out.Reason = o.Decision.Reason
	}
	return out
}
