package deploy

import (
	"bufio"
	"os"
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
	if want := []string{"3128/tcp", "5353/udp", "5353/tcp", "5432/tcp", "9090/tcp"}; !sameSet(expose, want) {
		t.Errorf("EXPOSE = %q; want %q", expose, want)
	}
	if v := rt.has("VOLUME "); !strings.Contains(v, "/var/lib/egressd/audit") || !strings.Contains(v, "/var/lib/egressd/ca") {
		t.Errorf("VOLUME = %q; want the audit and CA directories", v)
	}
}
