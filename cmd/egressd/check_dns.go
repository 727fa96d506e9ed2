package main

import (
	"cmp"
	"context"
	"flag"
	"strings"

	"github.com/miekg/dns"

	"github.com/egressd/egressd/dnsguard"
	"github.com/egressd/egressd/policy"
)

func init() { checkKinds["dns"] = checkDNS }

// checkDNS is `egressd check dns NAME [--qtype TYPE]`: the decision the
// sandbox-facing DNS server takes before it resolves anything.
var checkDNS = checkKind{
	args:  "NAME",
	nargs: 1,
	about: "Decide a DNS question as the sandbox-facing DNS server would, before it resolves anything.",
	argHelp: [][2]string{
		{"NAME", "the name asked for, e.g. pypi.org"},
	},
	setup: func(fs *flag.FlagSet) requestFunc {
		qtype := fs.String("qtype", "A", "record `TYPE` asked for (A, AAAA, CNAME, TXT, …)")
		return func(args []string, req *checkRequest) { req.Kind, req.Name, req.QType = "dns", args[0], *qtype }
	},
	decide: func(ctx context.Context, env *decideEnv, req *checkRequest) checkOutput {
		qtype := cmp.Or(req.QType, "A")
		t, ok := dns.StringToType[strings.ToUpper(qtype)]
		if !ok {
			return refusedBeforePolicy(policy.KindDNS, env, &policy.DenyError{Reason: policy.ReasonQTypeNotAllowed, Detail: "unknown record type " + qtype})
		}
		facts, d, err := dnsguard.Decide(ctx, env.engine, env.identity, req.Name, t)
		if err != nil {
			return refusedBeforePolicy(policy.KindDNS, env, err)
		}
		return decided(policy.KindDNS, env, facts, d)
	},
}
