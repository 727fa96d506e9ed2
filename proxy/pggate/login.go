package pggate

import (
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy"
)

// maxClaimedLen caps the client-chosen user and database names in a login
// record: a startup packet may carry kilobytes of them.
const maxClaimedLen = 256

// auditLogin records a refused login. The user is only claimed (it did not
// authenticate), so it goes into the record's identity field as sent,
// capped; an audit failure is logged, the login is refused either way.
func (g *Gate) auditLogin(client string, params map[string]string, reason policy.Reason) {
	if reason == "" {
		return
	}
	user := capClaimed(params["user"])
	db := params["database"]
	if db == "" {
		db = params["user"]
	}
	r := audit.Decided(audit.KindSQL, user, client, audit.Verdict{Reason: reason, Policy: g.engine().Digest()})
	r.Database = capClaimed(db)
	if err := g.deps.Audit.Append(r); err != nil {
		g.failLog.Failed(err, zap.String("refused", "login"))
	}
}

func capClaimed(s string) string {
	if len(s) <= maxClaimedLen {
		return s
	}
	n := maxClaimedLen
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…(truncated)"
}
