package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// serveRequests is a loopback upstream written by hand, for what net/http
// would not do (ignore a body, send a response too many, close mid-stream):
// on each connection it reads requests one after another and hands each to
// answer, with its number on the connection (from 1); answer writes the
// response on c and returns false to close the connection. It returns the
// address and the count of accepted connections.
func serveRequests(t testing.TB, answer func(c net.Conn, n int, req *http.Request) bool) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for n := 1; ; n++ {
					req, err := http.ReadRequest(br)
					if err != nil || !answer(c, n, req) {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), &conns
}

// rawUpstream answers each request on a connection with resp, then closes
// the connection after closeAfter requests (0: never). It counts accepted
// connections.
func rawUpstream(t testing.TB, resp string, closeAfter int) (string, *atomic.Int32) {
	t.Helper()
	return serveRequests(t, func(c net.Conn, n int, req *http.Request) bool {
		io.Copy(io.Discard, req.Body)
		out := resp
		if req.Method == http.MethodHead {
			out = out[:strings.Index(out, "\r\n\r\n")+4]
		}
		io.WriteString(c, out)
		return n != closeAfter
	})
}

func TestUpstreamPool(t *testing.T) {
	const ok = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
	tests := []struct {
		name       string
		method     string
		resp       string // if empty, ok
		closeAfter int
		readAll    bool
		wantConns  int32
	}{
		{name: "keep-alive reuses one connection", method: "GET", readAll: true, wantConns: 1},
		{name: "upstream closed idle connection is retried on a new one", method: "GET", closeAfter: 1, readAll: true, wantConns: 3},
		{name: "early close does not reuse", method: "GET", readAll: false, wantConns: 3},
		{name: "HEAD declaring no length reuses", method: "HEAD", resp: "HTTP/1.1 200 OK\r\n\r\n", readAll: true, wantConns: 1},
		{name: "HEAD declaring a length does not reuse", method: "HEAD", readAll: true, wantConns: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := tt.resp
			if resp == "" {
				resp = ok
			}
			addr, conns := rawUpstream(t, resp, tt.closeAfter)
			p := newUpstreamPool(DefaultConfig(), &net.Dialer{})
			defer p.closeIdle()
			for i := range 3 {
				req, _ := http.NewRequest(tt.method, "http://"+addr+"/x", nil)
				if !fastPathOK(req) {
					t.Fatalf("fastPathOK(%s) = false; want true", tt.method)
				}
				resp, ip, err := p.roundTrip(req, "", addr)
				if err != nil {
					t.Fatalf("request %d: roundTrip: %v", i, err)
				}
				if ip != "127.0.0.1" || resp.StatusCode != 200 {
					t.Fatalf("request %d: ip, status = %q, %d; want 127.0.0.1, 200", i, ip, resp.StatusCode)
				}
				if tt.readAll {
					b, _ := io.ReadAll(resp.Body)
					if want := map[string]string{"GET": "hello", "HEAD": ""}[tt.method]; string(b) != want {
						t.Fatalf("request %d: body = %q; want %q", i, b, want)
					}
				}
				resp.Body.Close()
			}
			if got := conns.Load(); got != tt.wantConns {
				t.Errorf("upstream connections = %d; want %d", got, tt.wantConns)
			}
		})
	}
}

func TestFastPathOK(t *testing.T) {
	tests := []struct {
		name   string
		method string
		body   string
		expect string
		want   bool
	}{
		{name: "bodyless GET", method: "GET", want: true},
		{name: "bodyless POST", method: "POST", want: true},
		{name: "POST with a body goes through the Transport", method: "POST", body: "x", want: false},
		{name: "GET with a body", method: "GET", body: "x", want: false},
		{name: "Expect header", method: "GET", expect: "100-continue", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
			}
			req, _ := http.NewRequest(tt.method, "http://example.test/", body)
			if tt.expect != "" {
				req.Header.Set("Expect", tt.expect)
			}
			if got := fastPathOK(req); got != tt.want {
				t.Errorf("fastPathOK(%s) = %v; want %v", tt.name, got, tt.want)
			}
		})
	}
}

// A request cancelled while waiting for the response head (client gone,
// body idle timeout) ends at once with the context's error.
func TestUpstreamPoolCancel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		http.ReadRequest(bufio.NewReader(c))
		close(got)
		io.Copy(io.Discard, c) // never answers
	}()
	p := newUpstreamPool(DefaultConfig(), &net.Dialer{})
	defer p.closeIdle()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-got; cancel() }()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+ln.Addr().String()+"/", nil)
	if _, _, err := p.roundTrip(req, "", ln.Addr().String()); !errors.Is(err, context.Canceled) {
		t.Fatalf("roundTrip after cancel: err = %v; want context.Canceled", err)
	}
}

// plantedResponse is what a misbehaving upstream slips in after a response:
// a whole response that the next request on the connection would read as
// its own.
const plantedResponse = "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nplanted"

// scriptedUpstream answers the first request it gets with first, then (once
// plant is closed, if it is not nil) writes plantedResponse on the same
// connection; every other request gets a 200 whose body is its path.
func scriptedUpstream(t *testing.T, first string, plant <-chan struct{}) string {
	t.Helper()
	var total atomic.Int32
	addr, _ := serveRequests(t, func(c net.Conn, _ int, req *http.Request) bool {
		if total.Add(1) == 1 {
			io.WriteString(c, first)
			if plant != nil {
				<-plant
				io.WriteString(c, plantedResponse)
			}
			return true
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(req.URL.Path))+"\r\n\r\n"+req.URL.Path)
		return true
	})
	return addr
}

