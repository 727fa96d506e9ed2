package proxy

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/budget"
)

// RebuildBudgets counts into l what the audit log in dir says each
// identity spent within its budgets' windows: the log is the record of
// truth, so a restart neither forgets a budget's use nor double counts it.
// Tokens come from the completion records of requests a token budget
// counted (they name the rule), bytes from every completion record of
// an identity with a byte budget. Budgets are per replica: each counts
// what its own log holds. rules gives a rule's request keys (the active
// bundle's). It returns how many records it counted.
func RebuildBudgets(l *budget.Ledger, dir string, rules func(id string) *policy.RuleOptions, ids *identity.Store, now time.Time) (int, error) {
	segs, err := audit.ListSegments(dir)
	if errors.Is(err, os.ErrNotExist) || len(segs) == 0 {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("rebuild budgets: %w", err)
	}
	rd, err := audit.NewReader(segs)
	if err != nil {
		return 0, fmt.Errorf("rebuild budgets: %w", err)
	}
	defer rd.Close()
	counted := 0
	for {
		r, err := rd.Next()
		if err == io.EOF {
			return counted, nil
		}
		if err != nil {
			return counted, fmt.Errorf("rebuild budgets from %s: %w", dir, err)
		}
		if r.Kind != audit.KindHTTPDone && r.Kind != audit.KindConnectDone {
			continue
		}
		if tokens := r.TokensIn + r.TokensOut; tokens > 0 && r.Rule != "" {
			if o := rules(r.Rule); o != nil && o.LLM != nil && o.LLM.Budget != nil && now.Sub(r.TS) < o.LLM.Budget.Per {
				l.Add(budget.Key{Identity: r.Identity, Scope: r.Rule}, o.LLM.Budget.Per, r.TS, tokens)
				counted++
			}
		}
		if b := ids.ByteBudget(r.Identity); b != nil && now.Sub(r.TS) < b.Window() && !(r.Kind == audit.KindConnectDone && r.Inspected) {
			l.Add(budget.Key{Identity: r.Identity, Scope: byteScope}, b.Window(), r.TS, r.BytesIn+r.BytesOut)
			counted++
		}
	}
}
