package proxy

import (
	"net/http"
	"net/textproto"
	"strings"
)

// hopHeaders are single-hop headers (RFC 9110 §7.6.1 and the proxy
// credentials): they describe one connection and must not cross the proxy.
// Upgrade is included so a plain-HTTP request cannot turn into an
// uninspected stream; tunnels go through CONNECT.
var hopHeaders = []string{
	"Connection",
	"Proxy-Connection",
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer",
	"Transfer-Encoding",
	"Upgrade",
}

// stripHopByHop removes hop-by-hop headers, including every header the
// Connection header names, in place.
func stripHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for len(v) > 0 {
			var f string
			f, v, _ = strings.Cut(v, ",")
			if f = textproto.TrimString(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
}
