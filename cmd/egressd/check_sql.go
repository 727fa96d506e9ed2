package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlfacts"
	"github.com/egressd/egressd/policy/sqlparse"
	"github.com/egressd/egressd/proxy/pggate"
)

// builtinsOnly is what a check says when it did not resolve calls
// against a real catalog.
const builtinsOnly = "built-ins only: every function, operator and cast is taken to be PostgreSQL's own; " +
	"pass --catalog to resolve them against postgres.upstream's catalog as the gate does"

func init() { checkKinds["sql"] = checkSQL }

// maxStdinSQL bounds what `check sql -` reads: far above any
// postgres.max_query_bytes a gate would accept.
const maxStdinSQL = 64 << 20

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
// same parser. With --catalog, calls, operators and casts are resolved
// against postgres.upstream's catalog as the gate resolves them; a
// catalog that cannot be read, or no postgres.upstream, denies
// (catalog_unavailable), as the gate refuses a login. Without it the
// check dials nothing and says it assumes built-ins only: a check run in
// CI must not reach a production database unasked.
var checkSQL = checkKind{
	args:  "SQL",
	nargs: 1,
	about: "Decide a query as the Postgres gate would: the login, then every statement, with the gate's own limits, parser and reasons. " +
		"With --catalog, calls, operators and casts are resolved against the catalog of the config's postgres.upstream, which it dials; " +
		"without, it dials nothing and assumes PostgreSQL's built-ins only (the output's assumes says so).",
	argHelp: [][2]string{
		{"SQL", "the query text, one or more statements; - reads it from standard input (for SQL that begins with -, or a file: < query.sql)"},
	},
	prepare: func(args []string, stdin io.Reader) ([]string, error) {
		if args[0] != "-" {
			return args, nil
		}
		b, err := io.ReadAll(io.LimitReader(stdin, maxStdinSQL+1))
		if err != nil {
			return nil, fmt.Errorf("check sql: read standard input: %w", err)
		}
		if len(b) > maxStdinSQL {
			return nil, usageErrorf("check sql: standard input holds more than %d bytes; the gate refuses queries past postgres.max_query_bytes anyway", maxStdinSQL)
		}
		if len(bytes.TrimSpace(b)) == 0 {
			return nil, usageErrorf("check sql -: standard input is empty; pipe the query in (egressd check sql - < query.sql)")
		}
		return []string{string(b)}, nil
	},
	setup: func(fs *flag.FlagSet) requestFunc {
		database := fs.String("database", "", "`DB` the session uses (default: the identity id, as PostgreSQL does)")
		catalog := fs.Bool("catalog", false, "resolve calls, operators and casts against postgres.upstream's catalog (dials it; default: built-ins only)")
		return func(args []string, req *checkRequest) {
			req.Kind, req.SQL, req.Database, req.Catalog = "sql", args[0], *database, *catalog
		}
	},
	decide: func(ctx context.Context, env *decideEnv, req *checkRequest) checkOutput {
		sql, db := req.SQL, cmp.Or(req.Database, env.identity.ID)
		pc := env.cfg.Postgres
		var cat *sqlfacts.Catalog
		if req.Catalog && pc.Upstream == "" {
			err := errors.New("--catalog needs postgres.upstream in the config: it names the database whose catalog resolves the calls")
			return refusedBeforePolicy(policy.KindSQL, env, &policy.DenyError{Reason: policy.ReasonCatalogUnavailable, Detail: err.Error(), Err: err})
		}
		if req.Catalog {
			// config.Load provisioned pc: StartupTimeout is set.
			cctx, cancel := context.WithTimeout(ctx, pc.StartupTimeout)
			var err error
			cat, err = pggate.UpstreamCatalog(cctx, pc, db)
			cancel()
			if err != nil {
				return refusedBeforePolicy(policy.KindSQL, env, &policy.DenyError{Reason: policy.ReasonCatalogUnavailable, Detail: err.Error(), Err: err})
			}
		}
		qd := pggate.DecideQuery(ctx, pc, env.engine, env.identity, db, cat, sql)
		if !qd.Connect.Allow {
			connect := sqlfacts.Connect(db)
			return decided(policy.KindSQL, env, []sqlStatement{{Statement: connect, Decision: qd.Connect}}, qd.Connect)
		}
		limits := sqlfacts.Limits{MaxLen: pc.MaxQueryBytes, MaxDepth: pc.MaxNesting, MaxOps: pc.MaxOperators}
		opts := sqlfacts.Options{Database: db, SearchPath: []string{pc.SearchPath}, Limits: limits, Catalog: cat}
		if len(qd.Statements) == 0 {
			out := decided(policy.KindSQL, env, nil, qd.Decision)
			// Say which bound refused, when it was the pre-scan's,
			// or what the parser found wrong, and where.
			var de *policy.DenyError
			if err := sqlfacts.Prescan(sql, limits); errors.As(err, &de) && de.Reason == qd.Reason {
				out.Detail = de.Detail
			} else if qd.Reason == policy.ReasonSQLParseError {
				_, err := sqlfacts.ParseContext(ctx, sql, opts)
				out.Detail = parseDetail(sql, err)
			}
			// The gate refused the text before any statement reached
			// the policy.
			if !qd.Allow {
				out.refused = &refusal{kind: policy.KindSQL, err: &policy.DenyError{Reason: qd.Reason, Detail: out.Detail}}
			}
			return out
		}
		// The facts are for the reader; the decisions are the gate's.
		sts, err := sqlfacts.ParseContext(ctx, sql, opts)
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
	},
}

// parseDetail is what the parser said about text: its message and, when
// it gives one, the position as PostgreSQL reports it (a 1-based character
// offset) and as the line and column an editor shows. Any other failure
// (a crashed worker) is its error text.
func parseDetail(text string, err error) string {
	var pe *sqlparse.Error
	if !errors.As(err, &pe) {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	if pe.Cursorpos <= 0 {
		return pe.Message
	}
	line, col := 1, 1
	for i, r := range []rune(text) {
		if i == pe.Cursorpos-1 {
			break
		}
		col++
		if r == '\n' {
			line, col = line+1, 1
		}
	}
	return fmt.Sprintf("%s at character %d (line %d, column %d)", pe.Message, pe.Cursorpos, line, col)
}
