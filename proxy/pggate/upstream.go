package pggate

import (
	"context"
	"fmt"
	"maps"
	"net"
	"sort"
	"strings"

	"github.com/egressd/egressd/policy"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"
)

// pinnedParams are the upstream settings the parser relies on: pg_query
// parses as PostgreSQL does with standard_conforming_strings on and UTF-8
// text, so the server must agree or a string literal could mean one thing
// to the gate and another to the server.
var pinnedParams = map[string]string{
	"standard_conforming_strings": "on",
	"client_encoding":             "UTF8",
}

// readOnlyParam is pinned on for the sessions of a profile that may write
// nothing. PostgreSQL 14 and later report it in ParameterStatus, so a
// change the facts missed ends the session (see the relay); every way to
// change it is denied by the policy (data.sql.pinned_settings).
const readOnlyParam = "default_transaction_read_only"

// pinnedValue is the value the session's upstream must keep for the
// parameter name, if it pins one.
func (s *session) pinnedValue(name string) (string, bool) {
	if name == readOnlyParam && s.readOnly {
		return "on", true
	}
	v, ok := pinnedParams[name]
	return v, ok
}

// connectUpstream logs in upstream with the gate's credentials (pgconn
// does SCRAM, MD5 or cleartext as the server asks), takes over the raw
// connection, and sends the client its login answer: AuthenticationOk, the
// server's ParameterStatus, a gate-issued BackendKeyData, ReadyForQuery.
func (s *session) connectUpstream(ctx context.Context, params map[string]string) error {
	g := s.g
	cfg := g.upstreamConfig(s.database, params)
	if s.readOnly {
		cfg.RuntimeParams[readOnlyParam] = "on"
	}
	pc, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect upstream: %w", err)
	}
	// The catalog is read on this session's own connection, before the
	// client has it: same database, same credentials, no second login.
	if s.catalog, err = g.catalogs.ensure(ctx, s.database, pc, g.cfg.TrustedExtensions); err != nil {
		pc.Close(ctx)
		g.log.Warn("catalog unavailable; refusing login", zap.String("database", s.database), zap.Error(err))
		s.auditRefusal(policy.ReasonCatalogUnavailable)
		return sessionRefusal(policy.ReasonCatalogUnavailable, "egressd: denied: %s (the gate could not read the database's catalog)", policy.ReasonCatalogUnavailable)
	}
	hc, err := pc.Hijack()
	if err != nil {
		pc.Close(ctx)
		return fmt.Errorf("take over upstream connection: %w", err)
	}
	for k, want := range pinnedParams {
		if got := hc.ParameterStatuses[k]; !strings.EqualFold(got, want) {
			hc.Conn.Close()
			return fatalf(codeFeatureUnsupported, "egressd: upstream reports %s = %q; the gate needs %q", k, got, want)
		}
	}
	if got, ok := hc.ParameterStatuses[readOnlyParam]; ok && s.readOnly && got != "on" {
		hc.Conn.Close()
		return fatalf(codeFeatureUnsupported, "egressd: upstream reports %s = %q; the gate needs \"on\"", readOnlyParam, got)
	}
	s.upstream = hc.Conn
	s.fe = pgproto3.NewFrontend(hc.Conn, hc.Conn)
	s.pid = g.cancels.add(&cancelTarget{upstreamPID: hc.PID, upstreamKey: hc.SecretKey, addr: upstreamAddr(hc.Conn)})
	s.be.Send(&pgproto3.AuthenticationOk{})
	keys := make([]string, 0, len(hc.ParameterStatuses))
	for k := range hc.ParameterStatuses {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s.be.Send(&pgproto3.ParameterStatus{Name: k, Value: hc.ParameterStatuses[k]})
	}
	s.be.Send(&pgproto3.BackendKeyData{ProcessID: s.pid, SecretKey: g.cancels.key(s.pid)})
	s.be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	if err := s.be.Flush(); err != nil {
		s.close()
		return fmt.Errorf("send login answer: %w", err)
	}
	return nil
}

// upstreamConfig is the login to the upstream database db with the
// gate's credentials, the client's passed startup params and the pinned
// settings.
func (g *Gate) upstreamConfig(db string, params map[string]string) *pgconn.Config {
	cfg := g.upstream.Copy()
	cfg.Database = db
	cfg.Password = g.password
	// The dialler resolves and vets the name itself: pgconn must not
	// resolve it first with the system resolver.
	cfg.LookupFunc = func(_ context.Context, host string) ([]string, error) { return []string{host}, nil }
	cfg.DialFunc = pgconn.DialFunc(g.deps.Dial)
	cfg.ConnectTimeout = g.cfg.StartupTimeout
	cfg.RuntimeParams = maps.Clone(params)
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	maps.Copy(cfg.RuntimeParams, pinnedParams)
	cfg.RuntimeParams["search_path"] = g.cfg.SearchPath
	cfg.OnNotice, cfg.OnNotification = nil, nil
	return cfg
}

// upstreamAddr is where cancels for the session go: the address actually
// dialled, so a cancel cannot be steered elsewhere by DNS.
func upstreamAddr(c net.Conn) string {
	return c.RemoteAddr().String()
}
