package audit

import (
	"errors"
	"fmt"
	"time"
)

// field indexes in the fixed key order; a line's keys must appear in
// strictly increasing order, so duplicates and unknown keys are refused.
const (
	fSeq = iota
	fTS
	fKind
	fRequest
	fIdentity
	fUser
	fClient
	fVia
	fTraceparent
	fMethod
	fScheme
	fHost
	fPort
	fPath
	fQuery
	fInspected
	fName
	fQType
	fDatabase
	fSQL
	fFingerprint
	fIP
	fDecision
	fReason
	fRule
	fPolicy
	fWouldDeny
	fObservedBy
	fCredentials
	fMCPMethod
	fTool
	fRPCID
	fArgsHMAC
	fModel
	fTokensIn
	fTokensOut
	fSecret
	fSecretPattern
	fStatus
	fBytesIn
	fBytesOut
	fDurationUS
	fError
	fCount
	fTruncated
	fDetail
	fPrev
	fHash
)

var fieldIndex = map[string]int{
	"seq": fSeq, "ts": fTS, "kind": fKind, "request": fRequest,
	"identity": fIdentity, "user": fUser, "client": fClient, "via": fVia, "traceparent": fTraceparent, "method": fMethod,
	"scheme": fScheme, "host": fHost, "port": fPort, "path": fPath, "query": fQuery, "inspected": fInspected,
	"name": fName, "qtype": fQType, "database": fDatabase, "sql": fSQL,
	"fingerprint": fFingerprint, "ip": fIP, "decision": fDecision,
	"reason": fReason, "rule": fRule, "policy": fPolicy,
	"would_deny": fWouldDeny, "observed_by": fObservedBy, "credentials": fCredentials,
	"mcp_method": fMCPMethod, "tool": fTool, "rpc_id": fRPCID, "args_hmac": fArgsHMAC, "model": fModel,
	"tokens_in": fTokensIn, "tokens_out": fTokensOut, "secret": fSecret, "secret_pattern": fSecretPattern, "status": fStatus,
	"bytes_in": fBytesIn, "bytes_out": fBytesOut, "duration_us": fDurationUS,
	"error": fError, "count": fCount, "truncated": fTruncated, "detail": fDetail, "prev": fPrev, "hash": fHash,
}

// fieldNames are the keys in layout order.
var fieldNames = func() []string {
	n := make([]string, len(fieldIndex))
	for k, i := range fieldIndex {
		n[i] = k
	}
	return n
}()

// nextField finds key among the fields after last: keys come in layout
// order, so a short forward scan beats hashing.
func nextField(key []byte, last int) int {
	for j := last + 1; j < len(fieldNames); j++ {
		if string(key) == fieldNames[j] {
			return j
		}
	}
	return -1
}

// ParseRecord decodes one line (without its newline) strictly: the keys of
// the fixed layout in order, string and integer values only, valid UTF-8.
// It checks syntax, not the hash; Verifier does that.
func ParseRecord(line []byte, r *Record) error {
	*r = Record{}
	d := decoder{b: line}
	if err := d.record(r); err != nil {
		return fmt.Errorf("byte %d: %w", d.i, err)
	}
	return nil
}

// parseLite is ParseRecord for the verifier: it checks the whole line
// but keeps only Seq, TS, Kind and Detail (the chain fields it reads by
// position), reusing d's scratch space.
func (d *decoder) parseLite(line []byte, r *Record) error {
	*r = Record{}
	d.b, d.i, d.lite = line, 0, true
	if err := d.record(r); err != nil {
		return fmt.Errorf("byte %d: %w", d.i, err)
	}
	return nil
}

type decoder struct {
	b []byte
	i int
	// lite skips building the strings a verifier does not need: only seq,
	// ts, kind and detail are kept, the rest is checked and dropped.
	lite    bool
	scratch []byte
	// sec caches the last parsed timestamp's second: consecutive records
	// share it, and only their microseconds need reading.
	secText [len("2006-01-02T15:04:05.")]byte
	sec     time.Time
}

var errEnd = errors.New("unexpected end of line")

// literal consumes lit if the line continues with it.
func (d *decoder) literal(lit string) bool {
	if len(d.b)-d.i < len(lit) || string(d.b[d.i:d.i+len(lit)]) != lit {
		return false
	}
	d.i += len(lit)
	return true
}

func (d *decoder) expect(c byte) error {
	if d.i >= len(d.b) {
		return errEnd
	}
	if d.b[d.i] != c {
		return fmt.Errorf("want %q, got %q", c, d.b[d.i])
	}
	d.i++
	return nil
}

