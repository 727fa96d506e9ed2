// Package generation builds what one config yields: the address floor, the
// policy engine, the identities and the brokered secrets, each checked
// against the others. `serve` builds one at start and one on every reload,
// and `check` builds one to answer for, with the same function (Build), so
// that a check added for one applies to all three. Running holds the
// generation in force and swaps in the next on a reload, or refuses it and
// keeps the one in force.
//
// It lives under cmd/egressd, beside config, because it composes the
// listeners' packages (proxy/broker among them) around config.Config; config
// itself stays decoding and validation without I/O.
package generation

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/dnsguard"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/broker"
)

// Generation is one config's reloadable state, checked as a whole.
type Generation struct {
	// Config is the config it was built from.
	Config *config.Config
	// Floor is the address floor of Config.Internal.
	Floor *dnsguard.Floor
	// Engine is the policy bundle of Config.Policy.
	Engine *policy.Engine
	// Identities is Config.Identities as a store.
	Identities *identity.Store
	// Secrets are the values of Config.Secrets, read from their files and
	// environment variables when the generation was built; nil when it
	// was built for Deciding.
	Secrets *broker.Secrets
}

// Purpose says what a generation is built for.
type Purpose int

const (
	// Serving builds everything the listeners use, the secrets' values
	// included: they are what the proxy sends.
	Serving Purpose = iota
	// Deciding leaves the secrets' values unread (Generation.Secrets is
	// nil): `egressd check` names where a credential would go, never its
	// value, and a process that never sends a secret does not read one.
	// Every other step, the credential rules against the declared secrets
	// among them, runs as for Serving.
	Deciding
)

// Build builds the generation of cfg, read from path ("" for the embedded
// defaults; errors name it), for purpose. log is the policy engine's
// logger. The steps run in one order wherever a config is loaded:
// internal: (the floor), the policy bundle, the identities, the
// identities' attributes against the bundle, the bundle's credential rules
// against the secrets and the floor, then (Serving) the secrets' values.
// The first failure is returned.
func Build(ctx context.Context, cfg *config.Config, path string, purpose Purpose, log *zap.Logger) (*Generation, error) {
	floor, err := dnsguard.NewFloor(cfg.Internal)
	if err != nil {
		return nil, fmt.Errorf("internal: %w", err)
	}
	engine, err := policy.New(ctx, cfg.Policy, log)
	if err != nil {
		return nil, fmt.Errorf("load policy: %w", err)
	}
	ids, err := identity.New(cfg.Identities)
	if err != nil {
		return nil, err
	}
	if err := checkEngine(cfg, path, engine, floor, log); err != nil {
		return nil, err
	}
	g := &Generation{Config: cfg, Floor: floor, Engine: engine, Identities: ids}
	if purpose == Serving {
		if g.Secrets, err = cfg.LoadSecrets(); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// checkEngine checks engine against cfg, read from path: the identities'
// attributes, then the credential rules against the secrets and floor;
// and warns of rules naming identities cfg lacks. Build and a bundle from
// a bundle service (Running.SetBundle) run the same checks.
func checkEngine(cfg *config.Config, path string, engine *policy.Engine, floor broker.InternalFloor, log *zap.Logger) error {
	if err := checkIdentities(path, cfg.Identities, engine); err != nil {
		return err
	}
	if err := checkCredentials(path, cfg, engine, floor); err != nil {
		return err
	}
	for _, w := range UnknownRuleIdentities(cfg.Identities, engine) {
		log.Warn("a rule names an identity the config lacks: it allows nobody by that name",
			zap.String("config", path), zap.String("rule", w.Rule), zap.String("identity", w.Identity))
	}
	return nil
}

// checkIdentities reports the first identity whose attributes the bundle
// cannot honour (an sql_profile it lacks), naming the config file and the
// key.
func checkIdentities(path string, ids identity.Config, eng *policy.Engine) error {
	for i, e := range ids {
		if err := eng.CheckIdentity(policy.Identity{ID: e.ID, Attributes: e.Attributes}); err != nil {
			return fmt.Errorf("config %s: identities[%d].%w", path, i, err)
		}
	}
	return nil
}

// RuleIdentity is an identity a rule names.
type RuleIdentity struct{ Rule, Identity string }

// UnknownRuleIdentities are the identities the bundle's rules name that
// the config does not declare (without identities, every client is
// "anonymous"), sorted by rule: most likely a typo or an identity since
// removed. The bundle does not know the config, so this is checked where
// both meet; it is a warning, as a bundle may serve several configs.
func UnknownRuleIdentities(ids identity.Config, eng *policy.Engine) []RuleIdentity {
	known := map[string]bool{}
	for _, e := range ids {
		known[e.ID] = true
	}
	if len(ids) == 0 {
		known[identity.Anonymous.ID] = true
	}
	var out []RuleIdentity
	for rule, names := range eng.RuleIdentities() {
		for _, n := range names {
			if !known[n] {
				out = append(out, RuleIdentity{Rule: rule, Identity: n})
			}
		}
	}
	slices.SortFunc(out, func(a, b RuleIdentity) int {
		return cmp.Or(strings.Compare(a.Rule, b.Rule), strings.Compare(a.Identity, b.Identity))
	})
	return out
}

// checkCredentials refuses a bundle whose credential rules name a secret
// the config lacks or would send one in cleartext to a public address
// (broker.CheckRules).
func checkCredentials(path string, cfg *config.Config, eng *policy.Engine, floor broker.InternalFloor) error {
	if err := broker.CheckRules(eng.CredentialRules(), cfg.Secrets, floor); err != nil {
		return fmt.Errorf("policy bundle with config %s: %w", path, err)
	}
	return nil
}
