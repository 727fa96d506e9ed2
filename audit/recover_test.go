package audit

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// writeRecords opens the log of c, appends records from to from+n-1 and
// closes it again, as one run of egressd would.
func writeRecords(t *testing.T, c Config, from, n int) {
	t.Helper()
	w := mustOpen(t, c)
	appendN(t, w, from, n)
	w.Close()
}

// lastRecord returns the last record of the log in dir.
func lastRecord(t *testing.T, dir string) Record {
	t.Helper()
	rd, err := NewReader([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var last Record
	for {
		r, err := rd.Next()
		if err != nil {
			return last
		}
		last = *r
	}
}

func TestRecoverTornTail(t *testing.T) {
	c := testConfig(t, "always")
	writeRecords(t, c, 0, 5)
	segs, _ := ListSegments(c.Dir)
	fi, _ := os.Stat(segs[0])
	torn := `{"seq":7,"ts":"2026-11-30T03:00:00.000000Z","kind":"ht`
	f, err := os.OpenFile(segs[0], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(torn)
	f.Close()

	var be *BreakError
	if err := NewVerifier().Paths([]string{c.Dir}); !errors.As(err, &be) || be.Line != 7 || !strings.Contains(be.Reason, "unterminated") {
		t.Fatalf("verify before restart = %v; want the unterminated line 7 named", err)
	}

	writeRecords(t, c, 5, 3)
	v := mustVerify(t, c.Dir)
	if v.Counts.Segments != 2 || v.Counts.Records != 1+5+1+3 {
		t.Errorf("verify counts = %+v; want 2 segments, 10 records", v.Counts)
	}
	b, _ := os.ReadFile(segs[0])
	if !strings.HasSuffix(string(b), torn) || int64(len(b)) != fi.Size()+int64(len(torn)) {
		t.Errorf("torn segment was changed; want it left as it was")
	}
	rd, _ := NewReader([]string{filepath.Join(c.Dir, SegmentName(2))})
	hdr, err := rd.Next()
	if err != nil {
		t.Fatal(err)
	}
	want := SegmentName(1) + "@" + strconv.FormatInt(fi.Size(), 10)
	if hdr.Kind != KindSegment || hdr.Detail["reason"] != "recovered_torn_tail" || hdr.Detail["torn"] != want {
		t.Errorf("new segment header = %+v; want reason recovered_torn_tail, torn %s", hdr, want)
	}
	rd.Close()
}

func TestRecoverBrokenChain(t *testing.T) {
	c := testConfig(t, "interval")
	writeRecords(t, c, 0, 5)
	segs, _ := ListSegments(c.Dir)
	lines := readLines(t, segs[0])
	lines[3] = []byte(strings.Replace(string(lines[3]), "sandbox-a", "sandbox-b", 1))
	writeLines(t, segs[0], lines)

	_, err := Open(c, testLogger(t))
	if err == nil || !strings.Contains(err.Error(), SegmentName(1)+":4: seq 4: hash mismatch") ||
		!strings.Contains(err.Error(), "--audit-accept-break") {
		t.Fatalf("Open over a broken chain = %v; want an error naming %s:4 seq 4 and --audit-accept-break", err, SegmentName(1))
	}

	c.AcceptBreak = true
	writeRecords(t, c, 5, 2)
	if r := lastRecord(t, c.Dir); r.Request != "req-6" {
		t.Errorf("last record = %+v; want req-6", r)
	}
	v := NewVerifier()
	if err := v.File(filepath.Join(c.Dir, SegmentName(2))); err != nil {
		t.Fatalf("verify of the segment after the accepted break = %v", err)
	}
	rd, _ := NewReader([]string{filepath.Join(c.Dir, SegmentName(2))})
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	note, _ := rd.Next()
	if note.Kind != KindAcceptedBreak || note.Detail["line"] != "4" || note.Detail["seq"] != "4" {
		t.Errorf("second record = %+v; want accepted_break naming line 4 seq 4", note)
	}
	rd.Close()

	// A later start needs no second acceptance.
	c.AcceptBreak = false
	w := mustOpen(t, c)
	w.Close()
}

func TestRecoverReusesEmptySegment(t *testing.T) {
	c := testConfig(t, "interval")
	writeRecords(t, c, 0, 3)
	empty := filepath.Join(c.Dir, SegmentName(2))
	if err := os.WriteFile(empty, nil, fileMode); err != nil {
		t.Fatal(err)
	}
	writeRecords(t, c, 3, 3)
	mustVerify(t, c.Dir)
	if segs, _ := ListSegments(c.Dir); len(segs) != 2 {
		t.Errorf("segments = %v; want the empty one reused", segs)
	}
}

func writeKey(t *testing.T) (string, ed25519.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "audit.key")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, pub
}

func TestSignedCheckpoints(t *testing.T) {
	c := testConfig(t, "always")
	c.CheckpointInterval = 5 * time.Millisecond
	key, pub := writeKey(t)
	c.SigningKey = key
	w := mustOpen(t, c)
	// Append (bounded) until the writer has added a checkpoint record.
	for i := 0; i < 2000 && w.Stats().Written <= w.Stats().Appended+w.Stats().Segments; i++ {
		appendN(t, w, i, 1)
	}
	w.Close()
	v := NewVerifier()
	v.PublicKey = pub
	if err := v.Paths([]string{c.Dir}); err != nil || v.Counts.Signed == 0 {
		t.Fatalf("verify = %v, %d signed checkpoints; want intact with at least one", err, v.Counts.Signed)
	}
	_, other, _ := ed25519.GenerateKey(nil)
	v = NewVerifier()
	v.PublicKey = other.Public().(ed25519.PublicKey)
	var be *BreakError
	if err := v.Paths([]string{c.Dir}); !errors.As(err, &be) || !strings.Contains(be.Reason, "signed by key") {
		t.Errorf("verify with another key = %v; want the checkpoint named", err)
	}
}

// TestCheckpointLogged checks the unsigned checkpoint: the chain head goes
// to the operational log, where verify --checkpoint can use it.
func TestCheckpointLogged(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	c := testConfig(t, "always")
	c.CheckpointInterval = 5 * time.Millisecond
	w, err := Open(c, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2000 && logs.FilterMessage("audit checkpoint").Len() == 0; i++ {
		appendN(t, w, i, 1)
	}
	w.Close()
	cps := logs.FilterMessage("audit checkpoint").All()
	if len(cps) == 0 {
		t.Fatal("no audit checkpoint logged")
	}
	f := cps[0].ContextMap()
	seq, _ := f["seq"].(uint64)
	hash, _ := f["hash"].(string)
	v := NewVerifier()
	v.Expect = []Checkpoint{{Seq: seq, Hash: hash}}
	if err := v.Paths([]string{c.Dir}); err != nil || seq == 0 {
		t.Errorf("verify against logged checkpoint seq %d hash %s = %v; want intact", seq, hash, err)
	}
	v = NewVerifier()
	v.Expect = []Checkpoint{{Seq: seq, Hash: strings.Repeat("0", 64)}}
	if err := v.Paths([]string{c.Dir}); err == nil {
		t.Errorf("verify against a wrong checkpoint hash = nil; want the record named")
	}
}
