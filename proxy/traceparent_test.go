package proxy

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/audittest"
)

// TestTraceparentRecorded: a valid W3C traceparent the sandbox sends is on
// the request's records as sent; anything else is left out.
func TestTraceparentRecorded(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	a := &audittest.Recorder{}
	s := startAudited(t, DefaultConfig(), nil, a, zap.NewNop())
	const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name    string
		headers []string
		want    string
	}{
		{"valid", []string{valid}, valid},
		{"none", nil, ""},
		{"two headers", []string{valid, valid}, ""},
		{"zero trace id", []string{"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, ""},
		{"upper case", []string{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01"}, ""},
		{"free text", []string{"hello from the sandbox"}, ""},
		{"version ff", []string{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", s.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			path := fmt.Sprintf("/tp/%d", i)
			fmt.Fprintf(c, "GET %s%s HTTP/1.1\r\nHost: x\r\n", up.URL, path)
			for _, h := range tt.headers {
				fmt.Fprintf(c, "Traceparent: %s\r\n", h)
			}
			fmt.Fprint(c, "Connection: close\r\n\r\n")
			for _, kind := range []audit.Kind{audit.KindHTTP, audit.KindHTTPDone} {
				r := a.WaitRecord(t, func(r audit.Record) bool { return r.Kind == kind && r.Path == path })
				if r.Traceparent != tt.want {
					t.Errorf("%s record traceparent = %q; want %q", kind, r.Traceparent, tt.want)
				}
			}
		})
	}
}
