package proxy

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// BenchmarkUpstreamPath compares the two ways a bodyless GET goes upstream
// — the hand-written pool and the Transport the proxy uses for everything
// else (newTransport: tuned, the same dialer) — against the same upstream,
// serially and with 8 concurrent requests. Run with -count N: the variants
// alternate within every round. cpu-ns/op is the process's user+system CPU
// per request (the upstream runs in-process and costs the same to both).
func BenchmarkUpstreamPath(b *testing.B) {
	body := "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 1024\r\n\r\n" + string(make([]byte, 1024))
	addr, _ := rawUpstream(b, body, 0)
	cfg := benchConfig()
	d := &net.Dialer{}
	paths := []struct {
		name string
		rt   func() func(*http.Request) (*http.Response, error)
	}{
		{"pool", func() func(*http.Request) (*http.Response, error) {
			p := newUpstreamPool(cfg, d)
			b.Cleanup(p.closeIdle)
			return func(r *http.Request) (*http.Response, error) {
				resp, _, err := p.roundTrip(r, "", addr)
				return resp, err
			}
		}},
		{"transport", func() func(*http.Request) (*http.Response, error) {
			tr := newTransport(cfg, d)
			b.Cleanup(tr.CloseIdleConnections)
			return tr.RoundTrip
		}},
	}
	for _, par := range []int{1, 8} {
		for _, p := range paths {
			b.Run(p.name+"/conc="+strconv.Itoa(par), func(b *testing.B) {
				rt := p.rt()
				one := func() {
					req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/bytes/1024", nil)
					resp, err := rt(req)
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				one() // a warm connection for the serial case
				b.ReportAllocs()
				cpu0, t0 := cpuTime(), time.Now()
				b.ResetTimer()
				if par == 1 {
					for b.Loop() {
						one()
					}
				} else {
					b.SetParallelism(par)
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							one()
						}
					})
				}
				b.StopTimer()
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
				b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "req/s")
			})
		}
	}
}

// cpuTime is the process's user plus system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err) // only EFAULT/EINVAL, impossible with these arguments
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
