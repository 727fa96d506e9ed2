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
	// MaxSegmentBytes is the size at which the writer starts a new segment
	// file; a segment exceeds it by at most one record. If zero, 64 MiB is
	// used.
	MaxSegmentBytes int64 `yaml:"max_segment_bytes"`
	// QueueSize bounds the records waiting for the writer; when it is full
	// Append refuses (the caller denies with audit_unavailable). If zero,
	// 16384 is used.
	QueueSize int `yaml:"queue_size"`
	// CheckpointInterval is how often the chain head (seq, hash) is logged
	// to the operational log and, with SigningKey, written as a signed
	// checkpoint record. If zero, 1m is used.
	CheckpointInterval time.Duration `yaml:"checkpoint_interval"`
	// SigningKey is a PEM file holding an Ed25519 private key (PKCS #8, as
	// written by `openssl genpkey -algorithm ed25519`). If empty,
	// checkpoints are only logged, not signed.
	SigningKey string `yaml:"signing_key"`

	// AcceptBreak lets Open continue past a broken chain in the newest
	// segment, recording the acceptance. It is set from `serve
	// --audit-accept-break` for one start, never from the file.
	AcceptBreak bool `yaml:"-"`
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Dir:                "./egressd-audit",
		Sync:               "interval",
		SyncInterval:       10 * time.Millisecond,
		MaxSegmentBytes:    64 << 20,
		QueueSize:          16384,
		CheckpointInterval: time.Minute,
	}
}

// minSegmentBytes keeps rotation from degenerating into a file per record.
const minSegmentBytes = 4096

// Validate checks values without I/O. Errors name the key relative to the
// section.
func (c *Config) Validate() error {
	if c.Dir == "" {
		return fmt.Errorf("dir must not be empty")
	}
	if c.Sync != "interval" && c.Sync != "always" {
		return fmt.Errorf("sync must be \"interval\" or \"always\", got %q", c.Sync)
	}
	if c.SyncInterval <= 0 {
		return fmt.Errorf("sync_interval must be > 0, got %q", c.SyncInterval)
	}
	if c.MaxSegmentBytes < minSegmentBytes {
		return fmt.Errorf("max_segment_bytes must be >= %d, got %d", minSegmentBytes, c.MaxSegmentBytes)
	}
	if c.QueueSize <= 0 {
		return fmt.Errorf("queue_size must be > 0, got %d", c.QueueSize)
	}
	if c.CheckpointInterval <= 0 {
		return fmt.Errorf("checkpoint_interval must be > 0, got %q", c.CheckpointInterval)
	}
	return nil
}
