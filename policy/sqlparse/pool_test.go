package sqlparse

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func reply(status byte, payload string) []byte {
	b := []byte{status, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

func TestReadReply(t *testing.T) {
	huge := []byte{statusOK, 0xff, 0xff, 0xff, 0xff}
	tests := []struct {
		name    string
		in      []byte
		want    string
		wantErr error
	}{
		{"ok", reply(statusOK, "{}"), "{}", nil},
		{"parse error", reply(statusParseError, "\x00\x00\x00\x07syntax error"), "", &Error{}},
		{"too large", reply(statusTooLarge, ""), "", ErrTooLarge},
		{"unknown status", reply(9, ""), "", ErrCrashed},
		{"length past the bound", huge, "", ErrCrashed},
		{"short payload", reply(statusOK, "{}")[:6], "", ErrCrashed},
		{"parse error without position", reply(statusParseError, "ab"), "", ErrCrashed},
		{"nothing", nil, "", ErrCrashed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readReply(bytes.NewReader(tt.in))
			var pe *Error
			switch want := tt.wantErr.(type) {
			case nil:
				if err != nil || string(got) != tt.want {
					t.Errorf("readReply = %q, %v; want %q", got, err, tt.want)
				}
			case *Error:
				if !errors.As(err, &pe) || pe.Cursorpos != 7 || pe.Message != "syntax error" {
					t.Errorf("readReply = %v; want *Error at 7", err)
				}
			default:
				if !errors.Is(err, want) {
					t.Errorf("readReply = %q, %v; want %v", got, err, want)
				}
			}
		})
	}
}

func TestServeWorkerRefusesBadRequests(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want int
	}{
		{"clean end", nil, 0},
		{"request past the bound", []byte{byte(opJSON), 0xff, 0xff, 0xff, 0xff}, 4},
		{"unknown operation", reply(77, "SELECT 1"), 5},
		{"truncated request", reply(byte(opJSON), "SELECT 1")[:7], 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if got := serveWorker(bytes.NewReader(tt.in), &out); got != tt.want {
				t.Errorf("serveWorker = %d; want exit %d", got, tt.want)
			}
		})
	}
	var out bytes.Buffer
	in := append(reply(byte(opFingerprint), "SELECT 1"), reply(byte(opJSON), "SELEC")...)
	if got := serveWorker(bytes.NewReader(in), &out); got != 0 {
		t.Fatalf("serveWorker = %d; want 0", got)
	}
	want, err := run(opFingerprint, "SELECT 1")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := readReply(&out); err != nil || string(got) != want {
		t.Errorf("first reply = %q, %v; want %q, the in-process fingerprint", got, err, want)
	}
	var pe *Error
	if _, err := readReply(&out); !errors.As(err, &pe) {
		t.Errorf("second reply = %v; want a parse error", err)
	}
}

