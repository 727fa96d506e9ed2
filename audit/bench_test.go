package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// BenchmarkEncode compares the hand-written line encoder the writer uses
// with encoding/json and zap's JSON encoder. All three hash their output,
// as the writer must; the alternatives would still need the hash spliced
// into the line.
func BenchmarkEncode(b *testing.B) {
	r := decisionRecord(1)
	r.TS = time.Now()
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		enc := newEncoder()
		var buf []byte
		for b.Loop() {
			buf, _ = enc.appendLine(buf[:0], r, 1, &zeroHash)
		}
		b.SetBytes(int64(len(buf)))
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		h := sha256.New()
		var sum []byte
		for b.Loop() {
			line, err := json.Marshal(r)
			if err != nil {
				b.Fatal(err)
			}
			h.Reset()
			h.Write(line)
			sum = hex.AppendEncode(sum[:0], h.Sum(nil))
		}
	})
	b.Run("zapcore", func(b *testing.B) {
		b.ReportAllocs()
		enc := zapcore.NewJSONEncoder(zapcore.EncoderConfig{})
		h := sha256.New()
		var sum []byte
		for b.Loop() {
			buf, err := enc.EncodeEntry(zapcore.Entry{}, []zapcore.Field{
				zap.Uint64("seq", 1), zap.String("ts", r.TS.UTC().Format(tsLayout)), zap.String("kind", r.Kind.String()),
				zap.String("request", r.Request), zap.String("identity", r.Identity), zap.String("client", r.Client),
				zap.String("method", r.Method), zap.String("scheme", r.Scheme), zap.String("host", r.Host),
				zap.Uint16("port", r.Port), zap.String("path", r.Path), zap.String("ip", r.IP),
				zap.String("decision", r.Decision.String()), zap.String("rule", r.Rule), zap.String("policy", r.Policy),
				zap.String("prev", "0000000000000000000000000000000000000000000000000000000000000000"),
			})
			if err != nil {
				b.Fatal(err)
			}
			h.Reset()
			h.Write(buf.Bytes())
			sum = hex.AppendEncode(sum[:0], h.Sum(nil))
			buf.Free()
		}
	})
}

// BenchmarkAppendInterval measures sustained records/s with sync: interval
// from one producer, including the final flush.
func BenchmarkAppendInterval(b *testing.B) {
	c := testConfig(b, "interval")
	c.QueueSize = 1 << 16
	w := mustOpen(b, c)
	r := decisionRecord(1)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	full := 0
	for i := 0; i < b.N; i++ {
		for {
			err := w.Append(r)
			if err == nil {
				break
			}
			if !errors.Is(err, ErrQueueFull) {
				b.Fatal(err)
			}
			// Back off rather than spin: the writer needs the core.
			full++
			time.Sleep(50 * time.Microsecond)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(b.N)/(cpuTime(b)-cpu0).Seconds(), "records/cpu-s")
	b.ReportMetric(float64(full)/float64(b.N), "queue-full/op")
}

// BenchmarkAppendAlways measures Append latency with sync: always under 1,
// 8 and 64 concurrent callers; group commit shares each fsync.
func BenchmarkAppendAlways(b *testing.B) {
	for _, callers := range []int{1, 8, 64} {
		b.Run("callers="+itoa(callers), func(b *testing.B) {
			c := testConfig(b, "always")
			w := mustOpen(b, c)
			defer w.Close()
			lat := make([][]time.Duration, callers)
			per := b.N/callers + 1
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for g := range callers {
				lat[g] = make([]time.Duration, 0, per)
				wg.Go(func() {
					r := decisionRecord(g)
					for range per {
						t0 := time.Now()
						if err := w.Append(r); err != nil {
							b.Error(err)
							return
						}
						lat[g] = append(lat[g], time.Since(t0))
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			all := slices.Concat(lat...)
			slices.Sort(all)
			b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(len(all))/b.Elapsed().Seconds(), "records/s")
			st := w.Stats()
			b.ReportMetric(float64(st.Written)/float64(max(st.Syncs, 1)), "records/fsync")
		})
	}
}

// BenchmarkVerify measures verify throughput over a ~32 MB log.
func BenchmarkVerify(b *testing.B) {
	c := testConfig(b, "interval")
	c.QueueSize = 1 << 16
	w := mustOpen(b, c)
	for i := range 100000 {
		for w.Append(decisionRecord(i)) != nil {
			runtime.Gosched()
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	segs, _ := ListSegments(c.Dir)
	var size int64
	for _, s := range segs {
		fi, _ := os.Stat(s)
		size += fi.Size()
	}
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, n := cpuTime(b), 0
	for b.Loop() {
		if err := NewVerifier().Paths([]string{c.Dir}); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(size)*float64(n)/1e6/(cpuTime(b)-cpu0).Seconds(), "MB/cpu-s")
}

// cpuTime is the process's user+system CPU time. Benchmarks report work
// per CPU second too: on a shared machine wall time mostly measures the
// neighbours.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func itoa(n int) string { return string(rune('0'+n/10%10)) + string(rune('0'+n%10)) }
