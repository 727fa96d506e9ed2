package main

import (
	"context"
	"flag"
	"fmt"

	"go.uber.org/zap"

	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/dnsguard"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/broker"
	"github.com/egressd/egressd/proxy/identity"
)

// engineFlags are the flags of every command that decides like the
// listeners do: which config, which bundle, which identity.
type engineFlags struct {
	config   string
	policy   string
	identity string
}

func (f *engineFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.config, "config", "", "config `FILE` (default: the embedded defaults)")
	fs.StringVar(&f.policy, "policy", "", "policy bundle `DIR` (default: policy.dir of the config, else the embedded bundle)")
	fs.StringVar(&f.identity, "identity", "", "sandbox `ID` to decide for (default \"anonymous\" when no identities are configured)")
}

// decideEnv is what a check needs: the config, the engine and address
// floor built from it, and the identity the request is decided for.
type decideEnv struct {
	cfg      *config.Config
	engine   checkEngine
	floor    *dnsguard.Floor
	identity policy.Identity
}

// load reads the config, builds the policy engine and resolves the
// identity. Every failure is a load error (exit 2).
func (f *engineFlags) load(ctx context.Context) (*decideEnv, error) {
	cfg, err := config.Load(f.config)
	if err != nil {
		return nil, err
	}
	id, err := f.resolveIdentity(cfg)
	if err != nil {
		return nil, err
	}
	pc := cfg.Policy
	if f.policy != "" {
		pc.Dir = f.policy
	}
	eng, err := policy.New(ctx, pc, zap.NewNop())
	if err != nil {
		return nil, err
	}
	if err := checkIdentities(f.config, cfg.Identities, eng); err != nil {
		return nil, err
	}
	floor, err := dnsguard.NewFloor(cfg.Internal)
	if err != nil {
		return nil, err
	}
	if err := checkCredentials(f.config, cfg, eng, floor); err != nil {
		return nil, err
	}
	return &decideEnv{cfg: cfg, engine: eng, floor: floor, identity: id}, nil
}

// resolveIdentity mirrors the proxy: with no identities configured every
// client is "anonymous"; otherwise the id must be a configured one, and its
// attributes come along.
func (f *engineFlags) resolveIdentity(cfg *config.Config) (policy.Identity, error) {
	store, err := identity.New(cfg.Identities)
	if err != nil {
		return policy.Identity{}, err
	}
	if store.AllAnonymous() {
		if f.identity == "" {
			return identity.Anonymous, nil
		}
		return policy.Identity{ID: f.identity}, nil
	}
	if f.identity == "" {
		return policy.Identity{}, usageErrorf("--identity is required: the config lists identities")
	}
	_, id, ok := store.Lookup(f.identity)
	if !ok {
		return policy.Identity{}, usageErrorf("--identity %q is not in the config's identities", f.identity)
	}
	return id, nil
}

// checkIdentities reports the first identity whose attributes the bundle
// cannot honour (an sql_profile it lacks), naming the config file and the
// key: serve, reload and check refuse such a pair of config and bundle.
func checkIdentities(cfgPath string, ids identity.Config, eng *policy.Engine) error {
	for i, e := range ids {
		if err := eng.CheckIdentity(policy.Identity{ID: e.ID, Attributes: e.Attributes}); err != nil {
			return fmt.Errorf("config %s: identities[%d].%w", cfgPath, i, err)
		}
	}
	return nil
}

// checkCredentials refuses a bundle whose credential rules name a secret
// the config lacks or would send one in cleartext to a public address
// (broker.CheckRules); serve, reload and check run it, so a check answers
// for a bundle the proxy would load.
func checkCredentials(cfgPath string, cfg *config.Config, eng *policy.Engine, floor broker.InternalFloor) error {
	if err := broker.CheckRules(eng.CredentialRules(), cfg.Secrets, floor); err != nil {
		return fmt.Errorf("policy bundle with config %s: %w", cfgPath, err)
	}
	return nil
}

// loadError keeps the exit code of usage errors and marks the rest as
// load errors.
func loadError(err error) error {
	if _, ok := err.(*exitError); ok {
		return err
	}
	return &exitError{code: 2, err: fmt.Errorf("load: %w", err)}
}
