package pggate

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"
)

// cancelTarget maps the key a client was given to the upstream session's.
type cancelTarget struct {
	key         [4]byte
	upstreamPID uint32
	upstreamKey []byte
	addr        string // upstream address of the session
}

// cancelTable holds one entry per live session, keyed by the process id the
// gate invented for it: clients never learn upstream pids or keys.
type cancelTable struct {
	mu sync.Mutex
	m  map[uint32]*cancelTarget
}

// add registers t and returns the (pid, key) to give the client.
func (c *cancelTable) add(t *cancelTarget) uint32 {
	rand.Read(t.key[:])
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		var b [4]byte
		rand.Read(b[:])
		pid := binary.BigEndian.Uint32(b[:]) & 0x7fffffff
		if _, taken := c.m[pid]; pid != 0 && !taken {
			c.m[pid] = t
			return pid
		}
	}
}

func (c *cancelTable) remove(pid uint32) {
	c.mu.Lock()
	delete(c.m, pid)
	c.mu.Unlock()
}

// key returns the client key of pid.
func (c *cancelTable) key(pid uint32) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.m[pid]; ok {
		return append([]byte(nil), t.key[:]...)
	}
	return nil
}

func (c *cancelTable) lookup(pid uint32, key []byte) (*cancelTarget, bool) {
	c.mu.Lock()
	t, ok := c.m[pid]
	c.mu.Unlock()
	if !ok || subtle.ConstantTimeCompare(t.key[:], key) != 1 {
		return nil, false
	}
	return t, true
}

// forwardCancel sends the upstream's own CancelRequest for a client's.
// PostgreSQL answers a cancel with nothing, so neither does the gate.
func (g *Gate) forwardCancel(req *pgproto3.CancelRequest) {
	t, ok := g.cancels.lookup(req.ProcessID, req.SecretKey)
	if !ok {
		g.log.Debug("cancel request for an unknown session")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.StartupTimeout)
	defer cancel()
	c, err := g.deps.Dial(ctx, "tcp", t.addr)
	if err != nil {
		g.log.Warn("dial upstream for cancel", zap.Error(err))
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(g.cfg.StartupTimeout))
	buf, err := (&pgproto3.CancelRequest{ProcessID: t.upstreamPID, SecretKey: t.upstreamKey}).Encode(nil)
	if err == nil {
		_, err = c.Write(buf)
	}
	if err != nil {
		g.log.Warn("forward cancel", zap.Error(err))
		return
	}
	// Wait for the server to close: it acts on the request before that.
	var one [1]byte
	_, _ = c.Read(one[:]) // EOF or an error: either way the server is done
}
