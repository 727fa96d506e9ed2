package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/dnsguard/dnstest"
	"github.com/egressd/egressd/internal/testport"
)

// TestReadmeExamples runs the examples of README.md and rego/README.md,
// each file's in order in a temporary directory of its own, against the
// built binary (called egressd, as README says), so
// that the README cannot drift from what egressd does. The convention, for
// whoever edits README.md:
//
//   - A fenced ```console block is commands (lines starting with "$ ",
//     continued by a trailing "\") each followed by the output README
//     shows for it. Each command must exit 0, or 1 when it is a check or
//     verify that denies. The shown lines must appear in the command's
//     output in that order (other lines may come between). In a shown
//     line "…" matches any text, and what changes from run to run is
//     normalised on both sides: digests and hashes written as a few hex
//     digits and "…", byte counts, request ids, times.
//   - A fenced ```sh block is a script whose output is not shown; it runs
//     as one `bash -e` script and must exit 0.
//   - `go run ./cmd/egressd` is the binary. `egressd serve` is started in
//     the background with the harness's listen addresses and DNS upstream
//     (loopback, free ports) added as a config file, and stopped at the
//     end; 127.0.0.1:3128 and 127.0.0.1:9090 in later commands name it.
//     `egressd serve --check` binds nothing and exits: it runs as any
//     other command.
//   - A command or block naming an address that is not loopback (a
//     sandbox network's 10.x or 172.x) is not run: a sh block is
//     syntax-checked with bash -n, a ```yaml block is loaded with
//     egressd's config loader (every config README shows must load).
//   - A ```json block preceded by `<!-- readme-test: prepend to FILE
//     rules -->` is pasted after the `"rules": [` of FILE, as a user
//     would paste it; later commands load the result.
//
// Indented code blocks are not run (docker, kubectl, long tests).
func TestReadmeExamples(t *testing.T) {
	for _, f := range []struct {
		path string
		min  int // commands the convention must find, or README was reorganised
	}{{"README.md", 10}, {"rego/README.md", 4}} {
		t.Run(f.path, func(t *testing.T) {
			blocks := readmeBlocks(t, filepath.Join(repoRoot, f.path))
			r := newReadmeRun(t, f.path)
			ran := 0
			for _, b := range blocks {
				switch {
				case b.lang == "yaml":
					if _, err := config.Parse([]byte(b.text)); err != nil {
						t.Errorf("%s:%d: the config does not load: %v", f.path, b.line, err)
					}
				case b.lang == "json" && b.paste != "":
					r.paste(b)
				case b.lang == "sh" && namesRemote(b.text):
					r.syntax(b)
				case b.lang == "sh":
					r.run(b.line, strings.TrimSpace(b.text), nil)
					ran++
				case b.lang == "console":
					for _, c := range b.commands() {
						r.run(b.line, c.cmd, c.want)
						ran++
					}
				}
			}
			if ran < f.min {
				t.Errorf("ran %d commands of %s; want at least %d (the convention above finds too few)", ran, f.path, f.min)
			}
		})
	}
}

// readmeBlock is one fenced code block.
type readmeBlock struct {
	lang, text string
	line       int    // of the opening fence
	paste      string // the FILE of a readme-test: prepend marker
}

// shownCommand is one console command and the output lines README shows.
type shownCommand struct {
	cmd  string
	want []string
}

var pasteRE = regexp.MustCompile(`^<!-- readme-test: prepend to (\S+) rules -->$`)

// readmeBlocks returns README's fenced blocks in order.
func readmeBlocks(t *testing.T, path string) []readmeBlock {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []readmeBlock
	var cur *readmeBlock
	paste := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &readmeBlock{lang: strings.TrimPrefix(l, "```"), line: n, paste: paste}
		case cur != nil && l == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += l + "\n"
		case strings.TrimSpace(l) != "":
			paste = ""
			if m := pasteRE.FindStringSubmatch(l); m != nil {
				paste = m[1]
			}
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: unclosed code block", path, cur.line)
	}
	return out
}

