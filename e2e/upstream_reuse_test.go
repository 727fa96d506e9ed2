package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/dnsguard/dnstest"
)

// TestPostBodyNeverRunsUpstream (issue 21 item 10): Python's http.server
// answers a POST without reading its body, so on a connection kept alive
// the body would run as the next request. A POST allowed by /public/**
// whose body is GET /admin/secret: every request line the upstream runs
// is one an allowing record names.
func TestPostBodyNeverRunsUpstream(t *testing.T) {
	port, seen := startPythonUpstream(t)
	dns := dnstest.Start(t)
	dns.SetRR("py.test", "py.test. 60 IN A 127.0.0.1")
	e := Start(t, Options{
		PolicyDir: WritePolicy(t, []Rule{{ID: "public", Hosts: []string{"py.test"}, Ports: []int{port}, Methods: []string{"GET", "POST"}, Paths: []string{"/public/**"}}}),
		DNS:       dns.Addr(),
		YAML:      InternalAllow("127.0.0.1:" + itoa(port)),
	})
	host := "py.test:" + itoa(port)
	smuggled := "GET /admin/secret HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
	for _, path := range []string{"/public/a", "/public/b"} {
		resp, body := rawRequest(t, e.ProxyAddr, "POST http://"+host+path+" HTTP/1.1\r\nHost: "+host+
			"\r\nContent-Length: "+itoa(len(smuggled))+"\r\n\r\n"+smuggled)
		if resp.StatusCode != 200 || body != path {
			t.Fatalf("POST %s = %d %q; want 200 %s", path, resp.StatusCode, body, path)
		}
	}
	resp, body := rawRequest(t, e.ProxyAddr, "GET http://"+host+"/public/end HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
	if resp.StatusCode != 200 || body != "/public/end" {
		t.Fatalf("GET /public/end = %d %q; want 200 /public/end", resp.StatusCode, body)
	}
	// The upstream prints a request line before it answers, so by the
	// marker's line every request it ran before has been printed.
	var ran []string
	for len(ran) == 0 || ran[len(ran)-1] != "GET /public/end" {
		select {
		case l := <-seen:
			ran = append(ran, l)
		case <-time.After(10 * time.Second):
			t.Fatalf("upstream printed %q and no line for GET /public/end", ran)
		}
	}
	e.WaitRecords(t, "the marker's record", func(r audit.Record) bool {
		return r.Kind == "http" && r.Path == "/public/end"
	})
	recs := e.Records(t)
	for _, l := range ran {
		method, path, _ := strings.Cut(l, " ")
		found := false
		for _, r := range recs {
			found = found || (r.Kind == "http" && r.Decision == "allow" && r.Method == method && r.Host == "py.test" && r.Path == path)
		}
		if !found {
			t.Errorf("upstream ran %q; no allowing record names it", l)
		}
	}
}
