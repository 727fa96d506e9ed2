package main

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io/fs"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/internal/testport"
)

// egressdOpts selects the optional parts of an egressd instance.
type egressdOpts struct {
	// inspect adds the inspect section (a CA directory) and a rule that
	// terminates tunnels to originName on the origin's inspected port.
	inspect bool
	// gate, when set, is the Postgres gate's section and identities.
	gate string
	// ports are more loopback ports the internal allow entry opens.
	ports []int
	// secret, if set, is the value of one secret the instance loads, so
	// that it scans every request for it.
	secret string
	// arrivals adds the SOCKS5 and transparent listeners and the DNS
	// listener transparent clients resolve through (issue 26).
	arrivals bool
	// tunnelCopy, when set, is proxy.tunnel_copy.
	tunnelCopy string
	// auditSync, when set, is audit.sync; else the default (interval).
	auditSync string
	// syncInterval, when set, is audit.sync_interval; else the default.
	syncInterval string
}

// startEgressd runs egressd with the default bundle's modules, rules for
// the bench origin, policy and audit on, and limits raised past the load.
func (b *bench) startEgressd(name, cpus string, eo egressdOpts) (*running, error) {
	d, err := b.dir(name, "")
	if err != nil {
		return nil, err
	}
	pol := filepath.Join(d, "policy")
	if err := b.policyInit(pol); err != nil {
		return nil, err
	}
	og := b.org
	plain := []int{og.http, og.sink, og.tlsSink, og.holder}
	rules := []string{
		fmt.Sprintf(`{"id":"bench","hosts":["127.0.0.1"],"ports":%s,"tls":false}`, jsonInts(plain)),
		fmt.Sprintf(`{"id":"bench-tls","hosts":[%q],"ports":%s}`, originName, jsonInts([]int{og.https, og.tlsSink})),
	}
	inspect := ""
	if eo.inspect {
		rules = append(rules,
			// The body workload's tool and model rules, ahead of the
			// host-wide rule that inspects everything else.
			fmt.Sprintf(`{"id":"bench-mcp","hosts":[%q],"ports":[%d],"inspect":true,"paths":["/mcp"],"mcp":{"tools":["search_*"]}}`, originName, og.inspected),
			fmt.Sprintf(`{"id":"bench-model","hosts":[%q],"ports":[%d],"inspect":true,"paths":["/v1/chat/completions"],"llm":{"api":"openai","models":["gpt-4o*"],"max_output_tokens":1000}}`, originName, og.inspected),
			fmt.Sprintf(`{"id":"bench-inspect","hosts":[%q],"ports":[%d],"inspect":true}`, originName, og.inspected))
		inspect = fmt.Sprintf("inspect: {ca_dir: %s, upstream_ca_file: %s}\n", filepath.Join(d, "ca"), og.caFile)
	}
	if eo.secret != "" {
		sec, err := secretSection(d, eo.secret)
		if err != nil {
			return nil, err
		}
		inspect += sec
	}
	data := `{"rules":[` + strings.Join(rules, ",") + `]}`
	if err := os.WriteFile(filepath.Join(pol, "data.json"), []byte(data), 0o644); err != nil {
		return nil, err
	}
	addr, admin := loopback(), loopback()
	all := append(append(plain, og.https, og.inspected), eo.ports...)
	var socks, transparent, dnsListen, arrivals, auditSync string
	if eo.auditSync != "" {
		auditSync = ", sync: " + eo.auditSync
	}
	if eo.syncInterval != "" {
		auditSync += ", sync_interval: " + eo.syncInterval
	}
	dnsSection := fmt.Sprintf("dns: {upstreams: [%q]}\n", og.dns)
	if eo.arrivals {
		socks, transparent, dnsListen = loopback(), loopback(), loopback()
		arrivals = fmt.Sprintf("  socks_listen: %s\n  transparent_listen: %s\n", socks, transparent)
		dnsSection = fmt.Sprintf("dns: {upstreams: [%q], listen: %s}\n", og.dns, dnsListen)
	}
	if eo.tunnelCopy != "" {
		arrivals += fmt.Sprintf("  tunnel_copy: %s\n", eo.tunnelCopy)
	}
	cfg := fmt.Sprintf(`log: {level: warn}
proxy:
  listen: %s
%s  max_conns: 20000
  per_identity_max_conns: 20000
  per_identity_rate: 1000000
  per_identity_burst: 1000000
admin: {listen: %s}
# The default audit budget (10,000 records/s per identity) is meant to stop
# one sandbox from flooding the log; this load is one identity on purpose.
audit: {dir: %s, identity_rate: 100000000, identity_burst: 100000000%s}
%spolicy: {dir: %s}
internal:
  - cidr: 127.0.0.1
    ports: %s
    action: allow
%s%s`, addr, arrivals, admin, filepath.Join(d, "audit"), auditSync, dnsSection, pol, jsonInts(all), inspect, eo.gate)
	cfgPath := filepath.Join(d, "egressd.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	r, err := b.launch(name, cpus, d, addr, true, b.egressd, "serve", "--config", cfgPath)
	if err != nil {
		return nil, err
	}
	// The proxy port may open before the admin listener says ready.
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + admin + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) || r.exited() {
			r.stop()
			return nil, fmt.Errorf("%s: not healthy: %w", name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.config, r.admin = cfgPath, admin
	r.socks, r.transparent, r.dnsListen = socks, transparent, dnsListen
	return r, nil
}

// policyInit writes the bundle embedded in the egressd under test (not
// the one this program was built with: the binary may come from another
// tree, -egressd) without its tests, which assert the default rules the
// bench replaces.
func (b *bench) policyInit(dir string) error {
	if out, err := exec.Command(b.egressd, "policy", "init", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("egressd policy init: %w: %s", err, out)
	}
	return filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() && strings.HasSuffix(p, "_test.rego") {
			err = os.Remove(p)
		}
		return err
	})
}

// exportCA asks egressd for the PEM root of identity's CA.
func (b *bench) exportCA(r *running, identity string) ([]byte, error) {
	cmd := exec.Command(b.egressd, "ca", "export", "--identity", identity, "--config", r.config)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("egressd ca export: %w: %s", err, lastLines(errb.String(), 3))
	}
	return out.Bytes(), nil
}

func jsonInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return "[" + strings.Join(s, ",") + "]"
}

func freePort() int {
	port, err := testport.Free()
	if err != nil {
		panic(err)
	}
	return port
}

// writeCA writes a self-signed RSA CA as DIR/NAME.pem and DIR/NAME.key,
// for a peer that mints leaves itself (Squid's ssl_bump).
func writeCA(dir, name string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: "egressd bench " + name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".key"),
		pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600)
}

// parseCAs reads PEM certificates into a pool.
func parseCAs(pemBytes []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("no certificate in %q", firstBytes(pemBytes, 80))
	}
	return pool, nil
}

func firstBytes(b []byte, n int) string { return string(b[:min(len(b), n)]) }
