package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"go.uber.org/zap"

	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/cmd/egressd/generation"
	"github.com/egressd/egressd/dnsguard"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/internal/testledger"
	"github.com/egressd/egressd/policy"
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
	// stdin is where `--data -` reads a body from.
	stdin io.Reader
}

// load reads the config and builds its generation as serve would, all but
// the secret values (generation.Deciding; the policy from --policy if
// given) and the Rego tests of a bundle that passed them before under this
// build (testledger), then resolves the identity. Every failure is a load error (exit
// 2).
func (f *engineFlags) load(ctx context.Context) (*decideEnv, error) {
	cfg, err := config.Load(f.config)
	if err != nil {
		return nil, err
	}
	if f.policy != "" {
		cfg.Policy.Dir = f.policy
	}
	// A check runs the bundle's Rego tests only the first time this build
	// sees the bundle (serve, reload and policy test always run them).
	if l := testledger.Open(); l != nil {
		cfg.Policy.Tests = l
	}
	gen, err := generation.Build(ctx, cfg, f.config, generation.Deciding, zap.NewNop())
	if err != nil {
		return nil, err
	}
	id, err := f.resolveIdentity(gen.Identities)
	if err != nil {
		return nil, err
	}
	return &decideEnv{cfg: cfg, engine: gen.Engine, floor: gen.Floor, identity: id}, nil
}

// resolveIdentity mirrors the proxy: with no identities configured every
// client is "anonymous"; otherwise the id must be a configured one, and its
// attributes come along.
func (f *engineFlags) resolveIdentity(store *identity.Store) (policy.Identity, error) {
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

// loadError keeps the exit code of usage errors and marks the rest as
// load errors.
func loadError(err error) error {
	if _, ok := err.(*exitError); ok {
		return err
	}
	return &exitError{code: 2, err: fmt.Errorf("load: %w", err)}
}
