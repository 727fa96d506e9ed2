package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Every process the bench starts runs in a process group of its own and
// carries markerEnv in its environment (inherited by whatever it forks, also
// through runuser), so that every exit path can stop them all and the end of
// a run can prove that none is left. Each started process also carries a
// tag of its own (procEnv): Squid's helpers start sessions of their own, so
// a process group does not hold them, but their environment does; the CPU
// and memory of a proxy are those of every process with its tag.

// markerEnv names the environment variable that tags this run's processes;
// procEnv the one that tags one started process and its descendants.
const (
	markerEnv = "EGRESSD_BENCH_RUN"
	procEnv   = "EGRESSD_BENCH_PROC"
)

// procSeq numbers the started processes, for their tags.
var procSeq atomic.Int64

// runMarker is this run's tag, set in this process's own environment so
// that every child inherits it. A tag already in the environment is kept:
// the test that interrupts a run looks for the tag it gave.
var runMarker = os.Getenv(markerEnv)

func init() {
	if runMarker == "" {
		runMarker = fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())
		os.Setenv(markerEnv, runMarker) //nolint:errcheck // a valid name and value cannot fail
	}
}

// proc is a process group the bench started: a proxy, a server, a helper.
type proc struct {
	name string
	tag  string
	cmd  *exec.Cmd
	done chan struct{}
}

// registry holds what must be undone on every exit path: running process
// groups and cleanup functions (temporary clusters, directories).
var registry struct {
	sync.Mutex
	procs    map[*proc]bool
	cleanups []func()
	// closed is set when an interrupted or overdue run (stopRun) begins
	// its cleanup: a process the run starts after the cleanup's snapshot
	// would outlive it.
	closed bool
}

// atExit registers f to run (once, last registered first) at cleanup.
func atExit(f func()) {
	registry.Lock()
	defer registry.Unlock()
	registry.cleanups = append(registry.cleanups, f)
}

// startProc starts argv in its own process group, pinned to cpus with
// taskset when cpus is not empty, with stdout and stderr appended to log.
func startProc(name, cpus, log string, argv ...string) (*proc, error) {
	if cpus != "" {
		argv = append([]string{"taskset", "-c", cpus}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	tag := fmt.Sprintf("%s-%d", runMarker, procSeq.Add(1))
	cmd.Env = append(os.Environ(), procEnv+"="+tag)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if log != "" {
		f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", name, err)
		}
		defer f.Close() //nolint:errcheck // the child has its own descriptor; ours wrote nothing
		cmd.Stdout, cmd.Stderr = f, f
	}
	registry.Lock()
	defer registry.Unlock()
	if registry.procs == nil {
		registry.procs = map[*proc]bool{}
	}
	if registry.closed {
		return nil, fmt.Errorf("start %s: the run is stopping", name)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, tag: tag, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	registry.procs[p] = true
	return p, nil
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop ends the process and its descendants: SIGTERM, then SIGKILL after
// a grace period to whatever is left.
func (p *proc) stop() {
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
	p.signal(syscall.SIGKILL)
	<-p.done
	// A process of another session (setsid) dies when its signal is
	// delivered, which can be after the group leader has been reaped: wait
	// (bounded; there is no exit to wait on for a process that is not
	// our child) until none of p's processes is left.
	for deadline := time.Now().Add(5 * time.Second); len(p.pids()) > 0 && time.Now().Before(deadline); {
		p.signal(syscall.SIGKILL)
		time.Sleep(10 * time.Millisecond)
	}
	registry.Lock()
	delete(registry.procs, p)
	registry.Unlock()
}

// signal sends sig to the process group and to every process with p's tag.
func (p *proc) signal(sig syscall.Signal) {
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	for _, pid := range p.pids() {
		_ = syscall.Kill(pid, sig)
	}
}

// pids lists p's live processes: its process group (PostgreSQL rewrites
// the memory /proc/PID/environ shows) and every process with its tag.
func (p *proc) pids() []int {
	var out []int
	forEachProc(func(pid int, stat []string) {
		if stat[0] == "Z" {
			return
		}
		if pgrp, _ := strconv.Atoi(stat[2]); pgrp == p.cmd.Process.Pid || hasEnv(pid, procEnv+"="+p.tag) {
			out = append(out, pid)
		}
	})
	return out
}

// cpu is the user+system CPU time p's live processes have used.
func (p *proc) cpu() time.Duration {
	var ticks int64
	for _, pid := range p.pids() {
		f, ok := statFields(strconv.Itoa(pid))
		if !ok || len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += ut + st
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// rss sums a /proc/PID/status field (VmRSS, VmHWM in KiB; Threads) over
// p's processes.
func (p *proc) rss(field string) int64 {
	var kb int64
	re := regexp.MustCompile(field + `:\s+(\d+)`)
	for _, pid := range p.pids() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		if m := re.FindSubmatch(b); m != nil {
			v, _ := strconv.ParseInt(string(m[1]), 10, 64)
			kb += v
		}
	}
	return kb
}

// hasEnv reports whether process pid's environment holds kv ("K=V").
func hasEnv(pid int, kv string) bool {
	return envHas(pid, func(e []byte) bool { return string(e) == kv })
}

// envHas reports whether process pid's environment holds an entry ("K=V")
// that match accepts.
func envHas(pid int, match func(kv []byte) bool) bool {
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return false
	}
	for _, e := range bytes.Split(env, []byte{0}) {
		if match(e) {
			return true
		}
	}
	return false
}

// forEachProc calls f with the fields of /proc/PID/stat after the command
// name (f[0] is the state, f[2] the process group) of every process.
func forEachProc(f func(pid int, stat []string)) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if stat, ok := statFields(e.Name()); ok {
			f(pid, stat)
		}
	}
}

// statFields returns the fields of /proc/PID/stat after the command name,
// false if the process is gone or the file is cut short.
func statFields(pid string) ([]string, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return nil, false
	}
	// The command name may contain spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return nil, false
	}
	return strings.Fields(string(b[i+2:])), true
}

