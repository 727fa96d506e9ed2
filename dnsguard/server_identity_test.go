package dnsguard

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/internal/identity"
)

// TestServerWarnsWhenNoIdentityCanMatch (issue 25 item 1): a DNS query
// carries no credentials, so identities with only tokens make every query
// unknown_client. Building the server (serve's start) and reloading it
// say so in the log.
func TestServerWarnsWhenNoIdentityCanMatch(t *testing.T) {
	sum := sha256.Sum256([]byte("agent-1-token"))
	tokenSum := hex.EncodeToString(sum[:])
	tests := []struct {
		name string
		ids  identity.Config
		warn bool
	}{
		{"no identities: every client is anonymous", nil, false},
		{"token only", identity.Config{{ID: "agent-1", TokenSHA256: tokenSum}}, true},
		{"scram only", identity.Config{{ID: "agent-1", SCRAMSHA256: "SCRAM-SHA-256$4096:c2FsdA==$a:b"}}, true},
		{"one identity with sources", identity.Config{
			{ID: "agent-1", TokenSHA256: tokenSum},
			{ID: "agent-2", Sources: []string{"10.244.0.0/16"}},
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ids, err := identity.New(tt.ids)
			if err != nil {
				t.Fatal(err)
			}
			core, logs := observer.New(zap.WarnLevel)
			r, _ := newTestResolver(t, testConfig("127.0.0.1:1"), nil)
			s, err := NewServer(ServerOptions{Config: testConfig("127.0.0.1:1"), Decider: fakeDecider{}, Resolver: r,
				Audit: &audittest.Recorder{}, Identities: ids, Log: zap.New(core)})
			if err != nil {
				t.Fatalf("NewServer: %v", err)
			}
			const msg = "no identity lists sources"
			want := 0
			if tt.warn {
				want = 1
			}
			if got := logs.FilterMessageSnippet(msg).Len(); got != want {
				t.Errorf("NewServer: %d warnings %q; want %d", got, msg, want)
			}
			s.Reload(fakeDecider{}, ids)
			if got := logs.FilterMessageSnippet(msg).Len(); got != 2*want {
				t.Errorf("NewServer, Reload: %d warnings %q; want %d", got, msg, 2*want)
			}
		})
	}
}
