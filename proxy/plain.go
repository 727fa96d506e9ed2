package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/policy"
)

// plainScan classifies the bytes at a request boundary of a non-TLS tunnel
// (its first bytes, or what follows a request) as they arrive, looking at
// each byte once: after optional empty lines, a run of token characters
// followed by a space or tab reads as an HTTP request line (a server would
// take it as one). Whitespace before it is refused: it is not HTTP, yet a
// server that skips it reads the request behind it. Anything else is
// another protocol, which the proxy does not bind.
type plainScan struct {
	off   int // bytes scanned
	start int // where the request line starts, after empty lines
	state plainState
}

type plainState uint8

const (
	plainLeading plainState = iota // empty lines before the request line
	plainMethod                    // the first token
	plainHTTP                      // a request line starts at start
	plainNotHTTP
	plainSpace // whitespace before the request line
)

// scan advances over b, the whole boundary so far, and returns the state;
// plainLeading and plainMethod need more bytes.
func (s *plainScan) scan(b []byte) plainState {
	for ; s.off < len(b) && s.state <= plainMethod; s.off++ {
		c := b[s.off]
		switch s.state {
		case plainLeading:
			switch {
			case c == '\r' || c == '\n':
			case isTokenChar(c):
				s.start, s.state = s.off, plainMethod
			case isLeadingSpace(c):
				s.state = plainSpace
			default:
				s.state = plainNotHTTP
			}
		case plainMethod:
			switch {
			case isTokenChar(c):
			case c == ' ' || c == '\t':
				// RFC 4253: an SSH client opens with "SSH-2.0-…", and its
				// comment follows a space; no HTTP method starts so.
				if bytes.HasPrefix(b[s.start:s.off], []byte("SSH-")) {
					s.state = plainNotHTTP
				} else {
					s.state = plainHTTP
				}
			default:
				s.state = plainNotHTTP
			}
		}
	}
	return s.state
}

// isTokenChar reports an RFC 9110 tchar.
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// isLeadingSpace reports the bytes some server skips before a request
// line: Python's http.server splits the line with str.split(), which
// drops every whitespace character of Latin-1 (SP, HTAB, VT, FF, 0x1C-0x1F,
// NEL, NBSP).
func isLeadingSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x1f, 0x85, 0xa0:
		return true
	}
	return false
}

// checkPlainHost says why the host a request is for (net/http's reading:
// the authority of an absolute-form target, else Host) is not host:port,
// or "".
func checkPlainHost(req *http.Request, host string, port uint16) string {
	if req.Host == "" {
		return "request names no host"
	}
	h, p := splitHostHeader(req.Host)
	if !sniMatches(h, host) || (p != "" && p != strconv.Itoa(int(port))) {
		return "request for host " + strconv.Quote(req.Host[:min(len(req.Host), 256)])
	}
	return ""
}

// splitHostHeader splits a Host header into its name and its port (""
// when it names none). Brackets come off an IPv6 literal only as a pair:
// the transparent listener takes the name to decide from here, and the
// tunnel checks every request against it the same way (checkPlainHost).
func splitHostHeader(hostport string) (host, port string) {
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		return h, p
	}
	if len(hostport) > 1 && hostport[0] == '[' && hostport[len(hostport)-1] == ']' {
		return hostport[1 : len(hostport)-1], ""
	}
	return hostport, ""
}

// checkPlainFlight binds a plaintext tunnel to its host. When its first
// bytes read as HTTP, every request in it is read with net/http's reader
// and must name the CONNECT host and port (plainRelay); a head that
// names another host, or that net/http cannot read, is refused as
// tunnel_host_mismatch. A server answering for many hosts (a CDN) routes
// each request by its Host, so one unchecked request would reach whatever
// tenant the client names. Other protocols pass unchecked: a rule allowed
// them with "tls": false. flight and err are what the first read returned.
func (t *tunnel) checkPlainFlight(flight []byte, err error, early *bytes.Reader) bool {
	pre := bytes.Clone(flight)
	if early != nil && early.Len() > 0 {
		pre = append(pre, t.early[len(t.early)-early.Len():]...)
	}
	r := &plainRelay{t: t, pre: bytes.NewReader(pre), end: t.f.start.Add(t.s.cfg.TunnelMaxLifetime), firstErr: err}
	r.br = bufio.NewReaderSize(r, plainBufSize)
	return r.run()
}

// plainBufSize bounds what a request boundary is classified in: the
// empty lines and the method before the first space.
const plainBufSize = 4 << 10

