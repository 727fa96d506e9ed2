package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/cmd/egressd/generation"
	"github.com/egressd/egressd/internal/admin"
)

// adminServer serves the admin handler with POST /v1/check deciding with
// the generation of cfgPath, and clients holding the tokens "check-token"
// (scope check) and "grant-token" (scope grant).
func adminServer(t *testing.T, cfgPath string) string {
	t.Helper()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := generation.Build(context.Background(), cfg, cfgPath, generation.Deciding, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	sum := func(tok string) string { s := sha256.Sum256([]byte(tok)); return hex.EncodeToString(s[:]) }
	auth, err := admin.NewAuth([]admin.Client{
		{Name: "tooling", TokenSHA256: sum("check-token"), Scopes: []string{admin.ScopeCheck}},
		{Name: "grants", TokenSHA256: sum("grant-token"), Scopes: []string{admin.ScopeGrant}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(admin.Handler(admin.Options{
		Auth:   auth,
		Routes: []admin.Route{checkRoute(func() *generation.Generation { return gen }, zap.NewNop())},
		Log:    zap.NewNop(),
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func tokenFile(t *testing.T, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// remoteArgs turns a local check's command line into the same check asked
// of url: --config dropped, --server and --token-file added.
func remoteArgs(args []string, url, tokenFile string) []string {
	out := []string{args[0], args[1], "--server", url, "--token-file", tokenFile}
	for i := 2; i < len(args); i++ {
		if args[i] == "--config" {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// TestCheckServer: a check asked of the admin listener prints what the
// local check of the same config prints, with the same exit status.
func TestCheckServer(t *testing.T) {
	cfg := writeConfig(t, t.TempDir(), batchConfig)
	url := adminServer(t, cfg)
	tok := tokenFile(t, "check-token")
	for _, req := range batchRequests {
		t.Run(req.Kind+" "+req.Method+req.URL+req.Target+req.Name+req.SQL, func(t *testing.T) {
			local := argsOf(cfg, req)
			lcode, lout, lerr := runCLI(local...)
			remote := remoteArgs(local, url, tok)
			rcode, rout, rerr := runCLI(remote...)
			if rcode != lcode || rout != lout {
				t.Errorf("egressd %q: exit %d\n%s%s\nlocally (%q): exit %d\n%s%s", remote, rcode, rout, rerr, local, lcode, lout, lerr)
			}
		})
	}
	t.Run("batch", func(t *testing.T) {
		stdin := jsonLines(t, batchRequests) + "not json\n"
		lcode, lout, _ := runCLIStdin(stdin, "check", "--batch", "--config", cfg)
		rcode, rout, rerr := runCLIStdin(stdin, "check", "--batch", "--server", url, "--token-file", tok)
		if rcode != lcode || rout != lout {
			t.Errorf("check --batch --server: exit %d\n%s%s\nlocally: exit %d\n%s", rcode, rout, rerr, lcode, lout)
		}
	})
	t.Run("identity from the environment token", func(t *testing.T) {
		t.Setenv(tokenEnv, "check-token")
		code, out, stderr := runCLI("check", "--server", url, "--identity", "team", "connect", "pypi.org:443")
		if code != 0 || !strings.Contains(out, `"identity":"team"`) {
			t.Errorf("check --server with $%s: exit %d, %s%s; want 0 for team", tokenEnv, code, out, stderr)
		}
	})
}

// TestCheckServerRefusesTokens: without a token, with an unknown one or
// one without scope check, nothing is decided and the error says what to
// fix (exit 2).
func TestCheckServerRefusesTokens(t *testing.T) {
	cfg := writeConfig(t, t.TempDir(), batchConfig)
	url := adminServer(t, cfg)
	t.Setenv(tokenEnv, "")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no token", nil, "--token-file FILE or set EGRESSD_ADMIN_TOKEN"},
		{"unknown token", []string{"--token-file", tokenFile(t, "guess")}, "refused the token (401)"},
		{"token without scope check", []string{"--token-file", tokenFile(t, "grant-token")}, `lacks scope "check"`},
		{"config with server", []string{"--token-file", tokenFile(t, "check-token"), "--config", cfg}, "drop --config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append(append([]string{"check", "connect", "--server", url, "--identity", "team"}, tt.args...), "pypi.org:443")
			code, out, stderr := runCLI(args...)
			if code != 2 || out != "" || !strings.Contains(stderr, tt.want) || (tt.name != "config with server" && !strings.Contains(stderr, "admin.clients")) {
				t.Errorf("egressd %q: exit %d, stdout %q, stderr %q; want exit 2, nothing decided, an error naming admin.clients and %q", args, code, out, stderr, tt.want)
			}
		})
	}
}
