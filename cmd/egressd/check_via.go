package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/url"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy"
)

// viaFlag registers check http's and check connect's --via: how the
// client reaches egressd, as records say it (audit.Via…). The policy
// decides every arrival alike; what differs is what the listener hands
// it (viaTunnel).
func viaFlag(fs *flag.FlagSet) *string {
	via := audit.ViaProxy
	fs.Func("via", "`VIA` the client reaches egressd by: proxy (HTTP_PROXY; the default), socks or transparent, as records' via says; "+
		"through socks or transparent a plain http:// request is a tunnel to its host, which its rule must allow with \"tls\": false", func(v string) error {
		switch v {
		case audit.ViaProxy, audit.ViaSOCKS, audit.ViaTransparent:
			via = v
			return nil
		}
		return fmt.Errorf("want proxy, socks or transparent, got %q", v)
	})
	return &via
}

// requestVia is the request's Via: "" for the proxy listener, the default.
func requestVia(via string) string {
	if via == audit.ViaProxy {
		return ""
	}
	return via
}

// viaTunnel decides a plain http:// request arriving through the SOCKS5
// or transparent listener as that listener does: a tunnel to the URL's
// host and port, decided as a CONNECT (its requests are then bound to that
// host), refused tls_required when its rule allows only TLS. ok is false
// for what the proxy listener's path decides (https:// is decided as a
// request in its inspected tunnel, or its CONNECT, either way).
func viaTunnel(ctx context.Context, env *decideEnv, req *checkRequest) (checkOutput, bool) {
	if req.Via == "" {
		return checkOutput{}, false
	}
	u, err := url.Parse(req.URL)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return checkOutput{}, false
	}
	authority := u.Host
	if u.Port() == "" {
		authority = net.JoinHostPort(u.Hostname(), "80")
	}
	d := policy.PreDial{Engine: env.engine, Floor: env.floor}
	out := outcomeOutput(policy.KindConnect, env, d.DecideConnect(ctx, env.identity, authority))
	if out.Allow && out.TLS {
		out.Allow, out.Reason, out.TLS = false, policy.ReasonTLSRequired, false
		out.Detail = "through " + req.Via + " a plain http:// request is a tunnel to " + authority + ", and its rule allows only TLS"
	}
	out.Via = req.Via
	return out, true
}
