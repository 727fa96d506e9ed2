package pggate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlfacts"
)

// oracle is the harness: a superuser session on the scratch database, the
// gate whose decisions are checked, and what the catalog says of the
// scratch relations.
type oracle struct {
	t    *testing.T
	dsn  string
	db   string
	role string
	// conn is the harness session a run uses: rw, or ro (started with
	// default_transaction_read_only on) for the profiles that may write
	// nothing.
	conn, rw, ro *pgconn.PgConn
	g            *Gate
	cat          *sqlfacts.Catalog
	// relkind is pg_class.relkind by "schema.name".
	relkind map[string]byte
	// viewBase maps an auto-updatable view to the table its writes land
	// in.
	viewBase map[string]string
	// ownedSeqs are the sequences a table's column defaults draw from: a
	// write to the table may use them.
	ownedSeqs map[string][]string
	// funcs are the regprocedure signatures by "schema.name".
	funcs map[string][]string
	// pinnedQuery lists data.sql.pinned_settings with their current
	// values, one row each.
	pinnedQuery string
	found       map[string]discrepancy
	stats       oracleStats
}

type discrepancy struct {
	profile, kind, detail, sql string
}

func (d discrepancy) key() string {
	return d.profile + "\t" + d.kind + "\t" + d.detail + "\t" + strconv.Quote(d.sql)
}

type oracleStats struct {
	decided, allowed, ran, skipped, retried, undecided int
	// userCalls counts the statements that ran a user function.
	userCalls int
	denied    map[policy.Reason]int
	errors    map[string]int
}

func (s *oracleStats) log(t *testing.T, corpus, generated int, took time.Duration) {
	t.Logf("oracle: %d corpus + %d generated texts, %d decisions in %v: %d allowed, %d ran (%d calling user functions), %d skipped (session or transaction control), %d policy retries, %d undecided",
		corpus, generated, s.decided, took.Round(time.Millisecond), s.allowed, s.ran, s.userCalls, s.skipped, s.retried, s.undecided)
	t.Logf("oracle: denies by reason %v", s.denied)
	t.Logf("oracle: server errors by SQLSTATE (not discrepancies unless 42501) %v", s.errors)
}

// oracleDBs keeps the scratch databases and roles of repeated runs apart.
var oracleDBs = 0

func newOracle(t *testing.T) *oracle {
	t.Helper()
	pg := sharedPG(t)
	oracleDBs++
	o := &oracle{t: t, db: fmt.Sprintf("oracle%d", oracleDBs), role: fmt.Sprintf("oracle_r%d_%d", os.Getpid(), oracleDBs),
		viewBase: map[string]string{"public.v_t": "public.t"}, found: map[string]discrepancy{},
		stats: oracleStats{denied: map[policy.Reason]int{}, errors: map[string]int{}}}
	schema, err := os.ReadFile("testdata/oracle/schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if err := pg.Exec(ctx, "postgres", "CREATE DATABASE "+o.db); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "postgres", "CREATE ROLE "+o.role+" NOLOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, c := range []*pgconn.PgConn{o.rw, o.ro} {
			if c != nil {
				c.Close(ctx)
			}
		}
		// Clean-up of a shared server: a leftover is harmless.
		_ = pg.Exec(ctx, "postgres", "DROP DATABASE "+o.db)
		_ = pg.Exec(ctx, "postgres", "DROP ROLE "+o.role)
	})
	if err := pg.Exec(ctx, o.db, string(schema)); err != nil {
		t.Fatal(err)
	}
	o.dsn = pg.DSN(o.db)
	o.connect()
	if o.cat, err = LoadCatalog(ctx, o.conn, nil); err != nil {
		t.Fatal(err)
	}
	o.relkind = map[string]byte{}
	for _, r := range o.query("SELECT n.nspname || '.' || c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname IN ('public', 'private')") {
		o.relkind[r[0]] = r[1][0]
	}
	o.ownedSeqs = map[string][]string{}
	for _, r := range o.query(`SELECT tn.nspname || '.' || tc.relname, sn.nspname || '.' || sc.relname
		FROM pg_depend d JOIN pg_class sc ON sc.oid = d.objid AND sc.relkind = 'S' JOIN pg_namespace sn ON sn.oid = sc.relnamespace
		JOIN pg_class tc ON tc.oid = d.refobjid JOIN pg_namespace tn ON tn.oid = tc.relnamespace
		WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')`) {
		o.ownedSeqs[r[0]] = append(o.ownedSeqs[r[0]], r[1])
	}
	o.funcs = map[string][]string{}
	for _, r := range o.query("SELECT n.nspname || '.' || p.proname, p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname IN ('public', 'private')") {
		o.funcs[r[0]] = append(o.funcs[r[0]], r[1])
	}
	o.pinnedQuery = pinnedQuery(t)
	cfg := DefaultConfig()
	cfg.Upstream = "postgres://oracle@127.0.0.1:1/?sslmode=disable"
	// The gate is used for its decisions only: it never dials.
	var d net.Dialer
	if o.g, err = New(cfg, Deps{Engine: oracleEngine(t), Identities: testIdentities(t), Audit: &audittest.Recorder{}, Dial: d.DialContext}); err != nil {
		t.Fatal(err)
	}
	return o
}

