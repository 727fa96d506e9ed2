package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestLostPortRaceIsRecognised checks what Start's retry relies on: when
// egressd's proxy address is taken, it exits before ready and its log
// names that address as in use, which lostPortRace recognises; a start
// that fails for another reason is not retried.
func TestLostPortRaceIsRecognised(t *testing.T) {
	taken := ReservePort(t) // held: egressd cannot bind it
	dir := t.TempDir()
	e := &Egressd{
		ProxyAddr:  taken.Addr(),
		AdminAddr:  ReservePort(t).Addr(),
		ConfigPath: filepath.Join(dir, "egressd.yaml"),
		LogPath:    filepath.Join(dir, "egressd.log"),
	}
	cfg := fmt.Sprintf("proxy:\n  listen: %s\nadmin:\n  listen: 127.0.0.1:0\naudit:\n  dir: %s\ndns:\n  upstreams: [\"127.0.0.1:1\"]\n",
		e.ProxyAddr, filepath.Join(dir, "audit"))
	if err := os.WriteFile(e.ConfigPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "serve", "--config", e.ConfigPath)
	cmd.Env = cleanEnv()
	if err := e.launch(cmd); err != nil {
		t.Fatal(err)
	}
	if err := e.Wait(30 * time.Second); err == nil {
		t.Fatalf("egressd with its proxy address taken exited 0; want a failure\n%s", e.Log())
	}
	if !e.lostPortRace() {
		t.Errorf("lostPortRace() = false for a start whose proxy address was taken; log:\n%s", e.Log())
	}
	other := &Egressd{ProxyAddr: "127.0.0.1:1", AdminAddr: "127.0.0.1:2", LogPath: e.LogPath, exited: e.exited}
	if other.lostPortRace() {
		t.Error("lostPortRace() = true for addresses the log does not name; want false")
	}
}
