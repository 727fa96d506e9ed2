package proxy

import (
	"time"

	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/budget"
)

// byteScope is the ledger scope of an identity's byte budget.
const byteScope = "bytes"

// overByteBudget refuses a request or tunnel of an identity that has sent
// and received its byte budget of the window. What one request moves is
// counted when it completes (countBytes), so a budget is crossed by at
// most the requests in flight when it ran out.
func (s *Server) overByteBudget(ids *identity.Store, id string) (refusal, bool) {
	b := ids.ByteBudget(id)
	if b == nil {
		return refusal{}, false
	}
	var retry time.Duration
	ok := false
	if s.budgets != nil {
		var res *budget.Reservation
		if res, retry, ok = s.budgets.Reserve(budget.Key{Identity: id, Scope: byteScope}, b.Bytes, b.Window(), 1); ok {
			res.Release()
		}
	}
	if ok {
		return refusal{}, false
	}
	rf := deniedRefusal(policy.ReasonByteBudgetExceeded)
	rf.retryAfter = retry
	rf.detail = "byte budget of " + b.Per + " spent"
	return rf, true
}

// countBytes counts what a completed request or opaque tunnel moved
// against the identity's byte budget.
func (s *Server) countBytes(ids *identity.Store, id string, n int64) {
	b := ids.ByteBudget(id)
	if b == nil || s.budgets == nil || n <= 0 {
		return
	}
	s.budgets.Add(budget.Key{Identity: id, Scope: byteScope}, b.Window(), time.Now(), n)
	s.metrics.budgetBytes.WithLabelValues(id).Add(float64(n))
}
