// Package sqlparse owns every call into libpg_query (through pg_query_go):
// nothing else in egressd calls the C parser. libpg_query recurses in C
// once per level of the parse tree — in the grammar's actions, in its JSON
// and protobuf writers, in Normalize and Fingerprint — and a left-deep tree
// of a few ten thousand levels (`SELECT 1 ISNULL ISNULL …`, a chain of
// NATURAL JOINs) runs off the C stack. That is a SIGSEGV, which Go cannot
// recover: in-process it would end egressd, proxy and DNS with it.
//
// So a text is parsed in-process only when Levels proves it shallow (at
// most InProcessLevels, far below the smallest crash measured); every
// other text goes to a contained worker: a small pool of subprocesses of
// the same executable, started on demand (pool.go, worker.go). A crash
// there costs the one statement, which is denied, and the worker is
// replaced.
package sqlparse

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"github.com/pganalyze/pg_query_go/v5/parser"
	"google.golang.org/protobuf/proto"
)

// The in-process bound. Crash points measured here (8 MiB C stack; the
// smallest crashing repetition n of each deepsql construct, found by
// bisection in a worker: go test -v -run TestInProcessBoundBelowCrashes
// ./policy/sqlparse -args -crashpoints), as Levels of the text:
//
//	construct      Normalize  protobuf  JSON
//	1+1+…             22,290    24,322    67,002
//	NOTNULL chain     26,833    23,855   131,072
//	ISNULL chain      26,780    24,502   131,571
//	AT TIME ZONE      33,027    72,156        –
//	::int chain       44,567    47,811   263,641
//	IS NULL chain     52,401    48,367   262,143
//	UNION chain       52,805    97,367        –
//	CROSS JOIN        67,209    72,786   197,355
//	NATURAL JOIN      68,283    71,496   196,857
//	LEFT JOIN USING  131,757   144,981        –
//
// (– : no crash up to 1 MiB.) Bracket nesting, CASE, nested calls,
// arrays, ROW and subselects fail cleanly in the grammar (its stack stops
// at 10,000) before any walker recurses. The smallest, 22,290 (Normalize
// of a sum, which egressd no longer calls: the gate's cache key is Key),
// is 5.5 times the bound: room for productions or code paths
// the generator does not reach, while ordinary queries (a few hundred
// levels even for a wide ORM SELECT) stay on the fast path. Fingerprint
// did not crash on any construct up to 1 MiB. One wide text failed too:
// Normalize of `SELECT 1,1,…` (262,396 constants, 512 KiB) outgrew the
// worker's 4 GiB, which inProcessBytes keeps out of this process.
const inProcessLevels8MiB = 4000

// InProcessLevels is the largest Levels parsed in-process: the bound for
// an 8 MiB C stack, scaled down when this process's threads get less (the
// C stack of a cgo call is the thread's pthread stack, whose default size
// glibc takes from RLIMIT_STACK at start).
var InProcessLevels = scaled(inProcessLevels8MiB)

// scaled is bound, set for an 8 MiB C stack, scaled to this process's.
func scaled(bound int) int {
	const full = 8 << 20
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_STACK, &lim); err != nil {
		return 0
	}
	size := lim.Cur
	// With no limit glibc falls back to its architecture default, 2 MiB
	// on some; assume the smallest.
	if size == ^uint64(0) || size == 0 {
		size = 2 << 20
	}
	if size >= full {
		return bound
	}
	return int(uint64(bound) * size / full)
}

// Error is libpg_query's own error: the text is not valid SQL.
type Error struct {
	Message string
	// Cursorpos is the 1-based character position of the error, 0 if
	// unknown.
	Cursorpos int
}

func (e *Error) Error() string { return e.Message }

// ErrCrashed is wrapped by the error of a parse whose worker died, broke
// the protocol or overran its time: the text is not parseable here.
var ErrCrashed = errors.New("parser crashed")

// ErrTooLarge is wrapped by the error of a parse whose request or result
// exceeds the worker protocol's bounds.
var ErrTooLarge = errors.New("parse result too large")

// op is one libpg_query function.
type op byte

const (
	opJSON op = iota + 1
	opProtobuf
	opFingerprint
)

// inProcessBytes8MiB bounds the text parsed in-process whatever its
// depth, with an 8 MiB C stack: libpg_query's Normalize takes about 8 KiB
// of memory per constant (a 1 MiB `SELECT 1,1,…` took 4.3 GB and 10 s
// here), so a wide text is not cheap either; up to 32 KiB it stays under
// 50 MB and 40 ms. It scales with the stack as InProcessLevels does: a
// byte bound that did not would let a text whose depth the scan
// under-counts by a constant factor through on a small stack.
const inProcessBytes8MiB = 32 << 10

// InProcessBytes is the longest text parsed in-process.
var InProcessBytes = scaled(inProcessBytes8MiB)

// InProcess reports whether sql is parsed in-process: short, and provably
// shallow by PostgreSQL's own scanner's tokens. Every level Levels counts
// takes at least a byte, so a text no longer than the bound needs no scan:
// the common case costs nothing. A text the scanner refuses goes to a
// worker, whose parse reports the error.
func InProcess(sql string) bool {
	if len(sql) <= InProcessLevels {
		return true
	}
	if len(sql) > InProcessBytes {
		return false
	}
	toks, err := Scan(sql)
	return err == nil && Levels(toks) <= InProcessLevels
}

// call runs o on sql in-process when InProcess, else in a worker. ctx
// ends a worker parse (the client left); an in-process parse is short
// enough to finish.
func call(ctx context.Context, o op, sql string) (string, error) {
	if InProcess(sql) {
		return run(o, sql)
	}
	b, err := workers.do(ctx, o, sql)
	return string(b), err
}

// run calls libpg_query. Only call and the worker loop call it. The
// protobuf tree comes back as a string too: one type for every result,
// and the JSON (the hot path) is not copied again.
func run(o op, sql string) (string, error) {
	var out string
	var err error
	switch o {
	case opJSON:
		out, err = parser.ParseToJSON(sql)
	case opProtobuf:
		var b []byte
		b, err = parser.ParseToProtobuf(sql)
		out = string(b)
	case opFingerprint:
		out, err = parser.FingerprintToHexStr(sql)
	default:
		return "", fmt.Errorf("unknown parser operation %d", o)
	}
	if err != nil {
		var pe *parser.Error
		if errors.As(err, &pe) {
			return "", &Error{Message: pe.Message, Cursorpos: pe.Cursorpos}
		}
		return "", err
	}
	return out, nil
}

// ParseToJSON is pg_query.ParseToJSON, contained.
func ParseToJSON(ctx context.Context, sql string) (string, error) {
	return call(ctx, opJSON, sql)
}

// Parse is pg_query.Parse (the protobuf tree), contained.
func Parse(ctx context.Context, sql string) (*pg_query.ParseResult, error) {
	b, err := call(ctx, opProtobuf, sql)
	if err != nil {
		return nil, err
	}
	tree := &pg_query.ParseResult{}
	if err := proto.Unmarshal([]byte(b), tree); err != nil {
		return nil, fmt.Errorf("decode parse tree: %w", err)
	}
	return tree, nil
}

// Fingerprint is pg_query.Fingerprint, contained. Give it redacted text:
// a fingerprint of text with literals lets anyone holding it test guesses
// of those literals.
func Fingerprint(ctx context.Context, sql string) (string, error) {
	return call(ctx, opFingerprint, sql)
}
