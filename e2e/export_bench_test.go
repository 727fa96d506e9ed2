package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/export"
)

// BenchmarkCollectorThroughput measures records per second through the
// real collector (OTLP/HTTP receiver to the file exporter) from one
// replica's exporter: the figure DESIGN's fleet note uses.
func BenchmarkCollectorThroughput(b *testing.B) {
	const n = 20000
	dir := b.TempDir()
	w, err := audit.Open(audit.Config{Dir: dir}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		r := &audit.Record{Kind: audit.KindHTTP, Identity: "sbx", Client: "10.0.0.7:40000", Method: "GET", Scheme: "https",
			Host: "api.github.com", Port: 443, Path: "/repos/" + itoa(i), Decision: audit.DecisionAllow, Reason: "allowed", Rule: "github"}
		if err := w.Append(r); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	head, _ := w.Head()
	col := StartCollector(b, "", filepath.Join(b.TempDir(), "otlp.json"))
	cfg := audit.ExportConfig{Replica: "bench", Poll: time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		fresh := b.TempDir()
		if err := os.CopyFS(fresh, os.DirFS(dir)); err != nil {
			b.Fatal(err)
		}
		sink, err := export.NewOTLP(context.Background(), "bench", otlploghttp.WithEndpointURL("http://"+col.Addr+"/v1/logs"))
		if err != nil {
			b.Fatal(err)
		}
		e, err := export.New(export.Options{Config: cfg, Dir: fresh}, sink)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		b.StartTimer()
		go func() { ran <- e.Run(ctx) }()
		for e.Exported()["otlp"] < head {
			// Polled: the exporter's progress is only visible this way
			// from outside, and a millisecond is far below a batch's time.
			time.Sleep(time.Millisecond)
		}
		b.StopTimer()
		cancel()
		if err := <-ran; err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*float64(head)/b.Elapsed().Seconds(), "records/s")
}