var errPlainHeadTooLarge = errors.New("request head too large")

// plainRelay carries the client's bytes of an HTTP plaintext tunnel
// upstream request by request. It reads them through br (net/http's
// reader) and keeps in buf every byte read and not yet forwarded, so what
// goes upstream is the client's bytes as they came, up to where net/http
// says a request ends.
type plainRelay struct {
	t   *tunnel
	br  *bufio.Reader
	pre *bytes.Reader // the first flight and early bytes, read first
	buf []byte
	end time.Time
	// firstErr is the first read's error, returned once pre is read.
	firstErr error
	// deadline bounds each client read; perRead, when set, moves it on
	// with each read (a body), while a head must be in by a fixed time.
	deadline time.Time
	perRead  time.Duration
	// limit, when positive, is how many more bytes a head may read.
	limit   int
	limited bool
}

func (r *plainRelay) Read(p []byte) (int, error) {
	if r.pre.Len() > 0 {
		n, _ := r.pre.Read(p) // a bytes.Reader with bytes left
		r.buf = append(r.buf, p[:n]...)
		return n, nil
	}
	if r.firstErr != nil {
		err := r.firstErr
		r.firstErr = nil
		return 0, err
	}
	if r.limited {
		if r.limit <= 0 {
			return 0, errPlainHeadTooLarge
		}
		p = p[:min(len(p), r.limit)]
	}
	d := r.deadline
	if r.perRead > 0 {
		d = minTime(time.Now().Add(r.perRead), r.end)
	}
	r.t.client.SetReadDeadline(d)
	n, err := r.t.client.Read(p)
	if r.limited {
		r.limit -= n
	}
	r.buf = append(r.buf, p[:n]...)
	return n, err
}

// forward writes upstream the bytes net/http has consumed.
func (r *plainRelay) forward() bool {
	n := len(r.buf) - r.br.Buffered()
	if n == 0 {
		return true
	}
	if _, err := r.t.up.Write(r.buf[:n]); err != nil {
		return false
	}
	r.t.down2up.Add(int64(n))
	r.t.lastActive.Store(time.Now().UnixNano())
	r.buf = append(r.buf[:0], r.buf[n:]...)
	return true
}

// forwardAll writes upstream every byte read and the rest of pre: the
// client's direction is raw from here on.
func (r *plainRelay) forwardAll() bool {
	if rest := r.pre.Len(); rest > 0 {
		b := make([]byte, rest)
		_, _ = r.pre.Read(b) // a bytes.Reader of exactly rest bytes
		r.buf = append(r.buf, b...)
	}
	if len(r.buf) == 0 {
		return true
	}
	if _, err := r.t.up.Write(r.buf); err != nil {
		return false
	}
	r.t.down2up.Add(int64(len(r.buf)))
	r.t.lastActive.Store(time.Now().UnixNano())
	r.buf = nil
	return true
}

// run relays requests until the client's direction ends. It reports
// whether the rest of that direction is piped raw: after the client's EOF
// (the pipe passes the half-close on), or after a request that may have
// switched protocols (Upgrade, CONNECT) is followed by bytes that are not
// HTTP. A request for another host, bytes that are neither a request nor
// allowed as another protocol, and a request net/http cannot frame are
// refused.
func (r *plainRelay) run() bool {
	t := r.t
	first, switching := true, false
	for {
		if !r.await() {
			return false
		}
		r.deadline, r.perRead = minTime(time.Now().Add(t.s.cfg.PeekTimeout), r.end), 0
		// Classify what is buffered before reading more: a client of
		// another protocol may send a few bytes and wait for an answer.
		var s plainScan
		var state plainState
		var err error
		for {
			b, _ := r.br.Peek(r.br.Buffered()) // no read
			if state = s.scan(b); state > plainMethod || err != nil {
				break
			}
			_, err = r.br.Peek(r.br.Buffered() + 1)
		}
		switch {
		case state > plainMethod:
		case r.br.Buffered() == 0 && errors.Is(err, io.EOF):
			return true // the client is done: the pipe passes the half-close on
		case errors.Is(err, net.ErrClosed):
			return false // closed by a reload or a drain, which say why
		case errors.Is(err, bufio.ErrBufferFull):
			return t.auditFlightRefusal(policy.ReasonTunnelHostMismatch, "no request line in the first "+strconv.Itoa(plainBufSize)+" bytes")
		default:
			return t.auditFlightRefusal(policy.ReasonTunnelHostMismatch, "incomplete request: "+err.Error())
		}
		switch state {
		case plainSpace:
			return t.auditFlightRefusal(policy.ReasonTunnelHostMismatch, "whitespace before the request line")
		case plainNotHTTP:
			if first || switching {
				return r.forwardAll()
			}
			return t.auditFlightRefusal(policy.ReasonTunnelHostMismatch, "bytes after a request that are not a request")
		}
		// Empty lines before a request line are skipped, as net/http's
		// server skips them after a POST (RFC 9112 section 2.2), and go
		// upstream with the request.
		r.br.Discard(s.start) //nolint:errcheck // s.start bytes are buffered
		req, why := r.readHead(s.start)
		if why != "" {
			return t.auditFlightRefusal(policy.ReasonTunnelHostMismatch, why)
		}
		if req == nil {
			return false
		}
		if smuggledBody(req) {
			return t.auditFlightRefusal(policy.ReasonRequestBodyNotAllowed, req.Method+" with a body")
		}
		if !r.forward() || !r.relayBody(req) {
			return false
		}
		first = false
		switching = req.Method == http.MethodConnect || req.Header.Get("Upgrade") != ""
	}
}

