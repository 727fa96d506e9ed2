package audit

import (
	"cmp"
	"fmt"
	"time"

	"github.com/egressd/egressd/internal/defaults"
)

// ExportConfig is the `audit.export:` section: shipping the log, behind
// the writer, to an OpenTelemetry collector and as OCSF events (package
// audit/export does the work). The zero value exports nothing.
type ExportConfig struct {
	// OTLP, when true, ships every record as an OTLP log record over
	// HTTP/protobuf, configured by the standard OTEL_EXPORTER_OTLP_*
	// environment variables (endpoint, headers, TLS, timeout).
	OTLP bool `yaml:"otlp"`
	// OCSF is a file that OCSF events are appended to as JSON lines, or
	// "-" for standard output. If empty, no OCSF events are written.
	OCSF string `yaml:"ocsf"`
	// Replica names this replica in every exported event, so the streams
	// of many replicas can be verified together. If empty, the host name
	// is used.
	Replica string `yaml:"replica"`
	// BatchSize is how many records one export carries at most. If zero,
	// 512 is used.
	BatchSize int `yaml:"batch_size"`
	// Poll is how often the exporter looks for new records when it has
	// caught up with the writer. If zero, 200ms is used.
	Poll time.Duration `yaml:"poll"`
	// MaxBackoff bounds the wait between retries of a failed export
	// (doubling from Poll). If zero, 5s is used.
	MaxBackoff time.Duration `yaml:"max_backoff"`
}

// Enabled reports whether any export is configured.
func (c *ExportConfig) Enabled() bool { return c.OTLP || c.OCSF != "" }

// DefaultExportConfig returns the documented defaults.
func DefaultExportConfig() ExportConfig {
	return ExportConfig{BatchSize: 512, Poll: 200 * time.Millisecond, MaxBackoff: 5 * time.Second}
}

// Provision replaces every zero value with its default.
func (c *ExportConfig) Provision() {
	defaults.Fill(c, DefaultExportConfig())
}

// maxExportBatch keeps one export request well under collectors' default
// 4 MiB message limit at the 1 KiB-per-field cap.
const maxExportBatch = 4096

// Validate checks a provisioned ExportConfig without I/O; errors name the
// key relative to audit.
func (c *ExportConfig) Validate() error {
	if err := cmp.Or(
		defaults.Between("export.batch_size", c.BatchSize, 1, maxExportBatch),
		defaults.Positive("export.poll", c.Poll),
		defaults.Positive("export.max_backoff", c.MaxBackoff),
	); err != nil {
		return err
	}
	if c.MaxBackoff < c.Poll {
		return fmt.Errorf("export.max_backoff must be >= export.poll (%s), got %q", c.Poll, c.MaxBackoff)
	}
	return nil
}
