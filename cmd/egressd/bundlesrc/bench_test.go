package bundlesrc

import (
	"context"
	"testing"

	"go.uber.org/zap"

	"github.com/egressd/egressd/internal/bundletest"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/rego"
)

// benchSource is a source of the default bundle, signed, put in force
// once; apply is what each new bundle costs after download and
// verification.
func benchSource(b *testing.B, apply Apply) (*Source, *fixture, map[string][]byte) {
	b.Helper()
	f := newFixture(b)
	files, err := bundletest.Files(rego.FS)
	if err != nil {
		b.Fatal(err)
	}
	tb, err := bundletest.Tarball(files, "r0", &f.key, policy.DefaultKeyID)
	if err != nil {
		b.Fatal(err)
	}
	f.srv.Set(tb)
	s, err := New(f.cfg, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	s.apply = apply
	if err := s.dl.Trigger(context.Background()); err != nil {
		b.Fatal(err)
	}
	return s, f, files
}

// BenchmarkPollNotModified is the steady state: a poll of an unchanged
// bundle, answered 304 over a kept-alive TLS connection.
func BenchmarkPollNotModified(b *testing.B) {
	s, _, _ := benchSource(b, func(context.Context, *policy.Fetched) error { return nil })
	b.ReportAllocs()
	for b.Loop() {
		if err := s.dl.Trigger(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	if s.st.polls[resultNotModified] == 0 {
		b.Fatal("no poll answered 304")
	}
}

// BenchmarkPollNewRevision is a new revision of the default bundle:
// download, signature check, then compile and its Rego tests (policy.New,
// as serve's Apply does before the swap).
func BenchmarkPollNewRevision(b *testing.B) {
	var cfg policy.Config
	s, f, files := benchSource(b, func(ctx context.Context, fe *policy.Fetched) error {
		c := cfg
		c.Fetched = fe
		_, err := policy.New(ctx, c, zap.NewNop())
		return err
	})
	cfg = f.cfg
	bundles := make([][]byte, 2)
	for i := range bundles {
		tb, err := bundletest.Tarball(files, "r"+string(rune('a'+i)), &f.key, policy.DefaultKeyID)
		if err != nil {
			b.Fatal(err)
		}
		bundles[i] = tb
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		f.srv.Set(bundles[i%2])
		i++
		if err := s.dl.Trigger(context.Background()); err != nil {
			b.Fatal(err)
		}
		if s.st.lastErr != nil {
			b.Fatal(s.st.lastErr)
		}
	}
}
