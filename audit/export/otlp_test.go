package export

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
)

// otlpCollector is an OTLP/HTTP logs endpoint built from the collector's
// own pdata: it decodes each request and appends it as one line of OTLP
// JSON, as the collector's file exporter does.
type otlpCollector struct {
	mu   sync.Mutex
	json bytes.Buffer
	down bool
}

func (c *otlpCollector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	body, err := io.ReadAll(r.Body)
	req := plogotlp.NewExportRequest()
	if err == nil {
		err = req.UnmarshalProto(body)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	line, err := (&plog.JSONMarshaler{}).MarshalLogs(req.Logs())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	c.json.Write(line)
	c.json.WriteByte('\n')
	resp, _ := plogotlp.NewExportResponse().MarshalProto()
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(resp) //nolint:errcheck // test server
}

func (c *otlpCollector) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.json.Bytes())
}

// exportOTLP sends the events of a fresh log through the OTLP sink and
// returns what the collector wrote.
func exportOTLP(t testing.TB, n int) []byte {
	t.Helper()
	col := &otlpCollector{}
	srv := httptest.NewServer(col)
	defer srv.Close()
	dir := t.TempDir()
	w := writeLog(t, dir, n)
	sink, err := NewOTLP(context.Background(), "r1", otlploghttp.WithEndpointURL(srv.URL+"/v1/logs"))
	if err != nil {
		t.Fatal(err)
	}
	e, stop := runExporter(t, dir, fastCfg, sink)
	head, _ := w.Head()
	waitExported(t, e, "otlp", head)
	stop()
	return col.bytes()
}

func TestOTLPExportVerifies(t *testing.T) {
	b := exportOTLP(t, 21)
	v := NewVerifier()
	if err := ReadOTLPJSON(bytes.NewReader(b), v); err != nil {
		t.Fatalf("ReadOTLPJSON = %v", err)
	}
	if reps := v.Reports(); !v.Ok() || len(reps) != 1 || reps[0].Records != 22 {
		t.Fatalf("reports = %+v; want one intact chain of 22 records", reps)
	}
	if !bytes.Contains(b, []byte(`"traceId":"4bf92f3577b34da6a3ce929d0e0e4736","spanId":"00f067aa0ba902b7"`)) {
		t.Errorf("no log record carries the traceparent's ids as its trace context:\n%.2000s", b)
	}
	for _, tt := range []struct{ name, from, to, want string }{
		{"decision attribute", `"key":"egressd.audit.decision","value":{"stringValue":"deny"}`, `"key":"egressd.audit.decision","value":{"stringValue":"allow"}`, "egressd.audit.decision"},
		{"trace id", `"traceId":"4bf92f3577b34da6a3ce929d0e0e4736"`, `"traceId":"4bf92f3577b34da6a3ce929d0e0e4737"`, "trace context"},
		{"body", `\"evil.example\"`, `\"good.example\"`, "hash mismatch"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			edited := strings.Replace(string(b), tt.from, tt.to, 1)
			if edited == string(b) {
				t.Fatalf("%s not found in the export", tt.from)
			}
			v := NewVerifier()
			if err := ReadOTLPJSON(strings.NewReader(edited), v); err != nil {
				t.Fatal(err)
			}
			if reps := v.Reports(); v.Ok() || !strings.Contains(reps[0].Err.Error(), tt.want) {
				t.Fatalf("reports = %+v; want a break naming %q", reps, tt.want)
			}
		})
	}
}

func TestOTLPRefusesOtherProtocols(t *testing.T) {
	for _, tt := range []struct{ key, value string }{
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"},
		{"OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "http/json"},
	} {
		t.Setenv(tt.key, tt.value)
		if _, err := NewOTLP(context.Background(), "r1"); err == nil || !strings.Contains(err.Error(), tt.key) {
			t.Errorf("NewOTLP with %s=%s = %v; want an error naming it", tt.key, tt.value, err)
		}
		t.Setenv(tt.key, "")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	s, err := NewOTLP(context.Background(), "r1")
	if err != nil {
		t.Fatalf("NewOTLP with http/protobuf = %v", err)
	}
	s.Close(context.Background()) //nolint:errcheck // nothing was sent
}
