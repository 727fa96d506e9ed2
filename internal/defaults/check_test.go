package defaults

import (
	"testing"
	"time"
)

func TestBoundChecks(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string // "" for no error
	}{
		{"positive int", Positive("queue_size", 1), ""},
		{"positive zero", Positive("queue_size", 0), "queue_size must be > 0, got 0"},
		{"positive duration", Positive("sync_interval", -time.Second), `sync_interval must be > 0, got "-1s"`},
		{"non-negative zero", NonNegative("timeout", time.Duration(0)), ""},
		{"non-negative duration", NonNegative("timeout", -time.Second), `timeout must be >= 0, got "-1s"`},
		{"non-negative float", NonNegative("rate_limit", -0.5), "rate_limit must be >= 0, got -0.5"},
		{"at least", AtLeast("cache_size", -1, -1), ""},
		{"below least", AtLeast("cache_size", -2, -1), "cache_size must be >= -1, got -2"},
		{"between low end", Between("attempts", 0, 0, 10), ""},
		{"between high end", Between("attempts", 10, 0, 10), ""},
		{"above", Between("attempts", 11, 0, 10), "attempts must be between 0 and 10, got 11"},
		{"below", Between("attempts", -1, 0, 10), "attempts must be between 0 and 10, got -1"},
		{"duration bounds", Between("leaf_ttl", time.Second, time.Minute, time.Hour), `leaf_ttl must be between 1m0s and 1h0m0s, got "1s"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			switch {
			case tt.want == "" && tt.err != nil:
				t.Errorf("error %q; want none", tt.err)
			case tt.want != "" && (tt.err == nil || tt.err.Error() != tt.want):
				t.Errorf("error %v; want %q", tt.err, tt.want)
			}
		})
	}
}