func (d *decoder) record(r *Record) error {
	if err := d.expect('{'); err != nil {
		return err
	}
	last := -1
	for {
		if last >= 0 {
			if d.i < len(d.b) && d.b[d.i] == '}' {
				d.i++
				break
			}
			if err := d.expect(','); err != nil {
				return err
			}
		}
		key, err := d.raw()
		if err != nil {
			return err
		}
		idx := nextField(key, last)
		if idx < 0 {
			if _, ok := fieldIndex[string(key)]; ok {
				return fmt.Errorf("key %q out of order", key)
			}
			return fmt.Errorf("unknown key %q", key)
		}
		last = idx
		if err := d.expect(':'); err != nil {
			return err
		}
		if err := d.value(r, idx); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	if d.i != len(d.b) {
		return errors.New("trailing bytes after record")
	}
	if last != fHash {
		return errors.New("hash is not the last key")
	}
	if r.Kind == "" || r.TS.IsZero() || (r.Prev == "" && !d.lite) {
		return errors.New("missing seq, ts, kind or prev")
	}
	return nil
}

func (d *decoder) value(r *Record, idx int) error {
	var err error
	switch idx {
	case fSeq:
		r.Seq, err = d.uint(64)
	case fPort:
		var p uint64
		p, err = d.uint(16)
		r.Port = uint16(p)
	case fStatus:
		var s int64
		s, err = d.int()
		r.Status = int(s)
	case fTokensIn:
		r.TokensIn, err = d.int()
	case fTokensOut:
		r.TokensOut, err = d.int()
	case fBytesIn:
		r.BytesIn, err = d.int()
	case fBytesOut:
		r.BytesOut, err = d.int()
	case fDurationUS:
		r.DurationUS, err = d.int()
	case fCount:
		r.Count, err = d.int()
	case fDetail:
		r.Detail, err = d.object()
	case fCredentials:
		// The writer omits an empty map: "{}" is not a line it wrote.
		if r.Credentials, err = d.object(); err == nil && len(r.Credentials) == 0 {
			err = errors.New("empty object")
		}
	case fInspected:
		// Written only when true (omitempty), so "false" is not a layout
		// the writer produces.
		if !d.literal("true") {
			err = errors.New("want true")
		}
		r.Inspected = err == nil
	case fTS:
		var b []byte
		if b, err = d.raw(); err == nil {
			r.TS, err = d.ts(b)
		}
	case fKind:
		var b []byte
		if b, err = d.raw(); err == nil {
			r.Kind = internKind(b)
		}
	default:
		if d.lite {
			_, err = d.raw()
			break
		}
		var s string
		s, err = d.str()
		*stringField(r, idx) = s
	}
	return err
}

// internedKinds are the known kinds, which reading does not allocate.
var internedKinds = func() map[string]Kind {
	m := map[string]Kind{}
	for _, k := range kinds {
		m[string(k)] = k
	}
	return m
}()

// internKind returns the constant for a common kind, so reading it does
// not allocate (the map lookup with string(b) does not copy b).
func internKind(b []byte) Kind {
	if k, ok := internedKinds[string(b)]; ok {
		return k
	}
	return Kind(b)
}

func stringField(r *Record, idx int) *string {
	switch idx {
	case fRequest:
		return &r.Request
	case fIdentity:
		return &r.Identity
	case fUser:
		return &r.User
	case fClient:
		return &r.Client
	case fMethod:
		return &r.Method
	case fScheme:
		return &r.Scheme
	case fHost:
		return &r.Host
	case fPath:
		return &r.Path
	case fQuery:
		return &r.Query
	case fName:
		return &r.Name
	case fQType:
		return &r.QType
	case fDatabase:
		return &r.Database
	case fSQL:
		return &r.SQL
	case fFingerprint:
		return &r.Fingerprint
	case fIP:
		return &r.IP
	case fDecision:
		return (*string)(&r.Decision)
	case fReason:
		return &r.Reason
	case fRule:
		return &r.Rule
	case fPolicy:
		return &r.Policy
	case fWouldDeny:
		return &r.WouldDeny
	case fObservedBy:
		return &r.ObservedBy
	case fVia:
		return &r.Via
	case fTraceparent:
		return &r.Traceparent
	case fMCPMethod:
		return &r.MCPMethod
	case fTool:
		return &r.Tool
	case fRPCID:
		return &r.RPCID
	case fArgsHMAC:
		return &r.ArgsHMAC
	case fModel:
		return &r.Model
	case fSecret:
		return &r.Secret
	case fSecretPattern:
		return &r.SecretPattern
	case fError:
		return &r.Error
	case fTruncated:
		return &r.Truncated
	case fPrev:
		return &r.Prev
	}
	return &r.Hash
}

// ts parses b, reusing the second of the previous timestamp when b
// shares it.
func (d *decoder) ts(b []byte) (time.Time, error) {
	const n = len("2006-01-02T15:04:05.")
	if len(b) == n+7 && !d.sec.IsZero() && string(b[:n]) == string(d.secText[:]) && b[n+6] == 'Z' {
		us := 0
		for _, c := range b[n : n+6] {
			if c < '0' || c > '9' {
				return time.Time{}, fmt.Errorf("want RFC 3339 UTC with microseconds, got %q", b)
			}
			us = us*10 + int(c-'0')
		}
		return d.sec.Add(time.Duration(us) * time.Microsecond), nil
	}
	t, err := parseTS(string(b))
	if err == nil {
		copy(d.secText[:], b)
		d.sec = t.Truncate(time.Second)
	}
	return t, err
}

// parseTS accepts exactly the writer's layout: UTC, six fractional digits.
func parseTS(s string) (time.Time, error) {
	if len(s) != len("2006-01-02T15:04:05.000000Z") || s[len(s)-1] != 'Z' {
		return time.Time{}, fmt.Errorf("want RFC 3339 UTC with microseconds, got %q", s)
	}
	return time.Parse(tsLayout, s)
}
