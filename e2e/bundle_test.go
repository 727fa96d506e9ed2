package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/dnsguard/dnstest"
	"github.com/egressd/egressd/internal/bundletest"
	"github.com/egressd/egressd/internal/testwait"
	"github.com/egressd/egressd/policy"
)

// bundleWorld is egressd deciding with a bundle from a bundle service over
// TLS: an HTTP upstream under two names, a signing key, and the service.
type bundleWorld struct {
	up  *Upstream
	srv *bundletest.Server
	key bundletest.Key
	e   *Egressd
}

// tarball is the default bundle with rules allowing hosts on the upstream,
// as kind: "signed", "unsigned" or "tampered", with revision rev.
func (w *bundleWorld) tarball(t *testing.T, kind, rev string, hosts ...string) []byte {
	t.Helper()
	files, err := bundletest.Files(os.DirFS(WritePolicy(t, []Rule{{ID: "up-" + rev, Hosts: hosts, Ports: []int{w.up.Port}}})))
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	switch kind {
	case "signed":
		b, err = bundletest.Tarball(files, rev, &w.key, policy.DefaultKeyID)
	case "unsigned":
		b, err = bundletest.Tarball(files, rev, nil, "")
	case "tampered":
		b, err = bundletest.Tampered(files, rev, w.key, policy.DefaultKeyID)
	}
	if err != nil || b == nil {
		t.Fatalf("bundle %s %s: %v", kind, rev, err)
	}
	return b
}

// byHost matches the records of requests to host.
func byHost(host string) func(audit.Record) bool {
	return func(r audit.Record) bool { return r.Host == host }
}

