package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsHandlerServesOnlyMetrics: the metrics-only listener's handler
// answers GET /metrics and refuses reload, profiles and health, which stay
// on the loopback admin listener.
func TestMetricsHandlerServesOnlyMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "egressd_test_total", Help: "test"}))
	srv := httptest.NewServer(MetricsHandler(reg))
	defer srv.Close()
	tests := []struct {
		name, method, path string
		want               int
	}{
		{"metrics", http.MethodGet, "/metrics", http.StatusOK},
		{"reload", http.MethodPost, "/-/reload", http.StatusNotFound},
		{"pprof", http.MethodGet, "/debug/pprof/", http.StatusNotFound},
		{"profile", http.MethodGet, "/debug/pprof/profile", http.StatusNotFound},
		{"readyz", http.MethodGet, "/readyz", http.StatusNotFound},
		{"healthz", http.MethodGet, "/healthz", http.StatusNotFound},
		{"metrics post", http.MethodPost, "/metrics", http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.want {
				t.Errorf("%s %s = %d; want %d", tt.method, tt.path, resp.StatusCode, tt.want)
			}
			if tt.want == http.StatusOK && !strings.Contains(string(body), "egressd_test_total 0") {
				t.Errorf("%s %s body = %q; want the registry's series", tt.method, tt.path, string(body))
			}
		})
	}
}
