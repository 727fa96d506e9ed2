package audit

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/egressd/egressd/internal/defaults"
)

// Config is the `audit:` section. A zero value means the default
// DefaultConfig shows; Provision fills them in.
type Config struct {
	// Dir holds the segment files. If empty, ./egressd-audit is used.
	Dir string `yaml:"dir"`
	// Sync is "interval" (fsync at least every SyncInterval) or "always"
	// (fsync before Append returns). If empty, "interval" is used.
	Sync string `yaml:"sync"`
	// SyncInterval bounds what a crash can lose with Sync: interval: the
	// writer fsyncs every half interval, and an Append waits for the
	// fsync while the oldest acknowledged record not yet fsynced is older
	// than the interval. If zero, 10ms is used.
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

	// MaxFieldBytes caps every string a record carries (paths, queries,
	// hosts, SQL, errors, …): a longer value is cut at a UTF-8 boundary and
	// the record's "truncated" field names it, so a client cannot make one
	// request cost more than a few KiB of log. If zero, 1024 is used.
	MaxFieldBytes int `yaml:"max_field_bytes"`
	// RedactQueryParams are the query parameter names whose values the log
	// never holds: a parameter whose name (percent-decoded, lower-cased)
	// contains one of them is recorded as name=[redacted:N], N being the
	// value's length. If nil, DefaultRedactQueryParams is used; an empty
	// list records every value.
	RedactQueryParams []string `yaml:"redact_query_params"`
	// IdentityRate is each identity's audit budget in records per second
	// (before authentication, each client address's). Past it the
	// identity's allows are refused (audit_budget_exceeded) and its
	// refusals are counted into aggregate records, so its flood cannot
	// fill the queue or the disk for the others. If zero, 10000 is used:
	// above twice proxy.per_identity_rate, since an allowed request writes
	// a decision and a completion, with room for the identity's DNS and
	// SQL records. Without identities every client is "anonymous" and
	// shares one budget.
	IdentityRate float64 `yaml:"identity_rate"`
	// IdentityBurst is the budget's bucket size. If zero, 20000 is used.
	IdentityBurst int `yaml:"identity_burst"`
	// RefusalSamples is how many refusals of one kind, identity (or
	// client) and reason are written in full each second; the rest of that
	// second are folded into one record with a count. If zero, 10 is used.
	RefusalSamples int `yaml:"refusal_samples"`

	// Export ships the log to an OpenTelemetry collector and as OCSF
	// events; see ExportConfig. The zero value exports nothing.
	Export ExportConfig `yaml:"export"`

	// AcceptBreak lets Open continue past a broken chain in the newest
	// segment, recording the acceptance. It is set from `serve
	// --audit-accept-break` for one start, never from the file.
	AcceptBreak bool `yaml:"-"`
	// Started, when set, makes Open write a KindStarted record with these
	// details and fsync it before returning, so every start is in the
	// chain even if the process dies a moment later. Set by `serve`,
	// never from the file.
	Started map[string]string `yaml:"-"`
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
		MaxFieldBytes:      1024,
		RedactQueryParams:  DefaultRedactQueryParams(),
		IdentityRate:       10000,
		IdentityBurst:      20000,
		RefusalSamples:     10,
		Export:             DefaultExportConfig(),
	}
}

// DefaultRedactQueryParams are the name fragments whose query values are
// redacted unless audit.redact_query_params says otherwise. Matching is by
// substring, so "token" covers access_token and X-Goog-Token; a harmless
// parameter caught by a fragment loses only its value.
func DefaultRedactQueryParams() []string {
	return []string{"token", "key", "secret", "pass", "pwd", "auth", "sig", "credential", "session", "cookie", "jwt", "code"}
}

// minFieldBytes keeps capped fields long enough to recognise a target.
const minFieldBytes = 64

// minSegmentBytes keeps rotation from degenerating into a file per record.
const minSegmentBytes = 4096

// Validate checks a provisioned Config without I/O. Errors name the key
// relative to the section.
func (c *Config) Validate() error {
	if c.Dir == "" {
		return fmt.Errorf("dir must not be empty")
	}
	if c.Sync != "interval" && c.Sync != "always" {
		return fmt.Errorf("sync must be \"interval\" or \"always\", got %q", c.Sync)
	}
	if err := cmp.Or(
		defaults.Positive("sync_interval", c.SyncInterval),
		defaults.AtLeast("max_segment_bytes", c.MaxSegmentBytes, minSegmentBytes),
		defaults.Positive("queue_size", c.QueueSize),
		defaults.Positive("checkpoint_interval", c.CheckpointInterval),
		defaults.Between("max_field_bytes", c.MaxFieldBytes, minFieldBytes, maxRecordInput/32),
	); err != nil {
		return err
	}
	for i, p := range c.RedactQueryParams {
		if p == "" || p != strings.ToLower(p) {
			return fmt.Errorf("redact_query_params[%d] must be a non-empty lower-case name fragment, got %q", i, p)
		}
	}
	return cmp.Or(
		defaults.NonNegative("identity_rate", c.IdentityRate),
		defaults.NonNegative("identity_burst", c.IdentityBurst),
		defaults.NonNegative("refusal_samples", c.RefusalSamples),
		c.Export.Validate(),
	)
}

// Provision replaces every zero value with its default from DefaultConfig,
// so a zero key in the file and a Config built in code both get the
// documented values. It runs before Validate. An empty, non-nil
// RedactQueryParams stays empty: it means "redact nothing".
func (c *Config) Provision() {
	defaults.Fill(c, DefaultConfig())
	c.Export.Provision()
}
