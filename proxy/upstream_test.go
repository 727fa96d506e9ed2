package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// rawUpstream answers each request on a connection with resp, then closes
// the connection after closeAfter requests (0: never). It counts accepted
// connections.
func rawUpstream(t *testing.T, resp string, closeAfter int) (string, *atomic.Int32) {
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
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					out := resp
					if req.Method == http.MethodHead {
						out = out[:strings.Index(out, "\r\n\r\n")+4]
					}
					io.WriteString(c, out)
					if n == closeAfter {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), &conns
}

func TestUpstreamPool(t *testing.T) {
	const ok = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
	tests := []struct {
		name       string
		method     string
		closeAfter int
		readAll    bool
		wantConns  int32
	}{
		{name: "keep-alive reuses one connection", method: "GET", readAll: true, wantConns: 1},
		{name: "upstream closed idle connection is retried on a new one", method: "GET", closeAfter: 1, readAll: true, wantConns: 3},
		{name: "early close does not reuse", method: "GET", readAll: false, wantConns: 3},
		{name: "HEAD has no body and reuses", method: "HEAD", readAll: true, wantConns: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, conns := rawUpstream(t, ok, tt.closeAfter)
			p := newUpstreamPool(DefaultConfig(), &net.Dialer{})
			defer p.closeIdle()
			for i := range 3 {
				req, _ := http.NewRequest(tt.method, "http://"+addr+"/x", nil)
				if !fastPathOK(req) {
					t.Fatalf("fastPathOK(%s) = false; want true", tt.method)
				}
				resp, ip, err := p.roundTrip(req, addr)
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
		{name: "POST goes through the Transport", method: "POST", want: false},
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
	if _, _, err := p.roundTrip(req, ln.Addr().String()); !errors.Is(err, context.Canceled) {
		t.Fatalf("roundTrip after cancel: err = %v; want context.Canceled", err)
	}
}
