package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/egressdbin"
	"github.com/egressd/egressd/internal/testport"
	"github.com/egressd/egressd/internal/testwait"
	"github.com/egressd/egressd/rego"
)

// The harness every e2e file shares:
//
//	e := Start(t, Options{YAML: InternalAllow(up.Addr), PolicyDir: WritePolicy(t, rules), DNS: dns.Addr()})
//	e.Client(user, token)          // net/http client through the proxy
//	e.ProxyAddr, e.AdminAddr       // loopback addresses, for curl -x and friends
//	e.Admin(method, path)          // admin listener; e.Reload(t), e.Metrics(t)
//	e.Records(t), e.WaitRecords(…) // the audit log as audit.Record values
//	e.Signal(t, sig), e.Stop(d), e.Wait(d), e.Log()
//	RunCLI(t, args…)               // the same binary as a CLI (audit verify, check …)
//	VerifyAudit(t, e)              // `egressd audit verify` must pass
//
// Upstream fixtures are in upstream_test.go (StartHTTP, StartHTTPS with a CA
// file) and the proxy tests' standard setup in world_test.go (newWorld).

// binary is the egressd executable TestMain builds once per `go test` run.
var binary string

// repoRoot is the module root (the e2e directory's parent).
var repoRoot string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	_, file, _, _ := runtime.Caller(0)
	repoRoot = filepath.Dir(filepath.Dir(file))
	var err error
	if binary, err = egressdbin.Path(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build egressd:", err)
		return 1
	}
	defer removeCollector()
	return egressdbin.Main(m)
}

// Options describe one egressd instance. The harness always sets
// proxy.listen, admin.listen, audit.dir, dns.upstreams and policy.dir itself.
type Options struct {
	// YAML is extra top-level config: `internal:`, `identities:`, … .
	YAML string
	// AdminYAML is extra keys of the `admin:` section, as YAML lines
	// indented as if at the top level ("clients:\n  - name: …").
	AdminYAML string
	// AuditYAML is extra keys of the `audit:` section, one per line.
	AuditYAML string
	// ProxyYAML is extra keys of the `proxy:` section, one per line,
	// without indentation ("drain_timeout: 5s").
	ProxyYAML string
	// PolicyDir is the bundle; if empty the embedded default is used.
	PolicyDir string
	// DNS is the resolver egressd asks ("127.0.0.1:port"), usually a
	// dnstest server. If empty, 127.0.0.1:1 (nothing answers): tests that
	// resolve names must set it.
	DNS string
	// DNSListen is dns.listen, the sandbox-facing resolver; if empty none
	// starts.
	DNSListen string
	// AuditDir is reused when set (a restart continues a chain); if empty a
	// fresh directory is used.
	AuditDir string
	// Args are extra `serve` flags.
	Args []string
	// NotReady skips waiting for /readyz (for tests of an unready start).
	NotReady bool
	// Hold are ports the test wrote into the config (dns.listen,
	// postgres.listen) and holds (ReservePort) so that nothing else binds
	// them first; Start releases them just before egressd starts.
	Hold []*testport.Reservation
	// Wrap is a command egressd runs under, e.g. {"prlimit",
	// "--nofile=128:128"}; if empty, none.
	Wrap []string
	// Env are extra "KEY=value" environment variables of the process
	// (secrets read from the environment).
	Env []string
}

