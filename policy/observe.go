package policy

import "fmt"

// Mode says whether a rule, an identity or the whole bundle enforces its
// decisions or only observes them. The zero Mode enforces.
type Mode uint8

// The modes, as operators write them ("mode": "observe").
const (
	ModeEnforce Mode = iota
	// ModeObserve lets through what would be denied with a Liftable
	// reason, and records the decision it would have been (would_deny).
	ModeObserve
)

var modeNames = [...]string{"enforce", "observe"}

func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// ParseMode reads a mode as written in data.json or the identities config;
// "" is ModeEnforce.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "enforce":
		return ModeEnforce, nil
	case "observe":
		return ModeObserve, nil
	}
	return ModeEnforce, fmt.Errorf("must be \"enforce\" or \"observe\", got %q", s)
}

// ObservedBy names what put a decision in observe mode.
type ObservedBy uint8

// Which observe mode let a deny through; when several apply, the
// narrowest is named.
const (
	// ObservedByRule: the rule the deny names (Decision.Rule) has
	// "mode": "observe".
	ObservedByRule ObservedBy = iota + 1
	// ObservedByIdentity: the identity has mode: observe.
	ObservedByIdentity
	// ObservedByBundle: data.json has a top-level "mode": "observe".
	ObservedByBundle
)

var observedByNames = [...]string{"", "rule", "identity", "bundle"}

func (b ObservedBy) String() string {
	if int(b) < len(observedByNames) {
		return observedByNames[b]
	}
	return fmt.Sprintf("observed_by(%d)", uint8(b))
}

// MarshalText makes ObservedBy its name in JSON (`egressd check`).
func (b ObservedBy) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText reads a name MarshalText wrote.
func (b *ObservedBy) UnmarshalText(text []byte) error {
	for i, n := range observedByNames {
		if i > 0 && n == string(text) {
			*b = ObservedBy(i)
			return nil
		}
	}
	return fmt.Errorf("observed_by must be rule, identity or bundle, got %q", text)
}

// Observed is the deny an observe mode let through: Decision.WouldDeny.
// The rule that would have denied stays in Decision.Rule.
type Observed struct {
	// Reason is the deny's reason; Reason.Liftable is true of it.
	Reason Reason `json:"reason"`
	// By is the mode that let it through.
	By ObservedBy `json:"by"`
}

// RuleSQLAlways is the rule the bundle's SQL entry point names when it
// refuses a statement in every profile, whatever data.sql says (DO, COPY
// PROGRAM, SET of a setting the gate pins for its parser, SET ROLE, DDL):
// like the address floor, those refusals are not a rule an operator wrote.
const RuleSQLAlways = "sql.always"

// Liftable reports whether d is a deny an observe mode may let through
// (and a grant may lift): its reason is Liftable and it is not one of
// the SQL refusals of every profile (RuleSQLAlways), whose reasons only
// the bundle spells.
func (d *Decision) Liftable() bool {
	return !d.Allow && d.Reason.Liftable() && d.Rule != RuleSQLAlways
}

// observe turns d, a decision of the bundle for in, into an allow when it
// denies with a Liftable reason and the rule it names, the identity or
// the bundle observes. The allow keeps d's rule, and opens nothing more
// than observing needs: no credentials are added, and a CONNECT becomes
// an opaque tunnel that must carry TLS to the host it names (the SNI
// check). Refusals that protect the box (the address floor, malformed
// requests, secrets leaving, the audit log) are not Liftable and are
// never seen here as Rego decisions anyway. An observing identity's or
// bundle's SQL login is not made read-only, or the writes it observes
// would fail in PostgreSQL under a record that says allow.
func (c *compiled) observe(d Decision, kind Kind, id Identity) Decision {
	if d.Allow && d.ReadOnly && (id.Mode == ModeObserve || c.mode == ModeObserve) {
		// A read-only upstream session enforces the profile's refusal
		// of writes in PostgreSQL itself: observed, those writes run,
		// and a record saying allow must not be refused upstream.
		d.ReadOnly = false
	}
	if d.Allow || !d.Liftable() {
		return d
	}
	var by ObservedBy
	switch {
	case d.Rule != "" && c.views.observe[d.Rule]:
		by = ObservedByRule
	case id.Mode == ModeObserve:
		by = ObservedByIdentity
	case c.mode == ModeObserve:
		by = ObservedByBundle
	default:
		return d
	}
	obs := &Observed{Reason: d.Reason, By: by}
	d.Allow, d.Reason, d.WouldDeny = true, ReasonAllowed, obs
	if kind == KindConnect {
		d.TLS, d.Inspect = true, false
	}
	return d
}

// bundleMode reads data.mode, the mode of every rule decision of the
// bundle.
func bundleMode(root map[string]any, o origins) (Mode, error) {
	v, ok := root["mode"]
	if !ok {
		return ModeEnforce, nil
	}
	s, ok := v.(string)
	m, err := ParseMode(s)
	if !ok {
		err = fmt.Errorf("must be \"enforce\" or \"observe\", got %s", jsonKind(v))
	}
	if err != nil {
		return ModeEnforce, fmt.Errorf("%s: mode %w", o.of("mode"), err)
	}
	return m, nil
}
