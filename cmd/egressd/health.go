package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"time"
)

// runHealth is the container HEALTHCHECK and the Kubernetes exec probe. It
// runs inside the egressd container because the admin listener is bound to
// loopback, which neither docker nor the kubelet can reach from outside.
func runHealth(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	helpText{
		synopsis: []string{"health [--admin IP:PORT] [--live] [--timeout D]"},
		about: "GET the admin listener's /readyz (--live: /healthz) and exit by its answer: the container HEALTHCHECK and the Kubernetes exec probe, " +
			"run inside the egressd container because the admin listener is loopback-only.",
		exit: "0 ready (or live), 1 not, or no answer, 2 a usage error",
	}.install(fs)
	admin := fs.String("admin", "127.0.0.1:9090", "admin listener `IP:PORT` (admin.listen)")
	live := fs.Bool("live", false, "check liveness (/healthz) instead of readiness (/readyz)")
	timeout := fs.Duration("timeout", 2*time.Second, "give up after this long")
	pos, err := parseFlags(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErrorf("health takes no arguments, got %q", pos)
	}
	if _, err := netip.ParseAddrPort(*admin); err != nil {
		return usageErrorf("--admin must be IP:port, got %q", *admin)
	}
	path := "/readyz"
	if *live {
		path = "/healthz"
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := probe(ctx, "http://"+*admin+path); err != nil {
		return &exitError{code: 1, err: err}
	}
	fmt.Fprintf(stdout, "%s ok\n", path)
	return nil
}

// probe GETs url and succeeds only on 200. It never uses a proxy: an
// HTTP_PROXY left in the container environment must not divert the probe.
func probe(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("health request: %w", err)
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: %s answered %s: %s", url, resp.Status, body)
	}
	return nil
}
