package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/dnsguard/dnstest"
)

// world is the proxy tests' standard setup: an HTTP and an HTTPS upstream on
// loopback, a test DNS server naming them, a bundle with one rule per
// scenario, and egressd allowed to reach exactly the two upstream ports.
type world struct {
	HTTP   *Upstream
	HTTPS  *Upstream
	DNS    *dnstest.Server
	Policy string
	E      *Egressd
	Opts   Options
}

func yes() *bool { return new(true) }
func no() *bool  { return new(false) }

func (w *world) rules() []Rule {
	hp, tp := w.HTTP.Port, w.HTTPS.Port
	return []Rule{
		// Plaintext tunnels to the HTTP upstream need "tls": false.
		{ID: "upstream", Hosts: []string{"upstream.test", "127.0.0.1"}, Ports: []int{hp}, TLS: no()},
		{ID: "upstream-paths", Hosts: []string{"paths.test"}, Ports: []int{hp}, Methods: []string{"GET"}, Paths: []string{"/allowed/**"}},
		{ID: "rebinding", Hosts: []string{"rebind.test", "mixed.test", "meta.test"}, Ports: []int{hp}},
		{ID: "tls-upstream", Hosts: []string{"example.com"}, Ports: []int{tp}, TLS: yes()},
		{ID: "tls-path-only", Hosts: []string{"pathonly.test"}, Ports: []int{tp}, Paths: []string{"/x/**"}},
		{ID: "plain-tunnel", Hosts: []string{"upstream.test"}, Ports: []int{hp}, TLS: no()},
		{ID: "sandbox-only", Hosts: []string{"private.test"}, Ports: []int{hp}, Identities: []string{"sbx-1"}},
	}
}

// newWorld starts the world; edit changes the options before egressd
// starts (identities, limits, …).
func newWorld(t *testing.T, edit func(*world)) *world {
	t.Helper()
	w := &world{HTTP: StartHTTP(t), HTTPS: StartHTTPS(t), DNS: dnstest.Start(t)}
	for _, n := range []string{"upstream.test", "paths.test", "example.com", "pathonly.test", "private.test", "other.test"} {
		w.DNS.SetRR(n, n+". 60 IN A 127.0.0.1")
	}
	w.DNS.SetRR("mixed.test", "mixed.test. 60 IN A 127.0.0.1", "mixed.test. 60 IN A 10.0.0.5")
	w.DNS.SetRR("meta.test", "meta.test. 60 IN A 169.254.169.254")
	w.DNS.Set("rebind.test", dnstest.Entry{Answers: [][]string{
		{"rebind.test. 0 IN A 127.0.0.1"},
		{"rebind.test. 0 IN A 10.0.0.5"},
	}})
	w.Policy = WritePolicy(t, w.rules())
	w.Opts = Options{
		PolicyDir: w.Policy,
		DNS:       w.DNS.Addr(),
		YAML:      InternalAllow(w.HTTP.Addr, w.HTTPS.Addr),
	}
	if edit != nil {
		edit(w)
	}
	w.E = Start(t, w.Opts)
	return w
}

// url is an http URL on the HTTP upstream under the given host name.
func (w *world) url(host, path string) string {
	return fmt.Sprintf("http://%s:%d%s", host, w.HTTP.Port, path)
}

// rawRequest writes req verbatim to the proxy and returns the response.
func rawRequest(t *testing.T, proxyAddr, req string) (*http.Response, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read response to %q: %v", firstLine(req), err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\r\n")
	return l
}
