package main

import (
	"context"
	"errors"
	"flag"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlfacts"
	"github.com/egressd/egressd/proxy/pggate"
)

// builtinsOnly is what a check says when it could not resolve calls
// against a real catalog.
const builtinsOnly = "built-ins only: the config names no postgres.upstream, so every function, operator and cast is taken to be PostgreSQL's own; " +
	"set postgres.upstream to resolve them against the database's catalog as the gate does"

func init() { checkKinds["sql"] = checkSQL }

// sqlStatement is one statement's facts and decision in the check output.
type sqlStatement struct {
	*sqlfacts.Statement
	SQL      string          `json:"sql"`
	Decision policy.Decision `json:"decision"`
}

// checkSQL is `egressd check sql [--database DB] "SQL"`: the decision of
// the query and of every statement, made by the Postgres gate's own code
// (pggate.DecideQuery), so a statement the gate refuses with its query
// shows here as other_statement_denied too. The facts shown come from the
// same parser. When the config names postgres.upstream, calls, operators
// and casts are resolved against that database's catalog as the gate
// resolves them; a catalog that cannot be read denies
// (catalog_unavailable), as it refuses a login.
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
			var cat *sqlfacts.Catalog
			if pc.Upstream != "" {
				// config.Load provisioned pc: StartupTimeout is set.
				cctx, cancel := context.WithTimeout(ctx, pc.StartupTimeout)
				var err error
				cat, err = pggate.UpstreamCatalog(cctx, pc, db)
				cancel()
				if err != nil {
					return refusedBeforePolicy(policy.KindSQL, env, &policy.DenyError{Reason: policy.ReasonCatalogUnavailable, Detail: err.Error(), Err: err})
				}
			}
			qd := pggate.DecideQuery(ctx, pc, env.engine, env.identity, db, cat, args[0])
			if !qd.Connect.Allow {
				connect := &sqlfacts.Statement{Command: "connect", Database: db, Relations: []sqlfacts.Relation{}, Functions: []sqlfacts.Function{}}
				return decided(policy.KindSQL, env, []sqlStatement{{Statement: connect, Decision: qd.Connect}}, qd.Connect)
			}
			limits := sqlfacts.Limits{MaxLen: pc.MaxQueryBytes, MaxDepth: pc.MaxNesting, MaxOps: pc.MaxOperators}
			if len(qd.Statements) == 0 {
				out := decided(policy.KindSQL, env, nil, qd.Decision)
				// Say which bound refused, when it was the pre-scan's.
				var de *policy.DenyError
				if err := sqlfacts.Prescan(args[0], limits); errors.As(err, &de) && de.Reason.String() == qd.Reason {
					out.Detail = de.Detail
				}
				return out
			}
			// The facts are for the reader; the decisions are the gate's.
			sts, err := sqlfacts.ParseContext(ctx, args[0], sqlfacts.Options{Database: db, SearchPath: []string{pc.SearchPath}, Limits: limits, Catalog: cat})
			out := make([]sqlStatement, len(qd.Statements))
			for i, sd := range qd.Statements {
				out[i] = sqlStatement{SQL: sd.SQL, Decision: sd.Decision}
				if err == nil && len(sts) == len(qd.Statements) {
					out[i].Statement = sts[i]
				}
			}
			res := decided(policy.KindSQL, env, out, qd.Decision)
			if cat == nil {
				res.Assumes = builtinsOnly
			}
			return res
		}
	},
}
