package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The isolation topology: three network namespaces joined by two veth
// pairs, with addresses that exist only inside them.
//
//	sandbox 10.250.0.2/30 ── 10.250.0.1/30 egressd 10.250.0.5/30 ── 10.250.0.6/30 upstream
//
// The sandbox's default route points at egressd and the upstream's points
// back, so the only thing between the sandbox and the upstreams is that
// the egressd namespace does not forward (net.ipv4.ip_forward=0): the shape
// of a real deployment, where a sandbox's sole peer is egressd.
const (
	sandboxAddr    = "10.250.0.2"
	egressdSbAddr  = "10.250.0.1"
	egressdUpAddr  = "10.250.0.5"
	upstreamAddr   = "10.250.0.6"
	netnsCmdExpiry = 30 * time.Second
)

// topology names the namespaces of one test run.
type topology struct {
	sandbox, egressd, upstream string
}

// newTopology creates the namespaces and links, and removes them when the
// test ends, failed or not. It needs root and iproute2's ip, and fails the
// test loudly without them.
func newTopology(t *testing.T) *topology {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the isolation test creates network namespaces and must run as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("iproute2's ip is required (apt-get install iproute2): %v", err)
	}
	id := os.Getpid()
	topo := &topology{
		sandbox:  fmt.Sprintf("egressd-e2e-sb-%d", id),
		egressd:  fmt.Sprintf("egressd-e2e-eg-%d", id),
		upstream: fmt.Sprintf("egressd-e2e-up-%d", id),
	}
	for _, ns := range []string{topo.sandbox, topo.egressd, topo.upstream} {
		ipCmd(t, "netns", "add", ns)
		// Deleting a namespace destroys the veth ends inside it.
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v: %s", ns, err, out)
			}
		})
	}
	// Interface names are at most 15 bytes; they live only inside the
	// namespaces, so these fixed names cannot collide with another run.
	ipCmd(t, "link", "add", "name", "sb0", "netns", topo.sandbox, "type", "veth",
		"peer", "name", "eg-sb", "netns", topo.egressd)
	ipCmd(t, "link", "add", "name", "eg-up", "netns", topo.egressd, "type", "veth",
		"peer", "name", "up0", "netns", topo.upstream)

	setup := []struct {
		ns   string
		args []string
	}{
		{topo.sandbox, []string{"addr", "add", sandboxAddr + "/30", "dev", "sb0"}},
		{topo.egressd, []string{"addr", "add", egressdSbAddr + "/30", "dev", "eg-sb"}},
		{topo.egressd, []string{"addr", "add", egressdUpAddr + "/30", "dev", "eg-up"}},
		{topo.upstream, []string{"addr", "add", upstreamAddr + "/30", "dev", "up0"}},
		{topo.sandbox, []string{"link", "set", "lo", "up"}},
		{topo.egressd, []string{"link", "set", "lo", "up"}},
		{topo.upstream, []string{"link", "set", "lo", "up"}},
		{topo.sandbox, []string{"link", "set", "sb0", "up"}},
		{topo.egressd, []string{"link", "set", "eg-sb", "up"}},
		{topo.egressd, []string{"link", "set", "eg-up", "up"}},
		{topo.upstream, []string{"link", "set", "up0", "up"}},
		{topo.sandbox, []string{"route", "add", "default", "via", egressdSbAddr}},
		{topo.upstream, []string{"route", "add", "default", "via", egressdUpAddr}},
	}
	for _, s := range setup {
		ipCmd(t, append([]string{"-n", s.ns}, s.args...)...)
	}
	for _, knob := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
		nsRun(t, topo.egressd, "sh", "-c", "echo 0 > /proc/sys/"+knob)
		if got := strings.TrimSpace(nsMustRun(t, topo.egressd, "cat", "/proc/sys/"+knob)); got != "0" {
			t.Fatalf("egressd namespace %s = %q; want 0", knob, got)
		}
	}

	// `ip netns exec` bind-mounts /etc/netns/<ns>/resolv.conf over
	// /etc/resolv.conf: the sandbox's only resolver is egressd, as in a
	// deployment.
	etc := filepath.Join("/etc/netns", topo.sandbox)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(etc) }) // a temporary directory; a leftover is harmless
	resolv := "nameserver " + egressdSbAddr + "\noptions timeout:2 attempts:1\n"
	if err := os.WriteFile(filepath.Join(etc, "resolv.conf"), []byte(resolv), 0o644); err != nil {
		t.Fatal(err)
	}
	return topo
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// nsRun executes a command inside ns with the test's environment minus
// proxy variables, and returns its combined output and exit code; a command
// that cannot start fails the test. nsRunEnv adds env to that environment.
func nsRun(t *testing.T, ns string, args ...string) (string, int) {
	t.Helper()
	return nsRunEnv(t, ns, nil, args...)
}

func nsRunEnv(t *testing.T, ns string, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), netnsCmdExpiry)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, args...)...)
	cmd.Env = append(cleanEnv(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	case err != nil:
		t.Fatalf("ip netns exec %s %q: %v", ns, args, err)
	}
	return out.String(), 0
}

func nsMustRun(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, code := nsRun(t, ns, args...)
	if code != 0 {
		t.Fatalf("in %s: %q exit %d: %s", ns, args, code, out)
	}
	return out
}

// inNetns runs fn on an OS thread moved into ns. Sockets fn creates stay in
// ns for their whole life, whichever thread later uses them. The thread is
// never unlocked, so the runtime discards it when fn returns instead of
// reusing a thread in the wrong namespace.
func inNetns(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(filepath.Join("/run/netns", ns))
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// expose makes a service the test runs on loopback (an Upstream, a dnstest
// server, PostgreSQL) appear at addr inside ns, over network "tcp" or
// "udp": the listening socket is created in ns, and each connection or
// datagram is relayed to target from the test's own namespace. Only what
// can route to addr inside ns reaches the service.
func expose(t *testing.T, ns, network, addr, target string) {
	t.Helper()
	var ln net.Listener
	var pc net.PacketConn
	err := inNetns(ns, func() (err error) {
		if network == "udp" {
			pc, err = net.ListenPacket("udp", addr)
		} else {
			ln, err = net.Listen("tcp", addr)
		}
		return err
	})
	if err != nil {
		t.Fatalf("listen %s %s in %s: %v", network, addr, ns, err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
	)
	if pc != nil {
		t.Cleanup(func() { pc.Close(); wg.Wait() })
		wg.Go(func() { relayUDP(pc, target) })
		return
	}
	// Closing the listener and every relayed connection ends the relays
	// even if a client keeps an idle connection open.
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Go(func() {
				relayTCP(c, target)
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
			})
		}
	})
}

func relayTCP(c net.Conn, target string) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{})
	go func() {
		io.Copy(up, c)
		up.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	io.Copy(c, up)
	c.(*net.TCPConn).CloseWrite()
	<-done
}

// relayUDP answers each datagram with the target's one reply (DNS-shaped
// request/response), one exchange at a time.
func relayUDP(pc net.PacketConn, target string) {
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		up, err := net.Dial("udp", target)
		if err != nil {
			continue
		}
		up.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := up.Write(buf[:n]); err == nil {
			if m, err := up.Read(buf); err == nil {
				_, _ = pc.WriteTo(buf[:m], from) // UDP: a lost answer is the client's retry
			}
		}
		up.Close()
	}
}
