package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/cmd/egressd/grants"
	"github.com/egressd/egressd/internal/admin"
)

// grantExit is every grant action's exit status.
const grantExit = "0 done, 1 the admin listener refused or could not be reached (its answer is printed), 2 usage error"

var grantActions = map[string]helpText{
	"list": {
		synopsis: []string{"grant list [--server URL] [--token-file FILE] [--config FILE]"},
		summary:  "print the grants in force, soonest expiry first",
		about:    "Print the grants in force on the egressd whose admin listener --server is, as one JSON object {\"grants\": […]}.",
		exit:     grantExit,
	},
	"revoke": {
		synopsis: []string{"grant revoke [--server URL] [--token-file FILE] [--config FILE] ID"},
		summary:  "end a grant before its expiry",
		about:    "End grant ID now: it stops deciding and the tunnels opened under it are closed, as at its expiry. The revocation is recorded with who asked.",
		args:     [][2]string{{"ID", "the grant's id (egressd grant list)"}},
		exit:     grantExit,
	},
}

// grantHelp is the help of `egressd grant` itself, which creates a grant.
var grantHelp = helpText{
	synopsis: []string{
		"grant --from-request ID --ttl D [--tunnel] [--server URL] [--token-file FILE] [--config FILE]",
		"grant --identity ID --method M --url URL --ttl D [flags]",
		"grant --identity ID --url https://HOST:PORT --tunnel --ttl D [flags]",
		"grant list | revoke ID",
	},
	about: "Allow an identity what a rule does not, for a while: exactly the method, host, port and path of the denied request " +
		"--from-request names (the id in its X-Egressd-Request header), or of --method and --url. The grant takes effect at once, " +
		"expires by itself after --ttl (at most 168h), is recorded in the audit log with who granted it, and shows in check output " +
		"as rule grant:ID. It never opens an opaque CONNECT tunnel or allows a whole host unless --tunnel says so, and never lifts " +
		"the address floor, a refused request fact or a secret leaving. The admin listener needs a bearer token (--token-file, " +
		"or EGRESSD_ADMIN_TOKEN) whose sha256 is in admin.clients with scope grant. Grants are per replica.",
	actions: table(grantActions, func(h helpText) string { return h.summary }),
	exit:    grantExit,
}

// adminFlags are the flags of every command that talks to the admin
// listener's authenticated routes.
type adminFlags struct {
	server, tokenFile, config string
}

func (f *adminFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.server, "server", "", "admin listener `URL` (default: http:// and admin.listen of --config)")
	fs.StringVar(&f.tokenFile, "token-file", "", "read the bearer token from `FILE` (default: $EGRESSD_ADMIN_TOKEN)")
	fs.StringVar(&f.config, "config", "", "config `FILE` whose admin.listen is the default --server")
}

// adminClient talks to one admin listener with one token.
type adminClient struct {
	base, token string
	http        *http.Client
}

// client resolves the server and the token. Missing either is a usage
// error saying where to put it.
func (f *adminFlags) client() (*adminClient, error) {
	base := f.server
	if base == "" {
		cfg, err := config.Load(f.config)
		if err != nil {
			return nil, loadError(err)
		}
		base = "http://" + cfg.Admin.Listen
	}
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageErrorf("--server must be an http:// or https:// URL of the admin listener, got %q", base)
	}
	tok, err := adminToken(f.tokenFile, "grant", admin.ScopeGrant)
	if err != nil {
		return nil, err
	}
	return &adminClient{base: strings.TrimSuffix(base, "/"), token: tok, http: adminHTTPClient(30 * time.Second)}, nil
}

// tokenEnv is where the admin listener's clients (`check --server`,
// `grant`) read their token from when no --token-file is given.
const tokenEnv = "EGRESSD_ADMIN_TOKEN"

