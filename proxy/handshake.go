package proxy

import "strings"

// rejectedCertAlerts are the TLS alerts a client ends an inspected
// tunnel's handshake with when it does not trust the leaf egressd minted:
// "bad certificate" and "unknown certificate authority" from clients that
// say so, "certificate unknown" from others, and "bad record MAC" where a
// TLS 1.3 client sends its alert in the clear after the server's encrypted
// flight, which the server cannot authenticate.
var rejectedCertAlerts = []string{
	"tls: bad certificate",
	"tls: unknown certificate authority",
	"tls: certificate unknown",
	"tls: bad record MAC",
}

// clientHandshakeDetail is the audit detail of an inspected tunnel whose
// client handshake failed. When the client rejected egressd's certificate,
// it says what to check: that the sandbox trusts its identity's root.
func clientHandshakeDetail(err error, identity string) string {
	msg := err.Error()
	for _, a := range rejectedCertAlerts {
		if strings.Contains(msg, a) {
			return "client TLS handshake: the client rejected egressd's certificate (" + msg +
				"): does the sandbox trust `egressd ca export --identity " + identity + "`?"
		}
	}
	return "client TLS handshake: " + msg
}
