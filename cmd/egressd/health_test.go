package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHealth(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			http.Error(w, "audit_unavailable", http.StatusServiceUnavailable)
		case "/healthz":
			w.Write([]byte("ok"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	addr := srv.Listener.Addr().String()

	// A port nothing listens on: bind one, then close it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()

	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{name: "not ready", args: []string{"--admin", addr}, wantCode: 1, wantErr: "503"},
		{name: "live", args: []string{"--admin", addr, "--live"}, wantCode: 0},
		{name: "nothing listening", args: []string{"--admin", closed}, wantCode: 1, wantErr: "connection refused"},
		{name: "bad address", args: []string{"--admin", "localhost"}, wantCode: 2, wantErr: "IP:port"},
		{name: "extra argument", args: []string{"now"}, wantCode: 2, wantErr: "no arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(append([]string{"health"}, tt.args...)...)
			if code != tt.wantCode {
				t.Errorf("egressd health %q exit = %d; want %d (stderr %q)", tt.args, code, tt.wantCode, stderr)
			}
			if !strings.Contains(stderr, tt.wantErr) {
				t.Errorf("egressd health %q stderr = %q; want it to contain %q", tt.args, stderr, tt.wantErr)
			}
		})
	}
}
