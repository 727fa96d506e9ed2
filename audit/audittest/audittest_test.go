package audittest

import (
	"errors"
	"sync"
	"testing"

	"github.com/egressd/egressd/audit"
)

func TestRecorder(t *testing.T) {
	var r Recorder
	if err := r.Append(&audit.Record{Kind: "http", Decision: "allow", Reason: "allowed"}); err != nil {
		t.Fatalf("Append = %v; want nil", err)
	}
	r.SetFail(true)
	if err := r.Append(&audit.Record{Kind: "http", Decision: "deny"}); !errors.Is(err, ErrFull) {
		t.Errorf("Append while failing = %v; want ErrFull", err)
	}
	r.SetFail(false)
	rec := &audit.Record{Kind: "dns", Decision: "deny", Reason: "no_matching_rule"}
	if err := r.Append(rec); err != nil {
		t.Fatalf("Append = %v; want nil", err)
	}
	rec.Reason = "changed after Append"
	if got := Summary(r.Records()); got != "http:allow:allowed,dns:deny:no_matching_rule" {
		t.Errorf("Summary(Records()) = %s; want the two kept records, as appended", got)
	}
	if r.Len() != 2 || r.Last().Kind != "dns" || len(r.Since(1)) != 1 || len(r.Since(5)) != 0 {
		t.Errorf("Len, Last, Since = %d, %+v, %v; want 2, the dns record, one record after the first", r.Len(), r.Last(), r.Since(1))
	}
	r.SetDiscard(true)
	_ = r.Append(&audit.Record{Kind: "http"}) // discarding: Append reports success, Len must not move
	if r.Len() != 2 {
		t.Errorf("Len after a discarded Append = %d; want 2", r.Len())
	}
}

// TestWaitWakesOnAppend: Wait returns once a concurrent Append brings the
// record it waits for, and returns at once for a record already kept.
func TestWaitWakesOnAppend(t *testing.T) {
	var r Recorder
	var wg sync.WaitGroup
	started := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-started
		for i := range 50 {
			kind := audit.KindHTTP
			if i == 49 {
				kind = audit.KindHTTPDone
			}
			_ = r.Append(&audit.Record{Kind: kind}) // the recorder never fails here
		}
	}()
	close(started)
	got := r.WaitRecord(t, func(rec audit.Record) bool { return rec.Kind == "http_done" })
	wg.Wait()
	if got.Kind != "http_done" {
		t.Errorf("WaitRecord = %+v; want the http_done record", got)
	}
	if recs := r.Wait(t, func(recs []audit.Record) bool { return len(recs) == 50 }); len(recs) != 50 {
		t.Errorf("Wait(50 records) returned %d", len(recs))
	}
}
