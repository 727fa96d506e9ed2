package audit

import (
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// memLog is an Appender that keeps records in memory; fail refuses.
type memLog struct {
	mu   sync.Mutex
	recs []Record
	fail bool
}

func (l *memLog) Append(r *Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail {
		return ErrQueueFull
	}
	l.recs = append(l.recs, *r)
	return nil
}

// refusalsOf sums the refusals of identity and reason in l: full records
// count one, aggregates their count.
func (l *memLog) refusalsOf(identity, reason string) (records int, refusals int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.recs {
		if r.Identity == identity && r.Reason == reason && r.Decision == "deny" {
			records++
			refusals += max(1, r.Count)
		}
	}
	return records, refusals
}

// clock is a manual time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func testMeter(rate float64, burst, samples int) (*Meter, *memLog, *clock) {
	l := &memLog{}
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	cfg := DefaultConfig()
	cfg.IdentityRate, cfg.IdentityBurst, cfg.RefusalSamples = rate, burst, samples
	return newMeter(l, cfg, c.now), l, c
}

// TestMeterFoldsRepeatedRefusals is issue 11 item 19: an identity held at
// its rate limit refused thousands of times a second must cost a few
// records a second, each second's count written, none lost.
func TestMeterFoldsRepeatedRefusals(t *testing.T) {
	m, l, c := testMeter(5000, 10000, 10)
	const perSecond, seconds = 20000, 3
	for range seconds {
		for i := range perSecond {
			r := &Record{Kind: "http", Identity: "sbx-1", Client: "10.0.0.1", Decision: "deny", Reason: "rate_limited", Path: "/x"}
			if err := m.Append(r); err != nil {
				t.Fatalf("Append(refusal %d) = %v; want nil", i, err)
			}
			c.add(time.Second / perSecond)
		}
	}
	m.Flush()
	records, refusals := l.refusalsOf("sbx-1", "rate_limited")
	if refusals != perSecond*seconds {
		t.Errorf("records account for %d refusals; want %d", refusals, perSecond*seconds)
	}
	if max := seconds * (10 + 1); records > max {
		t.Errorf("%d refusals wrote %d records; want at most %d (10 samples and one aggregate a second)", refusals, records, max)
	}
	var agg *Record
	for i := range l.recs {
		if l.recs[i].Count > 0 {
			agg = &l.recs[i]
			break
		}
	}
	if agg == nil || agg.Kind != "http" || agg.Client != "10.0.0.1" || agg.Path != "" || agg.Detail["first"] == "" {
		t.Errorf("aggregate record = %+v; want kind http, the client, no target, first/last times", agg)
	}
}

