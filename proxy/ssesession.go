package proxy

import (
	"net/http"
	"net/url"
	"sync"

	"github.com/egressd/egressd/policy/mcp"
)

// sseSessions are the open GET streams of MCP's older HTTP+SSE transport.
// That transport answers a POST on its session's stream, not in the POST's
// body (which is 202 Accepted), so a refused tools/call must be told on
// the stream: a refusal in the POST's body is never read, and the agent
// would wait for an answer that never comes.
type sseSessions struct {
	mu      sync.Mutex
	streams map[*mcp.Stream]sseSession
}

// sseSession is whose a stream is and where its GET went.
type sseSession struct {
	identity string
	base     url.URL
}

// open wraps resp's body, the GET stream of a session, filtered to the
// allowed tools, and tracks it until it is closed.
func (ss *sseSessions) open(identity string, base url.URL, resp *http.Response, allow func(string) bool) {
	st := mcp.NewStream(resp.Body, allow)
	ss.mu.Lock()
	if ss.streams == nil {
		ss.streams = map[*mcp.Stream]sseSession{}
	}
	ss.streams[st] = sseSession{identity: identity, base: base}
	ss.mu.Unlock()
	resp.Body = &sseBody{Stream: st, ss: ss}
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
}

// sseBody is a tracked stream; closing it stops tracking it.
type sseBody struct {
	*mcp.Stream
	ss *sseSessions
}

func (b *sseBody) Close() error {
	b.ss.mu.Lock()
	delete(b.ss.streams, b.Stream)
	b.ss.mu.Unlock()
	return b.Stream.Close()
}

// inject puts msg on the stream of identity's session whose endpoint is
// target (the POST's), and reports whether there was one to take it.
func (ss *sseSessions) inject(identity string, target Target, msg []byte) bool {
	host := target.url().Host
	ss.mu.Lock()
	var found *mcp.Stream
	for st, s := range ss.streams {
		if s.identity != identity {
			continue
		}
		ep, err := url.Parse(st.Endpoint())
		if err != nil || st.Endpoint() == "" {
			continue
		}
		u := s.base.ResolveReference(ep)
		if u.Host == host && u.EscapedPath() == target.Path && u.RawQuery == target.Query {
			found = st
			break
		}
	}
	ss.mu.Unlock()
	return found != nil && found.Inject(msg) == nil
}
