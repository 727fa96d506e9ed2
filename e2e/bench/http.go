package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Keep-alive GET of 1 KiB with wrk: direct and through every proxy.

var (
	requestsRe = regexp.MustCompile(`(\d+) requests in ([\d.]+)(us|ms|s|m)`)
	latencyRe  = regexp.MustCompile(`(?m)^egressd-bench-latency ([\d.]+) (\d+)$`)
	non2xxRe   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	socketRe   = regexp.MustCompile(`Socket errors: .*`)
)

// pacedDelayMS is each wrk connection's wait between requests in the paced
// workload: 32 connections then offer at most 3,200 req/s, below every
// peer's capacity, so latencies compare the proxies at one load rather
// than at each one's own saturation (where the shared load core's queue,
// not the proxy, sets the tail).
const pacedDelayMS = 10

// wrkScript writes wrk's Lua script: requests in absolute form through a
// proxy (when proxied), a wait of delayMS before each request when not 0,
// and, when wrk is done, the latency percentiles (wrk's latency excludes
// the wait).
func (b *bench) wrkScript(proxied bool, delayMS int) (string, error) {
	var s strings.Builder
	if delayMS > 0 {
		fmt.Fprintf(&s, "delay = function() return %d end\n", delayMS)
	}
	if proxied {
		fmt.Fprintf(&s, "wrk.path = \"http://127.0.0.1:%d/bytes/1024\"\nwrk.headers[\"Host\"] = \"127.0.0.1:%d\"\n", b.org.http, b.org.http)
	}
	var qs []string
	for _, q := range latencyQuantiles {
		qs = append(qs, strconv.FormatFloat(q, 'f', -1, 64))
	}
	fmt.Fprintf(&s, `done = function(summary, latency, requests)
  for _, p in ipairs({%s}) do
    io.write(string.format("egressd-bench-latency %%g %%d\n", p, latency:percentile(p)))
  end
end
`, strings.Join(qs, ", "))
	f := filepath.Join(b.work, fmt.Sprintf("wrk-proxied-%t-delay-%d.lua", proxied, delayMS))
	return f, os.WriteFile(f, []byte(s.String()), 0o644)
}

// wrk runs one wrk load against target ("" proxy: direct) and returns the
// rate, the requests done and the latency percentiles in ms.
func (b *bench) wrk(cpus, proxy string, delayMS int) (Round, float64, string, error) {
	script, err := b.wrkScript(proxy != "", delayMS)
	if err != nil {
		return Round{}, 0, "", err
	}
	target := fmt.Sprintf("http://127.0.0.1:%d/bytes/1024", b.org.http)
	if proxy != "" {
		target = "http://" + proxy + "/"
	}
	args := []string{"wrk", "-t1", "-c" + strconv.Itoa(b.o.conns), "-d" + b.o.duration.String(), "--latency", "-s", script, target}
	if cpus != "" {
		args = append([]string{"taskset", "-c", cpus}, args...)
	}
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return Round{}, 0, "", fmt.Errorf("wrk: %w\n%s", err, out)
	}
	if m := non2xxRe.Find(out); m != nil {
		return Round{}, 0, "", fmt.Errorf("wrk: %s", m)
	}
	r, n, err := parseWrk(string(out))
	// A proxy that closes client connections after each response (tinyproxy)
	// makes wrk count read errors and reconnect: a figure, with a note.
	return r, n, string(socketRe.Find(out)), err
}

// parseWrk reads wrk's summary and the script's latency lines.
func parseWrk(out string) (Round, float64, error) {
	m := requestsRe.FindStringSubmatch(out)
	if m == nil {
		return Round{}, 0, fmt.Errorf("no request count in wrk output:\n%s", out)
	}
	n, _ := strconv.ParseFloat(m[1], 64)
	secs, _ := strconv.ParseFloat(m[2], 64)
	secs *= map[string]float64{"us": 1e-6, "ms": 1e-3, "s": 1, "m": 60}[m[3]]
	if n == 0 || secs == 0 {
		return Round{}, 0, fmt.Errorf("wrk did no requests:\n%s", out)
	}
	r := Round{Rate: n / secs}
	for _, l := range latencyRe.FindAllStringSubmatch(out, -1) {
		us, _ := strconv.ParseFloat(l[2], 64)
		r.LatencyMS = append(r.LatencyMS, us/1000)
	}
	if len(r.LatencyMS) != len(latencyQuantiles) {
		return Round{}, 0, fmt.Errorf("wrk script printed %d of %d percentiles:\n%s", len(r.LatencyMS), len(latencyQuantiles), out)
	}
	return r, n, nil
}

// getRound measures one target of a keep-alive GET workload: CPU of the
// proxy per 1,000 requests from its process group's /proc stat deltas.
func (b *bench) getRound(t *Target, p *running, loadCPUs string, delayMS int) {
	if t.Status != "" {
		return
	}
	proxy := ""
	if p != nil {
		proxy = p.addr
	}
	var c0 float64
	if p != nil {
		c0 = p.cpu().Seconds()
	}
	r, n, note, err := b.wrk(loadCPUs, proxy, delayMS)
	if err != nil {
		t.fail("error: " + err.Error())
		return
	}
	if note != "" && t.Note == "" {
		t.Note = "wrk: " + note + " (the proxy closes connections: wrk reconnects)"
	}
	if p != nil {
		r.CPU = (p.cpu().Seconds() - c0) * 1000 / (n / 1000)
	}
	t.Rounds = append(t.Rounds, r)
	b.progress("%s: %s %.0f req/s, p99 %.2f ms", t.Name, "GET", r.Rate, r.LatencyMS[slices.Index(latencyQuantiles, 99)])
}