// adminToken is the bearer token of a client of the admin listener's
// authenticated routes: --token-file's content, else $EGRESSD_ADMIN_TOKEN.
// cmd names the command and scope the scope it needs, in the error.
func adminToken(tokenFile, cmd, scope string) (string, error) {
	tok := os.Getenv(tokenEnv)
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return "", usageErrorf("%s: read --token-file: %v", cmd, err)
		}
		tok = string(b)
	}
	if tok = strings.TrimSpace(tok); tok == "" {
		return "", usageErrorf("%s: no admin token: pass --token-file FILE or set %s to a token whose sha256 is in admin.clients with scope %s", cmd, tokenEnv, scope)
	}
	return tok, nil
}

// adminHTTPClient is the client that carries an admin token. Never through
// a proxy: an HTTP_PROXY in the environment (egressd itself, inside a
// sandbox) must not see the token.
func adminHTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{Proxy: nil}}
}

// do sends one request and writes a 2xx answer's body to stdout; any other
// answer is exit 1 with the listener's message.
func (c *adminClient) do(method, path string, body any, stdout io.Writer) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, c.base+path, rd)
	if err != nil {
		return usageErrorf("--server: %v", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("%s %s: %w (is egressd serving there? --server or admin.listen of --config names the admin listener)", method, c.base+path, err)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("%s %s: read answer: %w", method, c.base+path, err)}
	}
	if resp.StatusCode/100 != 2 {
		return &exitError{code: 1, err: fmt.Errorf("%s %s: %s: %s", method, c.base+path, resp.Status, strings.TrimSpace(string(b)))}
	}
	_, err = stdout.Write(b)
	return err
}

// runGrant is `egressd grant …`: create, or the list and revoke actions.
func runGrant(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		if _, ok := grantActions[args[0]]; ok {
			return runGrantAction(args[0], args[1:], stdout, stderr)
		}
	}
	fs := flag.NewFlagSet("grant", flag.ContinueOnError)
	grantHelp.install(fs)
	var af adminFlags
	af.register(fs)
	var req grants.CreateRequest
	fs.StringVar(&req.FromRequest, "from-request", "", "grant exactly what the denied request `ID` asked for")
	fs.StringVar(&req.Identity, "identity", "", "the identity `ID` to grant (without --from-request)")
	fs.StringVar(&req.Method, "method", "", "the HTTP `METHOD` to grant (without --from-request)")
	fs.StringVar(&req.URL, "url", "", "the absolute `URL` to grant: scheme, host, port and path, never the query (without --from-request)")
	fs.BoolVar(&req.Tunnel, "tunnel", false, "grant the whole host and port: opens an opaque CONNECT tunnel")
	fs.StringVar(&req.TTL, "ttl", "", "how long the grant lasts, a `DURATION` such as 30m or 1h, at most 168h (required)")
	pos, err := parseFlags(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErrorf("grant takes flags only, or the action list or revoke; got %q (see egressd grant -h)", pos)
	}
	if ttl, err := time.ParseDuration(req.TTL); err != nil || ttl <= 0 {
		return usageErrorf("--ttl is required: how long the grant lasts, e.g. --ttl 1h")
	}
	if req.FromRequest == "" && (req.Identity == "" || req.URL == "" || (req.Method == "" && !req.Tunnel)) {
		return usageErrorf("say what to grant: --from-request ID, or --identity, --method and --url (see egressd grant -h)")
	}
	c, err := af.client()
	if err != nil {
		return err
	}
	return c.do(http.MethodPost, "/v1/grants", req, stdout)
}

func runGrantAction(action string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("grant "+action, flag.ContinueOnError)
	grantActions[action].install(fs)
	var af adminFlags
	af.register(fs)
	pos, err := parseFlags(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	switch {
	case action == "list" && len(pos) != 0:
		return usageErrorf("grant list takes no arguments, got %q", pos)
	case action == "revoke" && len(pos) != 1:
		return usageErrorf("grant revoke takes one argument, the grant's id (egressd grant list), got %d", len(pos))
	}
	c, err := af.client()
	if err != nil {
		return err
	}
	if action == "list" {
		return c.do(http.MethodGet, "/v1/grants", nil, stdout)
	}
	return c.do(http.MethodDelete, "/v1/grants/"+url.PathEscape(pos[0]), nil, stdout)
}
