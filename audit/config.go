package audit

import (
	"fmt"
	"time"
)

// Config is the `audit:` section.
type Config struct {
	// Dir holds the segment files. If empty, ./egressd-audit is used.
	Dir string `yaml:"dir"`
	// Sync is "interval" (fsync at least every SyncInterval) or "always"
	// (fsync before Append returns). If empty, "interval" is used.
	Sync string `yaml:"sync"`
	// SyncInterval is the longest time a record may sit unsynced with
	// Sync: interval. If zero, 10ms is used.
	SyncInterval time.Duration `yaml:"sync_interval"`
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{Dir: "./egressd-audit", Sync: "interval", SyncInterval: 10 * time.Millisecond}
}

// Validate checks values without I/O. Errors name the key relative to the
// section.
func (c *Config) Validate() error {
	if c.Sync != "interval" && c.Sync != "always" {
		return fmt.Errorf("sync must be \"interval\" or \"always\", got %q", c.Sync)
	}
	if c.SyncInterval <= 0 {
		return fmt.Errorf("sync_interval must be > 0, got %q", c.SyncInterval)
	}
	return nil
}