// TestMeterBudgetIsolatesIdentities: one identity spending its budget is
// refused (ErrOverBudget) while another's records still go through.
func TestMeterBudgetIsolatesIdentities(t *testing.T) {
	m, l, c := testMeter(100, 200, 10)
	allow := func(id string) error {
		return m.Append(&Record{Kind: "http", Identity: id, Decision: "allow", Path: "/"})
	}
	var over int
	for range 1000 {
		if err := allow("flood"); errors.Is(err, ErrOverBudget) {
			over++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if over != 800 {
		t.Errorf("flood: %d of 1000 allows over budget; want 800 (burst 200)", over)
	}
	if err := allow("quiet"); err != nil {
		t.Errorf("quiet identity: Append = %v; want nil while another is over budget", err)
	}
	// Completions are always written and overdraw the budget.
	if err := m.Append(&Record{Kind: "http_done", Identity: "flood", Status: 200}); err != nil {
		t.Errorf("completion over budget: Append = %v; want nil", err)
	}
	// Over budget, refusals fold even before their samples are used.
	for range 50 {
		_ = m.Append(&Record{Kind: "http", Identity: "flood", Decision: "deny", Reason: "no_matching_rule"})
	}
	c.add(time.Second)
	m.Flush()
	records, refusals := l.refusalsOf("flood", "no_matching_rule")
	if records != 1 || refusals != 50 {
		t.Errorf("flood refusals over budget: %d records for %d refusals; want 1 aggregate of 50", records, refusals)
	}
	if st := m.Stats(); st.Folded != 50 || st.OverBudget != 800 {
		t.Errorf("Stats() = %+v; want 50 folded, 800 over budget", st)
	}
	// The budget refills at its rate.
	c.add(time.Second)
	if err := allow("flood"); err != nil {
		t.Errorf("after refill: Append = %v; want nil", err)
	}
}

// TestMeterCarriesCountsThroughOutage: an aggregate the log refuses is
// written later with the count intact.
func TestMeterCarriesCountsThroughOutage(t *testing.T) {
	m, l, c := testMeter(5000, 10000, 1)
	deny := &Record{Kind: "dns", Client: "10.0.0.9", Decision: "deny", Reason: "no_matching_rule"}
	for range 5 {
		_ = m.Append(deny)
	}
	l.fail = true
	c.add(time.Second)
	m.Flush()
	l.fail = false
	c.add(time.Second)
	m.Flush()
	if records, refusals := l.refusalsOf("", "no_matching_rule"); refusals != 5 {
		t.Errorf("after an outage: %d records for %d refusals; want 5 refusals", records, refusals)
	}
}

// TestFailLogThrottles is issue 11 item 22: while appends fail, the
// operational log gets one line per interval, with the suppressed count.
func TestFailLogThrottles(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	fl := NewFailLog(zap.New(core), 5*time.Second)
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	fl.now = c.now
	for range 1539 {
		fl.Failed(ErrQueueFull, zap.String("request", "req"))
		c.add(4 * time.Second / 1539)
	}
	if n := logs.Len(); n != 1 {
		t.Errorf("1539 failures in 4s logged %d lines; want 1", n)
	}
	c.add(2 * time.Second)
	fl.Failed(ErrQueueFull, zap.String("request", "req"))
	entries := logs.All()
	if len(entries) != 2 {
		t.Fatalf("lines after the interval = %d; want 2", len(entries))
	}
	f := entries[1].ContextMap()
	if f["suppressed"] != uint64(1538) || f["failed_total"] != uint64(1540) {
		t.Errorf("second line fields = %v; want suppressed 1538, failed_total 1540", f)
	}
}

// TestMeterWritesEveryCompletion: a failed upstream makes completions deny;
// they end allowed requests and are never folded.
func TestMeterWritesEveryCompletion(t *testing.T) {
	m, l, _ := testMeter(5000, 10000, 1)
	for range 20 {
		_ = m.Append(&Record{Kind: "http_done", Identity: "sbx-1", Decision: "deny", Reason: "upstream_unreachable"})
	}
	m.Flush()
	if records, _ := l.refusalsOf("sbx-1", "upstream_unreachable"); records != 20 {
		t.Errorf("20 failed completions wrote %d records; want 20", records)
	}
}

// TestMeterLogVerifies: aggregate records go through the writer like any
// other and the log verifies.
func TestMeterLogVerifies(t *testing.T) {
	c := testConfig(t, "interval")
	c.RefusalSamples = 2
	w := mustOpen(t, c)
	m := NewMeter(w, c)
	for range 50 {
		if err := m.Append(&Record{Kind: "connect", Identity: "sbx-1", Decision: "deny", Reason: "rate_limited"}); err != nil {
			t.Fatal(err)
		}
	}
	m.Close()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, c.Dir)
	var n int64
	for _, r := range readRecords(t, c.Dir) {
		if r.Reason == "rate_limited" {
			n += max(1, r.Count)
		}
	}
	if n != 50 {
		t.Errorf("log accounts for %d refusals; want 50", n)
	}
}

// BenchmarkMeterAppend is the meter's cost per record on the decision
// path: an allow charged to one of four identities.
func BenchmarkMeterAppend(b *testing.B) {
	m := newMeter(discard{}, DefaultConfig(), time.Now)
	ids := []string{"sbx-1", "sbx-2", "sbx-3", "sbx-4"}
	recs := make([]Record, len(ids))
	for i, id := range ids {
		recs[i] = Record{Kind: "http", Identity: id, Decision: "allow"}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := m.Append(&recs[i&3]); err != nil && !errors.Is(err, ErrOverBudget) {
			b.Fatal(err)
		}
		i++
	}
}

type discard struct{}

func (discard) Append(*Record) error { return nil }
