package main

import (
	"context"
	"flag"

	"github.com/egressd/egressd/policy"
)

// checkHTTP is `egressd check http METHOD URL`.
var checkHTTP = checkKind{
	args:  "METHOD URL",
	nargs: 2,
	setup: func(fs *flag.FlagSet) decideFunc {
		hostHeader := fs.String("host-header", "", "`HOST` header as the client would send it (default: none)")
		redirect := fs.Bool("redirect", false, "decide URL as a redirect target (kind redirect)")
		return func(ctx context.Context, env *decideEnv, args []string) checkOutput {
			kind := policy.KindHTTP
			if *redirect {
				kind = policy.KindRedirect
			}
			f, err := policy.ParseHTTP(kind, args[0], args[1], *hostHeader)
			if err != nil {
				return refusedBeforePolicy(kind, env, err)
			}
			return decided(kind, env, f, env.engine.Decide(ctx, policy.Input{Identity: env.identity, Facts: f}))
		}
	},
}

// checkConnect is `egressd check connect HOST:PORT`.
var checkConnect = checkKind{
	args:  "HOST:PORT",
	nargs: 1,
	setup: func(*flag.FlagSet) decideFunc {
		return func(ctx context.Context, env *decideEnv, args []string) checkOutput {
			f, err := policy.ParseConnect(args[0])
			if err != nil {
				return refusedBeforePolicy(policy.KindConnect, env, err)
			}
			return decided(policy.KindConnect, env, f, env.engine.Decide(ctx, policy.Input{Identity: env.identity, Facts: f}))
		}
	},
}
