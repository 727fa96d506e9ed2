package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// With -profile PREFIX, egressd's CPU profile during its first round of
// each workload is saved as PREFIX-WORKLOAD.pprof (from pprof on its admin
// listener), in the first repeat: where a target is missed, the profile
// shows why. The idle
// workload, which spends no CPU, saves what memory is held instead: the heap
// (PREFIX-idle-heap.pprof) and the goroutines (PREFIX-idle-goroutine.pprof)
// while every tunnel is open.

// withProfile runs measure, profiling p (egressd) meanwhile when asked to
// and this is the first round.
func (b *bench) withProfile(p *running, name string, round int, d time.Duration, measure func()) {
	if b.o.profile == "" || p == nil || p.admin == "" || round != 0 || b.repeat != 0 {
		measure()
		return
	}
	file := fmt.Sprintf("%s-%s.pprof", b.o.profile, name)
	errc := make(chan error, 1)
	path := fmt.Sprintf("profile?seconds=%d", max(1, int(d.Seconds())))
	go func() { errc <- fetchProfile(p.admin, path, file) }()
	measure()
	if err := <-errc; err != nil {
		b.progress("profile %s: %v", name, err)
	} else {
		b.progress("wrote %s", file)
	}
}

// saveMemProfiles saves p's heap and goroutine profiles as
// PREFIX-NAME-heap.pprof and PREFIX-NAME-goroutine.pprof, when asked to.
func (b *bench) saveMemProfiles(p *running, name string) {
	if b.o.profile == "" || p == nil || p.admin == "" || b.repeat != 0 {
		return
	}
	if m, err := memMetrics(p.admin); err != nil {
		b.progress("metrics %s: %v", name, err)
	} else {
		b.progress("%s: %s VmHWM=%dKiB RssAnon=%dKiB RssFile=%dKiB Threads=%d", name, m, p.rss("VmHWM"), p.rss("RssAnon"), p.rss("RssFile"), p.rss("Threads"))
	}
	for _, kind := range []string{"heap", "goroutine"} {
		file := fmt.Sprintf("%s-%s-%s.pprof", b.o.profile, name, kind)
		if err := fetchProfile(p.admin, kind, file); err != nil {
			b.progress("profile %s %s: %v", name, kind, err)
		} else {
			b.progress("wrote %s", file)
		}
	}
}

// fetchProfile saves the pprof profile at path under /debug/pprof/ of
// egressd's admin listener as file.
func fetchProfile(admin, path, file string) error {
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/%s", admin, path))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pprof: %s", resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close() //nolint:errcheck // the write already failed; that error is returned
		return err
	}
	return f.Close()
}

// memMetrics is where egressd's memory is, from its Go runtime metrics:
// the heap in use, the goroutine stacks, what the runtime holds from the
// OS, and the goroutine count.
func memMetrics(admin string) (string, error) {
	var out []string
	for _, m := range []string{"go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes", "go_memstats_sys_bytes", "go_goroutines"} {
		v, err := metricValue(admin, m)
		if err != nil {
			return "", err
		}
		out = append(out, fmt.Sprintf("%s=%g", m, v))
	}
	return strings.Join(out, " "), nil
}

// metricValue is the value of the sample named series (a metric name with
// its labels as the exposition format writes them) on egressd's admin
// listener.
func metricValue(admin, series string) (float64, error) {
	resp, err := http.Get(fmt.Sprintf("http://%s/metrics", admin))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("metrics: no %s", series)
}

// waitFor calls fn until it returns nil, or returns its last error after
// max.
func waitFor(max time.Duration, fn func() error) error {
	deadline := time.Now().Add(max)
	for {
		err := fn()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
