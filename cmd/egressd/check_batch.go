package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
)

// maxBatchLine bounds one request line of --batch and of POST /v1/check:
// room for the largest body a body rule reads. A longer line is answered
// with an error object and skipped.
const maxBatchLine = 8 << 20

// batchChunk is how many lines a worker decides per hand-off: enough to
// make the hand-off cheap next to the decisions, few enough that both
// cores get work on a short input.
const batchChunk = 64

// lineError is the output line of an input line that is not a request (or
// names an identity the config does not allow): the run goes on.
type lineError struct {
	Error string `json:"error"`
}

// batchStats counts a batch's decided, denied and malformed lines.
type batchStats struct {
	decided, denied, malformed int
}

// err is the batch's exit status: 2 (a usage error) if any line was not a
// request, else errDenied (1) if any was denied, else nil.
func (s batchStats) err() error {
	switch {
	case s.malformed > 0:
		return usageErrorf("check --batch: %d line(s) were not requests (see their error objects)", s.malformed)
	case s.denied > 0:
		return errDenied
	}
	return nil
}

// runBatch is `check --batch`: requests from stdin, decided locally or by
// --server, one output line each on stdout.
func runBatch(stdin io.Reader, cf *checkFlags, stdout io.Writer) error {
	ctx := context.Background()
	if cf.server != "" {
		rc, err := cf.remote()
		if err != nil {
			return err
		}
		st, err := rc.batch(ctx, stdin, stdout)
		if err != nil {
			return err
		}
		return st.err()
	}
	env, err := cf.load(ctx)
	if err != nil {
		return loadError(err)
	}
	st, err := decideLines(ctx, env, cf.identity, stdin, stdout)
	if err != nil {
		return err
	}
	return st.err()
}

// batchLine is one input line: its bytes in the chunk's arena, or long
// when it was past maxBatchLine (its bytes dropped).
type batchLine struct {
	start, end int
	long       bool
}

// batchJob is a chunk of consecutive lines and, once done is closed, their
// output lines.
type batchJob struct {
	arena []byte
	lines []batchLine
	out   bytes.Buffer
	st    batchStats
	done  chan struct{}
}

// decideLines decides every request line of r for env (defaultID for a
// line without an identity) and writes one output line for each to w, in
// input order: the decision as a single check prints it, or a lineError.
// Blank lines are skipped. The lines are decided by one worker per CPU,
// a chunk at a time, each with decideRequest. The error is a read or
// write failure; the lines' own failures are in the stats.
func decideLines(ctx context.Context, env *decideEnv, defaultID string, r io.Reader, w io.Writer) (batchStats, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers := runtime.GOMAXPROCS(0)
	jobs := make(chan *batchJob)
	order := make(chan *batchJob, 4*workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for j := range jobs {
				j.decide(ctx, env, defaultID)
				close(j.done)
			}
		})
	}
	var readErr error
	go func() {
		defer close(order)
		defer close(jobs)
		readErr = readChunks(ctx, r, func(j *batchJob) bool {
			for _, ch := range []chan *batchJob{jobs, order} {
				select {
				case ch <- j:
				case <-ctx.Done():
					return false
				}
			}
			return true
		})
	}()
	bw := bufio.NewWriterSize(w, 64<<10)
	var st batchStats
	var writeErr error
	for j := range order {
		<-j.done
		if writeErr != nil {
			continue
		}
		if _, writeErr = bw.Write(j.out.Bytes()); writeErr != nil {
			cancel()
			continue
		}
		st.decided += j.st.decided
		st.denied += j.st.denied
		st.malformed += j.st.malformed
	}
	wg.Wait()
	if writeErr == nil {
		writeErr = bw.Flush()
	}
	if writeErr != nil {
		return st, fmt.Errorf("write decisions: %w", writeErr)
	}
	if readErr != nil {
		return st, fmt.Errorf("read requests: %w", readErr)
	}
	return st, nil
}

// readChunks reads r's lines into jobs of up to batchChunk lines and hands
// each to send, stopping when send returns false.
func readChunks(ctx context.Context, r io.Reader, send func(*batchJob) bool) error {
	br := bufio.NewReaderSize(r, 64<<10)
	newJob := func() *batchJob { return &batchJob{done: make(chan struct{})} }
	j := newJob()
	for {
		start := len(j.arena)
		var long bool
		var err error
		j.arena, long, err = appendLine(br, j.arena)
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if len(j.arena) > start || long {
			j.lines = append(j.lines, batchLine{start: start, end: len(j.arena), long: long})
		}
		if len(j.lines) == batchChunk || (err != nil && len(j.lines) > 0) {
			if !send(j) {
				return ctx.Err()
			}
			j = newJob()
		}
		if err != nil {
			return nil
		}
	}
}

// appendLine appends the next line of br to dst, without its line ending.
// A line past maxBatchLine is dropped (dst unchanged) and long is set.
// err is io.EOF after the last line.
func appendLine(br *bufio.Reader, dst []byte) (out []byte, long bool, err error) {
	start := len(dst)
	for {
		frag, err := br.ReadSlice('\n')
		if !long {
			if len(dst)-start+len(frag) > maxBatchLine+2 {
				long, dst = true, dst[:start]
			} else {
				dst = append(dst, frag...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		line := bytes.TrimSuffix(bytes.TrimSuffix(dst[start:], []byte("\n")), []byte("\r"))
		if !long && len(line) > maxBatchLine {
			long, line = true, line[:0]
		}
		return dst[:start+len(line)], long, err
	}
}

// decide decides each line of j into j.out.
func (j *batchJob) decide(ctx context.Context, env *decideEnv, defaultID string) {
	enc := json.NewEncoder(&j.out)
	fail := func(err error) {
		j.st.malformed++
		enc.Encode(lineError{Error: err.Error()}) //nolint:errcheck // a bytes.Buffer and a string field: cannot fail
	}
	for _, l := range j.lines {
		line := j.arena[l.start:l.end]
		if l.long {
			fail(fmt.Errorf("line longer than %d bytes", maxBatchLine))
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		req, err := parseRequest(line)
		if err != nil {
			fail(err)
			continue
		}
		out, err := decideRequest(ctx, env, defaultID, req)
		if err != nil {
			fail(err)
			continue
		}
		if err := enc.Encode(out); err != nil {
			fail(fmt.Errorf("encode decision: %w", err))
			continue
		}
		j.st.decided++
		if !out.Allow {
			j.st.denied++
		}
	}
}
