package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// CheckLine checks that line (one record as written, without its newline)
// carries the hash of its own bytes, parses it into r and returns the hash.
// It is the per-line half of Verifier for lines that travelled outside
// the segment files (an export); StreamVerifier adds the chain.
func CheckLine(line []byte, r *Record) (string, error) {
	body, prevHex, hashHex, err := splitLine(line)
	if err != nil {
		return "", fmt.Errorf("malformed line: %w", err)
	}
	var prev, sum [sha256.Size]byte
	if !decodeHex(&prev, prevHex) {
		return "", errors.New("malformed prev field")
	}
	lineSum(sha256.New(), &prev, body, &sum)
	got := hex.EncodeToString(sum[:])
	if got != string(hashHex) {
		return "", errors.New("hash mismatch: the record was altered")
	}
	if err := ParseRecord(line, r); err != nil {
		return "", fmt.Errorf("malformed record: %w", err)
	}
	return got, nil
}

// replayWindow is how many recent hashes a StreamVerifier keeps to
// recognise a repeated record. An exporter re-sends at most the batch it
// was exporting when it stopped (its cursor moves after every batch), far
// fewer than this.
const replayWindow = 1 << 14

// StreamVerifier checks one replica's chain from its records in the order
// an export delivered them: every line's own hash, seq continuity from 1,
// and prev linking to the previous record's hash. A record delivered again
// (at-least-once delivery repeats the batch in flight at a crash) is
// counted in Repeats when it is byte-identical to the record first seen
// at that seq, and is an error otherwise. Memory grows with the records
// seen, up to replayWindow hashes.
type StreamVerifier struct {
	// Records counts distinct records accepted; Repeats the exact repeats
	// skipped.
	Records, Repeats int
	// First is the hash of seq 1 (the chain's id) once seen.
	First string

	seq  uint64
	head string
	// ring holds the hashes of the last records, seq s at (s-1) %
	// replayWindow; it grows to replayWindow, then wraps.
	ring []string
}

// Head is the seq and hash of the last record accepted.
func (v *StreamVerifier) Head() (uint64, string) { return v.seq, v.head }

// Line checks the next delivered line; r receives the parsed record.
// Errors say which record is missing, moved, repeated with other bytes or
// altered.
func (v *StreamVerifier) Line(line []byte, r *Record) error {
	sum, err := CheckLine(line, r)
	if err != nil {
		return err
	}
	want := v.seq + 1
	switch {
	case r.Seq == 0:
		return errors.New("seq 0: no record has it")
	case r.Seq < want:
		if v.seq-r.Seq >= replayWindow {
			return fmt.Errorf("seq %d after %d: record out of order (too far back to be a re-delivery)", r.Seq, v.seq)
		}
		if v.ring[(r.Seq-1)%replayWindow] != sum {
			return fmt.Errorf("seq %d after %d: a different record with a seq already seen (out of order, or an altered copy)", r.Seq, v.seq)
		}
		v.Repeats++
		return nil
	case r.Seq > want && v.seq == 0:
		return fmt.Errorf("stream begins at seq %d: records 1..%d are missing", r.Seq, r.Seq-1)
	case r.Seq > want:
		return fmt.Errorf("seq jumps from %d to %d: records %d..%d are missing or moved", v.seq, r.Seq, want, r.Seq-1)
	}
	if v.seq == 0 {
		if r.Prev != hex.EncodeToString(zeroHash[:]) {
			return errors.New("seq 1 does not start a chain: its prev is not zero")
		}
		v.First = sum
	} else if r.Prev != v.head {
		return fmt.Errorf("prev of seq %d does not match the hash of seq %d: a record was altered, removed or reordered", r.Seq, v.seq)
	}
	v.seq, v.head = r.Seq, sum
	if len(v.ring) < replayWindow {
		v.ring = append(v.ring, sum)
	} else {
		v.ring[(r.Seq-1)%replayWindow] = sum
	}
	v.Records++
	return nil
}
