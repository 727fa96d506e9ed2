package main

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Idle tunnels and the memory they cost: a fresh instance of each proxy,
// b.o.tunnels CONNECT tunnels to the holder opened and left silent, then
// the peak RSS of the proxy's processes.

// held counts the connections the holder has accepted, so the bench waits
// until every tunnel reached it instead of sleeping.
var held atomic.Int64

func (b *bench) idleWorkload() *Workload {
	wl := &Workload{ID: "idle", Title: fmt.Sprintf("%d idle tunnels, peak RSS", b.o.tunnels), Unit: "MiB",
		LowerIsBetter: true, Scale: b.o.tunnels,
		Note: "A fresh instance of each proxy; peak RSS (VmHWM) summed over the proxy's processes, read once every tunnel has reached the origin and before any is closed. egressd's note gives its peak through the teardown too: every tunnel closed at once, each with its completion record. tinyproxy is left out: it runs a thread per connection."}
	for _, pp := range proxyPeers() {
		if pp.name == "tinyproxy" || !b.wantPeer(pp.name) {
			continue
		}
		t := wl.target(pp.name, pp.kind)
		p, err := pp.start(b, b.o.proxyCPU)
		if err != nil {
			t.fail("error: " + err.Error())
			continue
		}
		var hwm int64
		if err := b.openIdle(p, func() {
			hwm = p.rss("VmHWM")
			b.saveMemProfiles(p, "idle")
		}); err != nil {
			t.fail("error: " + err.Error())
		} else {
			t.Rounds = append(t.Rounds, Round{Rate: float64(hwm) / 1024})
			b.progress("%s: %d idle tunnels, peak RSS %.0f MiB", t.Name, b.o.tunnels, float64(hwm)/1024)
			if p.admin != "" {
				b.noteTeardown(t, p)
			}
		}
		p.stop()
	}
	return wl
}

// noteTeardown waits until egressd has closed every tunnel (its active
// tunnels gauge at zero: every completion record appended) and notes its
// peak RSS through their teardown, the highest of every round.
func (b *bench) noteTeardown(t *Target, p *running) {
	err := waitFor(30*time.Second, func() error {
		v, err := metricValue(p.admin, `egressd_proxy_active{what="tunnels"}`)
		if err == nil && v != 0 {
			err = fmt.Errorf("%v tunnels still open", v)
		}
		return err
	})
	if err != nil {
		b.progress("%s: teardown: %v", t.Name, err)
		return
	}
	mib := float64(p.rss("VmHWM")) / 1024
	b.progress("%s: peak RSS through the teardown %.0f MiB", t.Name, mib)
	if mib > b.teardownMiB[t.Name] {
		if b.teardownMiB == nil {
			b.teardownMiB = map[string]float64{}
		}
		b.teardownMiB[t.Name] = mib
		t.Note = fmt.Sprintf("peak RSS through the teardown of every tunnel at once: %.0f MiB (the highest of every round)", mib)
	}
}

// openIdle opens the tunnels through p, waits until the holder has them
// all, calls held while they are, and closes them when it returns.
func (b *bench) openIdle(p *running, whileHeld func()) error {
	target := fmt.Sprintf("127.0.0.1:%d", b.org.holder)
	start := held.Load()
	conns := make([]net.Conn, b.o.tunnels)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	var mu sync.Mutex
	var firstErr error
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i := range conns {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if ctx.Err() != nil {
				return
			}
			c, err := dialTunnel(p.addr, target)
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				cancel()
				return
			}
			conns[i] = c
		})
	}
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("open tunnels: %w", firstErr)
	}
	deadline := time.Now().Add(30 * time.Second)
	for held.Load()-start < int64(b.o.tunnels) {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d tunnels reached the origin", held.Load()-start, b.o.tunnels)
		}
		time.Sleep(10 * time.Millisecond)
	}
	whileHeld()
	return nil
}
