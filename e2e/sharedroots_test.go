package e2e

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/egressdbin"
)

// egressdUID is the image's user and group (distroless :nonroot), which
// the Kubernetes example gives the shared roots through fsGroup.
const egressdUID = 65532

// TestSharedRootsSecretVolume runs egressd as the image's user on a CA
// directory shaped like a mounted Secret of shared roots (issue 25): the
// directory is not writable by egressd, the files are root-owned in
// egressd's group. A 0440 key in egressd's group is served; any other mode
// or group is refused with what fixes it; an identity without a root is
// refused with the command that makes one, and nothing is written.
func TestSharedRootsSecretVolume(t *testing.T) {
	tmp := t.TempDir()
	made := filepath.Join(tmp, "made")
	for _, id := range []string{"sandbox-1"} {
		if _, errOut, code := RunCLI(t, "ca", "export", "--ca-dir", made, "--identity", id); code != 0 {
			t.Fatalf("ca export %s = %d (%s); want 0", id, code, errOut)
		}
	}
	bin := readableBinary(t, tmp)

	tests := []struct {
		name     string
		keyMode  os.FileMode
		keyGroup int
		identity string
		config   bool   // open as serve does, with a config listing sandbox-1 and sandbox-2
		want     string // "" exports; else a part of the refusal
	}{
		{"Secret 0440 in egressd's group", 0o440, egressdUID, "sandbox-1", false, ""},
		{"Secret 0444", 0o444, egressdUID, "sandbox-1", false, "defaultMode: 0440"},
		{"Secret 0640", 0o640, egressdUID, "sandbox-1", false, "chmod 440"},
		{"Secret 0440 in root's group", 0o440, 0, "sandbox-1", false, "fsGroup to 65532"},
		{"no shared root for the identity", 0o440, egressdUID, "sandbox-2", false,
			"create it in a writable directory with `egressd ca export --ca-dir DIR --identity sandbox-2`"},
		{"a served identity has no shared root", 0o440, egressdUID, "sandbox-1", true,
			`has no root for identity "sandbox-2"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := secretVolume(t, made, tt.keyMode, tt.keyGroup)
			args := []string{"ca", "export", "--ca-dir", dir, "--identity", tt.identity}
			if tt.config {
				// Through the config, as serve opens it: every identity
				// served needs its shared root at start.
				cfg := filepath.Join(filepath.Dir(dir), "egressd.yaml")
				yaml := "inspect:\n  ca_dir: " + dir + "\nidentities:\n" +
					"  - {id: sandbox-1, sources: [10.0.0.1/32]}\n  - {id: sandbox-2, sources: [10.0.0.2/32]}\n"
				if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
					t.Fatal(err)
				}
				args = []string{"ca", "export", "--config", cfg, "--identity", tt.identity}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, args...)
			cmd.Env = cleanEnv()
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: egressdUID, Gid: egressdUID}}
			out, errOut, code := egressdbin.Output(t, cmd)
			if tt.want == "" {
				want, err := os.ReadFile(filepath.Join(made, tt.identity+".crt"))
				if err != nil {
					t.Fatal(err)
				}
				if code != 0 || out != string(want) {
					t.Errorf("ca export as uid %d = %d (%s), %q; want 0 and the shared root", egressdUID, code, errOut, out)
				}
				return
			}
			if code == 0 || !strings.Contains(errOut, tt.want) {
				t.Errorf("ca export as uid %d = %d, %q; want a refusal saying %q", egressdUID, code, errOut, tt.want)
			}
			ents, err := os.ReadDir(dir)
			if err != nil || len(ents) != 2 {
				t.Errorf("shared roots directory holds %v (%v); want its two files, nothing written", ents, err)
			}
		})
	}
}

// secretVolume copies the roots in made into a directory shaped like a
// Secret volume as egressd's user sees it: root-owned and not writable by
// that user, keys root-owned with mode and group, certificates 0444.
func secretVolume(t *testing.T, made string, keyMode os.FileMode, keyGroup int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ca")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	openPath(t, dir)
	ents, err := os.ReadDir(made)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(made, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		mode, group := os.FileMode(0o444), egressdUID
		if strings.HasSuffix(e.Name(), ".key") {
			mode, group = keyMode, keyGroup
		}
		p := filepath.Join(dir, e.Name())
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, 0, group); err != nil {
			t.Fatalf("chown the key (the test needs root, as CI runs): %v", err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// readableBinary copies the test binary where egressd's user can run it
// (the build directory is private to root).
func readableBinary(t *testing.T, tmp string) string {
	t.Helper()
	dir := filepath.Join(tmp, "bin")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	openPath(t, dir)
	src, err := os.Open(binary)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close() //nolint:errcheck // read-only
	p := filepath.Join(dir, "egressd")
	dst, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// openPath lets every user traverse the directories above dir (t.TempDir
// makes them 0700).
func openPath(t *testing.T, dir string) {
	t.Helper()
	for d := filepath.Dir(dir); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}
