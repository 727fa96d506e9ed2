package bundlesrc

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/egressd/egressd/internal/bundletest"
	"github.com/egressd/egressd/policy"
)

const httpModule = `package egress.http

decision := {"allow": true, "reason": "allowed", "rule": data.rule} if input.host == "ok.test"
`

const passingTest = `package egress.http_test

import data.egress.http

test_ok if http.decision.allow with input as {"host": "ok.test"}
`

// bundleFiles is a small bundle whose allow rule is named rule; with
// failing, its Rego test fails.
func bundleFiles(rule string, failing bool) map[string][]byte {
	test := passingTest
	if failing {
		test = strings.Replace(test, `"ok.test"`, `"other.test"`, 1)
	}
	return map[string][]byte{
		"http.rego":      []byte(httpModule),
		"http_test.rego": []byte(test),
		"data.json":      []byte(`{"rule": "` + rule + `"}`),
	}
}

type fixture struct {
	srv *bundletest.Server
	key bundletest.Key
	cfg policy.Config
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	key, err := bundletest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	srv := bundletest.NewServer()
	t.Cleanup(srv.Close)
	ca, err := srv.WriteCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := policy.Config{
		BundleURL: srv.URL + "/bundles/egress.tar.gz", BundleCAFile: ca,
		BundleVerification: policy.BundleVerification{PublicKey: key.Public},
		BundlePollMin:      time.Second, BundlePollMax: time.Second, BundleStartTimeout: 10 * time.Second,
	}
	cfg.Provision()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return &fixture{srv: srv, key: key, cfg: cfg}
}

