package pggate

import (
	"context"
	"strconv"
	"sync"

	"github.com/egressd/egressd/policy"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
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
		return loginRefusal(policy.ReasonSessionLimit,
			"egressd: too many sessions: the gate holds %d (postgres.max_sessions); retry when one has closed", maxTotal)
	}
	if t.per[id] >= maxPer {
		return loginRefusal(policy.ReasonSessionLimit,
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

// learnMaxConns reads the upstream's max_connections, for the default
// caps, before the first session takes a slot: on a connection of its own,
// so that a burst of first logins is already held to caps below it. The
// logins that arrive meanwhile wait on learnMu for the answer (bounded by
// ctx, the startup timeout); once it is known nobody takes the lock. A
// failure leaves the fixed defaults and is tried again at the next login.
func (g *Gate) learnMaxConns(ctx context.Context, db string) {
	if g.upstreamMaxConns.Load() != 0 || g.cfg.MaxSessions != 0 && g.cfg.MaxSessionsPerIdentity != 0 {
		return
	}
	g.learnMu.Lock()
	defer g.learnMu.Unlock()
	if g.upstreamMaxConns.Load() != 0 {
		return
	}
	pc, err := pgconn.ConnectConfig(ctx, g.upstreamConfig(db, nil))
	if err != nil {
		g.log.Warn("read upstream max_connections", zap.Error(err))
		return
	}
	defer pc.Close(ctx)
	res, err := pc.Exec(ctx, "SHOW max_connections").ReadAll()
	if err != nil || len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1 {
		g.log.Warn("read upstream max_connections", zap.Error(err))
		return
	}
	if n, err := strconv.Atoi(string(res[0].Rows[0][0])); err == nil && n > 0 {
		g.upstreamMaxConns.Store(int64(n))
	}
}