// leftovers lists the live processes other than this one that carry
// marker.
func leftovers(marker string) []int {
	var out []int
	forEachProc(func(pid int, stat []string) {
		if pid != os.Getpid() && stat[0] != "Z" && hasEnv(pid, markerEnv+"="+marker) {
			out = append(out, pid)
		}
	})
	return out
}

// cleanupMu makes cleanup run once at a time (the signal handler and the
// end of run may race).
var cleanupMu sync.Mutex

// cleanup stops every registered process, runs the cleanup functions, then
// kills any process still carrying this run's marker and says so: a
// benchmark must leave nothing behind.
func cleanup() error { return cleanupGated(nil) }

// cleanupGated is cleanup with gate run after the cleanup functions (which
// may fork: nft) and before the last scan for the run's processes.
func cleanupGated(gate func()) error {
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	registry.Lock()
	ps := make([]*proc, 0, len(registry.procs))
	for p := range registry.procs {
		ps = append(ps, p)
	}
	fs := registry.cleanups
	registry.cleanups = nil
	registry.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(p.stop)
	}
	wg.Wait()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
	if gate != nil {
		gate()
	}
	left := leftovers(runMarker)
	if len(left) == 0 {
		return nil
	}
	// SIGKILL is delivered asynchronously: wait (bounded) until they are
	// gone, so that nothing outlives this program's exit.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		now := leftovers(runMarker)
		if len(now) == 0 || time.Now().After(deadline) {
			break
		}
		for _, pid := range now {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return fmt.Errorf("processes left behind (killed now): %v", left)
}

// cleanupOnSignal stops the run when it is interrupted, exiting 130.
func cleanupOnSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-ch
		stopRun(fmt.Sprintf("%v", s), 130)
	}()
}

// stopRun ends the run from a goroutine other than the one running it,
// which goes on meanwhile, and exits with code. Nothing it starts may
// outlive the exit: startProc refuses once registry.closed is set, and no
// child (git, nproc, a peer's version) is forked after the last scan for
// the run's processes, because every fork takes syscall.ForkLock for
// writing and this holds it for reading until the exit.
func stopRun(why string, code int) {
	fmt.Fprintf(os.Stderr, "bench: %s: stopping every process of this run\n", why)
	registry.Lock()
	registry.closed = true
	registry.Unlock()
	if err := cleanupGated(syscall.ForkLock.RLock); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
	}
	os.Exit(code)
}

// waitTCP waits until addr accepts a connection or p exits.
func waitTCP(p *proc, addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		if c, err := dialTCP(addr); err == nil {
			c.Close()
			return nil
		}
		if p != nil && p.exited() {
			return fmt.Errorf("%s exited before listening on %s", p.name, addr)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not listen on %s within %v", p.name, addr, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var errUnsupported = errors.New("not supported by this build")
