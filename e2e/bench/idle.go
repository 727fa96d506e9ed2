package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Idle tunnels and the RSS they cost.

// startHolder accepts connections and keeps them open without a byte.
func startHolder() (int, error) {
	return serveTCP(func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
}

func benchIdle(o options, e *egressd, port int) error {
	before, _ := e.status("VmRSS")
	target := fmt.Sprintf("127.0.0.1:%d", port)
	conns := make([]net.Conn, o.tunnels)
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
			c, err := dialTunnel(e.proxy, target)
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
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	if firstErr != nil {
		return fmt.Errorf("open tunnels: %w", firstErr)
	}
	time.Sleep(2 * time.Second)
	rss, err := e.status("VmRSS")
	if err != nil {
		return err
	}
	hwm, err := e.status("VmHWM")
	if err != nil {
		return err
	}
	fmt.Printf("idle tunnels: %d open; egressd RSS %d MiB (before %d MiB), peak RSS %d MiB (target <= 200) %s\n",
		o.tunnels, rss>>10, before>>10, hwm>>10, verdict(hwm>>10 <= 200))
	return nil
}
