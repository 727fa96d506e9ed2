package grants

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy"
)

// Bounds on grants, fixed: a grant is an exception an operator answers
// for, not a second policy.
const (
	// MaxGrants is the most grants in force at once.
	MaxGrants = 1000
	// MaxTTL is the longest a grant may last.
	MaxTTL = 7 * 24 * time.Hour
	// retryExpiry is how soon an expiry that failed to apply is tried
	// again.
	retryExpiry = time.Second
)

// Options are what a Manager works with.
type Options struct {
	// Path is the grants file (Path(audit.dir)).
	Path string
	// AuditDir is the audit log a grant's from_request is looked up in.
	AuditDir string
	// Audit records every change; a change whose record cannot be
	// appended is not made.
	Audit audit.Appender
	// Apply puts a set of grants in force, calling commit between
	// compiling and swapping (generation.Running.SetGrants).
	Apply func(ctx context.Context, grants []policy.Grant, commit func() error) error
	// Known reports whether an identity is one requests can come from; a
	// grant for any other would allow nothing. If nil, every identity is.
	Known func(identity string) bool
	// Registerer takes the grant metrics.
	Registerer prometheus.Registerer
	Log        *zap.Logger
	// Now is the clock; if nil, time.Now.
	Now func() time.Time
}

// Manager holds the grants in force and expires them on time.
type Manager struct {
	o     Options
	mu    sync.Mutex
	live  []policy.Grant // soonest expiry first
	timer *time.Timer
	// stopped is set by Stop: no expiry runs after it.
	stopped bool

	active                    prometheus.Gauge
	created, expired, revoked prometheus.Counter
}

// New makes a Manager for the grants live, which are already in force
// (Load's first result, given to the first generation), and records the
// grants Load found expired. Start schedules expiry.
func New(o Options, live, expired []policy.Grant) (*Manager, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	m := &Manager{o: o, live: slices.Clone(live),
		active: prometheus.NewGauge(prometheus.GaugeOpts{Name: "egressd_grants_active", Help: "Time-bound grants in force."}),
		created: prometheus.NewCounter(prometheus.CounterOpts{Name: "egressd_grants_created_total",
			Help: "Time-bound grants created through the admin listener."}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{Name: "egressd_grants_expired_total",
			Help: "Time-bound grants that expired, at their expiry or found expired at start."}),
		revoked: prometheus.NewCounter(prometheus.CounterOpts{Name: "egressd_grants_revoked_total",
			Help: "Time-bound grants revoked before their expiry."}),
	}
	for _, c := range []prometheus.Collector{m.active, m.created, m.expired, m.revoked} {
		if err := o.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("register grant metrics: %w", err)
		}
	}
	if len(expired) > 0 {
		if err := m.record(expired, "expired", ""); err != nil {
			return nil, err
		}
		if err := save(o.Path, m.live); err != nil {
			return nil, err
		}
		m.expired.Add(float64(len(expired)))
	}
	m.active.Set(float64(len(m.live)))
	return m, nil
}

// Start schedules the first expiry.
func (m *Manager) Start() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.scheduleLocked()
}

// Stop cancels the expiry timer.
func (m *Manager) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped = true
	if m.timer != nil {
		m.timer.Stop()
	}
}

// List returns the grants in force, soonest expiry first.
func (m *Manager) List() []policy.Grant {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.live)
}

// CreateRequest is the body of POST /v1/grants: from_request (with tunnel
// to grant a CONNECT or make the grant host-wide), or identity, url and
// method (or tunnel); ttl in either case.
type CreateRequest struct {
	FromRequest string `json:"from_request,omitempty"`
	Identity    string `json:"identity,omitempty"`
	Method      string `json:"method,omitempty"`
	// URL is the request's absolute URL; only its scheme, host, port and
	// path are granted (never its query).
	URL    string `json:"url,omitempty"`
	Tunnel bool   `json:"tunnel,omitempty"`
	// TTL is how long the grant lasts, a Go duration ("1h", "90s").
	TTL string `json:"ttl"`
}

