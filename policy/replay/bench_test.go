package replay

import (
	"context"
	"testing"

	"github.com/egressd/egressd/audit"
)

// BenchmarkReplay is the cost of one record re-decided under its own
// bundle and a candidate (both decisions cached after the first, as in a
// log that repeats its requests), by kind.
func BenchmarkReplay(b *testing.B) {
	own, cand := engine(b, ownRules), engine(b, narrowed())
	d := own.Digest()
	recs := map[string]audit.Record{
		"http":    httpRec("GET", "http", "paths.test", 80, "/ok/a", "", true, "allowed", "paths"),
		"connect": {Kind: audit.KindConnect, Identity: "anonymous", Host: "tunnel.test", Port: 443, Decision: audit.DecisionAllow, Reason: "allowed", Rule: "tunnel"},
		"dns":     {Kind: audit.KindDNS, Identity: "anonymous", Name: "docs.test", QType: "A", Decision: audit.DecisionAllow, Reason: "allowed", Rule: "docs"},
	}
	for name, rec := range recs {
		b.Run(name, func(b *testing.B) {
			rec.Policy = d
			rp := NewReplayer(Options{Env: env(b), New: cand, Own: func(context.Context, string) (Engine, error) { return own, nil }})
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if e := rp.Add(ctx, &rec); !e.Verified {
					b.Fatalf("entry %+v not verified", e)
				}
			}
		})
	}
}
