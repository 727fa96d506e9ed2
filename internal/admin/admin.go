// Package admin is egressd's operator listener, bound to loopback only:
// liveness, readiness, Prometheus metrics, a reload trigger and pprof. Sandboxes
// never reach it. MetricsHandler is the metrics-only listener's handler,
// which may bind elsewhere.
package admin

import (
	"context"
	"net/http"
	"net/http/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Check is one readiness condition; nil means ready.
type Check struct {
	Name string
	Fn   func(ctx context.Context) error
	// Listeners are the listeners it gates ("postgres"); if nil, every
	// one.
	Listeners []string
	// Detail, if set, is said after the check's state, passing or not
	// (the policy bundle's revision and age). If nil, the state alone.
	Detail func() string
}

// Options configure the handler.
type Options struct {
	// Gatherer serves /metrics.
	Gatherer prometheus.Gatherer
	// Ready are the /readyz conditions, all required; /readyz/LISTENER
	// asks only those that gate LISTENER.
	Ready []Check
	// Listeners name the running listeners ("proxy", "dns", "postgres"),
	// each of which has its /readyz/LISTENER.
	Listeners []string
	// Reload runs on POST /-/reload; its error is reported with 500. On
	// success it returns the config sections that changed but take effect
	// only at a restart, which the answer names.
	Reload func(ctx context.Context) (restart []string, err error)
	// ReadyTimeout bounds the whole /readyz evaluation. If zero, 2s.
	ReadyTimeout time.Duration
	// Auth authenticates Routes; if nil, Routes answer 401.
	Auth *Auth
	// Routes are the authenticated routes (check, grants).
	Routes []Route
	Log    *zap.Logger
}

// Handler returns the admin mux.
func Handler(o Options) http.Handler {
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 2 * time.Second
	}
	log := o.Log.Named("admin")
	rd := newReadiness(log)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		text(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ready(w, r, o, rd, "")
	})
	mux.HandleFunc("GET /readyz/{listener}", func(w http.ResponseWriter, r *http.Request) {
		l := r.PathValue("listener")
		if !slices.Contains(o.Listeners, l) {
			text(w, http.StatusNotFound, "no listener "+strconv.Quote(l)+"; running: "+strings.Join(o.Listeners, ", ")+"\n")
			return
		}
		ready(w, r, o, rd, l)
	})
	mux.Handle("GET /metrics", MetricsHandler(o.Gatherer))
	mux.HandleFunc("POST /-/reload", func(w http.ResponseWriter, r *http.Request) {
		if o.Reload == nil {
			text(w, http.StatusNotImplemented, "reload not configured\n")
			return
		}
		restart, err := o.Reload(r.Context())
		if err != nil {
			log.Warn("reload refused", zap.Error(err))
			text(w, http.StatusInternalServerError, "reload failed: "+err.Error()+"\n")
			return
		}
		if len(restart) > 0 {
			text(w, http.StatusOK, RestartNeeded(restart)+"\n")
			return
		}
		text(w, http.StatusOK, "reloaded\n")
	})
	for _, rt := range o.Routes {
		mux.HandleFunc(rt.Pattern, o.Auth.authenticated(rt))
	}
	// Profiles, for measuring before optimizing; operator-only like the
	// rest of this listener.
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return mux
}

// ready answers /readyz (listener "": every check) or /readyz/LISTENER:
// 200 if every check passes, else 503; the body names each check and its
// state, failures first, so that one look says which listener is not
// ready and why; rd logs a check that turns.
func ready(w http.ResponseWriter, r *http.Request, o Options, rd *readiness, listener string) {
	ctx, cancel := context.WithTimeout(r.Context(), o.ReadyTimeout)
	defer cancel()
	var failed, passed []byte
	for _, c := range o.Ready {
		if listener != "" && c.Listeners != nil && !slices.Contains(c.Listeners, listener) {
			continue
		}
		err := c.Fn(ctx)
		if r.Context().Err() == nil {
			// A poller that hung up is no news about the check.
			rd.observe(c.Name, err)
		}
		detail := ""
		if c.Detail != nil {
			if d := c.Detail(); d != "" {
				detail = " (" + d + ")"
			}
		}
		if err != nil {
			failed = append(failed, c.Name+": "+err.Error()+detail+"\n"...)
			continue
		}
		passed = append(passed, c.Name+": ok"+detail+"\n"...)
	}
	if failed != nil {
		text(w, http.StatusServiceUnavailable, string(failed)+string(passed))
		return
	}
	text(w, http.StatusOK, "ready\n"+string(passed))
}

func text(w http.ResponseWriter, status int, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(s)) // a client gone mid-response has nothing to be told
}

// RestartNeeded is what a reload that left changed sections unapplied
// says, in the reload answer and the log alike.
func RestartNeeded(sections []string) string {
	return "reloaded identities, internal, secrets and policy; restart egressd to apply the changed sections: " + strings.Join(sections, ", ")
}
