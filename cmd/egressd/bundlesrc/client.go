package bundlesrc

import (
	"cmp"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/download"
	"github.com/open-policy-agent/opa/v1/logging"
	"github.com/open-policy-agent/opa/v1/plugins/rest"

	"github.com/egressd/egressd/policy"
)

// maxBundleFile bounds one file of a fetched bundle, as policy bounds one
// of a directory: OPA's reader stops at it, before the file is held.
const maxBundleFile = 16 << 20

// newDownloader is OPA's downloader for cfg.BundleURL, calling update
// once per poll.
func newDownloader(cfg policy.Config, update func(context.Context, download.Update) error) (*download.Downloader, error) {
	u, err := url.Parse(cfg.BundleURL)
	if err != nil {
		return nil, fmt.Errorf("policy.bundle_url %q: %w", cfg.BundleURL, err)
	}
	// OPA's client joins its service URL and the download path with "/".
	service := u.Scheme + "://" + u.Host
	path := strings.TrimPrefix(u.EscapedPath(), "/")
	if u.RawQuery != "" {
		path += "?" + u.RawQuery
	}
	rc := map[string]any{"url": service}
	if cfg.BundleCAFile != "" {
		if _, err := os.Stat(cfg.BundleCAFile); err != nil {
			return nil, fmt.Errorf("policy.bundle_ca_file: %w", err)
		}
		// In place of the system roots, not beside them.
		rc["tls"] = map[string]any{"ca_cert": cfg.BundleCAFile}
	}
	raw, err := json.Marshal(rc)
	if err != nil {
		return nil, fmt.Errorf("policy.bundle_url: %w", err)
	}
	return finish(raw, cfg, path, update)
}

// finish builds the client from its JSON config and the downloader on it.
func finish(restConfig []byte, cfg policy.Config, path string, update func(context.Context, download.Update) error) (*download.Downloader, error) {
	// OPA's own log lines would bypass egressd's logger; every outcome
	// reaches update, which logs it.
	client, err := rest.New(restConfig, nil, rest.Logger(logging.NewNoOpLogger()))
	if err != nil {
		return nil, fmt.Errorf("policy.bundle_url: %w", err)
	}
	vc, err := verification(cfg.BundleVerification)
	if err != nil {
		return nil, err
	}
	dc := download.Config{Polling: download.PollingConfig{
		MinDelaySeconds: seconds(cfg.BundlePollMin), MaxDelaySeconds: seconds(cfg.BundlePollMax),
	}}
	if cfg.BundleLongPoll > 0 {
		dc.Polling.LongPollingTimeoutSeconds = seconds(cfg.BundleLongPoll)
	}
	if err := dc.ValidateAndInjectDefaults(); err != nil {
		return nil, fmt.Errorf("policy.bundle_poll_*: %w", err)
	}
	dl := download.New(dc, client, path).
		WithCallback(update).
		WithSizeLimitBytes(maxBundleFile).
		// Lazy: the data files' bytes come through as they are, for
		// policy to read as it reads a directory's.
		WithLazyLoadingMode(true).
		WithBundleParserOpts(ast.ParserOptions{RegoVersion: ast.RegoV1})
	if vc != nil {
		dl = dl.WithBundleVerificationConfig(vc)
	}
	return dl, nil
}

// seconds is d in whole seconds, at least 1: OPA's polling is configured
// in seconds.
func seconds(d time.Duration) *int64 {
	s := max(int64(d/time.Second), 1)
	return &s
}

// verification is OPA's verification config for v, or nil with
// insecure_unsigned (no key: a signed bundle cannot be checked and is
// refused with "verification key not provided").
func verification(v policy.BundleVerification) (*bundle.VerificationConfig, error) {
	if v.InsecureUnsigned {
		return nil, nil
	}
	key := v.PublicKey
	if v.PublicKeyFile != "" {
		b, err := os.ReadFile(v.PublicKeyFile)
		if err != nil {
			return nil, fmt.Errorf("policy.bundle_verification.public_key_file: %w", err)
		}
		key = string(b)
	}
	alg := cmp.Or(v.Algorithm, policy.DefaultAlgorithm)
	if !strings.HasPrefix(alg, "HS") {
		if blk, _ := pem.Decode([]byte(key)); blk == nil {
			return nil, errors.New("policy.bundle_verification: the public key is not PEM (-----BEGIN PUBLIC KEY-----)")
		}
	}
	id := cmp.Or(v.KeyID, policy.DefaultKeyID)
	keys := map[string]*bundle.KeyConfig{id: {Key: key, Algorithm: alg, Scope: v.Scope}}
	vc := bundle.NewVerificationConfig(keys, id, v.Scope, nil)
	if err := vc.ValidateAndInjectDefaults(keys); err != nil {
		return nil, fmt.Errorf("policy.bundle_verification: %w", err)
	}
	return vc, nil
}

// fetchedOf is the verified bundle b as policy loads it: its modules and
// data files as they were in the tarball, and its revision. A delta
// bundle (patches to the one in force) is refused: a bundle is swapped
// whole, and OPA only allows one unsigned.
func fetchedOf(source string, b *bundle.Bundle) (*policy.Fetched, error) {
	if b.Type() != bundle.SnapshotBundleType {
		return nil, fmt.Errorf("bundle %s is a %s bundle: serve one whole (snapshot) bundle", source, b.Type())
	}
	if len(b.WasmModules) > 0 || len(b.PlanModules) > 0 {
		return nil, fmt.Errorf("bundle %s holds wasm or plan modules: egressd evaluates Rego only", source)
	}
	files := make(map[string][]byte, len(b.Raw))
	for _, r := range b.Raw {
		files[r.Path] = r.Value
	}
	return policy.NewFetched(source, b.Manifest.Revision, files)
}
