package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
)

// batchConfig has two identities, one with a SQL profile, and a long eval
// timeout: under -race on a loaded machine the 100ms default could turn a
// decision into policy_timeout.
const batchConfig = "policy:\n  eval_timeout: 10s\nidentities:\n" +
	"  - id: team\n    sources: [192.0.2.1/32]\n    attributes: {tier: \"1\"}\n" +
	"  - id: agent\n    sources: [192.0.2.2/32]\n    attributes: {sql_profile: read_only}\n"

func strp(s string) *string { return &s }

// batchRequests cover every kind, allows and denies, refusals before the
// policy, a body and every flag a line can carry.
var batchRequests = []checkRequest{
	{Kind: "http", Identity: "team", Method: "GET", URL: "http://deb.debian.org/debian/"},
	{Kind: "http", Identity: "team", Method: "POST", URL: "http://deb.debian.org/debian/"},
	{Kind: "http", Identity: "agent", Method: "GET", URL: "https://pypi.org/simple/"},
	{Kind: "http", Identity: "team", Method: "GET", URL: "http://169.254.169.254/latest/meta-data/"},
	{Kind: "http", Identity: "team", Method: "GET", URL: "http://2130706433/"},
	{Kind: "http", Identity: "team", Method: "GET", URL: "http://deb.debian.org/debian/%2e%2e/x"},
	{Kind: "http", Identity: "team", Method: "GET", URL: "http://deb.debian.org/debian/", HostHeader: "evil.example"},
	{Kind: "http", Identity: "team", Method: "POST", URL: "http://example.com/", Body: strp(`{"a":1}`), ContentType: "application/json"},
	{Kind: "redirect", Identity: "team", Method: "GET", URL: "https://pypi.org/simple/"},
	{Kind: "connect", Identity: "team", Target: "pypi.org:443"},
	{Kind: "connect", Identity: "agent", Target: "example.com:443"},
	{Kind: "connect", Identity: "team", Target: "[fd00:ec2::254]:443"},
	{Kind: "dns", Identity: "team", Name: "pypi.org"},
	{Kind: "dns", Identity: "team", Name: "files.pythonhosted.org.", QType: "AAAA"},
	{Kind: "dns", Identity: "team", Name: "example.com", QType: "NOPE"},
	{Kind: "sql", Identity: "agent", SQL: "SELECT 1", Database: "app"},
	{Kind: "sql", Identity: "agent", SQL: "DELETE FROM users"},
	{Kind: "sql", Identity: "team", SQL: "SELECT 1"},
	// No postgres.upstream to read a catalog from: catalog_unavailable.
	{Kind: "sql", Identity: "agent", SQL: "SELECT 1", Catalog: true},
}

// argsOf is the command line of a single check of req.
func argsOf(cfg string, req checkRequest) []string {
	kind := req.Kind
	args := []string{"check", kind, "--config", cfg, "--identity", req.Identity}
	flag := func(name, v string) {
		if v != "" {
			args = append(args, "--"+name+"="+v)
		}
	}
	switch kind {
	case "http", "redirect":
		args[1] = "http"
		if kind == "redirect" {
			args = append(args, "--redirect")
		}
		flag("host-header", req.HostHeader)
		if req.Body != nil {
			flag("data", *req.Body)
		}
		flag("content-type", req.ContentType)
		flag("content-encoding", req.ContentEncoding)
		return append(args, "--", req.Method, req.URL)
	case "connect":
		return append(args, "--", req.Target)
	case "dns":
		flag("qtype", req.QType)
		return append(args, "--", req.Name)
	case "sql":
		flag("database", req.Database)
		if req.Catalog {
			args = append(args, "--catalog")
		}
		return append(args, "--", req.SQL)
	}
	panic("unknown kind " + kind)
}

