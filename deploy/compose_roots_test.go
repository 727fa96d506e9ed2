package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// composeMounts maps a service's container paths to "source" and whether
// the mount is read-only.
func composeMounts(t *testing.T, svc string, s composeService) map[string]struct {
	source string
	ro     bool
} {
	t.Helper()
	out := map[string]struct {
		source string
		ro     bool
	}{}
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 {
			t.Fatalf("%s volume %q; want source:target[:mode]", svc, v)
		}
		out[parts[1]] = struct {
			source string
			ro     bool
		}{parts[0], len(parts) == 3 && parts[2] == "ro"}
	}
	return out
}

// TestComposeSharedRoots: compose's one-shot ca-init makes a root for
// every identity of the config in the CA volume, which egressd mounts
// read-only and starts only after ca-init succeeded; the certificates go
// to a second volume, which the sandbox mounts read-only and names as its
// root in the trust variables.
func TestComposeSharedRoots(t *testing.T) {
	c := loadCompose(t)
	e, init, sb := c.Services["egressd"], c.Services["ca-init"], c.Services["sandbox"]
	em, im, sm := composeMounts(t, "egressd", e), composeMounts(t, "ca-init", init), composeMounts(t, "sandbox", sb)
	cfgPath := argAfter(e.Command, "--config")
	cfg := parseConfigFile(t, em[cfgPath].source)

	caVol := em[cfg.Inspect.CADir]
	if caVol.source == "" || !caVol.ro {
		t.Errorf("egressd mounts inspect.ca_dir %s as %+v; want the CA volume read-only", cfg.Inspect.CADir, caVol)
	}
	if got := e.DependsOn["ca-init"].Condition; got != "service_completed_successfully" {
		t.Errorf("egressd depends_on ca-init condition = %q; want service_completed_successfully", got)
	}

	if !slices.Equal(init.Command[:2], []string{"ca", "export"}) {
		t.Fatalf("ca-init command = %q; want ca export", init.Command)
	}
	if init.Image != e.Image || init.PullPolicy != "never" || !init.ReadOnly || init.NetworkMode != "none" || init.User != e.User {
		t.Errorf("ca-init image %q pull_policy %q read_only %v network_mode %q user %q; "+
			"want egressd's image (built, never pulled) and user, read-only, no network",
			init.Image, init.PullPolicy, init.ReadOnly, init.NetworkMode, init.User)
	}
	if got := im[argAfter(init.Command, "--config")]; got.source != em[cfgPath].source || !got.ro {
		t.Errorf("ca-init --config mount = %+v; want egressd's config %s read-only", got, em[cfgPath].source)
	}
	if got := im[cfg.Inspect.CADir]; got.source != caVol.source || got.ro {
		t.Errorf("ca-init mounts %s as %+v; want egressd's CA volume %s writable", cfg.Inspect.CADir, got, caVol.source)
	}
	out := argAfter(init.Command, "--out")
	rootsVol := im[path.Dir(out)]
	if rootsVol.source == "" || rootsVol.source == caVol.source {
		t.Errorf("ca-init --out %s is on %+v; want a volume of its own (the sandbox must never see a key)", out, rootsVol)
	}
	var ids []string
	for _, id := range cfg.Identities {
		ids = append(ids, id.ID)
	}
	if exported := argAfter(init.Command, "--identity"); !slices.Equal(ids, []string{exported}) || path.Base(out) != exported+".crt" {
		t.Errorf("ca-init exports %q to %s; want every identity of the config %q, each to <id>.crt", exported, out, ids)
	}

	sandboxIP := c.Services["sandbox-net"].Networks["sandbox"].IPv4Address
	var id string
	for _, i := range cfg.Identities {
		if slices.Contains(i.Sources, sandboxIP+"/32") {
			id = i.ID
		}
	}
	root := sb.Environment["EGRESSD_ROOT"]
	if got := sm[path.Dir(root)]; got.source != rootsVol.source || !got.ro || path.Base(root) != id+".crt" {
		t.Errorf("sandbox EGRESSD_ROOT %s on %+v; want %s.crt on volume %s, read-only", root, got, id, rootsVol.source)
	}
	if sb.Environment["NODE_EXTRA_CA_CERTS"] != root {
		t.Errorf("sandbox NODE_EXTRA_CA_CERTS = %q; want its root %s", sb.Environment["NODE_EXTRA_CA_CERTS"], root)
	}
	bundle := sb.Environment["SSL_CERT_FILE"]
	for _, v := range []string{"REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"} {
		if sb.Environment[v] != bundle {
			t.Errorf("sandbox %s = %q; want SSL_CERT_FILE's %q", v, sb.Environment[v], bundle)
		}
	}
	if !slices.Contains(sb.Tmpfs, path.Dir(bundle)) {
		t.Errorf("sandbox SSL_CERT_FILE %s is not on a tmpfs (%q); the read-only sandbox could not write it", bundle, sb.Tmpfs)
	}

	rt := parseDockerfile(t)[1]
	if rt.has("COPY --from=build --chown=65532:65532 /out/roots "+path.Dir(out)) == "" {
		t.Errorf("image has no %s owned by egressd's user; ca-init could not write a fresh volume there", path.Dir(out))
	}
}

// TestComposeSandboxTrustsItsRoot: sandbox.Dockerfile bakes no root in;
// its entrypoint writes SSL_CERT_FILE at start as the public roots plus
// the root EGRESSD_ROOT names, through which a leaf egressd mints for
// that identity verifies and another identity's does not.
func TestComposeSandboxTrustsItsRoot(t *testing.T) {
	b, err := os.ReadFile("compose/sandbox.Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var entrypoint []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "COPY") || strings.HasPrefix(line, "ADD") {
			t.Errorf("sandbox.Dockerfile %q; want no file baked in (the root comes at start)", line)
		}
		if ep, ok := strings.CutPrefix(line, "ENTRYPOINT "); ok {
			if err := json.Unmarshal([]byte(ep), &entrypoint); err != nil {
				t.Fatalf("sandbox.Dockerfile ENTRYPOINT %s: %v", ep, err)
			}
		}
	}
	if len(entrypoint) < 3 {
		t.Fatalf("sandbox.Dockerfile ENTRYPOINT %q; want the start step that trusts EGRESSD_ROOT", entrypoint)
	}
	if !slices.Contains(aptPackages(t, "compose/sandbox.Dockerfile"), "ca-certificates") {
		t.Error("sandbox.Dockerfile does not install ca-certificates; the bundle would lack the public roots")
	}
	sb := loadCompose(t).Services["sandbox"]
	id := strings.TrimSuffix(path.Base(sb.Environment["EGRESSD_ROOT"]), ".crt")
	tmp := t.TempDir()
	root, bundle := filepath.Join(tmp, "root.crt"), filepath.Join(tmp, "bundle.crt")
	writeRoot(t, root, tmp, id)
	args := slices.Clone(entrypoint)
	args[2] = strings.ReplaceAll(args[2], "/etc/ssl/certs/ca-certificates.crt", publicRoot(t, tmp))
	cmd := exec.Command(args[0], append(args[1:], "true")...)
	cmd.Env = append(os.Environ(), "EGRESSD_ROOT="+root, "SSL_CERT_FILE="+bundle)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sandbox entrypoint: %v\n%s", err, out)
	}
	checkBundle(t, "compose sandbox SSL_CERT_FILE", bundle, tmp, id, true)
}
