package main

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunPacedCountsEveryRequest: the paced generator sends each of its
// connections' requests in full, reads every answer and counts each one
// once in the histogram; a request bound ends the run before its time.
func TestRunPacedCountsEveryRequest(t *testing.T) {
	var mu sync.Mutex
	got := map[string]int{}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Method+" "+r.URL.RequestURI()+" "+r.Host]++
		mu.Unlock()
		w.Write(make([]byte, 1024))
	}))
	defer origin.Close()
	const conns, each = 4, 5
	res, err := runPaced(pacedSpec{url: origin.URL + "/bytes/1024", conns: conns, rate: 1000, duration: time.Minute, maxReqs: each})
	if err != nil {
		t.Fatal(err)
	}
	if res.requests != conns*each || res.lat.count() != conns*each {
		t.Errorf("runPaced = %d requests, %d latencies; want %d of each", res.requests, res.lat.count(), conns*each)
	}
	host := strings.TrimPrefix(origin.URL, "http://")
	if want := "GET /bytes/1024 " + host; got[want] != conns*each || len(got) != 1 {
		t.Errorf("origin saw %v; want %d × %q", got, conns*each, want)
	}
}

// TestPacedRequestThroughProxy: through a proxy the generator dials the
// proxy and sends the request in absolute form, as wrk's script does.
func TestPacedRequestThroughProxy(t *testing.T) {
	tests := []struct {
		name, proxy, wantAddr, wantLine string
	}{
		{"direct", "", "127.0.0.1:8080", "GET /bytes/1024 HTTP/1.1"},
		{"proxied", "127.0.0.1:3128", "127.0.0.1:3128", "GET http://127.0.0.1:8080/bytes/1024 HTTP/1.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, req, err := pacedRequest(pacedSpec{proxy: tt.proxy, url: "http://127.0.0.1:8080/bytes/1024"})
			if err != nil {
				t.Fatal(err)
			}
			r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(string(req))))
			if err != nil {
				t.Fatalf("pacedRequest = %q: %v", req, err)
			}
			line, _, _ := strings.Cut(string(req), "\r\n")
			if addr != tt.wantAddr || line != tt.wantLine || r.Host != "127.0.0.1:8080" {
				t.Errorf("pacedRequest = %s, %q, Host %q; want %s, %q, Host 127.0.0.1:8080", addr, line, r.Host, tt.wantAddr, tt.wantLine)
			}
		})
	}
}

// TestRunPacedRefusesNoRate: a rate of zero (no Squid figure to take 80%
// of) is an error, not a run that offers nothing.
func TestRunPacedRefusesNoRate(t *testing.T) {
	if _, err := runPaced(pacedSpec{url: "http://127.0.0.1:1/", conns: 1, duration: time.Second}); err == nil {
		t.Error("runPaced with no rate = nil error; want one")
	}
}

// TestEqualRate: the equal-load rate is equalShare of Squid's median
// keep-alive GET rate, and none without a Squid figure.
func TestEqualRate(t *testing.T) {
	get := &Workload{ID: "get"}
	if r := equalRate(get); r != 0 {
		t.Errorf("equalRate without squid = %g; want 0", r)
	}
	sq := get.target("squid", kindPeer)
	sq.Rounds = []Round{{Rate: 5000}, {Rate: 7000}, {Rate: 6000}}
	if r, want := equalRate(get), equalShare*6000; r != want {
		t.Errorf("equalRate = %g; want %g", r, want)
	}
	sq.fail("error: wrk")
	if r := equalRate(get); r != 0 {
		t.Errorf("equalRate of a failed squid = %g; want 0", r)
	}
}

// TestRunPacedEndsWithItsDuration: a run whose time is up while requests
// are in flight ends, and counts only the requests the origin answered
// (an exchange cut by the deadline once counted as a request, and the
// loop went on counting failed writes up to maxReqs).
func TestRunPacedEndsWithItsDuration(t *testing.T) {
	var served atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.Write(make([]byte, 1024))
	}))
	defer origin.Close()
	const conns, maxReqs = 2, 1_000_000
	res, err := runPaced(pacedSpec{url: origin.URL + "/bytes/1024", conns: conns, rate: 20_000, duration: 300 * time.Millisecond, maxReqs: maxReqs})
	if err != nil {
		t.Fatal(err)
	}
	if res.requests == 0 || res.requests > served.Load() || res.lat.count() != res.requests {
		t.Errorf("runPaced = %d requests, %d latencies; the origin answered %d", res.requests, res.lat.count(), served.Load())
	}
}
