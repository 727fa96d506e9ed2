package deploy

import (
	"bufio"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
)

// stage is one FROM … block of the Dockerfile: its instructions with line
// continuations joined.
type stage struct {
	from  string
	instr []string
}

func parseDockerfile(t *testing.T) []stage {
	t.Helper()
	f, err := os.Open("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stages []stage
	var cur strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(line)
		in := strings.Join(strings.Fields(cur.String()), " ")
		cur.Reset()
		if in == "" {
			continue
		}
		if strings.HasPrefix(in, "FROM ") {
			stages = append(stages, stage{from: in})
			continue
		}
		if len(stages) == 0 {
			t.Fatalf("Dockerfile instruction %q before FROM", in)
		}
		stages[len(stages)-1].instr = append(stages[len(stages)-1].instr, in)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return stages
}

func (s stage) has(prefix string) string {
	for _, in := range s.instr {
		if strings.HasPrefix(in, prefix) {
			return in
		}
	}
	return ""
}

// TestDockerfile checks the properties docker cannot be asked about on a
// machine without a Docker engine: the build stage builds with
// deploy/build.sh (the script CI runs, so one set of flags), and the
// runtime stage is minimal, non-root, probes with egressd itself and
// exposes every listener.
func TestDockerfile(t *testing.T) {
	stages := parseDockerfile(t)
	if len(stages) != 2 {
		t.Fatalf("Dockerfile stages = %d; want 2 (build, runtime)", len(stages))
	}
	build, rt := stages[0], stages[1]
	if !strings.HasPrefix(build.from, "FROM golang:1.26-bookworm AS build") {
		t.Errorf("build stage = %q; want FROM golang:1.26-bookworm AS build", build.from)
	}
	if in := build.has("RUN deploy/build.sh "); in == "" {
		t.Errorf("build stage does not RUN deploy/build.sh; instructions %q", build.instr)
	}
	// build.sh stamps what `egressd version` reports from these; the
	// context has no .git to read them from.
	for _, arg := range []string{"ARG EGRESSD_VERSION", "ARG EGRESSD_COMMIT"} {
		if build.has(arg) == "" {
			t.Errorf("build stage lacks %s; egressd version would say devel", arg)
		}
	}
	for _, in := range build.instr {
		if strings.Contains(in, "go build") {
			t.Errorf("build stage runs %q; build flags belong in deploy/build.sh only", in)
		}
	}
	if !strings.HasPrefix(rt.from, "FROM gcr.io/distroless/cc-debian12:nonroot") &&
		!strings.HasPrefix(rt.from, "FROM debian:bookworm-slim") {
		t.Errorf("runtime stage = %q; want distroless/cc or debian-slim", rt.from)
	}
	if u := rt.has("USER "); u == "" || strings.HasPrefix(u, "USER 0") || strings.HasPrefix(u, "USER root") {
		t.Errorf("runtime USER = %q; want a non-root user", u)
	}
	if hc := rt.has("HEALTHCHECK "); !strings.Contains(hc, `"/usr/local/bin/egressd", "health"`) {
		t.Errorf("HEALTHCHECK = %q; want it to run egressd health", hc)
	}
	expose := strings.Fields(strings.TrimPrefix(rt.has("EXPOSE "), "EXPOSE "))
	if want := []string{"3128/tcp", "5353/udp", "5353/tcp", "5432/tcp", "9090/tcp", "9091/tcp"}; !sameSet(expose, want) {
		t.Errorf("EXPOSE = %q; want %q", expose, want)
	}
	if v := rt.has("VOLUME "); !strings.Contains(v, "/var/lib/egressd/audit") || !strings.Contains(v, "/var/lib/egressd/ca") {
		t.Errorf("VOLUME = %q; want the audit and CA directories", v)
	}
}

// TestImageDefaultConfig: the image runs with no file mounted (the
// Dockerfile's own `docker run` example): its CMD names the config the
// image carries, deploy/image/egressd.yaml, which loads, uses the embedded
// policy, listens where a published port reaches, and writes the audit
// log to the image's volume.
func TestImageDefaultConfig(t *testing.T) {
	rt := parseDockerfile(t)[1]
	const src, dst = "deploy/image/egressd.yaml", "/etc/egressd/egressd.yaml"
	if cp := rt.has("COPY " + src + " "); cp != "COPY "+src+" "+dst {
		t.Errorf("runtime stage COPY of %s = %q; want it at %s", src, cp, dst)
	}
	if cmd := rt.has("CMD "); !strings.Contains(cmd, `"--config", "`+dst+`"`) {
		t.Errorf("CMD = %q; want serve --config %s", cmd, dst)
	}
	cfg := parseConfigFile(t, "image/egressd.yaml")
	if cfg.Policy.Dir != "" {
		t.Errorf("policy.dir = %q; want none (the embedded policy: nothing is mounted)", cfg.Policy.Dir)
	}
	ap, err := netip.ParseAddrPort(cfg.Proxy.Listen)
	if err != nil || ap.Addr().IsLoopback() || !strings.Contains(rt.has("EXPOSE "), strconv.Itoa(int(ap.Port()))+"/tcp") {
		t.Errorf("proxy.listen = %q; want a non-loopback address on an exposed port (docker run -p reaches only those)", cfg.Proxy.Listen)
	}
	if v := rt.has("VOLUME "); !strings.Contains(v, `"`+cfg.Audit.Dir+`"`) {
		t.Errorf("audit.dir = %q; want the image's VOLUME (%s): the root filesystem is read-only", cfg.Audit.Dir, v)
	}
}
