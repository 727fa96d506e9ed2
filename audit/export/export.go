// Package export ships the audit log to the systems operators already run:
// an OpenTelemetry collector as OTLP logs and a file (or standard output)
// as OCSF events. It reads the segment files behind the writer, never on
// the decision path, keeps a persisted cursor per sink (at-least-once: a
// restart, even after kill -9, resumes with no gap and may repeat the batch
// in flight; seq tells repeats apart), and reports its lag. Every event
// carries the record's chain position (seq, prev, hash), its replica and
// chain, and the record line verbatim, which Verify checks.
package export

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
)

// Event is one record on its way out.
type Event struct {
	// Line is the record as written, without its newline: the bytes its
	// hash covers.
	Line []byte
	// Rec is Line parsed.
	Rec audit.Record
	// Replica and Chain say whose log it is: the replica's name and the
	// hash of its log's first record.
	Replica, Chain string
}

// A Sink delivers batches of events. Export returns nil only once the
// batch is delivered (acknowledged by the collector, written and synced to
// the file); the exporter then moves the sink's cursor past it.
type Sink interface {
	// Name identifies the sink in metrics, logs and its cursor file:
	// "otlp" or "ocsf".
	Name() string
	Export(ctx context.Context, batch []Event) error
	Close(ctx context.Context) error
}

// Options configure an Exporter.
type Options struct {
	Config audit.ExportConfig
	// Dir is the audit log's directory; the cursors are kept there too.
	Dir string
	// Head returns the writer's last seq, for the lag metric. If nil, the
	// lag is not exported.
	Head func() uint64
	// Registerer receives the export metrics. If nil, none are registered.
	Registerer prometheus.Registerer
	// Log is where failed exports are reported. If nil, nothing is logged.
	Log *zap.Logger
}

// Exporter runs one reader per sink, each at its own cursor, so a
// collector outage holds back only the OTLP stream.
type Exporter struct {
	runners []*runner
	sinks   []Sink
}

// New prepares an Exporter for sinks; Run starts it. The replica name
// defaults to the host name.
func New(opts Options, sinks ...Sink) (*Exporter, error) {
	cfg := opts.Config
	cfg.Provision()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("audit.%w", err)
	}
	if cfg.Replica == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("audit.export.replica is empty and the host name is unknown: %w", err)
		}
		cfg.Replica = h
	}
	log := opts.Log
	if log == nil {
		log = zap.NewNop()
	}
	e := &Exporter{sinks: sinks}
	for _, s := range sinks {
		r, err := newRunner(cfg, opts.Dir, s, log.Named("export").With(zap.String("sink", s.Name())))
		if err != nil {
			return nil, err
		}
		e.runners = append(e.runners, r)
	}
	if opts.Registerer != nil {
		registerMetrics(opts.Registerer, e.runners, opts.Head)
	}
	return e, nil
}

// Run exports until ctx ends, then closes the sinks. A sink that cannot
// deliver is retried with backoff; Run returns only a sink's close error.
func (e *Exporter) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, r := range e.runners {
		wg.Go(func() { r.run(ctx) })
	}
	wg.Wait()
	var errs []error
	for _, s := range e.sinks {
		// ctx has ended; give each sink its own short close.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		if err := s.Close(cctx); err != nil {
			errs = append(errs, fmt.Errorf("close export %s: %w", s.Name(), err))
		}
		cancel()
	}
	return errors.Join(errs...)
}

// Exported is the last seq each sink delivered, by sink name.
func (e *Exporter) Exported() map[string]uint64 {
	m := make(map[string]uint64, len(e.runners))
	for _, r := range e.runners {
		m[r.sink.Name()] = r.seq.Load()
	}
	return m
}
