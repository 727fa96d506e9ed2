package proxy

import (
	"testing"

	"github.com/egressd/egressd/internal/docmap"
)

// TestDocMap keeps the package doc's map of the proxy's decision paths
// true: every name it writes is declared, and every step is reached from
// the step before it (internal/docmap says how).
func TestDocMap(t *testing.T) {
	docmap.Test(t, "doc.go", []string{"HTTP", "CONNECT", "SOCKS", "transparent", "inspected"}, map[string]string{
		"proxy":    "github.com/egressd/egressd/proxy",
		"broker":   "github.com/egressd/egressd/proxy/broker",
		"policy":   "github.com/egressd/egressd/policy",
		"dnsguard": "github.com/egressd/egressd/dnsguard",
		"audit":    "github.com/egressd/egressd/audit",
		"goproxy":  "github.com/elazarl/goproxy",
		"socks5":   "github.com/egressd/egressd/proxy/socks5",
	})
}
