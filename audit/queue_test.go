package audit

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testwait"
)

// TestQueueFull stalls the writer (interval mode flushes only on its tick
// or a full batch) with a queue filled to QueueSize: Append refuses with
// ErrQueueFull, Ready reports it, and both recover once the writer runs.
func TestQueueFull(t *testing.T) {
	c := testConfig(t, "interval")
	c.SyncInterval = time.Hour
	c.QueueSize = 64
	w := mustOpen(t, c)
	defer w.Close()

	w.mu.Lock()
	for i := range c.QueueSize {
		w.pending = append(w.pending, queued{rec: *decisionRecord(i)})
		w.pending[i].rec.TS = time.Now()
	}
	w.mu.Unlock()

	if err := w.Append(decisionRecord(-1)); !errors.Is(err, ErrQueueFull) || !errors.Is(err, ErrUnavailable) {
		t.Errorf("Append on a full queue = %v; want ErrQueueFull wrapping ErrUnavailable", err)
	}
	if err := w.Ready(); !errors.Is(err, ErrQueueFull) {
		t.Errorf("Ready() on a full queue = %v; want ErrQueueFull", err)
	}
	if st := w.Stats(); st.QueueFull != 1 || st.Refused != 1 || st.QueueDepth != c.QueueSize {
		t.Errorf("Stats() = %+v; want 1 queue-full refusal, depth %d", st, c.QueueSize)
	}
	w.wake <- struct{}{}
	testwait.For(t, "the writer to drain the queue", 5*time.Second, func() error {
		if n := w.QueueDepth(); n > 0 {
			return fmt.Errorf("queue depth %d", n)
		}
		return nil
	})
	if err := w.Ready(); err != nil {
		t.Errorf("Ready() after the writer ran = %v; want nil", err)
	}
	if err := w.Append(decisionRecord(0)); err != nil {
		t.Errorf("Append after the writer ran = %v", err)
	}
}

func TestAppendTooLarge(t *testing.T) {
	w := mustOpen(t, testConfig(t, "interval"))
	defer w.Close()
	r := decisionRecord(0)
	// Values are capped, so only a writer record's many detail keys can
	// still exceed the bound.
	r.Detail = map[string]string{}
	for i := 0; len(r.Detail)*64 <= maxRecordInput; i++ {
		r.Detail[fmt.Sprintf("%064d", i)] = "v"
	}
	if err := w.Append(r); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Append of a record with %d detail keys = %v; want ErrUnavailable", len(r.Detail), err)
	}
}

func TestAppendAfterClose(t *testing.T) {
	w := mustOpen(t, testConfig(t, "always"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(decisionRecord(0)); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close = %v; want ErrClosed", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close() = %v; want nil", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(c *Config)
		want   string
	}{
		{"defaults", func(*Config) {}, ""},
		{"empty dir", func(c *Config) { c.Dir = "" }, "dir must not be empty"},
		{"bad sync", func(c *Config) { c.Sync = "never" }, `sync must be "interval" or "always", got "never"`},
		{"negative interval", func(c *Config) { c.SyncInterval = -time.Second }, `sync_interval must be > 0, got "-1s"`},
		{"tiny segment", func(c *Config) { c.MaxSegmentBytes = 100 }, "max_segment_bytes must be >= 4096, got 100"},
		{"negative queue", func(c *Config) { c.QueueSize = -1 }, "queue_size must be > 0, got -1"},
		{"negative checkpoint", func(c *Config) { c.CheckpointInterval = -time.Second }, `checkpoint_interval must be > 0, got "-1s"`},
		{"tiny field cap", func(c *Config) { c.MaxFieldBytes = 10 }, "max_field_bytes must be between 64 and 4096, got 10"},
		{"upper-case redaction", func(c *Config) { c.RedactQueryParams = []string{"Token"} }, `redact_query_params[0] must be a non-empty lower-case name fragment, got "Token"`},
		{"negative budget", func(c *Config) { c.IdentityRate = -1 }, "identity_rate must be >= 0, got -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.modify(&c)
			got := ""
			if err := c.Validate(); err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Validate() = %q; want %q", got, tt.want)
			}
		})
	}
}

// TestProvision: zero values become the defaults, set values stay, and an
// empty (not nil) redaction list stays empty, since it means "redact
// nothing" (issue 13 item 4).
func TestProvision(t *testing.T) {
	tests := []struct {
		name string
		in   Config
		want func(c *Config)
	}{
		{"zero is the defaults", Config{}, func(*Config) {}},
		{"set values stay", Config{SyncInterval: time.Second, QueueSize: 7}, func(c *Config) { c.SyncInterval, c.QueueSize = time.Second, 7 }},
		{"empty redaction list stays empty", Config{RedactQueryParams: []string{}}, func(c *Config) { c.RedactQueryParams = []string{} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in
			got.Provision()
			want := DefaultConfig()
			tt.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Provision(%+v) = %+v; want %+v", tt.in, got, want)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Validate() after Provision = %v; want nil", err)
			}
		})
	}
}
