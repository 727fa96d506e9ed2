package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/dnsguard/dnstest"
	"github.com/egressd/egressd/internal/testport"
)

// heldConn is a client connection the proxy served and keeps open.
type heldConn struct {
	net.Conn
	r *bufio.Reader
}

// ask sends one denied request on c and reads the answer. The deadline
// only guards against a hang, which is the bug under test.
func ask(c net.Conn, r *bufio.Reader, path string) (*http.Response, error) {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "GET http://nowhere.test%s HTTP/1.1\r\nHost: nowhere.test\r\n\r\n", path); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	return resp, nil
}

// openServed opens a client connection and has one request answered on it:
// it returns the connection if the proxy served it, nil if the proxy
// refused it (closed or reset it), and fails the test if it hung.
func openServed(t *testing.T, addr, path string) *heldConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("dial %s hung: %v", addr, err)
		}
		return nil
	}
	h := &heldConn{Conn: c, r: bufio.NewReader(c)}
	if _, err := ask(c, h.r, path); err != nil {
		c.Close()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("client %s neither served nor refused within 10s: %v", path, err)
		}
		return nil
	}
	return h
}

// fdLimit is the RLIMIT_NOFILE the shortage tests give egressd: few
// enough descriptors for a test to use up, more than the reserve (32).
const fdLimit = 128

// prlimitWrap is the command that runs egressd with RLIMIT_NOFILE lowered
// to fdLimit.
func prlimitWrap(t *testing.T) []string {
	t.Helper()
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatalf("prlimit (util-linux) is needed to lower egressd's RLIMIT_NOFILE: %v", err)
	}
	return []string{prlimit, fmt.Sprintf("--nofile=%d:%d", fdLimit, fdLimit)}
}

// holdUntilRefused opens connections to what with open until it refuses
// one (open reports false), keeps them open until t ends and returns
// them. The refusal must come before the reserve (32) is touched, but not
// long before: an idle egressd holds a dozen or two descriptors.
func holdUntilRefused[C io.Closer](t *testing.T, what string, open func(i int) (C, bool)) []C {
	t.Helper()
	var held []C
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	for len(held) < fdLimit {
		c, ok := open(len(held))
		if !ok {
			break
		}
		held = append(held, c)
	}
	t.Logf("%s served %d connections before the first refusal", what, len(held))
	if len(held) < fdLimit/2 || len(held) >= fdLimit-32 {
		t.Fatalf("%s served %d connections before refusing one; want %d to %d (the reserve kept free of %d)", what, len(held), fdLimit/2, fdLimit-33, fdLimit)
	}
	return held
}

// TestFDShortageRefusesClientsAndAdminAnswers runs egressd with
// RLIMIT_NOFILE lowered to 128 (prlimit) and opens client connections
// until the proxy refuses one (item 20): egressd logs the soft and hard
// limits, refuses while it still has its reserve (well before 128), every
// later client is refused at once rather than left hanging, /readyz
// answers, and the whole shortage is one audit record.
func TestFDShortageRefusesClientsAndAdminAnswers(t *testing.T) {
	e := Start(t, Options{
		DNS:       dnstest.Start(t).Addr(),
		ProxyYAML: "read_header_timeout: 60s\nidle_timeout: 120s",
		// Every refusal in full: the marker's record below is one of
		// about a hundred no_matching_rule refusals within a second,
		// which the default sampling would fold into a counted record.
		AuditYAML: "refusal_samples: 1000",
		Wrap:      prlimitWrap(t),
	})
	if want := fmt.Sprintf(`"msg":"file descriptor limit","soft":%d,"hard":%d`, fdLimit, fdLimit); !strings.Contains(e.Log(), want) {
		t.Errorf("egressd log lacks %s:\n%s", want, e.Log())
	}

	held := holdUntilRefused(t, "proxy", func(i int) (*heldConn, bool) {
		h := openServed(t, e.ProxyAddr, fmt.Sprintf("/held-%d", i))
		return h, h != nil
	})
	for i := range 20 {
		if h := openServed(t, e.ProxyAddr, fmt.Sprintf("/late-%d", i)); h != nil {
			h.Close()
			t.Fatalf("client %d after the first refusal was served; want refused", i)
		}
	}
	if code, body, err := e.Admin(http.MethodGet, "/readyz"); err != nil || code != http.StatusOK {
		t.Errorf("/readyz while refusing clients = %d %q, %v; want 200", code, body, err)
	}

	// A request on a connection already open needs no descriptor; its
	// record follows any a refusal wrote.
	resp, err := ask(held[0], held[0].r, "/marker")
	if err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("request on a held connection = %v, %v; want 403", resp, err)
	}
	e.WaitRecords(t, "marker request", func(r audit.Record) bool { return r.Path == "/marker" })
	var refusals []audit.Record
	for _, r := range e.Records(t) {
		if r.Kind == "accept" {
			refusals = append(refusals, r)
		}
	}
	if len(refusals) != 1 || refusals[0].Reason != "fd_exhausted" || refusals[0].Decision != "deny" || refusals[0].Detail["listener"] != "proxy" {
		t.Errorf("accept records after 21 refused clients = %+v; want exactly one deny fd_exhausted for the proxy", refusals)
	}
}

// sslRequest is the PostgreSQL SSLRequest message; a gate without TLS
// answers it with one byte, 'N', and then waits for the startup message.
var sslRequest = []byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}

// openGate opens a connection to the Postgres gate and has its SSLRequest
// answered: the connection if the gate served it, nil if it refused it;
// a hang fails the test.
func openGate(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 1)
	if _, err = c.Write(sslRequest); err == nil {
		_, err = c.Read(b)
	}
	if err != nil {
		c.Close()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("gate client neither served nor refused within 10s: %v", err)
		}
		return nil
	}
	if b[0] != 'N' {
		t.Fatalf("gate answered SSLRequest with %q; want 'N'", b)
	}
	return c
}

// TestFDShortageRefusesGateClients is the Postgres gate's side of item
// 20: under a lowered RLIMIT_NOFILE new gate clients are refused at once
// once the reserve is reached, with one audit record for the shortage.
// (No database is needed: the gate dials upstream only after a login.)
func TestFDShortageRefusesGateClients(t *testing.T) {
	gatePort := ReservePort(t)
	gate := gatePort.Addr()
	// An upstream that accepts, for /readyz; no login reaches it.
	up := gateUpstream(t)
	e := Start(t, Options{
		Hold: []*testport.Reservation{gatePort},
		DNS:  dnstest.Start(t).Addr(),
		YAML: InternalAllow(up) + gateYAML(gate, up, "  startup_timeout: 60s\n"),
		Wrap: prlimitWrap(t),
	})
	holdUntilRefused(t, "gate", func(int) (net.Conn, bool) {
		c := openGate(t, gate)
		return c, c != nil
	})
	for i := range 10 {
		if c := openGate(t, gate); c != nil {
			c.Close()
			t.Fatalf("gate client %d after the first refusal was served; want refused", i)
		}
	}
	if code, body, err := e.Admin(http.MethodGet, "/readyz"); err != nil || code != http.StatusOK {
		t.Errorf("/readyz while refusing gate clients = %d %q, %v; want 200", code, body, err)
	}
	recs := e.WaitRecords(t, "fd_exhausted record", func(r audit.Record) bool { return r.Kind == "accept" })
	if len(recs) != 1 || recs[0].Reason != "fd_exhausted" || recs[0].Detail["listener"] != "postgres" {
		t.Errorf("accept records = %+v; want one fd_exhausted for the postgres listener", recs)
	}
}