// Create makes the grant req asks for on behalf of principal, puts it in
// force and records it. A refusal is a *refusal error with its status.
func (m *Manager) Create(ctx context.Context, req CreateRequest, principal string) (policy.Grant, error) {
	ttl, err := time.ParseDuration(req.TTL)
	switch {
	case req.TTL == "":
		return policy.Grant{}, refuse(400, "ttl is required: how long the grant lasts, e.g. \"1h\"")
	case err != nil:
		return policy.Grant{}, refuse(400, "ttl %q is not a duration: write e.g. \"30m\" or \"1h\"", req.TTL)
	case ttl <= 0:
		return policy.Grant{}, refuse(400, "ttl must be positive, got %q", req.TTL)
	case ttl > MaxTTL:
		return policy.Grant{}, refuse(400, "ttl %s is longer than a grant may last (%s): grant for less, and again when it expires", ttl, MaxTTL)
	}
	g, err := m.target(req)
	if err != nil {
		return policy.Grant{}, err
	}
	if m.o.Known != nil && !m.o.Known(g.Identity) {
		return policy.Grant{}, refuse(400, "identity %q is not one egressd knows (identities: in the config, or \"anonymous\" when none are listed): a grant for it would allow nothing", g.Identity)
	}
	now := m.o.Now().UTC().Truncate(time.Millisecond)
	g.ID, g.GrantedBy, g.Created, g.Expires = newID(), principal, now, now.Add(ttl)
	if err := g.Validate(); err != nil {
		return policy.Grant{}, refuse(400, "%v", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.live) >= MaxGrants {
		return policy.Grant{}, refuse(409, "%d grants are in force, the most there may be: revoke some (egressd grant revoke ID) or let them expire", len(m.live))
	}
	next := append(slices.Clone(m.live), g)
	sortByExpiry(next)
	if err := m.applyLocked(ctx, next, []policy.Grant{g}, "created", principal); err != nil {
		return policy.Grant{}, err
	}
	m.created.Inc()
	m.o.Log.Info("grant created", zap.String("id", g.ID), zap.String("by", principal), zap.String("identity", g.Identity),
		zap.String("host", g.Host), zap.Int("port", g.Port), zap.Time("expires", g.Expires))
	return g, nil
}

// target is the grant req asks for, without id, expiry or provenance.
func (m *Manager) target(req CreateRequest) (policy.Grant, error) {
	if req.FromRequest != "" {
		if req.Identity != "" || req.URL != "" || req.Method != "" {
			return policy.Grant{}, refuse(400, "give from_request or identity, method and url, not both")
		}
		rec, err := findDecision(m.o.AuditDir, req.FromRequest)
		if errors.Is(err, errNotFound) {
			return policy.Grant{}, refuse(404, "%v: check the id in the refusal's X-Egressd-Request header, or grant explicitly with identity, method and url", err)
		}
		if err != nil {
			return policy.Grant{}, err
		}
		return fromRecord(rec, req.Tunnel)
	}
	if req.Identity == "" || req.URL == "" || (req.Method == "" && !req.Tunnel) {
		return policy.Grant{}, refuse(400, "give from_request, or identity, method and url (method may be left out with tunnel)")
	}
	f, err := policy.ParseHTTP(policy.KindHTTP, "GET", req.URL, "")
	if err != nil {
		return policy.Grant{}, refuse(400, "url %q: %v: give an absolute http:// or https:// URL", req.URL, err)
	}
	if req.Tunnel {
		if req.Method != "" || (f.Path != "/" && f.Path != "") {
			return policy.Grant{}, refuse(400, "a tunnel grant is host-wide: give the url as scheme://host:port without a path, and no method")
		}
		return policy.Grant{Identity: req.Identity, Host: f.Host, Port: int(f.Port), Tunnel: true}, nil
	}
	g, err := policy.GrantFor(req.Identity, req.Method, f)
	if err != nil {
		return policy.Grant{}, refuse(400, "url %q: %v", req.URL, err)
	}
	return g, nil
}

// Revoke ends grant id before its expiry, on behalf of principal.
func (m *Manager) Revoke(ctx context.Context, id, principal string) (policy.Grant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := slices.IndexFunc(m.live, func(g policy.Grant) bool { return g.ID == id })
	if i < 0 {
		return policy.Grant{}, refuse(404, "no grant %q in force: egressd grant list shows them", id)
	}
	g := m.live[i]
	next := slices.Delete(slices.Clone(m.live), i, i+1)
	if err := m.applyLocked(ctx, next, []policy.Grant{g}, "revoked", principal); err != nil {
		return policy.Grant{}, err
	}
	m.revoked.Inc()
	m.o.Log.Info("grant revoked", zap.String("id", g.ID), zap.String("by", principal))
	return g, nil
}

// expire removes the grants whose expiry has come, and schedules the next.
func (m *Manager) expire() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	now := m.o.Now()
	n := 0
	for n < len(m.live) && !m.live[n].Expires.After(now) {
		n++
	}
	if n == 0 {
		m.scheduleLocked()
		return
	}
	gone := slices.Clone(m.live[:n])
	if err := m.applyLocked(context.Background(), slices.Clone(m.live[n:]), gone, "expired", ""); err != nil {
		// Tried again shortly; the grant keeps deciding meanwhile, which
		// the log says.
		m.o.Log.Error("grant expiry not applied; retrying", zap.Error(err))
		m.timer = time.AfterFunc(retryExpiry, m.expire)
		return
	}
	m.expired.Add(float64(n))
	for _, g := range gone {
		m.o.Log.Info("grant expired", zap.String("id", g.ID))
	}
	m.scheduleLocked()
}

