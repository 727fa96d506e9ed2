package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/testport"
)

// replayReport is what `policy replay --json` prints, as far as the test
// reads it.
type replayReport struct {
	Records        int            `json:"records"`
	Redecidable    int            `json:"redecidable"`
	Verified       int            `json:"verified"`
	NewlyDenied    int            `json:"newly_denied"`
	NewlyAllowed   int            `json:"newly_allowed"`
	NotRedecidable map[string]int `json:"not_redecidable"`
	Unloaded       []string       `json:"unloaded"`
	Changes        []struct {
		Seq     uint64 `json:"seq"`
		Outcome string `json:"outcome"`
		New     struct {
			Allow  bool   `json:"allow"`
			Reason string `json:"reason"`
		} `json:"new"`
	} `json:"changes"`
	Groups []struct {
		Outcome string `json:"outcome"`
		OldRule string `json:"old_rule"`
		NewRule string `json:"new_rule"`
		Count   int    `json:"count"`
	} `json:"groups"`
}

// TestPolicyReplay records a session (plain HTTP, CONNECT and DNS,
// allowed and denied), narrows the bundle, and checks that `policy replay`
// lists exactly the records whose verdict `egressd check` changes under
// the narrowed bundle, each re-decided first under its own archived
// bundle; a record whose query the log redacted is re-decided too (no rule
// reads the query).
func TestPolicyReplay(t *testing.T) {
	held := ReservePort(t)
	w := newWorld(t, func(w *world) {
		w.Opts.DNSListen = held.Addr()
		w.Opts.Hold = []*testport.Reservation{held}
	})
	waitDNS(t, held.Addr())
	c := w.E.Client("", "")
	hp := w.HTTP.Port
	for _, u := range []string{
		w.url("upstream.test", "/echo"),
		w.url("127.0.0.1", "/echo"),
		w.url("paths.test", "/allowed/a"),
		w.url("paths.test", "/secret"),
		w.url("other.test", "/"),
		w.url("upstream.test", "/echo?token=abc&x=1"),
	} {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		resp.Body.Close()
	}
	for _, host := range []string{"upstream.test", "127.0.0.1"} {
		target := fmt.Sprintf("%s:%d", host, hp)
		connectOnly(t, w.E.ProxyAddr, target)
	}
	// A reload archives its bundle too; the DNS records below are made
	// under it.
	b, err := json.Marshal(map[string]any{"rules": append(w.rules(), Rule{ID: "extra", Hosts: []string{"extra.test"}, Ports: []int{hp}})})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.Policy, "data.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	w.E.Reload(t)
	for _, name := range []string{"paths.test.", "other.test."} {
		m := new(dns.Msg).SetQuestion(name, dns.TypeA)
		if _, _, err := (&dns.Client{Net: "udp", Timeout: 5 * time.Second}).Exchange(m, held.Addr()); err != nil {
			t.Fatalf("dns %s: %v", name, err)
		}
	}
	w.E.WaitRecords(t, "the last dns query", func(r audit.Record) bool { return r.Kind == audit.KindDNS && r.Name == "other.test" })
	if err := w.E.Stop(10 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	VerifyAudit(t, w.E)
	if des, err := os.ReadDir(filepath.Join(w.E.AuditDir, "bundles")); err != nil || len(des) != 2 {
		t.Fatalf("bundle archive = %v, %v; want the two bundles served (start, reload)", des, err)
	}

	// Narrowed: no path rule, and the IP literal dropped from "upstream".
	var narrow []Rule
	for _, r := range w.rules() {
		switch r.ID {
		case "upstream-paths":
			continue
		case "upstream":
			r.Hosts = []string{"upstream.test"}
		}
		narrow = append(narrow, r)
	}
	narrowed := WritePolicy(t, narrow)
	base := []string{"--config", w.E.ConfigPath, "--policy", narrowed}

	_, stderr, code := RunCLI(t, append([]string{"policy", "replay", "--audit", w.E.AuditDir, "--json"}, base[:2]...)...)
	if code != 2 || !strings.Contains(stderr, "--policy DIR is required") {
		t.Errorf("replay without --policy: exit %d, %q; want 2 naming --policy", code, stderr)
	}
	rep := replayWitness(t, w.E, narrowed, 10)
	if len(rep.NotRedecidable) != 0 {
		t.Errorf("not re-decidable = %v; want none (the redacted query too is re-decided)", rep.NotRedecidable)
	}

	// The human report names the groups; the recorded bundle changes
	// nothing.
	stdout, _, code := RunCLI(t, "policy", "replay", "--audit", w.E.AuditDir, "--config", w.E.ConfigPath, "--policy", narrowed)
	if code != 1 || !strings.Contains(stdout, "newly denied: ") || !strings.Contains(stdout, "rule upstream-paths -> (none)") {
		t.Errorf("replay (text) exit %d:\n%s", code, stdout)
	}
	stdout, stderr, code = RunCLI(t, "policy", "replay", "--audit", w.E.AuditDir, "--config", w.E.ConfigPath, "--policy", w.Policy)
	if code != 0 || !strings.Contains(stdout, " 0 changed") {
		t.Errorf("replay against the recorded bundle: exit %d\n%s%s", code, stdout, stderr)
	}

	// audit explain: the path rule's allow, made under the first bundle,
	// explained under it (archived) and under the narrowed one.
	allowed := w.E.WaitRecords(t, "of the path rule's allow", func(r audit.Record) bool {
		return r.Kind == audit.KindHTTP && r.Path == "/allowed/a" && r.Decision == audit.DecisionAllow
	})[0]
	seq := strconv.FormatUint(allowed.Seq, 10)
	stdout, stderr, code = RunCLI(t, "audit", "explain", "--audit", w.E.AuditDir, "--config", w.E.ConfigPath, "--policy", narrowed, seq)
	own, current, found := strings.Cut(stdout, "under the current bundle")
	if code != 0 || !found || !strings.Contains(own, "under the bundle that made it ("+allowed.Policy+")") ||
		!strings.Contains(own, "result: allow allowed, rule upstream-paths") ||
		!strings.Contains(current, "result: deny no_matching_rule, rule none") {
		t.Errorf("audit explain %s: exit %d\n%s%s", seq, code, stdout, stderr)
	}
	if _, stderr, code := RunCLI(t, "audit", "explain", "--audit", w.E.AuditDir, "99999"); code != 2 || !strings.Contains(stderr, "no record 99999") {
		t.Errorf("audit explain of a missing seq: exit %d %q; want 2 naming it", code, stderr)
	}
}

// replayWitness runs `policy replay --json` of e's log against the bundle
// in dir and checks it against the witness: every decision record decided
// by `egressd check` under that bundle. The records replay lists as
// changed must be exactly those whose check verdict differs from the
// record (DNS records refused on their answer, which check cannot see,
// left out), each re-decided first under its own archived bundle. At
// least min decision records must be in the log.
func replayWitness(t *testing.T, e *Egressd, dir string, min int) replayReport {
	t.Helper()
	base := []string{"--config", e.ConfigPath, "--policy", dir}
	stdout, stderr, code := RunCLI(t, append([]string{"policy", "replay", "--audit", e.AuditDir, "--json"}, base...)...)
	if code != 1 {
		t.Fatalf("policy replay exit %d; want 1 (something changed)\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	var rep replayReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("replay --json: %v\n%s", err, stdout)
	}
	if len(rep.Unloaded) != 0 || rep.Verified != rep.Redecidable {
		t.Errorf("verified %d of %d re-decidable, unloaded %v; want every record verified under its archived bundle", rep.Verified, rep.Redecidable, rep.Unloaded)
	}
	changed := map[uint64]bool{}
	for _, ch := range rep.Changes {
		changed[ch.Seq] = ch.New.Allow
	}
	want := map[uint64]bool{}
	decisions := 0
	for _, r := range e.Records(t) {
		args := checkArgs(r)
		if args == nil {
			continue
		}
		decisions++
		cmd := append(append([]string{"check", args[0], "--identity", r.Identity}, base...), args[1:]...)
		out, errOut, code := RunCLI(t, cmd...)
		var d struct {
			Allow bool `json:"allow"`
		}
		if code == 2 || json.Unmarshal([]byte(out), &d) != nil {
			t.Fatalf("%v: exit %d %s %s", cmd, code, out, errOut)
		}
		if rec := r.Decision == audit.DecisionAllow; d.Allow != rec && !notRedecidableDNS(r) {
			want[r.Seq] = d.Allow
		}
	}
	if decisions < min {
		t.Fatalf("only %d decision records; want at least %d", decisions, min)
	}
	if len(want) == 0 || !maps.Equal(changed, want) {
		t.Errorf("replay changes = %v; want %v (check's verdicts that differ from the records)\n%s", changed, want, stdout)
	}
	newly := 0
	for _, allow := range want {
		if allow {
			newly++
		}
	}
	if rep.NewlyAllowed != newly || rep.NewlyDenied != len(want)-newly {
		t.Errorf("newly denied %d, newly allowed %d; want %d, %d", rep.NewlyDenied, rep.NewlyAllowed, len(want)-newly, newly)
	}
	return rep
}

// TestPolicyReplayInspected: requests inside an inspected tunnel, for
// configured identities, replayed against a bundle that drops their path:
// replay lists the inner request check now denies, and not its CONNECT.
func TestPolicyReplayInspected(t *testing.T) {
	w := newInspectWorld(t)
	for _, path := range []string{"/ok/a", "/admin"} {
		if _, err := run(t, "curl", "-sS", "-o", "/dev/null", "--max-time", "20", "-x", w.proxy("sbx-a"), "--cacert", w.CAFiles["sbx-a"], w.url(path)); err != nil {
			t.Fatalf("curl %s: %v", path, err)
		}
	}
	w.E.WaitRecords(t, "the inspected request to /admin", func(r audit.Record) bool { return r.Inspected && r.Path == "/admin" })
	if err := w.E.Stop(10 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	narrowed := WritePolicy(t, []Rule{
		{ID: "inspected", Hosts: []string{"example.com"}, Ports: []int{w.HTTPS.Port}, Methods: []string{"GET"}, Paths: []string{"/ws"}, Inspect: true},
	})
	rep := replayWitness(t, w.E, narrowed, 3)
	if len(rep.Changes) != 1 || rep.Changes[0].New.Allow {
		t.Errorf("changes = %+v; want the one inner request to /ok/a newly denied", rep.Changes)
	}
}

// checkArgs are the `egressd check` arguments that decide r's request, nil
// for a record that is no decision of the kinds the test sends.
func checkArgs(r audit.Record) []string {
	if r.Count > 0 || r.Identity == "" {
		return nil
	}
	switch r.Kind {
	case audit.KindHTTP:
		u := r.Scheme + "://" + r.Host + ":" + strconv.Itoa(int(r.Port)) + r.Path
		if r.Query != "" {
			u += "?" + r.Query
		}
		return []string{"http", r.Method, u}
	case audit.KindConnect:
		return []string{"connect", r.Host + ":" + strconv.Itoa(int(r.Port))}
	case audit.KindDNS:
		return []string{"dns", "--qtype", r.QType, r.Name}
	}
	return nil
}

// notRedecidableDNS: a DNS record refused on its answer, which check
// (deciding before any lookup) cannot witness.
func notRedecidableDNS(r audit.Record) bool {
	return r.Kind == audit.KindDNS && r.Decision == audit.DecisionDeny && r.Rule != ""
}

// connectOnly asks the proxy for a tunnel to target, reads its answer and
// hangs up.
func connectOnly(t *testing.T, proxyAddr, target string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// A 2xx answer to CONNECT has no body: the tunnel follows.
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	resp.Body.Close()
}
