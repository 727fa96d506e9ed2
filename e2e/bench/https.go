package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Keep-alive GETs over TLS (issue 14's benchmark): direct TLS, through an
// egressd plain tunnel, through an egressd-inspected tunnel (terminated with
// the identity's CA, every request decided and audited), and through Squid
// with ssl_bump bump, all with the Go load generator.

// inspectIdentity is the identity of a proxy client when no identities are
// configured.
const inspectIdentity = "anonymous"

func (b *bench) httpsWorkload() *Workload {
	wl := &Workload{ID: "https", Title: "keep-alive GET 1 KiB over TLS", Unit: "req/s",
		CPUUnit: "ms per 1,000 requests", Latency: true,
		Note: fmt.Sprintf("%d keep-alive connections, Go load generator (wrk cannot CONNECT). Inspected: egressd terminates TLS with the client identity's CA and decides every request; Squid terminates with `ssl_bump bump` and its own CA; plain tunnel: TLS end to end.", b.o.conns)}
	direct := wl.target("direct TLS", kindDirect)
	tunnel := wl.target("egressd (tunnel)", kindEgressd)
	inspected := wl.target("egressd (inspected)", kindEgressd)
	inspected.Subject = true
	squid := wl.target("squid (ssl_bump)", kindPeer)

	e, roots, err := b.startInspecting()
	if errors.Is(err, errUnsupported) {
		inspected.fail(err.Error())
		e, err = b.startEgressd("egressd-tunnel", b.o.proxyCPU, egressdOpts{})
	}
	if err != nil {
		tunnel.fail("error: " + err.Error())
		inspected.fail("error: " + err.Error())
	} else {
		defer e.stop()
	}
	sq, err := b.startSquid("squid-bump", b.o.proxyCPU, true)
	if err != nil {
		squid.fail("error: " + err.Error())
	} else {
		defer sq.stop()
	}
	var squidRoots *x509.CertPool
	if sq != nil {
		pemBytes, err := os.ReadFile(filepath.Join(sq.dir, "squid-ca.pem"))
		if err == nil {
			squidRoots, err = parseCAs(pemBytes)
		}
		if err != nil {
			squid.fail("error: " + err.Error())
		}
	}

	https := fmt.Sprintf("%s:%d", originName, b.org.https)
	for round := range b.o.rounds {
		b.loadRound(direct, nil, loadSpec{target: fmt.Sprintf("127.0.0.1:%d", b.org.https), serverName: originName, roots: b.org.roots})
		if e != nil {
			b.loadRound(tunnel, e, loadSpec{proxy: e.addr, target: https, roots: b.org.roots})
			b.withProfile(e, "https-inspected", round, b.o.duration-time.Second, func() {
				b.loadRound(inspected, e, loadSpec{proxy: e.addr, target: fmt.Sprintf("%s:%d", originName, b.org.inspected), roots: roots})
			})
		}
		if sq != nil {
			b.loadRound(squid, sq, loadSpec{proxy: sq.addr, target: https, roots: squidRoots})
		}
	}
	return wl
}

// startInspecting starts egressd with inspection on and returns it with
// the pool holding its CA for inspectIdentity. errUnsupported (wrapped)
// says this build cannot inspect: the config or rule is refused, there is
// no `ca export`, or a handshake through the inspected rule does not meet
// egressd's certificate.
func (b *bench) startInspecting() (*running, *x509.CertPool, error) {
	return b.startInspectingWith(egressdOpts{inspect: true})
}

// startInspectingWith is startInspecting with more options (eo.inspect
// set).
func (b *bench) startInspectingWith(eo egressdOpts) (*running, *x509.CertPool, error) {
	name := "egressd-inspect"
	if eo.secret != "" {
		name = "egressd-inspect-secret"
	}
	e, err := b.startEgressd(name, b.o.proxyCPU, eo)
	if err != nil {
		// launch's error ends with the last lines egressd wrote; a refusal
		// names the inspect key, any other failure is an error.
		last := lastLines(err.Error(), 1)
		if !strings.Contains(last, "inspect") {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("%w (egressd refused the inspect config or rule: %s)", errUnsupported, last)
	}
	pemBytes, err := b.exportCA(e, inspectIdentity)
	if err == nil {
		var roots *x509.CertPool
		if roots, err = parseCAs(pemBytes); err == nil {
			err = probeInspected(e, b.org.inspected, roots)
			if err == nil {
				return e, roots, nil
			}
		}
	}
	e.stop()
	return nil, nil, fmt.Errorf("%w (%s)", errUnsupported, firstLine(err.Error()))
}

// probeInspected checks that a tunnel to the inspected port is terminated
// by egressd: the handshake verifies against egressd's CA, not the
// origin's.
func probeInspected(e *running, port int, roots *x509.CertPool) error {
	c, err := dialTunnel(e.addr, fmt.Sprintf("%s:%d", originName, port))
	if err != nil {
		return err
	}
	defer c.Close()
	tc := tls.Client(c, &tls.Config{ServerName: originName, RootCAs: roots})
	if err := tc.Handshake(); err != nil {
		return fmt.Errorf("no termination: %w", err)
	}
	return nil
}

// loadRound runs the Go load generator once for t, through p when set.
func (b *bench) loadRound(t *Target, p *running, spec loadSpec) {
	if t.Status != "" {
		return
	}
	spec.conns, spec.duration, spec.maxReqs = b.o.conns, b.o.duration, b.o.maxReqs
	var c0 float64
	if p != nil {
		c0 = p.cpu().Seconds()
	}
	res, err := runLoad(spec)
	if err != nil {
		t.fail("error: " + err.Error())
		return
	}
	r, err := res.round(p, c0)
	if err != nil {
		t.fail("error: " + err.Error())
		return
	}
	t.Rounds = append(t.Rounds, r)
	b.progress("%s: %.0f req/s over TLS", t.Name, r.Rate)
}
