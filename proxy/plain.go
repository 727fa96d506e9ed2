package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/policy"
)

// plainScan classifies the first bytes of a non-TLS tunnel as they arrive,
// looking at each byte once: after optional empty lines, a run of token
// characters followed by a space or tab reads as an HTTP request line (a
// server would take it as one), and its head is then read to its end.
// Anything else is another protocol, which the proxy does not bind.
type plainScan struct {
	off   int // bytes scanned
	start int // where the request line starts, after empty lines
	state plainState
	// blank says the line being scanned has no byte but CR so far.
	blank bool
}

type plainState uint8

const (
	plainLeading plainState = iota // empty lines before the request line
	plainMethod                    // the first token
	plainHead                      // the rest of the head
	plainNotHTTP
	plainDone
)

// scan advances over b, the whole flight so far, and returns the state. On
// plainDone the head is b[s.start:s.off].
func (s *plainScan) scan(b []byte) plainState {
	for ; s.off < len(b) && s.state != plainNotHTTP && s.state != plainDone; s.off++ {
		c := b[s.off]
		switch s.state {
		case plainLeading:
			switch {
			case c == '\r' || c == '\n':
			case isTokenChar(c):
				s.start, s.state = s.off, plainMethod
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
					s.state = plainHead
				}
			default:
				s.state = plainNotHTTP
			}
		case plainHead:
			switch c {
			case '\n':
				if s.blank {
					s.state = plainDone
				}
				s.blank = true
			case '\r':
			default:
				s.blank = false
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

// checkPlainHead reads one request head and says why its target is not
// host:port, or "". The authority of an absolute-form target is what a
// server uses, so net/http's reading (Host from the target when there is
// one) is the one checked; a head net/http cannot read is refused.
func checkPlainHead(head []byte, host string, port uint16) string {
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		return "unreadable first request: " + err.Error()
	}
	if req.Host == "" {
		return "first request names no host"
	}
	h, p := req.Host, ""
	if sh, sp, err := net.SplitHostPort(req.Host); err == nil {
		h, p = sh, sp
	} else if len(h) > 1 && h[0] == '[' && h[len(h)-1] == ']' {
		h = h[1 : len(h)-1]
	}
	if !sniMatches(h, host) || (p != "" && p != strconv.Itoa(int(port))) {
		return "first request for host " + strconv.Quote(req.Host[:min(len(req.Host), 256)])
	}
	return ""
}

// checkPlainFlight binds a plaintext tunnel to its host: when the first
// bytes read as an HTTP request, the rest of its head is read (within
// PeekTimeout and max_header_bytes) and its host must be the CONNECT host
// and port. Other protocols pass unchecked: a rule allowed them with
// "tls": false. flight and err are what the first read returned. A server
// answering for many hosts (a CDN) routes by the request's Host, so an
// unchecked Host would reach whatever tenant the client names: a head that
// names another host, or cannot be read, is refused as tunnel_host_mismatch.
func (t *tunnel) checkPlainFlight(flight []byte, err error, src io.Reader, early *bytes.Reader) bool {
	limit := min(t.s.cfg.MaxHeaderBytes, maxHelloFlight)
	var s plainScan
	waiting := false
	for {
		switch s.scan(flight) {
		case plainNotHTTP:
			return t.forwardFlight(flight, early)
		case plainDone:
			if why := checkPlainHead(flight[s.start:s.off], t.f.target.Host, t.f.target.Port); why != "" {
				return t.refuseFlight(policy.ReasonTunnelHostDiffs, why)
			}
			return t.forwardFlight(flight, early)
		}
		if err != nil {
			return t.refuseFlight(policy.ReasonTunnelHostDiffs, "incomplete first request: "+err.Error())
		}
		if len(flight) >= limit {
			return t.refuseFlight(policy.ReasonTunnelHostDiffs, "first request head over "+strconv.Itoa(limit)+" bytes")
		}
		if !waiting {
			// Bytes that may be a request head: the rest must come soon,
			// as a ClientHello must.
			t.client.SetReadDeadline(time.Now().Add(t.s.cfg.PeekTimeout))
			waiting = true
		}
		flight, err = readSome(flight, src)
	}
}
