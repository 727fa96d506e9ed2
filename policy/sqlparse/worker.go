package sqlparse

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sync/atomic"
)

// workerEnv marks a process started as a parser worker.
const workerEnv = "EGRESSD_SQLPARSE_WORKER"

// The protocol's bounds. A request is one query text (the gate's outer
// limit is 1 MiB; a configured max_query_bytes above maxRequest is parsed
// only where it is provably shallow). A reply is a parse tree: JSON runs to
// about 60 bytes per byte of the densest 1 MiB query measured here, so a
// reply past maxReply is refused as too complex rather than buffered.
const (
	maxRequest = 16 << 20
	maxReply   = 256 << 20
)

// Reply statuses.
const (
	statusOK byte = iota
	statusParseError
	statusTooLarge
)

// enabled records that EnableWorkers ran in this process.
var enabled atomic.Bool

// EnableWorkers switches deep-text parsing on, and must be the first call
// of every main and TestMain whose binary parses SQL: a worker is this
// same executable re-run (egressd, or a `go test` binary), and the call is
// where the re-run turns into a worker: there EnableWorkers serves the
// parent's requests and exits instead of returning, before main or the
// tests do anything else. In any other process it only records the
// switch. A binary that parses a deep text without having called it
// panics (startWorker) rather than re-running a main that does not know
// to serve.
func EnableWorkers() {
	if os.Getenv(workerEnv) == "1" {
		os.Exit(serveWorker(os.Stdin, os.Stdout))
	}
	enabled.Store(true)
}

// serveWorker answers requests until its input ends; the exit code says
// why it stopped (0: the parent closed the pipe).
//
// A request is op (1 byte), length (4 bytes, big-endian), text. A reply is
// status (1 byte), length (4 bytes), payload: the result, or for a parse
// error the 4-byte cursor position and the message.
func serveWorker(in io.Reader, out io.Writer) int {
	r := bufio.NewReaderSize(in, 64<<10)
	w := bufio.NewWriterSize(out, 64<<10)
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF {
				return 0
			}
			return 3
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		if n > maxRequest {
			return 4
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(r, buf); err != nil {
			return 3
		}
		res, err := run(op(hdr[0]), string(buf))
		status := statusOK
		switch e := err.(type) {
		case nil:
			if len(res) > maxReply {
				status, res = statusTooLarge, ""
			}
		case *Error:
			status = statusParseError
			res = string(binary.BigEndian.AppendUint32(nil, uint32(e.Cursorpos))) + e.Message
		default:
			return 5
		}
		hdr[0] = status
		binary.BigEndian.PutUint32(hdr[1:], uint32(len(res)))
		if _, err := w.Write(hdr[:]); err != nil {
			return 3
		}
		if _, err := w.WriteString(res); err != nil {
			return 3
		}
		if err := w.Flush(); err != nil {
			return 3
		}
	}
}

// readReply reads one reply from r.
func readReply(r io.Reader) ([]byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("%w: read reply: %w", ErrCrashed, err)
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	switch hdr[0] {
	case statusOK:
		if n > maxReply {
			return nil, fmt.Errorf("%w: reply of %d bytes", ErrCrashed, n)
		}
	case statusParseError:
		if n < 4 || n > 64<<10 {
			return nil, fmt.Errorf("%w: parse error reply of %d bytes", ErrCrashed, n)
		}
	case statusTooLarge:
		return nil, fmt.Errorf("%w: parse tree over %d bytes", ErrTooLarge, maxReply)
	default:
		return nil, fmt.Errorf("%w: reply status %d", ErrCrashed, hdr[0])
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("%w: read reply: %w", ErrCrashed, err)
	}
	if hdr[0] == statusParseError {
		return nil, &Error{Cursorpos: int(binary.BigEndian.Uint32(buf)), Message: string(buf[4:])}
	}
	return buf, nil
}
