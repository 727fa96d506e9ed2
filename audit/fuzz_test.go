package audit

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"reflect"
	"testing"
	"time"
)

// FuzzParseRecord feeds arbitrary lines to the record decoder. Whatever it
// accepts must survive a round trip through the encoder unchanged.
func FuzzParseRecord(f *testing.F) {
	enc := newEncoder()
	for _, r := range []*Record{
		decisionRecord(1),
		{Kind: KindSegment, Detail: map[string]string{"reason": "start", "torn": "a@1"}},
		{TS: time.Unix(2, 5000), Kind: "sql", SQL: "select \"x\"\n\t\\ \u2028 \x01 é", Status: -3, BytesIn: 1 << 40},
		{TS: time.Unix(3, 0), Kind: "http", User: "sbx\u202e", Path: "/p", Query: "q=1&token=[redacted:3]",
			Decision: "deny", Reason: "rate_limited", Count: 41, Truncated: "path,query"},
		{TS: time.Unix(6, 0), Kind: KindHTTP, Method: "GET", Path: "/p", Query: "k=egressd:secret:gh", Decision: "allow",
			Credentials: map[string]string{"gh": "header:Authorization", "oa": "query:k,header:X-Key"}},
		{TS: time.Unix(5, 0), Kind: KindHTTP, Method: "GET", Scheme: "https", Host: "api.test", Port: 443, Path: "/p", Inspected: true, Decision: "allow"},
		{TS: time.Unix(7, 0), Kind: KindHTTP, Method: "GET", Host: "w.test", Decision: "allow", Reason: "allowed", Rule: "watch", Policy: "sha256:00",
			WouldDeny: "rule_deny", ObservedBy: "rule"},
		{TS: time.Unix(4, 0), Kind: KindStarted, Detail: map[string]string{"version": "v1", "config": "embedded", "policy": "sha256:00"}},
	} {
		line, _ := enc.appendLine(nil, r, 7, &zeroHash)
		f.Add(bytes.TrimSuffix(line, []byte("\n")))
	}
	f.Add([]byte(`{"seq":1,"ts":"x","kind":"a","prev":"","hash":""}`))
	f.Add([]byte(`{"seq":01}`))
	f.Add([]byte(`{"seq":1,"kind":"\ud83d\ude00\ud800"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		var r Record
		if err := ParseRecord(line, &r); err != nil {
			return
		}
		var prev [sha256.Size]byte
		if !decodeHex(&prev, []byte(r.Prev)) {
			return
		}
		again, _ := enc.appendLine(nil, &r, r.Seq, &prev)
		var r2 Record
		if err := ParseRecord(bytes.TrimSuffix(again, []byte("\n")), &r2); err != nil {
			t.Fatalf("ParseRecord(encode(%q)) = %v", line, err)
		}
		r.Hash, r2.Hash = "", ""
		if !r.TS.Equal(r2.TS) {
			t.Fatalf("ts round trip: %v != %v", r.TS, r2.TS)
		}
		r.TS, r2.TS = time.Time{}, time.Time{}
		if len(r.Detail) == 0 {
			r.Detail = nil
		}
		if !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip of %q:\n got %+v\nwant %+v", line, r2, r)
		}
	})
}

// FuzzVerify feeds arbitrary bytes to the verifier as a segment: it must
// never panic and must report problems only as BreakErrors. Its oracle is
// an intact log with one byte changed (at flip, by mask): the verifier
// must name the record holding that byte, the one whose line it is in
// (its newline included), neither an earlier record that is intact nor a
// later one.
func FuzzVerify(f *testing.F) {
	enc := newEncoder()
	var log []byte
	head := zeroHash
	recs := []*Record{
		{Kind: KindSegment, Detail: map[string]string{"reason": "start"}},
		decisionRecord(1), decisionRecord(2), decisionRecord(3),
	}
	for i, r := range recs {
		r.TS = time.Unix(int64(i+1), 0)
		log, head = enc.appendLine(log, r, uint64(i+1), &head)
	}
	if err := verifyBytes(log); err != nil {
		f.Fatalf("verify of the intact log = %v", err)
	}
	f.Add(log, uint16(0), byte(0))
	f.Add(log[:len(log)-7], uint16(len(log)/2), byte(1))
	f.Add(append(bytes.Clone(log), log...), uint16(len(log)-1), byte('\n'))
	// A value (the host of the second decision), and a hash.
	f.Add([]byte{}, uint16(bytes.LastIndex(log, []byte("pypi.org"))), byte(1))
	f.Add([]byte{}, uint16(bytes.Index(log, []byte(`"hash":"`))+8), byte(2))
	f.Fuzz(func(t *testing.T, data []byte, flip uint16, mask byte) {
		var be *BreakError
		if err := verifyBytes(data); err != nil && !errors.As(err, &be) {
			t.Fatalf("verify = %v (%T); want a BreakError", err, err)
		}
		if mask == 0 {
			return
		}
		at := int(flip) % len(log)
		bad := bytes.Clone(log)
		bad[at] ^= mask
		line := 1 + bytes.Count(log[:at], []byte{'\n'})
		err := verifyBytes(bad)
		if !errors.As(err, &be) || be.Line != line {
			t.Fatalf("verify with byte %d (%q) of line %d changed to %q = %v; want a break at line %d", at, log[at], line, bad[at], err, line)
		}
	})
}

// verifyBytes verifies data as a whole log of one segment.
func verifyBytes(data []byte) error {
	v := NewVerifier()
	if err := v.Reader("audit-000001.jsonl", bytes.NewReader(data)); err != nil {
		return err
	}
	return v.Finish()
}