// commands splits a console block into commands (a trailing "\"
// continues one), each with the lines shown after it.
func (b readmeBlock) commands() []shownCommand {
	var out []shownCommand
	cont := false
	for _, l := range strings.Split(strings.TrimRight(b.text, "\n"), "\n") {
		switch {
		case cont:
			out[len(out)-1].cmd += "\n" + l
		case strings.HasPrefix(l, "$ "):
			out = append(out, shownCommand{cmd: strings.TrimPrefix(l, "$ ")})
		case len(out) > 0 && strings.TrimSpace(l) != "":
			out[len(out)-1].want = append(out[len(out)-1].want, l)
		}
		cont = strings.HasSuffix(l, "\\") && len(out) > 0 && out[len(out)-1].want == nil
	}
	return out
}

// remoteRE finds IPv4 addresses; namesRemote reports one that is not
// loopback.
var remoteRE = regexp.MustCompile(`\b(\d{1,3})\.\d{1,3}\.\d{1,3}\.\d{1,3}\b`)

func namesRemote(s string) bool {
	for _, m := range remoteRE.FindAllStringSubmatch(s, -1) {
		if m[1] != "127" {
			return true
		}
	}
	return false
}

// readmeRun is the state of one run: the directory, the PATH holding
// egressd, the background serve.
type readmeRun struct {
	t              *testing.T
	file           string // the README, for messages
	dir, binDir    string
	proxy, admin   string
	ports          []*testport.Reservation // proxy and admin, held until serve starts
	cfg            string
	serve          *Egressd // the README's `egressd serve`, once started
	normalizeLocal *strings.Replacer
}

