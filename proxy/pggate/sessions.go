package pggate

import (
	"context"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
)

// Defaults of the session caps when the config leaves them zero; each is
// also held below a share of the upstream's max_connections.
const (
	defaultMaxSessions            = 64
	defaultMaxSessionsPerIdentity = 16
)

// slotTable counts open sessions, in total and per identity. A session
// holds its slot from before the upstream login until it ends, so the
// count is of upstream connections the gate holds or is opening.
type slotTable struct {
	mu    sync.Mutex
	total int
	per   map[string]int
}

// acquire takes a slot for id, or refuses the login when either cap is
// reached.
func (t *slotTable) acquire(id string, maxTotal, maxPer int) *fatal {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.total >= maxTotal {
		return loginFatalf(reasonSessionLimit, codeTooManyConnections,
			"egressd: too many sessions: the gate holds %d (postgres.max_sessions); retry when one has closed", maxTotal)
	}
	if t.per[id] >= maxPer {
		return loginFatalf(reasonSessionLimit, codeTooManyConnections,
			"egressd: too many sessions for %q: %d open (postgres.max_sessions_per_identity); close one and retry", id, maxPer)
	}
	if t.per == nil {
		t.per = map[string]int{}
	}
	t.total++
	t.per[id]++
	return nil
}

func (t *slotTable) release(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total--
	if t.per[id]--; t.per[id] <= 0 {
		delete(t.per, id)
	}
}

// sessionCaps returns the total and per-identity caps: the configured ones,
// or the defaults held below the upstream's max_connections once known.
func (g *Gate) sessionCaps() (total, perIdentity int) {
	total, perIdentity = g.cfg.MaxSessions, g.cfg.MaxSessionsPerIdentity
	upstream := int(g.upstreamMaxConns.Load())
	if total == 0 {
		total = defaultMaxSessions
		if upstream > 0 {
			total = max(1, min(total, upstream/2))
		}
	}
	if perIdentity == 0 {
		perIdentity = defaultMaxSessionsPerIdentity
		if upstream > 0 {
			perIdentity = max(1, min(perIdentity, upstream/4))
		}
	}
	return total, perIdentity
}

// learnMaxConns reads the upstream's max_connections once, on the first
// upstream login, for the default caps. A failure leaves the fixed
// defaults in place and is tried again at the next login.
func (g *Gate) learnMaxConns(ctx context.Context, pc *pgconn.PgConn) {
	if g.upstreamMaxConns.Load() != 0 {
		return
	}
	res, err := pc.Exec(ctx, "SHOW max_connections").ReadAll()
	if err != nil || len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1 {
		return
	}
	if n, err := strconv.Atoi(string(res[0].Rows[0][0])); err == nil && n > 0 {
		g.upstreamMaxConns.Store(int64(n))
	}
}
