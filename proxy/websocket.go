package proxy

import (
	"io"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/egressd/egressd/policy"
)

// A WebSocket handshake inside an inspected tunnel is decided as the GET it
// is; when the upstream switches protocols, goproxy relays the upgraded
// connection both ways (it wants the response body to be an
// io.ReadWriter and the handshake headers in place). Only HTTP/1.1 can
// upgrade: an h2 client is offered no extended CONNECT, and plain HTTP
// strips Upgrade (hopHeaders), so the only WebSocket is one whose
// handshake was decided with a path.

// isWebSocketUpgrade reports an HTTP/1.1 GET asking to switch to WebSocket.
func isWebSocketUpgrade(r *http.Request) bool {
	return r.ProtoMajor == 1 && r.Method == http.MethodGet &&
		headerHasToken(r.Header, "Connection", "upgrade") && headerHasToken(r.Header, "Upgrade", "websocket")
}

// headerHasToken reports whether the comma-separated values of header
// name list token, in any case.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h[textproto.CanonicalMIMEHeaderKey(name)] {
		for len(v) > 0 {
			var f string
			f, v, _ = strings.Cut(v, ",")
			if strings.EqualFold(textproto.TrimString(f), token) {
				return true
			}
		}
	}
	return false
}

// switched hands goproxy an upstream's 101 Switching Protocols: for an
// inspected WebSocket handshake the upgraded connection becomes the body
// goproxy relays; any other 101 is an upstream failure (nothing asked for
// it).
func (f *httpFlow) switched(req *http.Request, resp *http.Response) (*http.Response, error) {
	rw, ok := resp.Body.(io.ReadWriteCloser)
	if !f.upgrade || !ok {
		resp.Body.Close()
		rf := refusalOf(policy.ReasonUpstreamUnreachable)
		f.complete(rf.status, rf.Reason, "unexpected 101 Switching Protocols")
		return rf.response(req, f.id), nil
	}
	// stripHopByHop removed them; goproxy recognises the handshake by them.
	resp.Header.Set("Connection", "Upgrade")
	resp.Header.Set("Upgrade", "websocket")
	resp.Body = &upgradedBody{responseBody: f.recv, rw: rw}
	return resp, nil
}

// upgradedBody is the upgraded upstream connection: reads (upstream to
// client) are counted by the response body, writes (client to upstream)
// by the request's count; both push back the idle timer.
type upgradedBody struct {
	*responseBody
	rw io.ReadWriteCloser
}

func (b *upgradedBody) Write(p []byte) (int, error) {
	n, err := b.rw.Write(p)
	b.f.sent.n.Add(int64(n))
	if n > 0 {
		b.idle.Reset(b.timeout)
	}
	return n, err
}
