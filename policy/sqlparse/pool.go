package sqlparse

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Pool sizing and limits.
const (
	// poolSize workers at most: deep texts are rare, and each worker is a
	// process.
	poolSize = 2
	// parseTimeout bounds one worker parse. The largest texts measured
	// here (1 MiB) parse in well under a second; a worker still busy past
	// this is killed.
	parseTimeout = 10 * time.Second
	// workerMemory is the worker's address-space limit (RLIMIT_AS): a Go
	// process reserves a few hundred MiB of address space at start, and
	// a 1 MiB text's tree and JSON need a few hundred more.
	workerMemory = 4 << 30
	// Restarts after failures back off from backoffMin, doubling, to
	// backoffMax: a client sending one crasher after another must not
	// turn the gate into a fork loop.
	backoffMin = 10 * time.Millisecond
	backoffMax = time.Second
)

// MaxWorkers is the most parser worker processes that run at once. Each
// is a process beside egressd in egressd's container, so the container's
// memory limit must cover them too (deploy/kubernetes/statefulset.yaml
// states the bound, and deploy's tests check it).
const MaxWorkers = poolSize

// testHookSent, when set by a test, runs after a request is written.
var testHookSent func()

// workers is the process-wide pool; it starts nothing until the first deep
// text.
var workers = newPool(poolSize)

// pool hands out workers; slots decides whose parse gets the next free
// one (WithIdentity), and waiting for it honours ctx.
type pool struct {
	slots *slots

	mu   sync.Mutex
	idle []*worker
	// fails counts failures since the last successful parse; lastFail is
	// when the last one happened.
	fails    int
	lastFail time.Time
}

func newPool(n int) *pool { return &pool{slots: newSlots(n)} }

// worker is one parser subprocess.
type worker struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// do runs o on sql in a worker. Any failure of the worker (crash,
// protocol error, timeout, ctx) discards it.
func (p *pool) do(ctx context.Context, o op, sql string) ([]byte, error) {
	if len(sql) > maxRequest {
		return nil, fmt.Errorf("%w: query of %d bytes", ErrTooLarge, len(sql))
	}
	id := identityOf(ctx)
	if err := p.slots.acquire(ctx, id); err != nil {
		return nil, err
	}
	defer p.slots.release(id)
	w, err := p.get(ctx)
	if err != nil {
		return nil, err
	}
	res, err := w.do(ctx, o, sql)
	var pe *Error
	if err == nil || errors.As(err, &pe) {
		p.put(w)
		return res, err
	}
	state := w.kill()
	if ctx.Err() != nil {
		// The caller left; the worker did nothing wrong.
		return nil, fmt.Errorf("parse abandoned: %w", ctx.Err())
	}
	p.failed()
	if errors.Is(err, ErrTooLarge) {
		return nil, err
	}
	return nil, fmt.Errorf("%w (worker %s)", err, state)
}

// get returns an idle worker or starts one, after the backoff that the
// failures before it earned.
func (p *pool) get(ctx context.Context) (*worker, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return w, nil
	}
	wait := time.Duration(0)
	if p.fails > 0 {
		wait = min(backoffMin<<min(p.fails-1, 16), backoffMax) - time.Since(p.lastFail)
	}
	p.mu.Unlock()
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for a parser: %w", ctx.Err())
		}
	}
	w, err := startWorker()
	if err != nil {
		p.failed()
		return nil, err
	}
	return w, nil
}

func (p *pool) put(w *worker) {
	p.mu.Lock()
	p.fails = 0
	p.idle = append(p.idle, w)
	p.mu.Unlock()
}

func (p *pool) failed() {
	p.mu.Lock()
	p.fails++
	p.lastFail = time.Now()
	p.mu.Unlock()
}

// startWorker re-executes this binary as a worker.
func startWorker() (*worker, error) {
	if !enabled.Load() {
		// A programming error, not a client's: this binary's main would
		// run again instead of serving (a test binary would rerun its
		// tests), so stop here, naming the fix.
		panic("sqlparse: a deep text needs a parser worker, and this binary's main (or TestMain) did not call sqlparse.EnableWorkers first")
	}
	// /proc/self/exe still names this binary after an upgrade replaced
	// or removed the file on disk; os.Executable's path would not.
	exe := "/proc/self/exe"
	if _, err := os.Stat(exe); err != nil {
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("start sql parser: find own executable: %w", err)
		}
	}
	cmd := exec.Command(exe, "sqlparse-worker")
	// Only the marker: the worker needs nothing of the parent's
	// environment, and one thread is all it uses.
	cmd.Env = []string{workerEnv + "=1", "GOMAXPROCS=1", "GOTRACEBACK=single"}
	cmd.Stderr = io.Discard
	// The worker dies with the gate.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("start sql parser: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("start sql parser: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sql parser %s: %w", exe, err)
	}
	w := &worker{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 64<<10)}
	// No core files from a crash, and a bounded address space. Set
	// after start (os/exec cannot set a child's limits); the first
	// request is written after this returns, so no parse runs without
	// them.
	pid := cmd.Process.Pid
	if err := unix.Prlimit(pid, unix.RLIMIT_CORE, &unix.Rlimit{}, nil); err != nil {
		w.kill()
		return nil, fmt.Errorf("start sql parser: limit core size: %w", err)
	}
	if raceEnabled {
		// The race detector's shadow memory is terabytes of address
		// space.
		return w, nil
	}
	if err := unix.Prlimit(pid, unix.RLIMIT_AS, &unix.Rlimit{Cur: workerMemory, Max: workerMemory}, nil); err != nil {
		w.kill()
		return nil, fmt.Errorf("start sql parser: limit memory: %w", err)
	}
	return w, nil
}

// do sends one request and reads its reply; ctx or the parse timeout
// kills the process, which ends the read.
func (w *worker) do(ctx context.Context, o op, sql string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, parseTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { w.cmd.Process.Kill() })
	var hdr [5]byte
	hdr[0] = byte(o)
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(sql)))
	_, err := w.in.Write(hdr[:])
	if err == nil {
		_, err = io.WriteString(w.in, sql)
	}
	var res []byte
	if err == nil {
		if testHookSent != nil {
			testHookSent()
		}
		res, err = readReply(w.out)
	} else {
		err = fmt.Errorf("%w: write request: %w", ErrCrashed, err)
	}
	if !stop() {
		// Killed, whether or not a reply made it out first.
		return nil, fmt.Errorf("%w: %w", ErrCrashed, ctx.Err())
	}
	return res, err
}

// kill ends the process, reaps it and says how it ended.
func (w *worker) kill() string {
	w.cmd.Process.Kill()
	w.in.Close() //nolint:errcheck // the pipe's reader was just killed
	w.cmd.Wait()
	return w.cmd.ProcessState.String()
}
