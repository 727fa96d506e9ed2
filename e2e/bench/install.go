package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// What the workloads need, checked before anything starts and installed
// with -install: Debian packages through apt-get (one update, one
// install), smokescreen through `go install` at a pinned version into a
// cache directory. A missing dependency is an error that says how to get
// it, never a skipped peer.

// smokescreenModule is the pinned smokescreen the bench builds.
const smokescreenModule = "github.com/stripe/smokescreen@v0.1.0"

// debPackage is a Debian package and the workloads or peers that need it.
type debPackage struct {
	name  string
	need  func(b *bench) bool
	where string // a file the package installs
}

var debPackages = []debPackage{
	// squid-openssl conflicts with squid and serves both the plain and the
	// ssl_bump runs.
	{"squid-openssl", func(b *bench) bool { return b.wantPeer("squid") || b.want("https") }, "/usr/lib/squid/security_file_certgen"},
	{"tinyproxy", func(b *bench) bool { return b.wantPeer("tinyproxy") }, "/usr/bin/tinyproxy"},
	{"pgbouncer", func(b *bench) bool { return b.want("pgbench") }, "/usr/sbin/pgbouncer"},
	{"postgresql", func(b *bench) bool { return b.want("pgbench") }, "/usr/bin/pgbench"},
	{"wrk", func(b *bench) bool { return b.want("get") || b.want("get-paced") || b.want("get-unpinned") }, "/usr/bin/wrk"},
}

// requirements finds (or with -install, installs) what the run needs.
func (b *bench) requirements() error {
	var missing []string
	for _, p := range debPackages {
		if p.need(b) && !installed(p.name) {
			missing = append(missing, p.name)
		}
	}
	if len(missing) > 0 {
		if !b.o.install {
			return fmt.Errorf("missing Debian packages %s: rerun with -install, or apt-get install -y %s",
				strings.Join(missing, ", "), strings.Join(missing, " "))
		}
		if err := aptInstall(missing); err != nil {
			return err
		}
	}
	for _, p := range debPackages {
		if p.need(b) {
			if _, err := os.Stat(p.where); err != nil {
				return fmt.Errorf("package %s is installed but %s is missing: reinstall it (apt-get install --reinstall %s)", p.name, p.where, p.name)
			}
		}
	}
	if b.wantPeer("smokescreen") {
		return b.findSmokescreen()
	}
	return nil
}

func installed(pkg string) bool {
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Status}", pkg).Output()
	return err == nil && bytes.HasSuffix(bytes.TrimSpace(out), []byte("installed"))
}

func aptInstall(pkgs []string) error {
	for _, args := range [][]string{{"update"}, append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)} {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("apt-get %s: %w", args[0], err)
		}
	}
	return nil
}

// findSmokescreen sets b.smokescreen to the pinned build in the cache,
// building it there with -install.
func (b *bench) findSmokescreen() error {
	cache, err := os.UserCacheDir()
	if err != nil {
		return fmt.Errorf("smokescreen: %w", err)
	}
	bin := filepath.Join(cache, "egressd-bench", strings.ReplaceAll(filepath.Base(smokescreenModule), "@", "-"))
	b.smokescreen = filepath.Join(bin, "smokescreen")
	if _, err := os.Stat(b.smokescreen); err == nil {
		return nil
	}
	if !b.o.install {
		return fmt.Errorf("smokescreen not built at %s: rerun with -install (go install %s)", b.smokescreen, smokescreenModule)
	}
	cmd := exec.Command("go", "install", smokescreenModule)
	// Outside the module: the pinned version alone decides the build.
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOBIN="+bin, "GOFLAGS=")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go install %s: %w", smokescreenModule, err)
	}
	return nil
}
