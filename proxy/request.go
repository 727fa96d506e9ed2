package proxy

import (
	"net"
	"net/http"
	"strconv"
	"strings"
)

// bodylessMethod reports whether requests with this method must not carry
// a body through the proxy.
func bodylessMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// smuggledBody reports whether r is a bodyless method that declares a body,
// by a non-zero Content-Length or any Transfer-Encoding.
func smuggledBody(r *http.Request) bool {
	return bodylessMethod(r.Method) && (r.ContentLength != 0 || len(r.TransferEncoding) > 0)
}

// methodOverrideHeaders ask some frameworks to run another method than the
// request line's; a rule that allows only GET must not let a GET act as a
// DELETE upstream, so they never cross the proxy.
var methodOverrideHeaders = []string{
	"X-Http-Method-Override",
	"X-Http-Method",
	"X-Method-Override",
}

// stripRequestOnly removes, in place, the request headers that must never
// reach an upstream besides the hop-by-hop ones.
func stripRequestOnly(h http.Header) {
	for _, k := range methodOverrideHeaders {
		delete(h, k)
	}
}

// hostHeader is the Host an upstream receives for the decided host and
// port: the normalized spelling the policy matched, never the client's
// (upper case, a trailing dot), with the port only when it is not the
// scheme's default.
func hostHeader(scheme, host string, port uint16) string {
	if (scheme == "http" && port == 80) || (scheme == "https" && port == 443) {
		if strings.IndexByte(host, ':') >= 0 {
			return "[" + host + "]"
		}
		return host
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}
