package main

import (
	"testing"

	"github.com/egressd/egressd/internal/docmap"
)

// TestDocMap keeps the package doc's map of the five decision paths true:
// every name it writes is declared, and every step is reached from the
// step before it (internal/docmap says how).
func TestDocMap(t *testing.T) {
	docmap.Test(t, "doc.go", []string{"HTTP", "CONNECT", "inspected", "DNS", "SQL"}, map[string]string{
		"proxy":    "github.com/egressd/egressd/proxy",
		"pggate":   "github.com/egressd/egressd/proxy/pggate",
		"dnsguard": "github.com/egressd/egressd/dnsguard",
		"policy":   "github.com/egressd/egressd/policy",
		"sqlfacts": "github.com/egressd/egressd/policy/sqlfacts",
		"audit":    "github.com/egressd/egressd/audit",
		"goproxy":  "github.com/elazarl/goproxy",
		"http":     "net/http",
		"dns":      "github.com/miekg/dns",
	})
}
