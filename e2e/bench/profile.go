package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// With -profile PREFIX, egressd's CPU profile during its first round of
// each workload is saved as PREFIX-WORKLOAD.pprof (from pprof on its admin
// listener): where a target is missed, the profile shows why.

// withProfile runs measure, profiling p (egressd) meanwhile when asked to
// and this is the first round.
func (b *bench) withProfile(p *running, name string, round int, d time.Duration, measure func()) {
	if b.o.profile == "" || p == nil || p.admin == "" || round != 0 {
		measure()
		return
	}
	file := fmt.Sprintf("%s-%s.pprof", b.o.profile, name)
	errc := make(chan error, 1)
	go func() { errc <- fetchProfile(p.admin, file, max(1, int(d.Seconds()))) }()
	measure()
	if err := <-errc; err != nil {
		b.progress("profile %s: %v", name, err)
	} else {
		b.progress("wrote %s", file)
	}
}

func fetchProfile(admin, file string, secs int) error {
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", admin, secs))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pprof: %s", resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close() //nolint:errcheck // the write already failed; that error is returned
		return err
	}
	return f.Close()
}
