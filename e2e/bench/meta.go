package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
)

// What the report says about the run: machine, commit, versions, settings.

func machine() Machine {
	m := Machine{NProc: runtime.NumCPU(), CPU: "unknown CPU"}
	if out, err := exec.Command("nproc").Output(); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil {
			m.NProc = n
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if x := regexp.MustCompile(`(?m)^model name\s*:\s*(.+)$`).FindSubmatch(b); x != nil {
			m.CPU = strings.TrimSpace(string(x[1]))
		}
	}
	if out, err := exec.Command("uname", "-r").Output(); err == nil {
		m.Kernel = strings.TrimSpace(string(out))
	}
	return m
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// commit is the measured commit, marked dirty when the tree has changes.
func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown (not a git checkout)"
	}
	c := strings.TrimSpace(string(out))
	// --no-optional-locks: an interrupted run kills this child (stopRun),
	// and a status killed while refreshing the index would leave the
	// repository's index.lock behind.
	if st, err := exec.Command("git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += " (with uncommitted changes)"
	}
	return c
}

// versions asks every component the run uses for its version.
func (b *bench) versions() map[string]string {
	v := map[string]string{"go": runtime.Version(), "egressd": "commit " + commit()}
	first := func(name string, argv ...string) {
		out, _ := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		line := strings.TrimSpace(firstLine(string(out)))
		if line == "" {
			line = "unknown"
		}
		v[name] = line
	}
	if b.wantPeer("squid") || b.want("https") {
		first("squid", "squid", "-v")
		v["squid"] += " (" + debVersion("squid-openssl") + ")"
	}
	if b.wantPeer("tinyproxy") {
		first("tinyproxy", "tinyproxy", "-v")
	}
	if b.wantPeer("smokescreen") {
		v["smokescreen"] = smokescreenModule
	}
	if b.want("pgbench") {
		first("pgbouncer", "pgbouncer", "--version")
		first("postgresql", "pgbench", "--version")
	}
	if b.want("get") || b.want("get-paced") || b.want("get-unpinned") {
		first("wrk", "wrk", "-v")
	}
	return v
}

func debVersion(pkg string) string {
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Package} ${Version}", pkg).Output()
	if err != nil {
		return pkg + " not installed"
	}
	return string(out)
}

func (b *bench) settings() []string {
	o := b.o
	pin := fmt.Sprintf("each proxy pinned to CPU %s, load generators, origins and PostgreSQL to CPU %s (taskset)", o.proxyCPU, o.loadCPU)
	if o.proxyCPU == "" {
		pin = "nothing pinned"
	}
	return []string{
		pin,
		fmt.Sprintf("%d rounds of the proxy workloads, %d of pgbench; targets interleaved within each round; medians; the workloads run %d time(s) (-repeat)", o.rounds, o.pgRounds, o.repeat),
		fmt.Sprintf("HTTP loads: %d keep-alive connections, %v per run; CONNECT bulk: %d MiB per transfer; %d idle tunnels", o.conns, o.duration, o.bulk>>20, o.tunnels),
		fmt.Sprintf("pgbench: -c %d -j 2 -T %d, scale %d", o.pgClients, o.pgSeconds, o.pgScale),
		"egressd: default bundle's modules, rules for the bench origin, audit on (sync: interval), log level warn, connection and rate limits raised past the load",
		"Squid: access log on (daemon:, as Debian ships it), caching off (`cache deny all`, `cache_mem 0`); ssl_bump with its own CA and security_file_certgen",
		"tinyproxy: LogLevel Warning (at Info it writes a line per request)",
		"smokescreen: enforcing egress ACL allowing the origin, loopback allowed with --allow-range",
		"PgBouncer: session mode, SCRAM for clients, connection logging off, run as the postgres user",
		"relay, pg relay: this program's bare Go relays (io.Copy, splice(2)); ceilings, not peers",
		"proxy CPU: user+system time of the proxy's process group from /proc/PID/stat, per unit of work",
	}
}

// write saves the JSON results, the chart and the markdown report.
func (b *bench) write() error {
	if b.o.out == "" {
		return nil
	}
	base := strings.TrimSuffix(b.o.out, filepath.Ext(b.o.out))
	if err := b.res.writeJSON(base + ".json"); err != nil {
		return err
	}
	rel, err := writeReport(b.res, b.o.out)
	if err != nil {
		return err
	}
	b.progress("wrote %s (chart: %q) and %s", b.o.out, rel, base+".json")
	return nil
}

// writeReport writes the chart beside out and the markdown report at out;
// it returns the chart's path relative to the report ("" when the run has
// no figures to draw).
func writeReport(r *Results, out string) (string, error) {
	chart, rel := strings.TrimSuffix(out, filepath.Ext(out))+".png", ""
	if chartWorkload(r) != nil { // a run of micro-benchmarks only has no chart
		if err := writeChart(chart, r); err != nil {
			return "", err
		}
		rel, _ = filepath.Rel(filepath.Dir(out), chart)
	}
	f, err := os.Create(out)
	if err != nil {
		return "", err
	}
	if err := renderMarkdown(f, r, rel); err != nil {
		f.Close() //nolint:errcheck // the write already failed; that error is returned
		return "", err
	}
	return rel, f.Close()
}

// rerender writes the report and chart of a saved run again: the report is
// always a function of the results, never edited by hand.
func rerender(results, out string) error {
	b, err := os.ReadFile(results)
	if err != nil {
		return err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", results, err)
	}
	if out == "" {
		return errors.New("-render needs -out")
	}
	_, err = writeReport(&r, out)
	return err
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
