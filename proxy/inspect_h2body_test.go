package proxy

import (
	"encoding/pem"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestInspectH2UnreadBodyEndsCleanly: curl --http2 POSTs a body through an
// inspected credential rule to an upstream that answers without reading
// it; curl gets the 200 and a clean end of stream. The upstream side
// closed the client's request body when the upstream stopped reading,
// and the h2 server answered curl's next DATA frames with RST_STREAM
// (STREAM_CLOSED): curl exited 92, "Stream error in the HTTP/2 framing
// layer", after the 200.
func TestInspectH2UnreadBodyEndsCleanly(t *testing.T) {
	f := startInspect(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	}), inspectOptions{rules: credInspectRules, secrets: testStore(t)})
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.ca.rootCert(t, "anonymous").Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	body := filepath.Join(dir, "body")
	if err := os.WriteFile(body, []byte(strings.Repeat("a", 2<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("curl", "-sS", "--http2", "-x", "http://"+f.proxy, "--cacert", ca,
		"--data-binary", "@"+body, "-H", "Content-Type: application/json", f.url("/post")).CombinedOutput()
	if err != nil || string(out) != `{"ok":true}` {
		t.Errorf("curl --http2 POST = %q, %v; want the 200's body and exit 0", out, err)
	}
}
