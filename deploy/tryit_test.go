package deploy

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/internal/egressdbin"
)

// sandboxTools maps a command the example sandbox runs to the Debian
// package that provides it.
var sandboxTools = map[string]string{"curl": "curl", "psql": "postgresql-client", "python3": "python3"}

// aptPackages returns the packages a Dockerfile installs with apt-get.
func aptPackages(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	src := strings.ReplaceAll(string(b), "\\\n", " ")
	var pkgs []string
	for _, m := range regexp.MustCompile(`apt-get install ([^&\n]*)`).FindAllStringSubmatch(src, -1) {
		for _, f := range strings.Fields(m[1]) {
			if !strings.HasPrefix(f, "-") {
				pkgs = append(pkgs, f)
			}
		}
	}
	return pkgs
}

// tryStep is one step of compose/try-it.sh: what it says egressd decides
// and the sandbox command it runs.
type tryStep struct {
	line  int
	allow bool
	cmd   []string // after "sandbox"
}

// tryItSteps reads the script's `step "allowed|denied: …"` lines and the
// `sandbox …` command after each.
func tryItSteps(t *testing.T) (steps []tryStep, showsAudit bool) {
	t.Helper()
	f, err := os.Open("compose/try-it.sh")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var verdict string
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, `step "allowed`), strings.HasPrefix(l, `step "denied`):
			verdict = strings.TrimPrefix(strings.Fields(l)[1], `"`)
		case strings.HasPrefix(l, "sandbox "):
			if verdict == "" {
				t.Fatalf("try-it.sh:%d: sandbox command without a step saying allowed or denied", n)
			}
			steps = append(steps, tryStep{line: n, allow: strings.HasPrefix(verdict, "allowed"), cmd: shellWords(t, strings.TrimPrefix(l, "sandbox "))})
			verdict = ""
		case strings.Contains(l, "egressd audit show"):
			showsAudit = true
		}
	}
	return steps, showsAudit
}

// shellWords splits a line as sh would for the simple quoting the script
// uses (single quotes, no escapes).
func shellWords(t *testing.T, s string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`'([^']*)'|(\S+)`).FindAllStringSubmatch(s, -1) {
		if m[2] != "" {
			out = append(out, m[2])
		} else {
			out = append(out, m[1])
		}
	}
	return out
}

// TestComposeSandboxImage: the example sandbox is built from
// compose/sandbox.Dockerfile, which installs curl, psql and python3, and
// every tool try-it.sh runs in it is installed there.
func TestComposeSandboxImage(t *testing.T) {
	sb := loadCompose(t).Services["sandbox"]
	if sb.Build == nil || filepath.Join(sb.Build.Context, sb.Build.Dockerfile) != "compose/sandbox.Dockerfile" {
		t.Fatalf("sandbox build = %+v; want compose/sandbox.Dockerfile", sb.Build)
	}
	pkgs := aptPackages(t, "compose/sandbox.Dockerfile")
	for tool, pkg := range sandboxTools {
		if !strings.Contains(strings.Join(pkgs, " "), pkg) {
			t.Errorf("sandbox image installs %q; want %s (for %s)", pkgs, pkg, tool)
		}
	}
	steps, _ := tryItSteps(t)
	for _, s := range steps {
		if _, ok := sandboxTools[s.cmd[0]]; !ok {
			t.Errorf("try-it.sh:%d runs %s in the sandbox; the image has only %v", s.line, s.cmd[0], sandboxTools)
		}
	}
	// psql reads PG* variables, not DATABASE_URL.
	for _, k := range []string{"PGHOST", "PGUSER", "PGDATABASE", "PGPASSWORD"} {
		if sb.Environment[k] == "" {
			t.Errorf("sandbox environment lacks %s; psql -c in try-it.sh would not reach the gate", k)
		}
	}
}

// TestTryIt: compose/try-it.sh is valid sh, shows an allowed request, a
// denied one, a denied SQL statement and the audit records; and what each
// step says egressd decides is what egressd decides, asked with `egressd
// check` for the sandbox's identity, with the compose file's config and
// the policy it mounts. (No Docker engine is needed: the same decision
// code serves check and the listeners.)
func TestTryIt(t *testing.T) {
	if out, err := exec.Command("sh", "-n", "compose/try-it.sh").CombinedOutput(); err != nil {
		t.Fatalf("sh -n compose/try-it.sh: %v\n%s", err, out)
	}
	steps, showsAudit := tryItSteps(t)
	var allowed, denied, deniedSQL bool
	for _, s := range steps {
		allowed = allowed || s.allow
		denied = denied || (!s.allow && s.cmd[0] == "curl")
		deniedSQL = deniedSQL || (!s.allow && s.cmd[0] == "psql")
	}
	if !allowed || !denied || !deniedSQL || !showsAudit {
		t.Errorf("try-it.sh: allowed request %v, denied request %v, denied SQL %v, audit records %v; want all", allowed, denied, deniedSQL, showsAudit)
	}

	cfgPath := composeCheckConfig(t)
	bin := egressdbin.Build(t)
	sb := loadCompose(t).Services["sandbox"]
	id := sb.Environment["PGUSER"]
	for _, s := range steps {
		args := []string{"check"}
		switch s.cmd[0] {
		case "curl":
			u := s.cmd[len(s.cmd)-1]
			if host, ok := strings.CutPrefix(u, "https://"); ok {
				args = append(args, "connect", strings.SplitN(host, "/", 2)[0]+":443")
			} else {
				args = append(args, "http", "GET", u)
			}
		case "psql":
			args = append(args, "sql", "--database", sb.Environment["PGDATABASE"], argAfter(s.cmd, "-c"))
		default:
			t.Fatalf("try-it.sh:%d: no check for %q", s.line, s.cmd)
		}
		args = append(args, "--config", cfgPath, "--identity", id)
		out, err := exec.Command(bin, args...).Output()
		var d struct {
			Allow  bool   `json:"allow"`
			Reason string `json:"reason"`
		}
		if jerr := json.Unmarshal(out, &d); jerr != nil {
			t.Fatalf("try-it.sh:%d: egressd %q = %v, %q", s.line, args, err, out)
		}
		if d.Allow != s.allow {
			t.Errorf("try-it.sh:%d says allowed=%v; egressd %q decides %v (%s)", s.line, s.allow, args, d.Allow, d.Reason)
		}
	}
}

// composeCheckConfig writes the compose file's egressd config for `egressd
// check` on this machine: policy.dir is the host directory the compose
// file mounts there, and the postgres section goes, so that check sql
// does not dial the compose network's database (listeners are not bound
// by check).
func composeCheckConfig(t *testing.T) string {
	t.Helper()
	c := loadCompose(t)
	b, err := os.ReadFile("compose/egressd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range c.Services["egressd"].Volumes {
		if parts := strings.Split(v, ":"); len(parts) >= 2 && parts[1] == cfg.Policy.Dir {
			m["policy"] = map[string]any{"dir": parts[0], "eval_timeout": "10s"}
		}
	}
	delete(m, "postgres")
	out, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "egressd.yaml")
	if err := os.WriteFile(p, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
