package admin

import (
	"sync"

	"go.uber.org/zap"
)

// readiness remembers which checks last failed, so that /readyz, which
// an orchestrator polls every few seconds, logs a check only when it
// turns: a warning with its error when it starts failing, info when it
// passes again.
type readiness struct {
	log     *zap.Logger
	mu      sync.Mutex
	failing map[string]bool // by check name; absent means passing
}

func newReadiness(log *zap.Logger) *readiness {
	return &readiness{log: log, failing: map[string]bool{}}
}

// observe records the outcome of check name (err nil: passed) and logs a
// change of state.
func (rd *readiness) observe(name string, err error) {
	rd.mu.Lock()
	was := rd.failing[name]
	if err != nil {
		rd.failing[name] = true
	} else {
		delete(rd.failing, name)
	}
	rd.mu.Unlock()
	switch {
	case err != nil && !was:
		rd.log.Warn("not ready: check failing", zap.String("check", name), zap.Error(err))
	case err == nil && was:
		rd.log.Info("check passes again", zap.String("check", name))
	}
}
