package proxy

import (
	"net/http"
	"reflect"
	"testing"
)

func TestStripHopByHop(t *testing.T) {
	tests := []struct {
		name string
		in   http.Header
		want http.Header
	}{
		{
			name: "named in connection",
			in:   http.Header{"Connection": {"X-Secret, keep-alive"}, "X-Secret": {"1"}, "Keep-Alive": {"timeout=5"}, "Accept": {"*/*"}},
			want: http.Header{"Accept": {"*/*"}},
		},
		{
			name: "proxy credentials",
			in:   http.Header{"Proxy-Authorization": {"Basic eDp5"}, "Proxy-Connection": {"keep-alive"}, "Authorization": {"Bearer t"}},
			want: http.Header{"Authorization": {"Bearer t"}},
		},
		{
			name: "several connection headers",
			in:   http.Header{"Connection": {"a", " B ,,"}, "A": {"1"}, "B": {"2"}, "Upgrade": {"websocket"}, "Te": {"trailers"}},
			want: http.Header{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stripHopByHop(tt.in)
			if !reflect.DeepEqual(tt.in, tt.want) {
				t.Errorf("stripHopByHop() = %v; want %v", tt.in, tt.want)
			}
		})
	}
}
