package main

import (
	"context"
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/export"
)

// newExporter builds the audit.export sinks, or returns nil when none is
// configured. The exporter reads the log's files behind the writer; it
// holds no reference to the writer but its head seq, for the lag metric.
func newExporter(ctx context.Context, cfg audit.Config, w *audit.Writer, reg prometheus.Registerer, log *zap.Logger) (*export.Exporter, error) {
	ec := cfg.Export
	if !ec.Enabled() {
		return nil, nil
	}
	var sinks []export.Sink
	if ec.OCSF != "" {
		s, err := export.NewOCSFFile(ec.OCSF, os.Stdout)
		if err != nil {
			return nil, err
		}
		sinks = append(sinks, s)
	}
	if ec.OTLP {
		s, err := export.NewOTLP(ctx, replicaName(ec.Replica))
		if err != nil {
			return nil, fmt.Errorf("audit.export.otlp: %w", err)
		}
		sinks = append(sinks, s)
	}
	head := func() uint64 { seq, _ := w.Head(); return seq }
	e, err := export.New(export.Options{Config: ec, Dir: cfg.Dir, Head: head, Registerer: reg, Log: log}, sinks...)
	if err != nil {
		for _, s := range sinks {
			_ = s.Close(ctx) //nolint:errcheck // start-up failed; its error is the one returned
		}
		return nil, err
	}
	return e, nil
}

// replicaName is audit.export.replica, or the host name.
func replicaName(name string) string {
	if name != "" {
		return name
	}
	h, _ := os.Hostname() //nolint:errcheck // export.New reports an unknown host name
	return h
}
