package e2e

import (
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Upstream is a loopback HTTP or HTTPS server the tests reach through the
// proxy. Its handlers:
//
//	/bytes/N          N bytes of 'x'
//	/echo             the request line and headers as received, as text
//	/close            answers with Connection: close (no reuse upstream)
//	/redirect?to=URL  302 to URL
//	/hold?c=ID        signals Arrived(ID), blocks until Release(ID), then 200
//	/ws               a WebSocket handshake (Upgrade: websocket) switches
//	                  protocols, then echoes each line as "echo <line>"
type Upstream struct {
	*httptest.Server
	// Addr is "127.0.0.1:port"; Port the port.
	Addr string
	Port int
	// CAFile is the PEM of the server's certificate (HTTPS only), for
	// curl --cacert and friends.
	CAFile string

	mu    sync.Mutex
	holds map[string]*held
}

// held is one /hold id: arrived is closed when the first request for it
// reaches the handler, release by Release.
type held struct {
	arrived, release chan struct{}
	once             sync.Once
}

func upstreamHandler(u *Upstream) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/bytes/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.PathValue("n"))
		if err != nil || n < 0 || n > 1<<30 {
			http.Error(w, "bad n", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(n))
		chunk := []byte(strings.Repeat("x", 32<<10))
		for n > 0 {
			m := min(n, len(chunk))
			if _, err := w.Write(chunk[:m]); err != nil {
				return
			}
			n -= m
		}
	})
	mux.HandleFunc("/close", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		io.WriteString(w, "closing\n")
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			http.Error(w, "want Upgrade: websocket", http.StatusBadRequest)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			brw.WriteString("echo " + line)
			brw.Flush()
		}
	})
	mux.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		h := u.hold(r.URL.Query().Get("c"))
		h.once.Do(func() { close(h.arrived) })
		<-h.release
		io.WriteString(w, "released\n")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "%s %s %s\n", r.Method, r.RequestURI, r.Proto)
		fmt.Fprintf(w, "host: %s\n", r.Host)
		for k, vs := range r.Header {
			for _, v := range vs {
				fmt.Fprintf(w, "%s: %s\n", strings.ToLower(k), v)
			}
		}
		fmt.Fprintf(w, "body: %s\n", body)
	})
	return mux
}

func (u *Upstream) hold(id string) *held {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.holds == nil {
		u.holds = map[string]*held{}
	}
	h, ok := u.holds[id]
	if !ok {
		h = &held{arrived: make(chan struct{}), release: make(chan struct{})}
		u.holds[id] = h
	}
	return h
}

// Release lets every /hold?c=id request answer.
func (u *Upstream) Release(id string) { close(u.hold(id).release) }

// WaitArrived waits until a /hold?c=id request has reached the upstream,
// so a test knows it is in flight; a request that never comes fails t
// after a safety limit (not a timing assertion).
func (u *Upstream) WaitArrived(t testing.TB, id string) {
	t.Helper()
	select {
	case <-u.hold(id).arrived:
	case <-time.After(30 * time.Second):
		t.Fatalf("no /hold?c=%s request reached the upstream", id)
	}
}

// StartHTTP starts a plain HTTP upstream on 127.0.0.1.
func StartHTTP(t testing.TB) *Upstream {
	t.Helper()
	u := &Upstream{}
	u.Server = httptest.NewServer(upstreamHandler(u))
	t.Cleanup(u.Close)
	u.fill()
	return u
}

// StartHTTPS starts an HTTPS upstream on 127.0.0.1 whose certificate names
// example.com (and 127.0.0.1); CAFile trusts it.
func StartHTTPS(t testing.TB) *Upstream {
	t.Helper()
	u := &Upstream{}
	startTLS(t, u, upstreamHandler(u), false)
	return u
}

// StartTLSHandler starts an HTTPS upstream on 127.0.0.1 serving h, also
// over h2 when h2 is set (gRPC needs it), with its certificate in CAFile
// for inspect.upstream_ca_file.
func StartTLSHandler(t testing.TB, h http.Handler, h2 bool) *Upstream {
	t.Helper()
	u := &Upstream{}
	startTLS(t, u, h, h2)
	return u
}

func startTLS(t testing.TB, u *Upstream, h http.Handler, h2 bool) {
	t.Helper()
	u.Server = httptest.NewUnstartedServer(h)
	u.EnableHTTP2 = h2
	u.StartTLS()
	t.Cleanup(u.Close)
	u.fill()
	u.CAFile = filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: u.Certificate().Raw})
	if err := os.WriteFile(u.CAFile, pemBytes, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (u *Upstream) fill() {
	u.Addr = u.Listener.Addr().String()
	_, p, _ := net.SplitHostPort(u.Addr)
	u.Port, _ = strconv.Atoi(p)
}