func newReadmeRun(t *testing.T, file string) *readmeRun {
	r := &readmeRun{t: t, file: file, dir: t.TempDir(), binDir: t.TempDir()}
	if err := os.Symlink(binary, filepath.Join(r.binDir, "egressd")); err != nil {
		t.Fatal(err)
	}
	r.ports = []*testport.Reservation{ReservePort(t), ReservePort(t)}
	r.proxy, r.admin = r.ports[0].Addr(), r.ports[1].Addr()
	r.cfg = filepath.Join(t.TempDir(), "readme-serve.yaml")
	cfg := fmt.Sprintf("proxy:\n  listen: %s\nadmin:\n  listen: %s\ndns:\n  upstreams: [%q]\n", r.proxy, r.admin, dnstest.Start(t).Addr())
	if err := os.WriteFile(r.cfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r.normalizeLocal = strings.NewReplacer("127.0.0.1:3128", r.proxy, "127.0.0.1:9090", r.admin)
	t.Cleanup(r.stop)
	return r
}

// goRun is how README runs the binary from a checkout.
var goRun = regexp.MustCompile(`\bgo run \./cmd/egressd\b`)

// run runs one command; want nil means its output is not shown.
func (r *readmeRun) run(line int, cmd string, want []string) {
	t := r.t
	cmd = r.normalizeLocal.Replace(goRun.ReplaceAllString(cmd, "egressd"))
	if strings.HasPrefix(strings.TrimSpace(cmd), "egressd serve") && !strings.Contains(cmd, "--check") {
		r.start(line, cmd)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", cmd)
	c.Dir = r.dir
	c.Env = append(cleanEnv(), "PATH="+r.binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := c.CombinedOutput()
	code := c.ProcessState.ExitCode()
	if err != nil && code < 0 {
		t.Fatalf("%s:%d: %s: %v", r.file, line, cmd, err)
	}
	if code != 0 && (want == nil || code != 1 || !isDecision(cmd)) {
		t.Errorf("%s:%d: $ %s\nexit %d; want 0%s:\n%s", r.file, line, cmd, code, map[bool]string{true: " (or 1 for a deny)"}[want != nil], out)
		return
	}
	if miss := missingLines(string(out), want); miss != "" {
		t.Errorf("%s:%d: $ %s\nREADME shows %q, which the output lacks (in order):\n%s", r.file, line, cmd, miss, out)
	}
}

// isDecision reports a command whose exit 1 means a deny or a broken log.
func isDecision(cmd string) bool {
	return strings.Contains(cmd, "egressd check ") || strings.Contains(cmd, "egressd audit verify") || strings.Contains(cmd, "curl ")
}

// start runs `egressd serve` in the background with the harness's
// listeners and waits until it is ready (Egressd.WaitReady); the run's
// cleanup stops it.
func (r *readmeRun) start(line int, cmd string) {
	t := r.t
	if r.serve != nil {
		t.Fatalf("%s:%d: a second egressd serve", r.file, line)
	}
	args := strings.Fields(cmd)[1:]
	if !strings.Contains(cmd, "--config") {
		args = append(args, "--config", r.cfg)
	}
	e := &Egressd{ProxyAddr: r.proxy, AdminAddr: r.admin, AuditDir: filepath.Join(r.dir, "egressd-audit"),
		ConfigPath: r.cfg, LogPath: filepath.Join(t.TempDir(), "serve.log")}
	serve := exec.Command(binary, args...)
	serve.Dir = r.dir
	serve.Env = cleanEnv()
	for _, p := range r.ports {
		p.Release()
	}
	if err := e.launch(serve); err != nil {
		t.Fatalf("%s:%d: %s: %v", r.file, line, cmd, err)
	}
	r.serve = e
	e.WaitReady(t, 20*time.Second)
}

func (r *readmeRun) stop() {
	if r.serve == nil {
		return
	}
	if err := r.serve.Stop(10 * time.Second); err != nil {
		r.t.Errorf("egressd serve of the README: %v\n%s", err, r.serve.Log())
	}
}

// syntax checks a block that is not run.
func (r *readmeRun) syntax(b readmeBlock) {
	c := exec.Command("bash", "-n")
	c.Stdin = strings.NewReader(b.text)
	if out, err := c.CombinedOutput(); err != nil {
		r.t.Errorf("%s:%d: the sh block is not valid shell: %v\n%s", r.file, b.line, err, out)
	}
}

// paste inserts the block after `"rules": [` in its file, as a user
// pasting it would, and checks the file is still JSON.
func (r *readmeRun) paste(b readmeBlock) {
	t := r.t
	p := filepath.Join(r.dir, b.paste)
	src, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%s:%d: paste into %s: %v (an earlier step must create it)", r.file, b.line, b.paste, err)
	}
	s := string(src)
	i := strings.Index(s, `"rules": [`)
	if i < 0 {
		t.Fatalf("%s:%d: %s has no \"rules\": [", r.file, b.line, b.paste)
	}
	i += len(`"rules": [`)
	s = s[:i] + "\n" + b.text + s[i:]
	if !json.Valid([]byte(s)) {
		t.Errorf("%s:%d: %s is not JSON after pasting the block:\n%s", r.file, b.line, b.paste, s)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Normalisation of what changes from run to run, applied to the output
// and to the lines README shows.
var (
	shortHexRE = regexp.MustCompile(`\b[0-9a-f]{4,}…`)
	longHexRE  = regexp.MustCompile(`\b[0-9a-f]{32,}\b`)
	bytesRE    = regexp.MustCompile(`\b\d+ bytes\b`)
	requestRE  = regexp.MustCompile(`\brequest("?:"?| )[0-9a-f]+-\d+\b`)
	// requestIDRE is a request id alone, as audit show's REQUEST column
	// shows it: a random hex prefix and a base-36 counter.
	requestIDRE = regexp.MustCompile(`\b[0-9a-f]{8}-[0-9a-z]+\b`)
	timeRE      = regexp.MustCompile(`\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z\b`)
)

func normalizeShown(s string) string {
	s = shortHexRE.ReplaceAllString(s, "…")
	s = longHexRE.ReplaceAllString(s, "…")
	s = bytesRE.ReplaceAllString(s, "N bytes")
	s = requestRE.ReplaceAllString(s, "request …")
	s = requestIDRE.ReplaceAllString(s, "…")
	return timeRE.ReplaceAllString(s, "…")
}

// missingLines returns the first shown line that the output lacks, in
// order, or "".
func missingLines(out string, want []string) string {
	lines := strings.Split(out, "\n")
	i := 0
	for _, w := range want {
		re := shownRE(normalizeShown(w))
		for ; i < len(lines); i++ {
			if re.MatchString(normalizeShown(strings.TrimRight(lines[i], "\r"))) {
				break
			}
		}
		if i == len(lines) {
			return w
		}
		i++
	}
	return ""
}

// shownRE matches a whole line against a shown line in which "…" is any
// text.
func shownRE(w string) *regexp.Regexp {
	parts := strings.Split(w, "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
}