// scheduleLocked sets the timer for the soonest expiry.
func (m *Manager) scheduleLocked() {
	if m.timer != nil {
		m.timer.Stop()
	}
	if m.stopped || len(m.live) == 0 {
		return
	}
	m.timer = time.AfterFunc(max(m.live[0].Expires.Sub(m.o.Now()), 0), m.expire)
}

// applyLocked puts next in force; the commit between compiling and
// swapping saves the file and records changed under event, so a change is
// made only once it is durable and in the log.
func (m *Manager) applyLocked(ctx context.Context, next, changed []policy.Grant, event, by string) error {
	var commitErr error
	err := m.o.Apply(ctx, next, func() error {
		if commitErr = save(m.o.Path, next); commitErr != nil {
			return commitErr
		}
		if commitErr = m.record(changed, event, by); commitErr != nil {
			// Put the file back as it was: the change was not made.
			commitErr = errors.Join(commitErr, save(m.o.Path, m.live))
		}
		return commitErr
	})
	switch {
	case err == nil:
	case commitErr != nil:
		// egressd's own state or log failed: a 500, logged.
		return fmt.Errorf("grant not %s: %w", event, commitErr)
	default:
		// The bundle refused the set (its checks or Rego tests).
		return &refusal{status: 409, err: fmt.Errorf("grant not %s: %w", event, err)}
	}
	m.live = next
	m.active.Set(float64(len(next)))
	if event != "expired" {
		m.scheduleLocked()
	}
	return nil
}

// record appends one grant record per grant.
func (m *Manager) record(gs []policy.Grant, event, by string) error {
	for _, g := range gs {
		r := &audit.Record{Kind: audit.KindGrant, Identity: g.Identity, Method: g.Method, Host: g.Host,
			Port: uint16(g.Port), Path: g.Path, Rule: g.RuleID(), Detail: map[string]string{
				"event": event, "id": g.ID, "expires": g.Expires.UTC().Format(time.RFC3339),
			}}
		if g.Inspect {
			r.Scheme = "https"
		}
		if by != "" {
			r.Detail["by"] = by
		}
		if g.FromRequest != "" {
			r.Detail["from_request"] = g.FromRequest
		}
		if g.Tunnel {
			r.Detail["tunnel"] = strconv.FormatBool(true)
		}
		if err := m.o.Audit.Append(r); err != nil {
			return fmt.Errorf("record grant %s: %w", g.ID, err)
		}
	}
	return nil
}

// newID is a grant id: 12 random hex digits.
func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