// await waits, as pipe does, until the client sends bytes, ends, or the
// tunnel idles out or reaches its lifetime; it reports whether to go on.
func (r *plainRelay) await() bool {
	if r.pre.Len() > 0 || r.br.Buffered() > 0 || r.firstErr != nil {
		return true
	}
	t := r.t
	window := t.s.cfg.TunnelIdleTimeout / 2
	idle := t.s.cfg.TunnelIdleTimeout.Nanoseconds()
	for {
		now := time.Now()
		if !now.Before(r.end) {
			return false
		}
		t.client.SetReadDeadline(minTime(now.Add(window), r.end))
		err := waitReadable(t.client)
		if err == nil {
			return true
		}
		if !isTimeout(err) || time.Now().UnixNano()-t.lastActive.Load() >= idle {
			return false
		}
	}
}

// readHead reads one request head with net/http and checks it: its host
// must be the tunnel's, and its body framing unambiguous. It says why not,
// or returns neither request nor reason when the tunnel was closed.
func (r *plainRelay) readHead(skipped int) (*http.Request, string) {
	t := r.t
	r.limited, r.limit = true, min(t.s.cfg.MaxHeaderBytes, maxHelloFlight)
	req, err := http.ReadRequest(r.br)
	r.limited = false
	if err != nil {
		if errors.Is(err, net.ErrClosed) {
			return nil, ""
		}
		if errors.Is(err, errPlainHeadTooLarge) {
			return nil, "request head over " + strconv.Itoa(min(t.s.cfg.MaxHeaderBytes, maxHelloFlight)) + " bytes"
		}
		return nil, "unreadable request: " + err.Error()
	}
	if why := checkPlainHost(req, t.f.target.Host, t.f.target.Port); why != "" {
		return nil, why
	}
	// net/http drops Content-Length beside Transfer-Encoding, and ignores
	// Transfer-Encoding before HTTP/1.1; the upstream gets the head as
	// sent and may frame its body by the other one: read the head's
	// fields again, as sent.
	head := r.buf[skipped : len(r.buf)-r.br.Buffered()]
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
	if _, err := tp.ReadLine(); err == nil {
		if h, err := tp.ReadMIMEHeader(); err == nil && len(h["Transfer-Encoding"]) > 0 &&
			(len(h["Content-Length"]) > 0 || !req.ProtoAtLeast(1, 1)) {
			return nil, "Transfer-Encoding with Content-Length or before HTTP/1.1"
		}
	}
	return req, ""
}

// relayBody forwards the request's body as net/http frames it.
func (r *plainRelay) relayBody(req *http.Request) bool {
	if req.Body == nil || req.Body == http.NoBody {
		return true
	}
	r.perRead = r.t.s.cfg.TunnelIdleTimeout
	var tmp [16 << 10]byte
	for {
		_, err := req.Body.Read(tmp[:])
		if !r.forward() {
			return false
		}
		if errors.Is(err, io.EOF) {
			return true
		}
		if err != nil {
			if isTimeout(err) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || !time.Now().Before(r.end) {
				// The client stopped sending or left, or the tunnel was
				// closed: no request to refuse.
				return false
			}
			return r.t.auditFlightRefusal(policy.ReasonTunnelHostMismatch, "unreadable request body: "+err.Error())
		}
	}
}