// udfProfile is read_only plus two user functions allowed by qualified
// name: the oracle checks that a call the facts resolve to an allowed user
// function is the only user function that runs.
const udfProfile = "read_only_udf"

// oracleEngine is the shipped SQL bundle with one more profile,
// udfProfile; read_only and read_write are the shipped ones.
func oracleEngine(t *testing.T) *policy.Engine {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"base.rego", "sql.rego", "sql/data.json"} {
		b, err := os.ReadFile(filepath.Join("../../rego", f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "sql/data.json" {
			var data map[string]any
			if err := json.Unmarshal(b, &data); err != nil {
				t.Fatal(err)
			}
			profiles := data["profiles"].(map[string]any)
			udf := maps.Clone(profiles["read_only"].(map[string]any))
			udf["functions"] = []string{"common", "oracle_udf"}
			profiles[udfProfile] = udf
			data["function_sets"].(map[string]any)["oracle_udf"] = []string{"public.app_fmt", "public.app_cents"}
			if b, err = json.Marshal(data); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := policy.DefaultConfig()
	cfg.Dir = dir
	cfg.EvalTimeout = 10 * time.Second // decisions, not evaluation time, are under test
	e, err := policy.New(context.Background(), cfg, zap.NewNop())
	if err != nil {
		t.Fatalf("policy.New: %v", err)
	}
	return e
}

// connect (re)opens the harness session: after a client-side timeout
// pgconn closes the connection.
func (o *oracle) connect() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []*pgconn.PgConn{o.rw, o.ro} {
		if c != nil {
			c.Close(ctx)
		}
	}
	for _, readOnly := range []bool{false, true} {
		cfg, err := pgconn.ParseConfig(o.dsn)
		if err != nil {
			o.t.Fatalf("oracle: %v", err)
		}
		if readOnly {
			// As the gate starts the sessions of a profile that may
			// write nothing: the pin is the session's starting value.
			cfg.RuntimeParams[readOnlyParam] = "on"
		}
		c, err := pgconn.ConnectConfig(ctx, cfg)
		if err != nil {
			o.t.Fatalf("oracle: connect: %v", err)
		}
		// A superuser setting: the restricted role cannot turn it off.
		if _, err := c.Exec(ctx, "SET track_functions = 'all'").ReadAll(); err != nil {
			o.t.Fatalf("oracle: %v", err)
		}
		if readOnly {
			o.ro = c
		} else {
			o.rw = c
		}
	}
	o.conn = o.rw
}

func (o *oracle) query(sql string) [][]string {
	o.t.Helper()
	return rows(o.t, o.conn, sql)
}

// notRun are the commands the harness does not execute: they would end
// its transaction, outlive it (prepared statements, cursors, DISCARD), or
// run nothing.
var notRun = map[string]bool{
	"transaction": true, "discard": true, "prepare": true, "execute": true, "deallocate": true,
	"declare_cursor": true, "fetch": true, "close_portal": true, "listen": true, "unlisten": true,
}

// check decides text for the identity and, if allowed, runs it against
// the witnesses.
func (o *oracle) check(id policy.Identity, text string) {
	o.stats.decided++
	q := query{ident: id, db: o.db, prefix: cacheKeyPrefix(id, o.db), cat: o.cat, text: text}
	v := o.g.verdict(context.Background(), q)
	for i := 0; i < 3 && !v.cacheable; i++ {
		// A policy timeout on a loaded machine: decide again rather than
		// let the load pick what runs.
		o.stats.retried++
		v = o.g.verdict(context.Background(), q)
	}
	if !v.cacheable {
		// Still no decision: what would have run is unknown, so this
		// run cannot tell a fixed gap from a skipped one.
		o.stats.undecided++
	}
	if !v.allow {
		o.stats.denied[v.reason]++
		return
	}
	o.stats.allowed++
	sts, err := sqlfacts.Parse(text, o.g.parseOptions(o.db, o.cat))
	if err != nil {
		o.t.Errorf("oracle: %q allowed, but its facts fail: %v", text, err)
		return
	}
	copyFrom := false
	for _, st := range sts {
		if notRun[st.Command] {
			o.stats.skipped++
			return
		}
		copyFrom = copyFrom || st.Copy != nil && st.Copy.Direction == "from"
	}
	if copyFrom && len(sts) > 1 {
		o.stats.skipped++
		return
	}
	o.run(id.Attributes["sql_profile"], text, sts, copyFrom)
}

// run executes text as the restricted role holding the privileges sts
// name, and compares what the server did with sts.
func (o *oracle) run(profile, text string, sts []*sqlfacts.Statement, copyFrom bool) {
	o.stats.ran++
	report := func(kind, detail string) {
		d := discrepancy{profile: profile, kind: kind, detail: detail, sql: text}
		o.found[d.key()] = d
	}
	// The function counters are the backend's unflushed ones: they are
	// flushed only between transactions, not per transaction, so the
	// witness is their growth within this one.
	// The pinned settings are read as the restricted role, just before
	// and just after the statement. The transaction is read-write on
	// either session, so that the write witnesses see what the facts
	// missed rather than PostgreSQL's refusal.
	o.conn = o.rw
	if profileWrites[profile] == "\x00" {
		o.conn = o.ro
	}
	pre := "BEGIN READ WRITE; SET LOCAL statement_timeout = '5s'; SET LOCAL lock_timeout = '1s'; " + o.grants(sts) + funcCalls +
		"; SET LOCAL oracle.active = 'on'; SET LOCAL ROLE " + o.role + "; " + o.pinnedQuery
	res, err := o.conn.Exec(ctxT(o.t), pre).ReadAll()
	if err != nil || len(res) < 4 {
		o.t.Fatalf("oracle: harness setup %q: %v", pre, err)
	}
	before := map[string]string{}
	for _, row := range res[len(res)-4].Rows {
		before[string(row[0])] = string(row[1])
	}
	pinnedBefore := map[string]string{}
	for _, row := range res[len(res)-1].Rows {
		pinnedBefore[string(row[0])] = string(row[1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	if copyFrom {
		_, err = o.conn.CopyFrom(ctx, strings.NewReader(""), text)
	} else {
		// CopyTo runs any simple query and drains COPY TO STDOUT data.
		_, err = o.conn.CopyTo(ctx, io.Discard, text)
	}
	cancel()
	if err != nil {
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe):
			o.stats.errors[pe.Code]++
			if pe.Code == "42501" {
				report("permission", pe.Message)
			}
		case o.conn.IsClosed():
			o.stats.errors["connection"]++
			o.connect()
			return
		default:
			o.t.Fatalf("oracle: run %q: %v", text, err)
		}
		o.rollback()
		return
	}
	// The statement may have set a timeout the witnesses cannot meet.
	post := "SET LOCAL statement_timeout = '5s'; " + o.pinnedQuery + "; RESET ROLE; SET LOCAL oracle.active = 'off'; SELECT tbl, op FROM oracle.writes; SELECT tag FROM oracle.ddl; " + funcCalls
	res, err = o.conn.Exec(ctxT(o.t), post).ReadAll()
	if err != nil || len(res) != 7 {
		o.t.Fatalf("oracle: harness witnesses after %q: %d results, %v", text, len(res), err)
	}
	// Independent of the facts: no allowed statement changes a setting
	// the bundle pins (data.sql.pinned_settings), in any form, except to
	// narrow a transaction or session to read-only.
	for _, row := range res[1].Rows {
		name, now := string(row[0]), string(row[1])
		narrowed := (name == "transaction_read_only" || name == readOnlyParam) && now == "on"
		if was := pinnedBefore[name]; now != was && !narrowed {
			report("pinned_setting", name+" "+was+" -> "+now)
		}
	}
	res = res[2:]
	writes, funcs := map[string]bool{}, map[string]bool{}
	for _, st := range sts {
		for _, r := range st.Relations {
			if r.Role != sqlfacts.RoleRead {
				writes[r.Schema+"."+r.Name] = true
				if b, ok := o.viewBase[r.Schema+"."+r.Name]; ok {
					writes[b] = true
				}
			}
		}
		for _, f := range st.Functions {
			funcs[f.Schema+"."+f.Name] = true
		}
	}
	for _, row := range res[2].Rows {
		tbl := string(row[0])
		if !writes[tbl] {
			report("write", tbl+" "+string(row[1]))
		}
		// Independent of the facts: the profile's own write list.
		if !strings.HasPrefix(tbl, profileWrites[profile]) {
			report("profile_write", tbl+" "+string(row[1]))
		}
	}
	for _, row := range res[3].Rows {
		report("ddl", string(row[0]))
	}
	for _, row := range res[4].Rows {
		fn := string(row[0])
		if before[fn] == string(row[1]) {
			continue
		}
		o.stats.userCalls++
		if !funcs[fn] {
			report("function", fn)
		}
	}
	o.rollback()
}

// profileWrites is the schema prefix each profile may write (data.json:
// read_write writes public.*); "\x00" matches no table.
var profileWrites = map[string]string{"read_write": "public.", "read_only": "\x00", udfProfile: "\x00", "test": ""}

// funcCalls lists the user functions called and not yet flushed to the
// statistics, with their call counts.
const funcCalls = "SELECT schemaname || '.' || funcname, calls FROM pg_stat_xact_user_functions WHERE schemaname <> 'oracle'"

func (o *oracle) rollback() {
	if _, err := o.conn.Exec(ctxT(o.t), "ROLLBACK").ReadAll(); err != nil {
		o.t.Fatalf("oracle: rollback: %v", err)
	}
}

// grants are the GRANTs that let the restricted role do exactly what sts
// say (any role but read counts as a write, so a role the facts gain
// later is granted, not reported): SELECT on read relations; SELECT, INSERT, UPDATE, DELETE on write
// relations (a DML target's WHERE and RETURNING read it) and USAGE on the
// sequences their defaults draw from; UPDATE too on read relations of a
// locking statement; USAGE, SELECT, UPDATE on write sequences; EXECUTE on the user functions named by qualified name; USAGE
// on the schemas of all of them.
func (o *oracle) grants(sts []*sqlfacts.Statement) string {
	var b strings.Builder
	schemas := map[string]bool{}
	grant := func(privs, object string) {
		fmt.Fprintf(&b, "GRANT %s ON %s TO %s; ", privs, object, o.role)
	}
	for _, st := range sts {
		for _, r := range st.Relations {
			key := r.Schema + "." + r.Name
			kind, ok := o.relkind[key]
			if !ok || kind == 'c' {
				// A composite type needs no grant: its row type is
				// usable by every role.
				continue
			}
			schemas[r.Schema] = true
			name := pgx.Identifier{r.Schema, r.Name}.Sanitize()
			switch {
			case kind == 'S' && r.Role != sqlfacts.RoleRead:
				grant("USAGE, SELECT, UPDATE", "SEQUENCE "+name)
			case kind == 'S':
				grant("SELECT", "SEQUENCE "+name)
			case r.Role != sqlfacts.RoleRead:
				grant("SELECT, INSERT, UPDATE, DELETE", "TABLE "+name)
				for _, seq := range o.ownedSeqs[key] {
					grant("USAGE", "SEQUENCE "+seq)
				}
			case st.Locking:
				// FOR UPDATE/SHARE needs UPDATE on the tables it locks;
				// the facts say only that the statement locks.
				grant("SELECT, UPDATE", "TABLE "+name)
			default:
				grant("SELECT", "TABLE "+name)
			}
		}
		for _, f := range st.Functions {
			for _, sig := range o.funcs[f.Schema+"."+f.Name] {
				schemas[f.Schema] = true
				grant("EXECUTE", "FUNCTION "+sig)
			}
		}
	}
	for s := range schemas {
		if s != "public" {
			grant("USAGE", "SCHEMA "+pgx.Identifier{s}.Sanitize())
		}
	}
	return b.String()
}

// pinnedQuery selects each of the shipped bundle's pinned settings with its
// value.
func pinnedQuery(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../rego/sql/data.json")
	if err != nil {
		t.Fatal(err)
	}
	var data struct {
		Pinned []string `json:"pinned_settings"`
	}
	if err := json.Unmarshal(b, &data); err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, n := range data.Pinned {
		parts = append(parts, fmt.Sprintf("SELECT '%s', current_setting('%s')", n, n))
	}
	return strings.Join(parts, " UNION ALL ")
}