func (w *bundleWorld) get(t *testing.T, host string) int {
	t.Helper()
	resp, err := w.e.Client("", "").Get(fmt.Sprintf("http://%s:%d/bytes/16", host, w.up.Port))
	if err != nil {
		t.Fatalf("GET %s: %v", host, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// metric is the value of the series of /metrics whose line starts with
// series, or -1 if there is none.
func (w *bundleWorld) metric(t *testing.T, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(w.e.Metrics(t))
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// TestPolicyFromBundleServer (issue 27 item 1): a bundle signed in the
// `opa build --signing-key` format and served over TLS decides, its
// revision in every record and in the started record; a tampered and an
// unsigned bundle are refused with the error on /readyz and /metrics and
// the decisions unchanged; a new signed revision is picked up under load
// with no failed request.
func TestPolicyFromBundleServer(t *testing.T) {
	key, err := bundletest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	w := &bundleWorld{up: StartHTTP(t), srv: bundletest.NewServer(), key: key}
	t.Cleanup(w.srv.Close)
	dns := dnstest.Start(t)
	for _, n := range []string{"upstream.test", "next.test"} {
		dns.SetRR(n, n+". 60 IN A 127.0.0.1")
	}
	dir := t.TempDir()
	ca, err := w.srv.WriteCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "bundle-key.pem")
	if err := os.WriteFile(keyFile, []byte(key.Public), 0o644); err != nil {
		t.Fatal(err)
	}
	w.srv.Set(w.tarball(t, "signed", "r1", "upstream.test"))
	bundleURL := w.srv.URL + "/bundles/egress.tar.gz"
	w.e = Start(t, Options{DNS: dns.Addr(), YAML: InternalAllow(w.up.Addr) + fmt.Sprintf(
		"policy:\n  bundle_url: %s\n  bundle_ca_file: %s\n  bundle_poll_min: 1s\n  bundle_poll_max: 1s\n"+
			"  bundle_verification:\n    public_key_file: %s\n", bundleURL, ca, keyFile)})

	// r1 decides, and says so in the records.
	code := w.get(t, "upstream.test")
	if code != http.StatusOK {
		t.Fatalf("GET upstream.test under r1 = %d; want 200", code)
	}
	if c := w.get(t, "next.test"); c != http.StatusForbidden {
		t.Fatalf("GET next.test under r1 = %d; want 403", c)
	}
	rec := w.e.WaitRecords(t, "of the request under r1", byHost("upstream.test"))[0]
	if _, rev := policy.SplitDigest(rec.Policy); rev != "r1" {
		t.Errorf("record policy = %q; want sha256:…@r1", rec.Policy)
	}
	started := w.e.WaitRecords(t, "started", func(r audit.Record) bool { return r.Kind == audit.KindStarted })[0]
	if started.Detail["policy"] != rec.Policy || started.Detail["bundle_url"] != bundleURL || started.Detail["bundle_insecure_unsigned"] != "" {
		t.Errorf("started detail = %v; want policy %q, bundle_url %q, no insecure_unsigned", started.Detail, rec.Policy, bundleURL)
	}
	if _, body, _ := w.e.Admin(http.MethodGet, "/readyz"); !strings.Contains(body, `bundle: ok (revision "r1"`) {
		t.Errorf("/readyz = %q; want the bundle check naming revision r1", body)
	}
	if v := w.metric(t, `egressd_bundle_info{revision="r1"}`); v != 1 {
		t.Errorf(`egressd_bundle_info{revision="r1"} = %v; want 1`, v)
	}

	// Refused bundles: the error shows, r1 keeps deciding.
	for _, tt := range []struct{ kind, rev, says string }{
		{"tampered", "r2", "digest mismatch"},
		{"unsigned", "r3", "missing .signatures.json"},
	} {
		failed := w.metric(t, `egressd_bundle_polls_total{result="failed"}`)
		w.srv.Set(w.tarball(t, tt.kind, tt.rev, "upstream.test", "next.test"))
		// A poll of the previous bundle may still be under way when the
		// server changes: it fails too, with the previous error, so the
		// wait is for this bundle's error, not for any failed poll.
		testwait.For(t, "the "+tt.kind+" bundle refused", 15*time.Second, func() error {
			if v := w.metric(t, `egressd_bundle_polls_total{result="failed"}`); v <= failed {
				return fmt.Errorf("polls failed = %v", v)
			}
			if _, body, _ := w.e.Admin(http.MethodGet, "/readyz"); !strings.Contains(body, tt.says) {
				return fmt.Errorf("/readyz = %q", body)
			}
			return nil
		})
		if v := w.metric(t, "egressd_bundle_failing"); v != 1 {
			t.Errorf("%s: egressd_bundle_failing = %v; want 1", tt.kind, v)
		}
		code, body, _ := w.e.Admin(http.MethodGet, "/readyz")
		if code != http.StatusOK || !strings.Contains(body, `revision "r1"`) || !strings.Contains(body, tt.says) {
			t.Errorf("%s: /readyz = %d %q; want ready, r1 in force, the error %q", tt.kind, code, body, tt.says)
		}
		if c := w.get(t, "next.test"); c != http.StatusForbidden {
			t.Errorf("%s: GET next.test = %d; want 403 (r1 stays)", tt.kind, c)
		}
	}

	// A new revision under load: upstream.test is allowed by both, so no
	// request may fail across the swap.
	const workers, maxRequests = 4, 3000
	var sent, done, failed atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	c := w.e.Client("", "")
	for range workers {
		wg.Go(func() {
			for sent.Add(1) <= maxRequests {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := c.Get(fmt.Sprintf("http://upstream.test:%d/bytes/64", w.up.Port))
				if err != nil {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, err.Error())
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, resp.Status)
					continue
				}
				done.Add(1)
			}
		})
	}
	testwait.For(t, "load before the swap", 10*time.Second, func() error {
		if d := done.Load(); d < 50 {
			return fmt.Errorf("%d answered", d)
		}
		return nil
	})
	w.srv.Set(w.tarball(t, "signed", "r4", "upstream.test", "next.test"))
	testwait.For(t, "r4 in force", 15*time.Second, func() error {
		if v := w.metric(t, `egressd_bundle_info{revision="r4"}`); v != 1 {
			return fmt.Errorf(`egressd_bundle_info{revision="r4"} = %v`, v)
		}
		return nil
	})
	atSwap := done.Load()
	testwait.For(t, "load after the swap", 10*time.Second, func() error {
		if d := done.Load(); d < atSwap+50 && d+failed.Load() < maxRequests {
			return fmt.Errorf("%d answered since the swap", d-atSwap)
		}
		return nil
	})
	close(stop)
	wg.Wait()
	if f := failed.Load(); f > 0 {
		t.Errorf("%d of %d requests failed across the swap; first: %v", f, done.Load()+f, firstFailure.Load())
	}
	if v := w.metric(t, "egressd_bundle_failing"); v != 0 {
		t.Errorf("egressd_bundle_failing after r4 = %v; want 0", v)
	}
	if code := w.get(t, "next.test"); code != http.StatusOK {
		t.Fatalf("GET next.test under r4 = %d; want 200", code)
	}
	rec = w.e.WaitRecords(t, "of the request under r4", func(r audit.Record) bool { return r.Host == "next.test" && r.Decision == audit.DecisionAllow })[0]
	if d, rev := policy.SplitDigest(rec.Policy); rev != "r4" || rec.Rule != "up-r4" {
		t.Errorf("record policy, rule = %q (digest %s), %q; want …@r4, up-r4", rec.Policy, d, rec.Rule)
	}
	t.Logf("%d requests across the swap, none failed", done.Load())

	// serve --check fetches and checks the bundle serve would start with.
	out, stderr, code := RunCLI(t, "serve", "--check", "--config", w.e.ConfigPath)
	if code != 0 || !strings.Contains(out, "@r4") {
		t.Errorf("serve --check = %d, %q, %q; want 0 naming the policy …@r4", code, out, stderr)
	}
}

// TestBundleServerDownAtStart: with no bundle to be had, serve does not
// start (fail closed: nothing listens) and says why once its bounded wait
// ends.
func TestBundleServerDownAtStart(t *testing.T) {
	key, err := bundletest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	srv := bundletest.NewServer()
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	ca, err := srv.WriteCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "bundle-key.pem")
	if err := os.WriteFile(keyFile, []byte(key.Public), 0o644); err != nil {
		t.Fatal(err)
	}
	srv.Fail(http.StatusServiceUnavailable)
	e := Start(t, Options{NotReady: true, YAML: fmt.Sprintf(
		"policy:\n  bundle_url: %s/b.tar.gz\n  bundle_ca_file: %s\n  bundle_poll_min: 1s\n  bundle_poll_max: 1s\n  bundle_start_timeout: 2s\n"+
			"  bundle_verification:\n    public_key_file: %s\n", srv.URL, ca, keyFile)})
	if err := e.Wait(20 * time.Second); err == nil {
		t.Fatal("egressd serve exited 0 with no bundle; want a start-up failure")
	}
	if log := e.Log(); !strings.Contains(log, "bundle_start_timeout") || !strings.Contains(log, "Service Unavailable") {
		t.Errorf("log does not say why serve did not start (bundle_start_timeout, Service Unavailable):\n%s", log)
	}
}