// TestPoolWaitHonoursContext: a caller waiting for a busy pool, or for the
// backoff after failures, leaves when its context ends, starting nothing.
func TestPoolWaitHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	busy := newPool(1)
	if err := busy.slots.acquire(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := busy.do(ctx, opJSON, "SELECT 1"); !errors.Is(err, context.Canceled) {
		t.Errorf("do on a busy pool = %v; want context.Canceled", err)
	}
	backing := newPool(1)
	backing.fails, backing.lastFail = 10, time.Now()
	if _, err := backing.get(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("get during backoff = %v; want context.Canceled", err)
	}
	if len(backing.idle) != 0 {
		t.Errorf("%d workers started during backoff; want 0", len(backing.idle))
	}
	if _, err := busy.do(context.Background(), opJSON, strings.Repeat("x", maxRequest+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("do(request past the bound) = %v; want ErrTooLarge", err)
	}
}

// TestPoolServesIdentitiesInTurn: while identity a's parses hold every
// worker a may hold and more of a's wait, b's parse is served at once, not
// after a's queue (one sandbox's flood of 1 MiB texts made another's 36 KB
// text wait 18.6 s). a's parses are slots taken as do takes them, held
// for as long as the test likes: the slowest parse there is.
func TestPoolServesIdentitiesInTurn(t *testing.T) {
	p := newPool(2)
	t.Cleanup(func() {
		for _, w := range p.idle {
			w.kill()
		}
	})
	var a []*waiter
	for range 3 {
		a = append(a, p.slots.enqueue("a"))
	}
	// Only a guard against waiting forever on a pool that is not fair:
	// b is served as soon as its worker starts.
	ctx, cancel := context.WithTimeout(WithIdentity(context.Background(), "b"), 30*time.Second)
	defer cancel()
	want, err := run(opFingerprint, "SELECT 2")
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.do(ctx, opFingerprint, "SELECT 2")
	if err != nil || string(got) != want {
		t.Errorf("b's parse while a's hold the pool = %q, %v; want %q at once", got, err, want)
	}
	// a's parses are served one at a time, in order.
	for i := range a {
		for j, w := range a {
			select {
			case <-w.ready:
				if j > i {
					t.Errorf("a's parse %d holds a worker while %d does; want one at a time", j, i)
				}
			default:
				if j <= i {
					t.Errorf("a's parse %d waits after %d releases; want it served", j, i)
				}
			}
		}
		p.slots.release("a")
	}
}

// TestSlotsServeLeastRecentlyServed pins the order slots grants in: each
// identity holds at most n-1 slots, and a freed slot goes to the waiting
// identity served least recently (one that was idle first), FIFO within an
// identity; a waiter that leaves gives up its place.
func TestSlotsServeLeastRecentlyServed(t *testing.T) {
	s := newSlots(2)
	w := map[string]*waiter{}
	for _, name := range []string{"a1", "b1", "a2", "b2", "c1", "a3"} {
		w[name] = s.enqueue(name[:1])
	}
	granted := func(step string, want ...string) {
		t.Helper()
		var got []string
		for _, name := range []string{"a1", "b1", "a2", "b2", "c1", "a3"} {
			select {
			case <-w[name].ready:
				got = append(got, name)
			default:
			}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("after %s granted %v; want %v", step, got, want)
		}
	}
	granted("queueing", "a1", "b1")
	s.release("a")
	granted("a1 done", "a1", "b1", "c1")
	s.release("b")
	granted("b1 done", "a1", "b1", "a2", "c1")
	s.release("c")
	granted("c1 done", "a1", "b1", "a2", "b2", "c1")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.wait(ctx, "a", w["a3"]); !errors.Is(err, context.Canceled) {
		t.Errorf("wait(cancelled) = %v; want context.Canceled", err)
	}
	s.release("a")
	s.release("b")
	granted("all done", "a1", "b1", "a2", "b2", "c1")
	if s.busy != 0 || len(s.ids) != 0 {
		t.Errorf("after every release busy = %d, %d identities kept; want 0, 0", s.busy, len(s.ids))
	}
}

func TestSlotsCapPerIdentity(t *testing.T) {
	for _, tt := range []struct{ n, want int }{{1, 1}, {2, 1}, {3, 2}, {8, 7}} {
		s := newSlots(tt.n)
		got := 0
		for range tt.n {
			select {
			case <-s.enqueue("a").ready:
				got++
			default:
			}
		}
		if got != tt.want {
			t.Errorf("newSlots(%d): a lone identity got %d slots; want %d", tt.n, got, tt.want)
		}
	}
}

// A binary whose main did not call EnableWorkers must not re-run itself
// as a worker (a test binary would rerun its tests): the first deep text
// stops it, naming the missing call.
func TestWorkerNeedsEnableWorkers(t *testing.T) {
	enabled.Store(false)
	defer enabled.Store(true)
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "sqlparse.EnableWorkers") {
			t.Errorf("startWorker without EnableWorkers recovered %v; want a panic naming sqlparse.EnableWorkers", r)
		}
	}()
	w, err := startWorker()
	if err == nil {
		w.kill()
	}
	t.Errorf("startWorker without EnableWorkers = %v; want a panic", err)
}