func jsonLines(t *testing.T, reqs []checkRequest) string {
	t.Helper()
	var b strings.Builder
	for _, r := range reqs {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// runCLIStdin is runCLI with standard input.
func runCLIStdin(stdin string, args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = exitCode(runCheckFrom(strings.NewReader(stdin), args[1:], &out, &errb), &errb)
	return code, out.String(), errb.String()
}

// TestCheckBatchMatchesSingle: every line of --batch is answered with the
// bytes the single check of the same request prints.
func TestCheckBatchMatchesSingle(t *testing.T) {
	cfg := writeConfig(t, t.TempDir(), batchConfig)
	code, stdout, stderr := runCLIStdin(jsonLines(t, batchRequests), "check", "--batch", "--config", cfg)
	if code != 1 {
		t.Fatalf("check --batch: exit %d, stderr %q; want 1 (some denied)", code, stderr)
	}
	got := strings.SplitAfter(stdout, "\n")
	if len(got) != len(batchRequests)+1 || got[len(got)-1] != "" {
		t.Fatalf("check --batch printed %d lines for %d requests:\n%s", len(got)-1, len(batchRequests), stdout)
	}
	for i, req := range batchRequests {
		args := argsOf(cfg, req)
		scode, want, serr := runCLI(args...)
		if scode == 2 {
			t.Fatalf("egressd %q: exit 2: %s", args, serr)
		}
		if got[i] != want {
			t.Errorf("line %d (%s): batch printed\n%s; egressd %q printed\n%s", i+1, req.Kind, got[i], args, want)
		}
	}
}

// TestCheckBatchLines: a line that is not a request gets an error object in
// its place and the run goes on; blank lines are skipped; the exit status
// is the worst of the lines.
func TestCheckBatchLines(t *testing.T) {
	cfg := writeConfig(t, t.TempDir(), batchConfig)
	allow := `{"kind":"connect","identity":"team","target":"pypi.org:443"}`
	deny := `{"kind":"connect","identity":"team","target":"example.com:443"}`
	long := `{"kind":"dns","identity":"team","name":"` + strings.Repeat("a", maxBatchLine) + `"}`
	tests := []struct {
		name  string
		stdin string
		code  int
		// want are the output lines in order: "allow", "deny", or an
		// error's text.
		want []string
	}{
		{"all allowed", allow + "\n" + allow, 0, []string{"allow", "allow"}},
		{"a deny", allow + "\n" + deny + "\n", 1, []string{"allow", "deny"}},
		{"blank lines", "\n" + allow + "\r\n  \n\n" + deny + "\n\n", 1, []string{"allow", "deny"}},
		{"not JSON", allow + "\nGET http://x/\n" + allow, 2, []string{"allow", "not a request object", "allow"}},
		{"unknown field", `{"kind":"http","identity":"team","method":"GET","uri":"http://x/"}`, 2, []string{`unknown field "uri"`}},
		{"unknown kind", `{"kind":"ftp","identity":"team"}` + "\n" + deny, 2, []string{`unknown kind "ftp"`, "deny"}},
		{"no kind", `{"identity":"team","target":"pypi.org:443"}`, 2, []string{`"kind" is required`}},
		{"missing fields", `{"kind":"http","identity":"team"}`, 2, []string{"kind http needs method, url"}},
		{"two values", allow + " " + allow, 2, []string{"more than one JSON value"}},
		{"unknown identity", `{"kind":"connect","identity":"nobody","target":"pypi.org:443"}`, 2, []string{`"nobody" is not in the config's identities`}},
		{"no identity", `{"kind":"connect","target":"pypi.org:443"}`, 2, []string{"--identity is required"}},
		{"long line", allow + "\n" + long + "\n" + deny, 2, []string{"allow", "line longer than", "deny"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLIStdin(tt.stdin, "check", "--batch", "--config", cfg)
			if code != tt.code {
				t.Errorf("check --batch: exit %d, stderr %q; want %d", code, stderr, tt.code)
			}
			lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("check --batch printed %d lines; want %d:\n%s", len(lines), len(tt.want), stdout)
			}
			for i, line := range lines {
				var v struct {
					Allow bool
					Error string
				}
				if err := json.Unmarshal([]byte(line), &v); err != nil {
					t.Fatalf("line %d %q: %v", i+1, line, err)
				}
				got := v.Error
				if got == "" {
					got = map[bool]string{true: "allow", false: "deny"}[v.Allow]
				}
				if !strings.Contains(got, tt.want[i]) {
					t.Errorf("line %d = %q; want %q", i+1, got, tt.want[i])
				}
			}
		})
	}
}

// TestCheckBatchOrder: across many chunks and both workers, output line i
// answers input line i.
func TestCheckBatchOrder(t *testing.T) {
	cfg := writeConfig(t, t.TempDir(), batchConfig)
	const n = 20*batchChunk + 7
	reqs := make([]checkRequest, n)
	for i := range reqs {
		reqs[i] = checkRequest{Kind: "http", Identity: "team", Method: "GET", URL: fmt.Sprintf("http://deb.debian.org/debian/%d", i)}
	}
	code, stdout, stderr := runCLIStdin(jsonLines(t, reqs), "check", "--batch", "--config", cfg)
	if code != 0 {
		t.Fatalf("check --batch: exit %d, stderr %q; want 0", code, stderr)
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	for i := range n {
		var out struct{ Facts struct{ Path string } }
		if err := dec.Decode(&out); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if want := fmt.Sprintf("/debian/%d", i); out.Facts.Path != want {
			t.Fatalf("line %d answers path %q; want %q", i+1, out.Facts.Path, want)
		}
	}
	if dec.More() {
		t.Fatalf("check --batch printed more than %d lines", n)
	}
}

// TestCheckFlagsFirst: flags before the kind are the kind's own, and
// --batch takes no arguments.
func TestCheckFlagsFirst(t *testing.T) {
	cfg := writeConfig(t, t.TempDir(), batchConfig)
	code, first, stderr := runCLI("check", "--config", cfg, "--identity", "team", "connect", "pypi.org:443")
	if code != 0 {
		t.Fatalf("check --config … connect: exit %d, %s", code, stderr)
	}
	if _, after, _ := runCLI("check", "connect", "--config", cfg, "--identity", "team", "pypi.org:443"); first != after {
		t.Errorf("flags first printed %s; flags after %s", first, after)
	}
	if code, _, stderr := runCLI("check", "--batch", "connect"); code != 2 || !strings.Contains(stderr, "takes no arguments") {
		t.Errorf("check --batch connect: exit %d, %q; want 2, takes no arguments", code, stderr)
	}
}

// BenchmarkCheckBatch is --batch's throughput on distinct http requests
// (the decision cache answers none of them), every CPU: what the bench's
// check-batch workload measures on the binary, without the process.
func BenchmarkCheckBatch(b *testing.B) {
	cfg := writeConfig(b, b.TempDir(), batchConfig)
	var cf checkFlags
	cf.config = cfg
	env, err := cf.load(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	hosts := []string{"deb.debian.org", "security.debian.org", "example.com", "evil.test", "10.0.0.1"}
	var in bytes.Buffer
	for i := range b.N {
		fmt.Fprintf(&in, `{"kind":"http","identity":"team","method":"GET","url":"http://%s/pool/%d/x"}`+"\n", hosts[i%len(hosts)], i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	st, err := decideLines(context.Background(), env, "", &in, io.Discard)
	if err != nil || st.decided != b.N {
		b.Fatalf("decideLines = %+v, %v; want %d decided", st, err, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}