// set serves a bundle of kind "signed", "unsigned", "tampered" or
// "failing" (signed, its Rego test fails) with revision rev.
func (f *fixture) set(t *testing.T, kind, rev string) {
	t.Helper()
	var b []byte
	var err error
	switch kind {
	case "signed":
		b, err = bundletest.Tarball(bundleFiles(rev, false), rev, &f.key, policy.DefaultKeyID)
	case "failing":
		b, err = bundletest.Tarball(bundleFiles(rev, true), rev, &f.key, policy.DefaultKeyID)
	case "unsigned":
		b, err = bundletest.Tarball(bundleFiles(rev, false), rev, nil, "")
	case "tampered":
		b, err = bundletest.Tampered(bundleFiles(rev, false), rev, f.key, policy.DefaultKeyID)
	default:
		t.Fatalf("bundle kind %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	f.srv.Set(b)
}

// compile is serve's check of a bundle: compiled and its tests run.
func compile(cfg policy.Config) Apply {
	return func(ctx context.Context, f *policy.Fetched) error {
		cfg.Fetched = f
		_, err := policy.New(ctx, cfg, zap.NewNop())
		return err
	}
}

// TestFirstAcceptsSignedBundle: a bundle signed as `opa build
// --signing-key` signs it, served over TLS with the CA in bundle_ca_file,
// is the first bundle, with its revision.
func TestFirstAcceptsSignedBundle(t *testing.T) {
	f := newFixture(t)
	f.set(t, "signed", "r1")
	s, err := New(f.cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	got, err := s.First(context.Background(), compile(f.cfg))
	if err != nil {
		t.Fatalf("First() error = %v", err)
	}
	if got.Revision != "r1" {
		t.Errorf("First() revision = %q; want r1", got.Revision)
	}
	if err := s.Ready(context.Background()); err != nil {
		t.Errorf("Ready() = %v; want nil", err)
	}
}

// TestFirstFailsClosed: with only refused bundles on offer, First gives up
// at bundle_start_timeout naming why.
func TestFirstFailsClosed(t *testing.T) {
	tests := []struct{ kind, want string }{
		{"unsigned", "missing .signatures.json"},
		{"tampered", "digest mismatch"},
		{"failing", "rego test(s) failed"},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			f := newFixture(t)
			f.set(t, tt.kind, "r1")
			f.cfg.BundleStartTimeout = 500 * time.Millisecond
			s, err := New(f.cfg, zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.First(context.Background(), compile(f.cfg))
			if err == nil || !strings.Contains(err.Error(), "bundle_start_timeout") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("First() error = %v; want a timeout naming %q", err, tt.want)
			}
		})
	}
}

// TestRefusedBundlesLeaveTheLastGood: after a good bundle, each refused
// one (unsigned, tampered, failing its tests, a failing service) leaves
// the revision in force and shows the error; a good one clears it. Polls
// are triggered by hand, one at a time, instead of by the timer.
func TestRefusedBundlesLeaveTheLastGood(t *testing.T) {
	f := newFixture(t)
	s, err := New(f.cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	var applied []string
	apply := compile(f.cfg)
	s.apply = func(ctx context.Context, fe *policy.Fetched) error {
		if err := apply(ctx, fe); err != nil {
			return err
		}
		applied = append(applied, fe.Revision)
		return nil
	}
	steps := []struct {
		name, kind, rev string
		status          int // a failing service instead of a bundle; kind "" and status 0: the same bundle
		result          string
		inForce         string
		errWant         string // in Detail; "" for none
	}{
		{name: "signed", kind: "signed", rev: "r1", result: resultOK, inForce: "r1"},
		{name: "unchanged", result: resultNotModified, inForce: "r1"},
		{name: "unsigned", kind: "unsigned", rev: "r2", result: resultFailed, inForce: "r1", errWant: "missing .signatures.json"},
		{name: "tampered", kind: "tampered", rev: "r3", result: resultFailed, inForce: "r1", errWant: "digest mismatch"},
		{name: "failing tests", kind: "failing", rev: "r4", result: resultRefused, inForce: "r1", errWant: "rego test(s) failed"},
		// The same bytes: a refused bundle's ETag is forgotten, so it is
		// fetched and refused again rather than answered 304.
		{name: "refused is fetched again", result: resultRefused, inForce: "r1", errWant: "rego test(s) failed"},
		{name: "service down", status: http.StatusBadGateway, result: resultFailed, inForce: "r1", errWant: "Bad Gateway"},
		{name: "next signed", kind: "signed", rev: "r5", result: resultOK, inForce: "r5"},
	}
	for _, st := range steps {
		switch {
		case st.status != 0:
			f.srv.Fail(st.status)
		case st.kind != "":
			f.set(t, st.kind, st.rev)
		}
		before := testutil.ToFloat64(counter(s, st.result))
		_ = s.dl.Trigger(context.Background()) // its outcome is in the status
		if got := testutil.ToFloat64(counter(s, st.result)); got != before+1 {
			t.Errorf("%s: polls_total{result=%q} = %v; want %v", st.name, st.result, got, before+1)
		}
		d := s.Detail()
		if !strings.Contains(d, `revision "`+st.inForce+`"`) {
			t.Errorf("%s: Detail() = %q; want revision %q in force", st.name, d, st.inForce)
		}
		if st.errWant == "" && strings.Contains(d, "failed") || st.errWant != "" && !strings.Contains(d, st.errWant) {
			t.Errorf("%s: Detail() = %q; want last error %q", st.name, d, st.errWant)
		}
		failing := 0.0
		if st.errWant != "" {
			failing = 1
		}
		if got := gauge(t, s, "egressd_bundle_failing"); got != failing {
			t.Errorf("%s: egressd_bundle_failing = %v; want %v", st.name, got, failing)
		}
	}
	if strings.Join(applied, ",") != "r1,r5" {
		t.Errorf("bundles put in force = %v; want [r1 r5]", applied)
	}
}

// counter is egressd_bundle_polls_total{result} of s.
func counter(s *Source, result string) prometheus.Collector {
	return &filtered{s: s, name: "egressd_bundle_polls_total", label: result}
}

// gauge is the value of the unlabelled gauge name of s.
func gauge(t *testing.T, s *Source, name string) float64 {
	t.Helper()
	return testutil.ToFloat64(&filtered{s: s, name: name})
}

// filtered is one series of s, for testutil.ToFloat64.
type filtered struct {
	s     *Source
	name  string
	label string
}

func (f *filtered) Describe(ch chan<- *prometheus.Desc) { f.s.Describe(ch) }

func (f *filtered) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric, 64)
	f.s.Collect(all)
	close(all)
	for m := range all {
		if !strings.Contains(m.Desc().String(), `"`+f.name+`"`) {
			continue
		}
		if f.label != "" && labelsOf(m) != f.label {
			continue
		}
		ch <- m
	}
}

func labelsOf(m prometheus.Metric) string {
	var b strings.Builder
	pb := new(dto.Metric)
	_ = m.Write(pb)
	for _, l := range pb.Label {
		b.WriteString(l.GetValue())
	}
	return b.String()
}

// TestLongPolling: with bundle_long_poll and a service that long-polls, a
// new revision arrives as it is published, not at the next poll (30s
// away here): the poll is held open, answered when the bundle changes,
// and the next one sent at once.
func TestLongPolling(t *testing.T) {
	f := newFixture(t)
	f.cfg.BundlePollMin, f.cfg.BundlePollMax, f.cfg.BundleLongPoll = 30*time.Second, 30*time.Second, 5*time.Second
	f.set(t, "signed", "r1")
	s, err := New(f.cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	first, err := s.First(context.Background(), compile(f.cfg))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 4)
	check := compile(f.cfg)
	s.Serve(context.Background(), first, func(ctx context.Context, fe *policy.Fetched) error {
		if err := check(ctx, fe); err != nil {
			return err
		}
		got <- fe.Revision
		return nil
	})
	f.set(t, "signed", "r2")
	select {
	case rev := <-got:
		if rev != "r2" {
			t.Errorf("revision put in force = %q; want r2", rev)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("r2 not put in force within 15s of publishing, with polls 30s apart: long polling did not answer (%s)", s.Detail())
	}
}
