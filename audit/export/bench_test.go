package export

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
)

// benchRecords is the log each benchmark iteration exports: a mix of the
// four decision kinds, as writeLog makes them.
const benchRecords = 20000

// BenchmarkExport measures records per second one replica's exporter
// delivers from its log files: to an OCSF file (synced per batch) and as
// OTLP/HTTP to a receiver decoding with the collector's pdata.
func BenchmarkExport(b *testing.B) {
	dir := b.TempDir()
	w, err := audit.Open(audit.Config{Dir: dir}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	appendN(b, w, benchRecords)
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	head := uint64(benchRecords + 1)
	cfg := audit.ExportConfig{Replica: "bench", Poll: time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	for _, tc := range []struct {
		name string
		sink func(b *testing.B) Sink
	}{
		{"ocsf", func(b *testing.B) Sink {
			s, err := NewOCSFFile(filepath.Join(b.TempDir(), "ocsf.jsonl"), nil)
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
		{"otlp", func(b *testing.B) Sink {
			srv := httptest.NewServer(&otlpCollector{})
			b.Cleanup(srv.Close)
			s, err := NewOTLP(context.Background(), "bench", otlploghttp.WithEndpointURL(srv.URL+"/v1/logs"))
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				b.StopTimer()
				// A fresh copy each time: the cursor lives beside the log.
				fresh := b.TempDir()
				if err := os.CopyFS(fresh, os.DirFS(dir)); err != nil {
					b.Fatal(err)
				}
				s := &untilSeq{Sink: tc.sink(b), head: head, done: make(chan struct{})}
				e, err := New(Options{Config: cfg, Dir: fresh}, s)
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				ran := make(chan error, 1)
				b.StartTimer()
				go func() { ran <- e.Run(ctx) }()
				<-s.done
				b.StopTimer()
				cancel()
				if err := <-ran; err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)*float64(head)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// untilSeq closes done once the batch holding seq head is delivered.
type untilSeq struct {
	Sink
	head uint64
	done chan struct{}
}

func (u *untilSeq) Export(ctx context.Context, batch []Event) error {
	if err := u.Sink.Export(ctx, batch); err != nil {
		return err
	}
	if batch[len(batch)-1].Rec.Seq == u.head {
		close(u.done)
	}
	return nil
}