// A request (A) whose upstream sends more than its response must not leave
// those bytes to be read as the response of the next request (B) on the
// connection, even one of the same identity (the pool is per identity,
// and both are the same one here). B always gets its own response.
func TestUpstreamPoolNeverHandsOverForeignBytes(t *testing.T) {
	tests := []struct {
		name    string
		method  string
		first   string
		delayed bool // the planted response arrives after A's response was read
	}{
		{name: "extra response after a framed one", method: "GET", first: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n/a" + plantedResponse},
		{name: "short Content-Length", method: "GET", first: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx" + plantedResponse},
		{name: "HEAD with a body", method: "HEAD", first: "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(plantedResponse)) + "\r\n\r\n" + plantedResponse},
		{name: "204 with a body", method: "GET", first: "HTTP/1.1 204 No Content\r\nContent-Length: " + strconv.Itoa(len(plantedResponse)) + "\r\n\r\n" + plantedResponse},
		{name: "304 with a body", method: "GET", first: "HTTP/1.1 304 Not Modified\r\nContent-Length: " + strconv.Itoa(len(plantedResponse)) + "\r\n\r\n" + plantedResponse},
		{name: "extra response while idle", method: "GET", first: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n/a", delayed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var plant chan struct{}
			if tt.delayed {
				plant = make(chan struct{})
			}
			addr := scriptedUpstream(t, tt.first, plant)
			p := newUpstreamPool(DefaultConfig(), &net.Dialer{})
			defer p.closeIdle()

			reqA, _ := http.NewRequest(tt.method, "http://"+addr+"/a", nil)
			resp, _, err := p.roundTrip(reqA, "", addr)
			if err != nil {
				t.Fatalf("A: roundTrip: %v", err)
			}
			io.ReadAll(resp.Body)
			resp.Body.Close()
			if tt.delayed {
				close(plant)
				waitPlanted(t, p, addr)
			}

			reqB, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/b", nil)
			resp, _, err = p.roundTrip(reqB, "", addr)
			if err != nil {
				t.Fatalf("B: roundTrip: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "/b" {
				t.Errorf("B received body %q; want its own response %q", b, "/b")
			}
		})
	}
}

// waitPlanted waits until the pooled connection to addr has bytes to read:
// the planted response arrived while it sat idle.
func waitPlanted(t *testing.T, p *upstreamPool, addr string) {
	t.Helper()
	p.mu.Lock()
	list := p.idle[poolKey("", addr)]
	p.mu.Unlock()
	if len(list) != 1 {
		t.Fatalf("idle connections to %s = %d; want 1", addr, len(list))
	}
	rc, err := list[0].c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	list[0].c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return !errors.Is(err, syscall.EAGAIN)
	})
	if err != nil {
		t.Fatal(err)
	}
	list[0].c.SetReadDeadline(time.Time{})
}

// A response head is read up to 1 MiB, as on the Transport path, not held
// in memory whole however long it is.
func TestUpstreamPoolCapsResponseHead(t *testing.T) {
	// Built before counting; written as bytes, not converted from a string.
	huge := []byte("HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", 16<<20) + "\r\nContent-Length: 0\r\n\r\n")
	addr := "127.0.0.1:" + oneConnUpstream(t, func(c net.Conn) {
		http.ReadRequest(bufio.NewReader(c))
		c.Write(huge)
	})
	p := newUpstreamPool(DefaultConfig(), &net.Dialer{})
	defer p.closeIdle()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	resp, _, err := p.roundTrip(req, "", addr)
	runtime.ReadMemStats(&after)
	if err == nil {
		resp.Body.Close()
		t.Errorf("roundTrip of a 16 MiB head = %d, nil; want an error", resp.StatusCode)
	} else if !strings.Contains(err.Error(), "1 MiB") {
		t.Errorf("roundTrip of a 16 MiB head: %v; want the 1 MiB cap named", err)
	}
	// textproto grows the line it reads by append, which allocates about
	// seven times the 1 MiB read; the whole 16 MiB head would cost ~80 MiB.
	if alloc, limit := after.TotalAlloc-before.TotalAlloc, uint64(12<<20); alloc > limit {
		t.Errorf("reading a 16 MiB head allocated %d bytes; want at most %d", alloc, limit)
	}
}

// A request that may not be sent twice never takes a pooled connection
// (the upstream may have closed it meanwhile, and the pool would then send
// it again), but leaves its own to the pool; one with an idempotency key
// may, as net/http decides.
func TestUpstreamPoolNonReplayableDialsFresh(t *testing.T) {
	addr, conns := rawUpstream(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 0)
	p := newUpstreamPool(DefaultConfig(), &net.Dialer{})
	defer p.closeIdle()
	steps := []struct {
		method, key string
		wantConns   int32
	}{
		{"GET", "", 1},
		{"POST", "", 2},
		{"DELETE", "", 3},
		{"GET", "", 3},
		{"POST", "k1", 3},
	}
	for _, s := range steps {
		req, _ := http.NewRequest(s.method, "http://"+addr+"/", nil)
		if s.key != "" {
			req.Header.Set("Idempotency-Key", s.key)
		}
		resp, _, err := p.roundTrip(req, "sbx", addr)
		if err != nil {
			t.Fatalf("%s: %v", s.method, err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := conns.Load(); got != s.wantConns {
			t.Errorf("after %s (key %q): upstream connections = %d; want %d", s.method, s.key, got, s.wantConns)
		}
	}
}
