package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/egressd/egressd/internal/testwait"
)

// streamOK matches verify's line for an intact exported chain.
var streamOK = regexp.MustCompile(`replica (\S+) chain \S+: ok: (\d+) records \(seq 1\.\.(\d+)\), (\d+) repeated deliveries skipped`)

// okChains parses verify's output: replica → [records, head, repeats].
func okChains(out string) map[string][3]int {
	m := map[string][3]int{}
	for _, s := range streamOK.FindAllStringSubmatch(out, -1) {
		var v [3]int
		for i := range 3 {
			fmt.Sscan(s[i+2], &v[i]) //nolint:errcheck // the regexp matched digits
		}
		m[s[1]] = v
	}
	return m
}

// TestAuditExportThroughCollector: every record reaches a real collector
// once and in order, with the request's trace context; kill -9 mid-export
// and a restart leave no gap; the collector's file and the OCSF stream
// verify, and an edited one does not.
func TestAuditExportThroughCollector(t *testing.T) {
	dir := t.TempDir()
	col := StartCollector(t, "", filepath.Join(dir, "otlp.json"))
	ocsf := filepath.Join(dir, "ocsf.jsonl")
	e := Start(t, exportOptions(t, col, "r1", ocsf, ""))
	deniedRequests(t, e, 60, 5*time.Second)
	waitDrained(t, e, "otlp")
	waitDrained(t, e, "ocsf")

	// Without a crash each record arrives exactly once.
	head := logHead(t, e)
	snap := filepath.Join(dir, "snapshot.json")
	snapshot := func() {
		t.Helper()
		b, _ := os.ReadFile(col.File)
		if err := os.WriteFile(snap, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	testwait.For(t, "the collector's file holds every record", 30*time.Second, func() error {
		snapshot()
		out, _ := verifyLine(t, "--otlp-json", snap)
		if c, ok := okChains(out)["r1"]; !ok || c[1] < head {
			return fmt.Errorf("verify: %s", out)
		}
		return nil
	})
	out, code := verifyLine(t, "--otlp-json", snap)
	if c := okChains(out)["r1"]; code != 0 || c[2] != 0 || c[0] != c[1] {
		t.Fatalf("verify --otlp-json (no crash) = %d %q; want every record once", code, out)
	}
	b, _ := os.ReadFile(snap)
	if !bytes.Contains(b, []byte(`"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331"`)) {
		t.Errorf("no exported log record carries the request's trace context")
	}

	// kill -9 while records are being written and exported.
	var wg sync.WaitGroup
	wg.Go(func() {
		c := e.Client("", "")
		c.Timeout = 2 * time.Second
		for i := 0; ; i++ {
			resp, err := c.Get("http://blocked.example/burst/" + itoa(i))
			if err != nil {
				return // egressd was killed
			}
			readAll(resp)
		}
	})
	testwait.For(t, "the burst under way", 30*time.Second, func() error {
		if s := exportMetric(t, e, "egressd_audit_export_seq", "otlp"); s < float64(head+40) {
			return fmt.Errorf("exported seq %v", s)
		}
		return nil
	})
	t.Logf("kill -9 with %v records not yet exported", exportMetric(t, e, "egressd_audit_export_lag_records", "otlp"))
	e.Signal(t, syscall.SIGKILL)
	e.Wait(10 * time.Second) //nolint:errcheck // killed: exits non-zero
	wg.Wait()

	e2 := Start(t, exportOptions(t, col, "r1", ocsf, e.AuditDir))
	deniedRequests(t, e2, 10, 5*time.Second)
	waitDrained(t, e2, "otlp")
	waitDrained(t, e2, "ocsf")
	if err := e2.Stop(10 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	col.Stop(t)

	logOut, code := verifyLine(t, e.AuditDir)
	var records int
	if _, err := fmt.Sscanf(logOut, "ok: %d records", &records); code != 0 || err != nil {
		t.Fatalf("verify %s = %d %q", e.AuditDir, code, logOut)
	}
	for _, args := range [][]string{{"--otlp-json", col.File}, {"--ocsf", ocsf}} {
		out, code := verifyLine(t, args...)
		c, ok := okChains(out)["r1"]
		if code != 0 || !ok || c[0] != records || c[1] != records {
			t.Fatalf("verify %v = %d %q; want replica r1 intact with all %d records of the log", args, code, out, records)
		}
	}

	// An edited export fails, naming what was changed.
	b, err := os.ReadFile(col.File)
	if err != nil {
		t.Fatal(err)
	}
	edited := filepath.Join(dir, "edited.json")
	from := []byte(`"key":"egressd.audit.decision","value":{"stringValue":"deny"}`)
	if err := os.WriteFile(edited, bytes.Replace(b, from, []byte(`"key":"egressd.audit.decision","value":{"stringValue":"allow"}`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := verifyLine(t, "--otlp-json", edited); code != 1 || !strings.Contains(out, "egressd.audit.decision differ") {
		t.Fatalf("verify of an edited export = %d %q; want 1 naming the decision attribute", code, out)
	}
}

// TestAuditExportCollectorOutage: with the collector down, decisions go
// on at full speed, the lag grows, and it drains when the collector is
// back.
func TestAuditExportCollectorOutage(t *testing.T) {
	dir := t.TempDir()
	col := StartCollector(t, "", filepath.Join(dir, "otlp.json"))
	e := Start(t, exportOptions(t, col, "r1", "", ""))
	deniedRequests(t, e, 5, 5*time.Second)
	waitDrained(t, e, "otlp")
	col.Stop(t)

	// Each decision is answered at once; the records wait on disk.
	lagAtLeast := func(n float64) float64 {
		t.Helper()
		var lag float64
		testwait.For(t, fmt.Sprintf("export lag of at least %v records", n), 30*time.Second, func() error {
			if lag = exportMetric(t, e, "egressd_audit_export_lag_records", "otlp"); lag < n {
				return fmt.Errorf("lag %v", lag)
			}
			return nil
		})
		return lag
	}
	deniedRequests(t, e, 20, 2*time.Second)
	lag1 := lagAtLeast(20)
	deniedRequests(t, e, 20, 2*time.Second)
	lagAtLeast(lag1 + 20)
	if f := exportMetric(t, e, "egressd_audit_export_failures_total", "otlp"); f == 0 {
		t.Errorf("no failed export counted during the outage")
	}

	col2 := StartCollector(t, col.Addr, col.File)
	waitDrained(t, e, "otlp")
	if err := e.Stop(10 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	col2.Stop(t)
	out, code := verifyLine(t, "--otlp-json", col.File)
	if c, ok := okChains(out)["r1"]; code != 0 || !ok || c[1] != logHead(t, e) {
		t.Fatalf("verify after the outage = %d %q; want r1 intact up to seq %d", code, out, logHead(t, e))
	}
}

// TestAuditExportTwoReplicas: two egressd replicas, one collector. Each
// log verifies alone and both exported chains verify together; a record
// removed from one replica's export is named.
func TestAuditExportTwoReplicas(t *testing.T) {
	dir := t.TempDir()
	col := StartCollector(t, "", filepath.Join(dir, "otlp.json"))
	var reps []*Egressd
	for i, name := range []string{"r1", "r2"} {
		e := Start(t, exportOptions(t, col, name, "", ""))
		deniedRequests(t, e, 15+5*i, 5*time.Second)
		reps = append(reps, e)
	}
	var heads []int
	for _, e := range reps {
		waitDrained(t, e, "otlp")
		heads = append(heads, logHead(t, e))
	}
	col.Stop(t)
	for _, e := range reps {
		if err := e.Stop(10 * time.Second); err != nil {
			t.Fatalf("stop: %v", err)
		}
	}

	out, code := verifyLine(t, reps[0].AuditDir, reps[1].AuditDir)
	if code != 0 || strings.Count(out, ": ok: ") != 2 {
		t.Fatalf("verify DIR1 DIR2 = %d %q; want both ok", code, out)
	}
	out, code = verifyLine(t, "--otlp-json", col.File)
	chains := okChains(out)
	if code != 0 || len(chains) != 2 || chains["r1"][1] != heads[0] || chains["r2"][1] != heads[1] {
		t.Fatalf("verify --otlp-json of two replicas = %d %q", code, out)
	}

	cut := filepath.Join(dir, "cut.json")
	removeRecord(t, col.File, cut, "r2", 9)
	out, code = verifyLine(t, "--otlp-json", cut)
	if _, ok := okChains(out)["r1"]; code != 1 || !ok || !regexp.MustCompile(`replica r2 chain \S+: broken: .*records 9\.\.9 are missing`).MatchString(out) {
		t.Fatalf("verify with r2's seq 9 removed = %d %q; want r1 ok and r2 naming seq 9", code, out)
	}
}

// removeRecord copies the collector file src to dst without the log
// record of replica with seq, using the collector's own pdata.
func removeRecord(t testing.TB, src, dst, replica string, seq int64) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var out bytes.Buffer
	removed := false
	sc := bufio.NewScanner(in)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		logs, err := (&plog.JSONUnmarshaler{}).UnmarshalLogs(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		for _, rl := range logs.ResourceLogs().All() {
			for _, sl := range rl.ScopeLogs().All() {
				sl.LogRecords().RemoveIf(func(lr plog.LogRecord) bool {
					r, _ := lr.Attributes().Get("egressd.audit.replica")
					s, _ := lr.Attributes().Get("egressd.audit.seq")
					hit := r.AsString() == replica && s.Int() == seq
					removed = removed || hit
					return hit
				})
			}
		}
		b, err := (&plog.JSONMarshaler{}).MarshalLogs(logs)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(b)
		out.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !removed {
		t.Fatalf("no record of %s with seq %d in %s", replica, seq, src)
	}
	if err := os.WriteFile(dst, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}
