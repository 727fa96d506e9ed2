package e2e

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/dnsguard/dnstest"
	"github.com/egressd/egressd/internal/decisiontest"
)

// TestStartedRecordOnEveryStart is issue 11 item 21: after a clean stop,
// or a crash that left a whole last line, the next start appended to the
// same segment without a trace. Every start
// now writes a started record naming the build, config and bundle, and the
// log still verifies.
func TestStartedRecordOnEveryStart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "audit")
	dns := dnstest.Start(t)
	// A clean stop, then a kill between records: both leave whole lines.
	for i, kill := range []bool{false, true, false} {
		e := Start(t, Options{AuditDir: dir, DNS: dns.Addr()})
		if kill {
			e.Signal(t, syscall.SIGKILL)
			_ = e.Wait(10 * time.Second) // a killed process reports the kill
			continue
		}
		if err := e.Stop(10 * time.Second); err != nil {
			t.Fatalf("stop %d: %v", i, err)
		}
	}
	e := &Egressd{AuditDir: dir}
	var started []audit.Record
	for _, r := range e.Records(t) {
		if r.Kind == "started" {
			started = append(started, r)
		}
	}
	if len(started) != 3 {
		t.Fatalf("three starts wrote %d started records; want 3", len(started))
	}
	for _, r := range started {
		if r.Detail["version"] == "" || len(r.Detail["config"]) != len("sha256:")+64 || r.Detail["policy"] == "" {
			t.Errorf("started record detail = %v; want version, config sha256 and policy digest", r.Detail)
		}
	}
	if out, errOut, code := RunCLI(t, "audit", "verify", dir); code != 0 {
		t.Errorf("audit verify = %d: %s%s", code, out, errOut)
	}
}

// TestRefusalFloodIsAggregated is issue 11 item 19: one identity held at
// its rate limit wrote a full record per refusal (572,001 in 23 s). Now
// each second holds a few samples per identity and reason and one record
// counting the rest; the counts add up to exactly the refusals the client
// saw, and the log verifies.
func TestRefusalFloodIsAggregated(t *testing.T) {
	w := newWorld(t, func(w *world) {
		w.Opts.ProxyYAML = "per_identity_rate: 1\nper_identity_burst: 5"
	})
	c := w.E.Client("", "")
	refused := 0
	for range 600 {
		resp, err := c.Get(w.url("upstream.test", "/echo"))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests && decisiontest.Reason(resp.Header) == "rate_limited" {
			refused++
		}
	}
	if m := w.E.Metrics(t); !strings.Contains(m, "egressd_audit_refusals_folded_total ") ||
		strings.Contains(m, "egressd_audit_refusals_folded_total 0\n") {
		t.Errorf("metrics do not count folded refusals:\n%s", m)
	}
	// A clean stop writes the last second's counts.
	if err := w.E.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	records, counted := 0, int64(0)
	seconds := map[int64]bool{}
	for _, r := range w.E.Records(t) {
		if r.Reason != "rate_limited" {
			continue
		}
		records++
		counted += max(1, r.Count)
		seconds[r.TS.Unix()] = true
	}
	t.Logf("%d rate_limited refusals: %d records in %d seconds", refused, records, len(seconds))
	if counted != int64(refused) {
		t.Errorf("records account for %d rate_limited refusals; the client saw %d", counted, refused)
	}
	// audit.refusal_samples (10) full records and one aggregate per
	// second in which the refusals were written.
	if max := 11 * len(seconds); records > max {
		t.Errorf("%d refusals wrote %d records in %d seconds; want at most %d", refused, records, len(seconds), max)
	}
	if out, errOut, code := RunCLI(t, "audit", "verify", w.E.AuditDir); code != 0 {
		t.Errorf("audit verify = %d: %s%s", code, out, errOut)
	}
}
