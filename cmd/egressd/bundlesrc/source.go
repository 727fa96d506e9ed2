// Package bundlesrc fetches serve's policy bundle from an OPA bundle
// service (policy.bundle_url) with OPA's own download and bundle packages:
// polled with ETag / If-None-Match (and long polling where the service
// offers it), its .signatures.json verified against
// policy.bundle_verification, then handed, as files and a revision, to
// whatever puts it in force (generation.Running.SetBundle), which compiles
// and tests it as a local bundle. A bundle that fails to download, verify,
// compile or test is refused and the one in force stays; the state (the
// revision in force, its age, the last error) is on /readyz and /metrics.
//
// It lives under cmd/egressd beside generation, which it feeds: policy
// knows bundles as files, never how they are fetched.
package bundlesrc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/download"
	"go.uber.org/zap"

	"github.com/egressd/egressd/policy"
)

// Apply puts a fetched bundle in force, or refuses it with an error.
type Apply func(ctx context.Context, f *policy.Fetched) error

// Source polls one bundle service. Its methods are safe for concurrent
// use.
type Source struct {
	cfg policy.Config
	log *zap.Logger
	dl  *download.Downloader
	now func() time.Time

	// mu orders the downloader's updates with Serve: an update is
	// applied whole before the next, and never to a stale Apply.
	mu    sync.Mutex
	apply Apply
	// st has a lock of its own.
	st status
	// first is signalled once a bundle passes the Apply of First.
	first chan struct{}
	// latest is the newest bundle First's Apply accepted.
	latest   *policy.Fetched
	started  bool
	stopOnce sync.Once
}

// New is the source of cfg's bundle_url: it reads the verification key and
// sets up OPA's downloader, and fetches nothing until First.
func New(cfg policy.Config, log *zap.Logger) (*Source, error) {
	s := &Source{cfg: cfg, log: log.Named("bundle"), now: time.Now, first: make(chan struct{})}
	dl, err := newDownloader(cfg, s.update)
	if err != nil {
		return nil, err
	}
	s.dl = dl
	return s, nil
}

// First starts polling and waits, at most policy.bundle_start_timeout,
// for the first bundle that check accepts (serve: it compiles and its
// tests pass), and returns it. A bundle check refuses is refused as any
// later one is, and polling goes on. Without one in time it stops polling
// and returns the last error: serve does not start without a policy.
func (s *Source) First(ctx context.Context, check Apply) (*policy.Fetched, error) {
	s.mu.Lock()
	s.apply = func(ctx context.Context, f *policy.Fetched) error {
		if err := check(ctx, f); err != nil {
			return err
		}
		if s.latest == nil {
			close(s.first)
		}
		s.latest = f
		return nil
	}
	s.started = true
	s.mu.Unlock()
	s.dl.Start(ctx)
	s.log.Info("waiting for the first policy bundle", zap.String("bundle_url", s.cfg.BundleURL),
		zap.Duration("bundle_start_timeout", s.cfg.BundleStartTimeout))
	t := time.NewTimer(s.cfg.BundleStartTimeout)
	defer t.Stop()
	select {
	case <-s.first:
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.latest, nil
	case <-t.C:
	case <-ctx.Done():
	}
	s.Stop()
	last := s.st.last()
	if last == nil {
		last = errors.New("no answer")
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("policy.bundle_url %s: stopped before the first bundle: %w", s.cfg.BundleURL, ctx.Err())
	}
	return nil, fmt.Errorf("policy.bundle_url %s: no bundle verified, compiled and tested within policy.bundle_start_timeout (%s); last error: %w",
		s.cfg.BundleURL, s.cfg.BundleStartTimeout, last)
}

// Serve hands every later bundle to apply. first is the bundle First
// returned: if a newer one was accepted since, apply gets it now.
func (s *Source) Serve(ctx context.Context, first *policy.Fetched, apply Apply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apply = apply
	if s.latest != first {
		// Not from the downloader's goroutine: its ETag is left alone
		// (refused would race with a poll), so a bundle refused here is
		// taken again only at its next revision.
		if err := s.applyLocked(ctx, s.latest); err != nil {
			s.fail(resultRefused, err)
		}
	}
}

// Stop ends polling; a download under way is cancelled.
func (s *Source) Stop() {
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if started {
		s.stopOnce.Do(func() { s.dl.Stop(context.Background()) })
	}
}

// update is the downloader's callback, once per poll. It returns nil
// whatever the outcome: an error would make the downloader retry at once
// with back-off, where a refused bundle is asked for again at the next
// poll.
func (s *Source) update(ctx context.Context, u download.Update) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case u.Error != nil:
		// A download, an HTTP status, a signature or a tarball that
		// failed: OPA's reader verified before anything was parsed.
		s.fail(resultFailed, fmt.Errorf("download %s: %w", s.cfg.BundleURL, u.Error))
	case u.Bundle == nil:
		s.st.record(s.now(), resultNotModified, "", nil)
	default:
		f, err := fetchedOf(s.cfg.BundleURL, u.Bundle)
		if err != nil {
			s.refused(err)
			return nil
		}
		if err := s.applyLocked(ctx, f); err != nil {
			s.refused(err)
		}
	}
	return nil
}

// applyLocked puts f in force through s.apply and records it, or returns
// why not.
func (s *Source) applyLocked(ctx context.Context, f *policy.Fetched) error {
	if err := s.apply(ctx, f); err != nil {
		return fmt.Errorf("bundle %s revision %q refused: %w", s.cfg.BundleURL, f.Revision, err)
	}
	s.st.record(s.now(), resultOK, f.Revision, nil)
	s.log.Info("policy bundle accepted", zap.String("bundle_url", s.cfg.BundleURL), zap.String("revision", f.Revision))
	return nil
}

// refused records a bundle that downloaded and verified but was refused,
// and forgets its ETag, so that the next poll fetches it again rather
// than hearing "not modified" of a bundle never put in force (OPA's
// bundle plugin does the same). Called from the downloader's callback
// only: the ETag is the downloader's goroutine's.
func (s *Source) refused(err error) {
	s.dl.SetCache("")
	s.fail(resultRefused, err)
}

func (s *Source) fail(result string, err error) {
	s.st.record(s.now(), result, "", err)
	s.log.Warn("policy bundle not taken; the bundle in force stays", zap.String("result", result), zap.Error(err))
}
