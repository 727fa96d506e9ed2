package main

import (
	"context"
	"flag"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlfacts"
)

func init() { checkKinds["sql"] = checkSQL }

// sqlStatement is one statement's facts and decision in the check output.
type sqlStatement struct {
	*sqlfacts.Statement
	SQL      string          `json:"sql"`
	Decision policy.Decision `json:"decision"`
}

// checkSQL is `egressd check sql [--database DB] "SQL"`: the facts and
// decision of every statement, and the query's decision — a deny of any
// statement denies the whole query, as the Postgres gate does.
var checkSQL = checkKind{
	args:  "SQL",
	nargs: 1,
	setup: func(fs *flag.FlagSet) decideFunc {
		database := fs.String("database", "", "`DB` the session uses (default: the identity id, as PostgreSQL does)")
		return func(ctx context.Context, env *decideEnv, args []string) checkOutput {
			db := *database
			if db == "" {
				db = env.identity.ID
			}
			pc := env.cfg.Postgres
			connect := &sqlfacts.Statement{Command: "connect", Database: db, Relations: []sqlfacts.Relation{}, Functions: []sqlfacts.Function{}}
			if d := env.engine.Decide(ctx, policy.Input{Identity: env.identity, Facts: connect}); !d.Allow {
				return decided(policy.KindSQL, env, []sqlStatement{{Statement: connect, Decision: d}}, d)
			}
			sts, err := sqlfacts.ParseContext(ctx, args[0], sqlfacts.Options{
				Database:   db,
				SearchPath: []string{pc.SearchPath},
				Limits:     sqlfacts.Limits{MaxLen: pc.MaxQueryBytes, MaxDepth: pc.MaxNesting, MaxOps: pc.MaxOperators},
			})
			if err != nil {
				return refusedBeforePolicy(policy.KindSQL, env, err)
			}
			out := make([]sqlStatement, len(sts))
			query := policy.Decision{Allow: true, Reason: "allowed", Policy: env.engine.Digest()}
			for i, st := range sts {
				d := env.engine.Decide(ctx, policy.Input{Identity: env.identity, Facts: st})
				out[i] = sqlStatement{Statement: st, SQL: st.Text, Decision: d}
				if query.Allow {
					query = d
				}
			}
			return decided(policy.KindSQL, env, out, query)
		}
	},
}
