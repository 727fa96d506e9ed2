package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/egressd/egressd/internal/admin"
	"github.com/egressd/egressd/internal/fdlimit"
	"github.com/egressd/egressd/proxy/pggate"
)

// run binds the listeners, serves until ctx ends or a listener fails,
// reloading on SIGHUP, then drains.
func (d *daemon) run(ctx context.Context) error {
	b, err := d.bind()
	if err != nil {
		return err
	}
	running := []string{"proxy"}
	if d.dns != nil {
		running = append(running, "dns")
	}
	ready := []admin.Check{
		// First: a load balancer must stop sending the moment the drain
		// starts, whatever else holds.
		{Name: "draining", Fn: func(context.Context) error {
			if d.draining.Load() {
				return errors.New("egressd is shutting down")
			}
			return nil
		}},
	}
	if d.gate != nil {
		running = append(running, "postgres")
		// Fails readiness as a whole too: a sandbox sent here would have
		// its logins refused upstream_unavailable. /readyz/proxy leaves
		// it out for a balancer of the proxy alone.
		ready = append(ready, admin.Check{Name: "postgres", Fn: d.gate.Ready, Listeners: []string{"postgres"}})
	}
	adminSrv := &http.Server{
		Handler: admin.Handler(admin.Options{
			Gatherer:  d.registry,
			Listeners: running,
			Ready: append(ready, []admin.Check{
				{Name: "policy", Fn: func(context.Context) error {
					if d.gen.Current().Engine.Digest() == "" {
						return errors.New("no policy loaded")
					}
					return nil
				}},
				{Name: "audit", Fn: func(context.Context) error { return d.audit.Ready() }},
				admin.DNSCheck(d.cfg.DNS.Upstreams),
			}...),
			Reload: d.gen.Reload,
			Auth:   d.adminAuth,
			Routes: append(d.grants.Routes(), checkRoute(d.gen.Current, d.log.Named("admin"))),
			Log:    d.log,
		}),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          zap.NewStdLog(d.log.Named("admin")),
	}
	metricsSrv := &http.Server{
		Handler:           admin.MetricsHandler(d.registry),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          zap.NewStdLog(d.log.Named("metrics")),
	}
	d.grants.Start()
	defer d.grants.Stop()
	errc := make(chan error, 7)
	go func() { errc <- d.proxy.Serve(b.proxy) }()
	// The proxy's Shutdown closes these with its own listener.
	if b.socks != nil {
		go func() { errc <- d.proxy.ServeSOCKS(b.socks) }()
	}
	if b.transparent != nil {
		go func() { errc <- d.proxy.ServeTransparent(b.transparent) }()
	}
	// The admin listener is never refused for want of descriptors; at
	// the very end it accepts into a spare one.
	go func() { errc <- adminSrv.Serve(fdlimit.NewSpare(b.admin)) }()
	dnsCtx, stopDNS := context.WithCancel(ctx)
	defer stopDNS()
	if d.dns != nil {
		go func() { errc <- d.dns.Serve(dnsCtx, b.dnsPC, b.dnsLn) }()
	}
	if d.gate != nil {
		go func() { errc <- d.gate.Serve(b.gate) }()
	}
	if b.metrics != nil {
		go func() { errc <- metricsSrv.Serve(b.metrics) }()
	}
	d.log.Info("serving", append(b.fields(), zap.String("policy", d.gen.Current().Engine.Digest()))...)

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var serveErr error
loop:
	for {
		select {
		case <-hup:
			if _, err := d.gen.Reload(ctx); err != nil {
				d.log.Warn("reload refused; previous configuration stays", zap.Error(err))
			}
		case err := <-errc:
			serveErr = err
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), d.cfg.Proxy.DrainTimeout)
	defer cancel()
	d.drain(sctx, stopDNS)
	if err := adminSrv.Shutdown(sctx); err != nil {
		d.log.Warn("drain deadline passed; closed the admin listener's remaining connections", zap.Error(err))
	}
	if err := metricsSrv.Shutdown(sctx); err != nil {
		d.log.Warn("drain deadline passed; closed the metrics listener's remaining connections", zap.Error(err))
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) && !errors.Is(serveErr, pggate.ErrClosed) {
		return serveErr
	}
	d.log.Info("stopped")
	return nil
}

// drain is one drain for every client listener: /readyz fails at once,
// the proxy and the Postgres gate stop accepting together and drain in
// parallel until ctx's deadline (proxy.drain_timeout), the DNS server
// stops; each records what it cuts at the deadline. The admin listener
// stays up meanwhile, answering /readyz 503.
func (d *daemon) drain(ctx context.Context, stopDNS func()) {
	d.draining.Store(true)
	d.log.Info("draining", zap.Duration("deadline", d.cfg.Proxy.DrainTimeout))
	stopDNS()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := d.proxy.Shutdown(ctx); err != nil {
			d.log.Warn("drain deadline passed; cut the remaining proxy connections", zap.Error(err))
		}
	})
	if d.gate != nil {
		wg.Go(func() {
			if err := d.gate.Shutdown(ctx); err != nil {
				d.log.Warn("drain deadline passed; ended the remaining postgres sessions", zap.Error(err))
			}
		})
	}
	wg.Wait()
}
