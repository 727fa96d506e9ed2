// Package fdlimit keeps egressd answering when file descriptors run short.
// A tunnel holds four (client, upstream and a splice pipe pair); once the
// process is out of them, accept fails with EMFILE, the kernel keeps new
// connections queued, and clients, the admin listener's /readyz among
// them, hang until they time out instead of being refused. So egressd
// raises its soft RLIMIT_NOFILE to the hard limit at start, and a Budget
// lets client listeners refuse new connections while fewer than a reserve
// of descriptors is left: the reserve is for the audit log, DNS, upstream
// dials of clients already admitted, and the admin listener, which is
// never guarded.
package fdlimit

import (
	"errors"
	"sync"
	"syscall"
	"time"
)

// Limits are the soft and hard RLIMIT_NOFILE.
type Limits struct {
	Soft, Hard uint64
}

// Raise sets the soft RLIMIT_NOFILE to the hard limit and returns the
// limits in force afterwards. (The Go runtime already raises it at start
// on Linux; doing it here makes the value egressd relies on explicit and
// logged, whatever the platform.)
func Raise() (Limits, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return Limits{}, err
	}
	if r.Cur < r.Max {
		r.Cur = r.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
			return Limits{}, err
		}
	}
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return Limits{}, err
	}
	return Limits{Soft: r.Cur, Hard: r.Max}, nil
}

// PerConn is what one admitted client connection may come to hold: a
// tunnel's client and upstream sockets and a splice pipe pair.
const PerConn = 4

// Reserve is how many descriptors a Budget keeps free below limit: an
// eighth, at least 32 and at most 4096.
func Reserve(limit uint64) int {
	return int(min(max(limit/8, 32), 4096))
}

// recount bounds how stale a count may be while admitting: descriptors
// opened without an accept (upstream dials, DNS) are seen within it.
const recount = time.Second

// gapFactor spaces counts by their own cost: when the estimate says
// descriptors are short, the next count waits gapFactor times as long as
// the last one took, which keeps counting under 1/gapFactor of a core
// however many clients arrive. A count by stat takes about a microsecond,
// so in practice each refusal is backed by a fresh count; reading a large
// /proc/self/fd (kernels before 6.2) takes milliseconds, and between
// counts the estimate decides.
const gapFactor = 20

// Budget decides whether one more client connection fits in the
// descriptor limit. It counts the descriptors open (see countOpen), and
// between counts charges each admitted connection PerConn; when that
// estimate leaves too few it counts again, and refuses only if the count
// does (while refusing, the estimate refuses until the gap has passed).
// It is safe for concurrent use.
type Budget struct {
	limit   int
	reserve int
	count   func() (int, error)
	now     func() time.Time

	mu       sync.Mutex
	open     int // at the last count
	admitted int // connections admitted since
	counted  time.Time
	gap      time.Duration
	refusing bool // the last answer was no
}

// NewBudget returns a Budget for limit (the soft RLIMIT_NOFILE) keeping
// Reserve(limit) free. Where descriptors cannot be counted it admits every
// connection.
func NewBudget(limit uint64) *Budget {
	return newBudget(limit, Reserve(limit), countOpen, time.Now)
}

func newBudget(limit uint64, reserve int, count func() (int, error), now func() time.Time) *Budget {
	return &Budget{limit: int(min(limit, 1<<30)), reserve: reserve, count: count, now: now}
}

// Limit and Reserve report the budget's parameters.
func (b *Budget) Limit() int   { return b.limit }
func (b *Budget) Reserve() int { return b.reserve }

// Admit reports whether one more client connection fits: its PerConn
// descriptors must leave the reserve free, and once refusing, a quarter
// of the reserve more, so that clients arriving as descriptors hover at
// the edge do not flip it between refusing and admitting (each flip would
// be a new shortage in the audit log). A count that fails (with EMFILE,
// when the process is already out) is a refusal.
func (b *Budget) Admit() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	need := b.reserve + PerConn
	if b.refusing {
		need += b.reserve / 4
	}
	est := b.open + PerConn*b.admitted
	age := now.Sub(b.counted)
	// The estimate charges every connection admitted since the count
	// PerConn, what a tunnel comes to hold; most hold less (a gate
	// client before its login, one socket), and some have closed. So it
	// only says when to count: a refusal is backed by a count, which
	// sees what the connections really hold. Only while refusing on a
	// count does the estimate refuse between counts, spaced by gap.
	if age >= recount || b.limit-est < need && (!b.refusing || age >= b.gap) {
		n, err := b.count()
		switch {
		case errors.Is(err, errUnsupported):
			return true
		case err != nil:
			n = b.limit
		}
		b.gap = gapFactor * b.now().Sub(now)
		b.open, b.admitted, b.counted = n, 0, now
		est = n
	}
	b.refusing = b.limit-est < need
	if b.refusing {
		return false
	}
	b.admitted++
	return true
}

// Open is the number of descriptors open at the last count.
func (b *Budget) Open() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open
}

var errUnsupported = errors.New("counting open descriptors is not supported here")
