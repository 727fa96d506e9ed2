package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The proxies: egressd, its peers and the bare relay, each started in a
// directory of its own under the run's work directory, on a free loopback
// port, pinned to cpus (not pinned when cpus is empty).

// running is a started proxy.
type running struct {
	*proc
	addr string
	// names: the proxy resolves originName (egressd, Squid, smokescreen
	// and the relay do; tinyproxy only asks the system resolver, so it is
	// given 127.0.0.1, which changes nothing for a byte relay).
	names bool
	// dir is the instance's own directory.
	dir string
	// config is egressd's config file, for its CLI (ca export).
	config string
	// admin is egressd's admin listener (pprof).
	admin string
	// socks, transparent and dnsListen are egressd's SOCKS5, transparent
	// and DNS listeners, when started with egressdOpts.arrivals.
	socks, transparent, dnsListen string
}

// proxyPeer is one proxy the HTTP workloads run through.
type proxyPeer struct {
	name  string
	kind  string
	start func(b *bench, cpus string) (*running, error)
}

// proxyPeers are the HTTP-side targets, in the order each round runs them.
func proxyPeers() []proxyPeer {
	return []proxyPeer{
		{"egressd", kindEgressd, func(b *bench, cpus string) (*running, error) {
			return b.startEgressd("egressd", cpus, egressdOpts{arrivals: b.want("connect") || b.want("connect-tls")})
		}},
		// Not in the default -peers: egressd with its tunnels copied
		// through a buffer instead of spliced (proxy.tunnel_copy), beside
		// the default in the CONNECT workloads.
		{"egressd-buffer", kindEgressd, func(b *bench, cpus string) (*running, error) {
			return b.startEgressd("egressd-buffer", cpus, egressdOpts{tunnelCopy: "buffer"})
		}},
		// Not in the default -peers: egressd with audit.sync: always (an
		// fsync before every decision goes on), beside the default
		// sync: interval in the GET workloads (issue 28).
		{"egressd-always", kindEgressd, func(b *bench, cpus string) (*running, error) {
			return b.startEgressd("egressd-always", cpus, egressdOpts{auditSync: "always"})
		}},
		windowPeer(20),
		windowPeer(50),
		{"squid", kindPeer, func(b *bench, cpus string) (*running, error) { return b.startSquid("squid", cpus, false) }},
		{"tinyproxy", kindPeer, (*bench).startTinyproxy},
		{"smokescreen", kindPeer, (*bench).startSmokescreen},
		{"relay", kindCeiling, (*bench).startRelay},
		// Not in the default -peers: the library egressd builds on, bare.
		{"goproxy", kindCeiling, (*bench).startGoproxy},
	}
}

// windowPeer is egressd-windowMS, not in the default -peers: egressd with
// an audit window (audit.sync_interval) of ms milliseconds instead of the
// default 10, to size what the window costs the tail (issue 28).
func windowPeer(ms int) proxyPeer {
	name := fmt.Sprintf("egressd-window%d", ms)
	return proxyPeer{name, kindEgressd, func(b *bench, cpus string) (*running, error) {
		return b.startEgressd(name, cpus, egressdOpts{syncInterval: fmt.Sprintf("%dms", ms)})
	}}
}

// dir makes a fresh directory for one proxy instance, owned by owner when
// it is not empty (for daemons that drop root).
func (b *bench) dir(name, owner string) (string, error) {
	d, err := os.MkdirTemp(b.work, name+"-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(d, 0o755); err != nil {
		return "", err
	}
	if owner != "" {
		if err := chownR(d, owner); err != nil {
			return "", err
		}
	}
	return d, nil
}

