package export

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/egressd/egressd/audit"
)

// fuzzRead is the oracle both readers share: whatever a reader accepts as
// a chain must be a log the file verifier (audit.Verifier, a separate
// implementation of the chain rules) accepts too, ending at the head the
// report names; and no input panics.
func fuzzRead(t *testing.T, b []byte, read func(*bytes.Reader, *Verifier) error) {
	v := NewVerifier()
	logs := map[[2]string]*bytes.Buffer{}
	v.Accepted = func(replica, chain string, line []byte) {
		k := [2]string{replica, chain}
		if logs[k] == nil {
			logs[k] = &bytes.Buffer{}
		}
		logs[k].Write(line)
		logs[k].WriteByte('\n')
	}
	if err := read(bytes.NewReader(b), v); err != nil {
		return
	}
	for _, r := range v.Reports() {
		if r.Err != nil {
			continue
		}
		fv := audit.NewVerifier()
		log := logs[[2]string{r.Replica, r.Chain}]
		if err := fv.Reader("replayed", bytes.NewReader(log.Bytes())); err != nil {
			t.Fatalf("chain %s/%s verified from the stream, but its lines fail the file verifier: %v", r.Replica, r.Chain, err)
		}
		if seq, _ := fv.Head(); seq != r.Head || fv.Counts.Records != r.Records {
			t.Fatalf("stream report %+v; file verifier head %d, %d records", r, seq, fv.Counts.Records)
		}
	}
}

func FuzzReadOCSF(f *testing.F) {
	var two bytes.Buffer
	for i, name := range []string{"a", "b"} {
		dir := f.TempDir()
		writeLog(f, dir, 6+i)
		if err := WriteOCSF(&two, readEvents(f, dir, name)); err != nil {
			f.Fatal(err)
		}
	}
	f.Add(two.Bytes())
	f.Add(append(bytes.Clone(two.Bytes()), two.Bytes()...))
	f.Add([]byte(`{"raw_data":"x","unmapped":{"egressd_hash":"h"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzRead(t, b, func(r *bytes.Reader, v *Verifier) error { return ReadOCSF(r, v) })
	})
}

func FuzzReadOTLPJSON(f *testing.F) {
	seed := exportOTLP(f, 6)
	f.Add(seed)
	f.Add(bytes.ReplaceAll(seed, []byte(`"egressd.audit.seq","value":{"intValue":"3"}`), []byte(`"egressd.audit.seq","value":{"intValue":"4"}`)))
	f.Add([]byte(fmt.Sprintf(`{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":%q}}]}]}]}`, "{}")))
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzRead(t, b, func(r *bytes.Reader, v *Verifier) error { return ReadOTLPJSON(r, v) })
	})
}
