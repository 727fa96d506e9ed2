package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/cmd/egressd/generation"
	"github.com/egressd/egressd/cmd/egressd/grants"
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

// checkFlags are the flags of every check: engineFlags for a local
// decision, or --server and its token to ask a running egressd.
type checkFlags struct {
	engineFlags
	server    string
	tokenFile string
}

func (f *checkFlags) register(fs *flag.FlagSet) {
	f.engineFlags.register(fs)
	fs.StringVar(&f.server, "server", "", "ask the running egressd on its admin listener at `URL` (e.g. http://127.0.0.1:9090) instead of deciding locally")
	fs.StringVar(&f.tokenFile, "token-file", "", "with --server: `FILE` holding an admin token with scope check (default: $EGRESSD_ADMIN_TOKEN)")
}

// decideEnv is what a check needs: the config, the engine, address floor
// and identities built from it, and (per request, set by decideRequest)
// the identity the request is decided for.
type decideEnv struct {
	cfg      *config.Config
	engine   checkEngine
	floor    *dnsguard.Floor
	ids      *identity.Store
	identity policy.Identity
}

// envOf is the decideEnv of a generation: a local check's, or the running
// one's for POST /v1/check.
func envOf(gen *generation.Generation) *decideEnv {
	return &decideEnv{cfg: gen.Config, engine: gen.Engine, floor: gen.Floor, ids: gen.Identities}
}

// load reads the config and builds its generation as serve would, all but
// the secret values (generation.Deciding; the policy from --policy if
// given) and the Rego tests of a bundle that passed them before under this
// build (testledger). Every failure is a load error (exit 2).
func (f *engineFlags) load(ctx context.Context) (*decideEnv, error) {
	cfg, err := config.Load(f.config)
	if err != nil {
		return nil, err
	}
	if f.policy != "" {
		cfg.Policy.UseDir(f.policy)
	}
	// The grants serve decides with, read from its file (none if there
	// is none), so that a check answers as the proxy would.
	if cfg.Policy.Grants, _, err = grants.Load(grants.Path(cfg.Audit.Dir), time.Now()); err != nil {
		return nil, err
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
	return envOf(gen), nil
}

// loadError keeps the exit code of usage errors and marks the rest as
// load errors.
func loadError(err error) error {
	if _, ok := err.(*exitError); ok {
		return err
	}
	return &exitError{code: 2, err: fmt.Errorf("load: %w", err)}
}