func chownR(path, owner string) error {
	u, err := user.Lookup(owner)
	if err != nil {
		return fmt.Errorf("user %s: %w", owner, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return filepath.Walk(path, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

func loopback() string { return fmt.Sprintf("127.0.0.1:%d", freePort()) }

// launch starts argv and waits until it listens on addr; the report lists
// the command.
func (b *bench) launch(name, cpus, dir, addr string, names bool, argv ...string) (*running, error) {
	b.command(name, dir, cpus, argv)
	p, err := startProc(name, cpus, filepath.Join(dir, "output.log"), argv...)
	if err != nil {
		return nil, err
	}
	if err := waitTCP(p, addr, 30*time.Second); err != nil {
		p.stop()
		out, _ := os.ReadFile(filepath.Join(dir, "output.log"))
		return nil, fmt.Errorf("%w\n%s", err, lastLines(string(out), 15))
	}
	return &running{proc: p, addr: addr, names: names, dir: dir}, nil
}

// command records how name was started, paths in its directory as $DIR
// and this program as bench.
func (b *bench) command(name, dir, cpus string, argv []string) {
	self, _ := os.Executable()
	var parts []string
	if cpus != "" {
		parts = append(parts, "taskset", "-c", cpus)
	}
	for _, a := range argv {
		a = strings.ReplaceAll(a, dir, "$DIR")
		a = strings.ReplaceAll(a, b.work, "$WORK")
		if a == self {
			a = "bench"
		}
		parts = append(parts, a)
	}
	if b.res.Commands == nil {
		b.res.Commands = map[string]string{}
	}
	b.res.Commands[name] = strings.Join(parts, " ")
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// startSquid runs Squid as Debian's package would serve a production
// deploy: access log on (through its log daemon), caching off, DNS through
// a hosts file naming the origin. With bump, its port terminates TLS with
// its own generated CA (ssl_bump bump) and verifies the origin against
// the origin's CA.
func (b *bench) startSquid(name, cpus string, bump bool) (*running, error) {
	d, err := b.dir(name, "")
	if err != nil {
		return nil, err
	}
	addr := loopback()
	port := "http_port " + addr
	var tlsConf string
	if bump {
		if err := writeCA(d, "squid-ca"); err != nil {
			return nil, err
		}
		db := filepath.Join(d, "ssl_db")
		if out, err := exec.Command("/usr/lib/squid/security_file_certgen", "-c", "-s", db, "-M", "16MB").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("squid: initialise %s: %w\n%s", db, err, out)
		}
		port += fmt.Sprintf(" ssl-bump tls-cert=%s/squid-ca.pem tls-key=%s/squid-ca.key generate-host-certificates=on dynamic_cert_mem_cache_size=16MB", d, d)
		tlsConf = fmt.Sprintf(`sslcrtd_program /usr/lib/squid/security_file_certgen -s %s -M 16MB
sslcrtd_children 4 startup=1 idle=1
acl step1 at_step SslBump1
ssl_bump peek step1
ssl_bump bump all
tls_outgoing_options cafile=%s
`, db, b.org.caFile)
	}
	conf := fmt.Sprintf(`%s
%s
pid_filename %s/squid.pid
cache_log %s/cache.log
access_log daemon:%s/access.log squid
cache deny all
cache_mem 0 MB
coredump_dir %s
cache_effective_user proxy
hosts_file %s
shutdown_lifetime 0 seconds
max_filedescriptors 16384
http_access allow localhost
http_access deny all
`, port, tlsConf, d, d, d, d, b.org.hostsFile)
	if err := os.WriteFile(filepath.Join(d, "squid.conf"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if err := chownR(d, "proxy"); err != nil {
		return nil, err
	}
	return b.launch(name, cpus, d, addr, true, "squid", "-N", "-f", filepath.Join(d, "squid.conf"))
}

// startTinyproxy runs tinyproxy at LogLevel Warning: at Info it writes
// (and flushes) a line per request.
func (b *bench) startTinyproxy(cpus string) (*running, error) {
	d, err := b.dir("tinyproxy", "tinyproxy")
	if err != nil {
		return nil, err
	}
	addr := loopback()
	_, port, _ := net.SplitHostPort(addr)
	conf := fmt.Sprintf(`User tinyproxy
Group tinyproxy
Port %s
Listen 127.0.0.1
Timeout 600
LogFile "%s/tinyproxy.log"
LogLevel Warning
PidFile "%s/tinyproxy.pid"
MaxClients 6000
Allow 127.0.0.1
`, port, d, d)
	if err := os.WriteFile(filepath.Join(d, "tinyproxy.conf"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return b.launch("tinyproxy", cpus, d, addr, false, "tinyproxy", "-d", "-c", filepath.Join(d, "tinyproxy.conf"))
}

// startSmokescreen runs smokescreen with an enforcing egress ACL that
// allows the origin, the closest thing to egressd's policy it has.
func (b *bench) startSmokescreen(cpus string) (*running, error) {
	d, err := b.dir("smokescreen", "")
	if err != nil {
		return nil, err
	}
	acl := fmt.Sprintf(`---
version: v1
services: []
default:
  name: bench
  project: bench
  action: enforce
  allowed_domains:
    - 127.0.0.1
    - %s
`, originName)
	if err := os.WriteFile(filepath.Join(d, "acl.yaml"), []byte(acl), 0o644); err != nil {
		return nil, err
	}
	// Without a client certificate smokescreen knows no role; the ACL's
	// default entry then applies.
	conf := fmt.Sprintf("allow_missing_role: true\nacl_file: %s\nallow_ranges: [127.0.0.0/8]\nresolver_addresses: [%q]\n",
		filepath.Join(d, "acl.yaml"), b.org.dns)
	if err := os.WriteFile(filepath.Join(d, "smokescreen.yaml"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	addr := loopback()
	_, port, _ := net.SplitHostPort(addr)
	return b.launch("smokescreen", cpus, d, addr, true, b.smokescreen,
		"--config-file", filepath.Join(d, "smokescreen.yaml"), "--listen-ip", "127.0.0.1", "--listen-port", port)
}

// startRelay runs this program's bare relay (-serve-relay).
func (b *bench) startRelay(cpus string) (*running, error) {
	return b.launchSelf("relay", "relay", cpus, true, "-serve-relay", "-relay-dns", b.org.dns)
}

// startGoproxy runs this program's bare goproxy (-serve-goproxy).
func (b *bench) startGoproxy(cpus string) (*running, error) {
	return b.launchSelf("goproxy", "goproxy", cpus, true, "-serve-goproxy", "-relay-dns", b.org.dns)
}

// launchSelf runs this program as one of its bare peers: serveFlag with a
// fresh loopback address, then args, in a directory named after dirName.
func (b *bench) launchSelf(name, dirName, cpus string, names bool, serveFlag string, args ...string) (*running, error) {
	d, err := b.dir(dirName, "")
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr := loopback()
	return b.launch(name, cpus, d, addr, names, append([]string{self, serveFlag, addr}, args...)...)
}
