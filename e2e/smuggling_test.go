package e2e

import (
	"bufio"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/dnsguard/dnstest"
	"github.com/egressd/egressd/internal/decisiontest"
)

// pythonUpstream is Python's http.server speaking HTTP/1.1: it never reads
// the body of a GET, so body bytes on a kept-alive connection are read as
// the next request. It prints every request line it runs.
const pythonUpstream = `
import http.server
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self): self.reply()
    def do_POST(self): self.reply()
    def reply(self):
        print(self.command, self.path, flush=True)
        b = self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print("ready", s.server_address[1], flush=True)
s.serve_forever()
`

// startPythonUpstream runs pythonUpstream and returns the port it listens
// on and the request lines it runs, in order, as it prints them. The server
// binds a port of its own choosing and reports it: a port picked here and
// released for it could be taken by another test in between.
func startPythonUpstream(t *testing.T) (int, <-chan string) {
	t.Helper()
	cmd := exec.Command("python3", "-c", pythonUpstream)
	cmd.Env = cleanEnv()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("python3: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 64)
	ready := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
				port, _ := strconv.Atoi(p)
				ready <- port
				continue
			}
			select {
			case lines <- sc.Text():
			default:
				// More lines than any test sends: keep the first 64.
			}
		}
	}()
	select {
	case port := <-ready:
		if port == 0 {
			t.Fatal("python http.server reported no port")
		}
		return port, lines
	case <-time.After(20 * time.Second):
		t.Fatal("python http.server did not start")
	}
	return 0, nil
}

// A GET carrying a second request in its body (CL.0 smuggling) is refused:
// the upstream, which would run the body as a POST no rule allows, never
// sees either.
func TestBodyOnGETNeverReachesUpstream(t *testing.T) {
	port, seen := startPythonUpstream(t)
	dns := dnstest.Start(t)
	dns.SetRR("py.test", "py.test. 60 IN A 127.0.0.1")
	e := Start(t, Options{
		PolicyDir: WritePolicy(t, []Rule{{ID: "public-read", Hosts: []string{"py.test"}, Ports: []int{port}, Methods: []string{"GET"}, Paths: []string{"/public/**"}}}),
		DNS:       dns.Addr(),
		YAML:      InternalAllow("127.0.0.1:" + itoa(port)),
	})
	host := "py.test:" + itoa(port)
	smuggled := "POST /admin/delete HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: 0\r\n\r\n"
	resp, body := rawRequest(t, e.ProxyAddr, "GET http://"+host+"/public/x HTTP/1.1\r\nHost: "+host+
		"\r\nContent-Length: "+itoa(len(smuggled))+"\r\n\r\n"+smuggled)
	if resp.StatusCode != 400 || decisiontest.Reason(resp.Header) != "request_body_not_allowed" {
		t.Errorf("GET with a request in its body = %d %q; want 400 request_body_not_allowed", resp.StatusCode, body)
	}
	e.WaitRecords(t, "the refusal", func(r audit.Record) bool {
		return r.Kind == "http" && r.Decision == "deny" && r.Reason == "request_body_not_allowed" && r.Host == "py.test"
	})
	// A plain GET afterwards is served: the upstream works and has run
	// nothing else.
	resp, body = rawRequest(t, e.ProxyAddr, "GET http://"+host+"/public/y HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
	if resp.StatusCode != 200 || body != "/public/y" {
		t.Fatalf("GET /public/y = %d %q; want 200 /public/y", resp.StatusCode, body)
	}
	// The upstream prints a request line before it answers, so the line
	// of /public/y is on its way; any smuggled request's came before it.
	select {
	case got := <-seen:
		if got != "GET /public/y" {
			t.Errorf("upstream ran %q first; want only GET /public/y", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("upstream printed no request line for GET /public/y")
	}
	select {
	case got := <-seen:
		t.Errorf("upstream also ran %q; want only GET /public/y", got)
	default:
	}
}
