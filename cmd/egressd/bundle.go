package main

import (
	"context"

	"go.uber.org/zap"

	"github.com/egressd/egressd/cmd/egressd/bundlesrc"
	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/policy"
)

// firstBundle is policy.bundle_url's source and the first bundle it
// fetched, verified, compiled and tested, which cfg.Policy.Fetched is set
// to; both nil when the config has no bundle_url. serve waits here, up to
// policy.bundle_start_timeout, before it binds anything: without a bundle
// it has no policy to decide with, and it fails closed by not starting
// (the error names the last failure).
func firstBundle(ctx context.Context, cfg *config.Config, log *zap.Logger) (*bundlesrc.Source, *policy.Fetched, error) {
	if cfg.Policy.BundleURL == "" {
		return nil, nil, nil
	}
	src, err := bundlesrc.New(cfg.Policy, log)
	if err != nil {
		return nil, nil, err
	}
	// The whole generation is checked by prepare; this refuses, and
	// goes on waiting past, a bundle that does not compile or whose
	// tests fail.
	check := func(ctx context.Context, f *policy.Fetched) error {
		p := cfg.Policy
		p.Fetched = f
		_, err := policy.New(ctx, p, zap.NewNop())
		return err
	}
	first, err := src.First(ctx, check)
	if err != nil {
		return nil, nil, err
	}
	cfg.Policy.Fetched = first
	return src, first, nil
}