// Egressd is one running `egressd serve`.
type Egressd struct {
	ProxyAddr  string
	AdminAddr  string
	AuditDir   string
	ConfigPath string
	LogPath    string

	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// ReservePort holds a loopback port for a listener egressd is to open
// (pass it in Options.Hold): picking a free port and closing it at once
// let another test's server take it before egressd bound it.
func ReservePort(t testing.TB) *testport.Reservation {
	t.Helper()
	r, err := testport.Reserve()
	if err != nil {
		t.Fatalf("reserve a port: %v", err)
	}
	t.Cleanup(r.Release)
	return r
}

// startAttempts bounds Start's retries on a lost port race.
const startAttempts = 3

// Start writes a config for o, starts egressd and waits until /readyz
// answers 200. The process is stopped when the test ends.
//
// egressd cannot take an inherited listener, so its proxy and admin ports
// are held until just before it starts and released for it to bind; in
// that moment another process may still take one. When egressd then exits
// before ready because its own proxy or admin address was in use, Start
// tries again with fresh ports.
func Start(t testing.TB, o Options) *Egressd {
	t.Helper()
	for attempt := 1; ; attempt++ {
		e, err := start(t, o)
		if err == nil {
			return e
		}
		if attempt == startAttempts || !e.lostPortRace() {
			t.Fatal(err)
		}
		t.Logf("egressd lost a port race (attempt %d), starting again: %v", attempt, err)
	}
}

// lostPortRace says whether egressd exited because its proxy or admin
// address was taken between release and bind.
func (e *Egressd) lostPortRace() bool {
	if !e.Exited() {
		return false
	}
	log := e.Log()
	for _, addr := range []string{e.ProxyAddr, e.AdminAddr} {
		if strings.Contains(log, addr) && strings.Contains(log, "address already in use") {
			return true
		}
	}
	return false
}

func start(t testing.TB, o Options) (*Egressd, error) {
	t.Helper()
	dir := t.TempDir()
	proxyPort, adminPort := ReservePort(t), ReservePort(t)
	e := &Egressd{
		ProxyAddr:  proxyPort.Addr(),
		AdminAddr:  adminPort.Addr(),
		AuditDir:   o.AuditDir,
		ConfigPath: filepath.Join(dir, "egressd.yaml"),
		LogPath:    filepath.Join(dir, "egressd.log"),
	}
	if e.AuditDir == "" {
		e.AuditDir = filepath.Join(dir, "audit")
	}
	e.WriteConfig(t, o)
	argv := append(append(append([]string{}, o.Wrap...), binary, "serve", "--config", e.ConfigPath), o.Args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(cleanEnv(), o.Env...)
	proxyPort.Release()
	adminPort.Release()
	for _, r := range o.Hold {
		r.Release()
	}
	if err := e.launch(cmd); err != nil {
		t.Fatalf("start egressd: %v", err)
	}
	e.stopAtEnd(t)
	if o.NotReady {
		return e, nil
	}
	return e, e.waitReady(20 * time.Second)
}

// launch starts cmd, an egressd serve (perhaps wrapped), with its output
// in e.LogPath; Wait, Stop and Exited follow it.
func (e *Egressd) launch(cmd *exec.Cmd) error {
	logf, err := os.Create(e.LogPath)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	e.cmd, e.exited = cmd, make(chan struct{})
	go func() {
		e.err = cmd.Wait()
		logf.Close()
		close(e.exited)
	}()
	return nil
}

// stopAtEnd stops egressd when t ends and prints its log if t failed.
func (e *Egressd) stopAtEnd(t testing.TB) {
	t.Cleanup(func() {
		if err := e.Stop(10 * time.Second); err != nil {
			t.Logf("egressd stop: %v", err)
		}
		if t.Failed() {
			t.Logf("egressd log:\n%s", e.Log())
		}
	})
}

// WriteConfig (re)writes the config file for o; Reload applies it.
func (e *Egressd) WriteConfig(t testing.TB, o Options) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "log:\n  level: debug\nproxy:\n  listen: %s\n", e.ProxyAddr)
	for _, l := range strings.Split(strings.TrimSpace(o.ProxyYAML), "\n") {
		if l != "" {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	fmt.Fprintf(&b, "admin:\n  listen: %s\n", e.AdminAddr)
	for _, l := range strings.Split(strings.TrimSpace(o.AdminYAML), "\n") {
		if l != "" {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	fmt.Fprintf(&b, "audit:\n  dir: %s\n", e.AuditDir)
	for _, l := range strings.Split(strings.TrimSpace(o.AuditYAML), "\n") {
		if l != "" {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	dns := o.DNS
	if dns == "" {
		dns = "127.0.0.1:1"
	}
	fmt.Fprintf(&b, "dns:\n  upstreams: [%q]\n", dns)
	if o.DNSListen != "" {
		fmt.Fprintf(&b, "  listen: %s\n", o.DNSListen)
	}
	if o.PolicyDir != "" {
		fmt.Fprintf(&b, "policy:\n  dir: %s\n", o.PolicyDir)
	}
	b.WriteString(o.YAML)
	if err := os.WriteFile(e.ConfigPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// cleanEnv keeps proxy variables of the developer's shell away from egressd
// and from the clients the tests start.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToLower(k) {
		case "http_proxy", "https_proxy", "all_proxy", "no_proxy":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// WaitReady polls /readyz until 200 or the timeout.
func (e *Egressd) WaitReady(t testing.TB, timeout time.Duration) {
	t.Helper()
	if err := e.waitReady(timeout); err != nil {
		t.Fatal(err)
	}
}

func (e *Egressd) waitReady(timeout time.Duration) error {
	var exited error
	err := testwait.Poll("egressd's /readyz to say 200", timeout, func() error {
		if e.Exited() {
			exited = fmt.Errorf("egressd exited before ready: %v\n%s", e.err, e.Log())
			return nil
		}
		code, body, err := e.Admin(http.MethodGet, "/readyz")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("/readyz = %d %s", code, body)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%w\n%s", err, e.Log())
	}
	return exited
}

// Admin sends a request to the admin listener.
func (e *Egressd) Admin(method, path string) (int, string, error) {
	req, err := http.NewRequest(method, "http://"+e.AdminAddr+path, nil)
	if err != nil {
		return 0, "", err
	}
	timeout := 5 * time.Second
	if method == http.MethodPost && path == "/-/reload" {
		// A reload compiles the bundle and runs its Rego tests before it
		// answers: seconds on a CI machine busy with other packages.
		timeout = 2 * time.Minute
	}
	c := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}, Timeout: timeout}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// Reload asks for a reload over the admin listener and fails the test unless
// it succeeded.
func (e *Egressd) Reload(t testing.TB) {
	t.Helper()
	code, body, err := e.Admin(http.MethodPost, "/-/reload")
	if err != nil || code != http.StatusOK {
		t.Fatalf("reload = %d %q, %v; want 200", code, body, err)
	}
}

// Metrics returns the /metrics text.
func (e *Egressd) Metrics(t testing.TB) string {
	t.Helper()
	code, body, err := e.Admin(http.MethodGet, "/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("metrics = %d, %v", code, err)
	}
	return body
}

// ProxyURL is the proxy as clients name it.
func (e *Egressd) ProxyURL(user, token string) *url.URL {
	u := &url.URL{Scheme: "http", Host: e.ProxyAddr}
	if user != "" {
		u.User = url.UserPassword(user, token)
	}
	return u
}

// Client is a Go net/http client using the proxy (as HTTP_PROXY would),
// optionally with credentials, trusting roots (nil: system roots).
func (e *Egressd) Client(user, token string) *http.Client {
	return &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(e.ProxyURL(user, token))},
		Timeout:   15 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// Signal sends sig to the process.
func (e *Egressd) Signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := e.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// Wait waits for the process to exit and returns its error (nil on exit 0).
func (e *Egressd) Wait(timeout time.Duration) error {
	select {
	case <-e.exited:
		return e.err
	case <-time.After(timeout):
		return errors.New("egressd did not exit in time")
	}
}

// Stop sends SIGTERM and waits; past timeout the process is killed.
func (e *Egressd) Stop(timeout time.Duration) error {
	select {
	case <-e.exited:
		return e.err
	default:
	}
	e.cmd.Process.Signal(syscall.SIGTERM)
	if err := e.Wait(timeout); err != nil {
		select {
		case <-e.exited:
			return err
		default:
			e.cmd.Process.Kill()
			<-e.exited
			return err
		}
	}
	return nil
}

// Exited reports whether the process has ended.
func (e *Egressd) Exited() bool {
	select {
	case <-e.exited:
		return true
	default:
		return false
	}
}

// Log returns the process's operational log so far.
func (e *Egressd) Log() string {
	b, _ := os.ReadFile(e.LogPath)
	return string(b)
}

// Records reads every audit record written so far, in file order.
func (e *Egressd) Records(t testing.TB) []audit.Record {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(e.AuditDir, "*.jsonl"))
	sort.Strings(files)
	var out []audit.Record
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var r audit.Record
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				continue // a torn tail; verify reports it
			}
			out = append(out, r)
		}
	}
	return out
}

// WaitRecords polls the audit log until want returns a non-empty match (the
// writer syncs on an interval), failing the test after 5 s.
func (e *Egressd) WaitRecords(t testing.TB, desc string, match func(audit.Record) bool) []audit.Record {
	t.Helper()
	var got []audit.Record
	testwait.For(t, "an audit record "+desc, 5*time.Second, func() error {
		got = got[:0]
		all := e.Records(t)
		for _, r := range all {
			if match(r) {
				got = append(got, r)
			}
		}
		if len(got) == 0 {
			return fmt.Errorf("none among %d records in %s", len(all), e.AuditDir)
		}
		return nil
	})
	return got
}

// ByRequest finds a request's records by the id in X-Egressd-Request.
func ByRequest(id string) func(audit.Record) bool {
	return func(r audit.Record) bool { return r.Request == id }
}

// RunCLI runs the egressd binary with args and returns stdout, stderr and
// the exit code.
func RunCLI(t testing.TB, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = cleanEnv()
	return egressdbin.Output(t, cmd)
}

// Rule is one entry of a test bundle's data.rules.
type Rule struct {
	ID         string   `json:"id"`
	Hosts      []string `json:"hosts"`
	Ports      []int    `json:"ports"`
	Methods    []string `json:"methods,omitempty"`
	Paths      []string `json:"paths,omitempty"`
	Identities []string `json:"identities,omitempty"`
	TLS        *bool    `json:"tls,omitempty"`
	Inspect    bool     `json:"inspect,omitempty"`
	Action     string   `json:"action,omitempty"`
	// Credentials are the rule's credential actions, as data.json spells
	// them.
	Credentials []map[string]any `json:"credentials,omitempty"`
	// The request keys: bounds and the body conditions (see rego/README.md).
	MaxRequestBytes int64          `json:"max_request_bytes,omitempty"`
	MaxBodyBytes    int64          `json:"max_body_bytes,omitempty"`
	MCP             map[string]any `json:"mcp,omitempty"`
	LLM             map[string]any `json:"llm,omitempty"`
	SecretPatterns  string         `json:"secret_patterns,omitempty"`
	// Mode is "observe" for a rule whose denies are only recorded.
	Mode string `json:"mode,omitempty"`
}

// WritePolicy writes the default bundle (package rego) into a temporary
// directory and replaces its data.json rules with rules.
func WritePolicy(t testing.TB, rules []Rule) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "policy")
	// The bundle's own Rego tests assert its default data; they are left
	// out because the rules here replace it.
	if err := rego.Write(dst, false); err != nil {
		t.Fatalf("copy bundle: %v", err)
	}
	b, err := json.MarshalIndent(map[string]any{"rules": rules}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "data.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// InternalAllow is an `internal:` section allowing exactly addr:port pairs.
func InternalAllow(addrs ...string) string {
	var b strings.Builder
	b.WriteString("internal:\n")
	for _, a := range addrs {
		host, port, _ := net.SplitHostPort(a)
		fmt.Fprintf(&b, "  - cidr: %s\n    ports: [%s]\n    action: allow\n", host, port)
	}
	return b.String()
}
