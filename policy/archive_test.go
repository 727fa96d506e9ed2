package policy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	defaultbundle "github.com/egressd/egressd/rego"
)

// TestArchiveRoundTrip: an archived bundle loads again under its digest,
// written once and read-only; a second archive of it is a no-op, an
// altered copy is refused, and a digest that is not one never names a
// path.
func TestArchiveRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bundle")
	if err := defaultbundle.Write(dir, true); err != nil {
		t.Fatal(err)
	}
	e := newTestEngine(t, Config{Dir: dir})
	root := ArchiveDir(t.TempDir())
	p, err := e.Archive(root)
	if err != nil {
		t.Fatalf("Archive: %v", err)
	}
	if want := filepath.Join(root, "sha256-"+strings.TrimPrefix(e.Digest(), "sha256:")); p != want {
		t.Errorf("Archive = %s; want %s", p, want)
	}
	if p2, err := e.Archive(root); err != nil || p2 != p {
		t.Errorf("second Archive = %s, %v; want %s, nil", p2, err, p)
	}
	des, _ := os.ReadDir(root)
	if len(des) != 1 {
		t.Errorf("archive holds %d entries; want 1 (no temporary left)", len(des))
	}
	data := filepath.Join(p, "data.json")
	if st, err := os.Stat(data); err != nil || st.Mode().Perm()&0o222 != 0 {
		t.Errorf("archived data.json: %v, %v; want read-only", st.Mode(), err)
	}

	ctx := context.Background()
	cfg := Config{EvalTimeout: testEvalTimeout}
	a, err := NewArchived(ctx, cfg, root, e.Digest(), zap.NewNop())
	if err != nil || a.Digest() != e.Digest() {
		t.Fatalf("NewArchived = %v; want the bundle of %s", err, e.Digest())
	}

	other := "sha256:" + strings.Repeat("0", 64)
	if _, err := NewArchived(ctx, cfg, root, other, zap.NewNop()); !errors.Is(err, ErrNotArchived) {
		t.Errorf("NewArchived(not archived) = %v; want ErrNotArchived", err)
	}
	for _, bad := range []string{"", "sha256:../../etc", "md5:abc", "sha256:" + strings.Repeat("A", 64)} {
		if _, err := NewArchived(ctx, cfg, root, bad, zap.NewNop()); err == nil || errors.Is(err, ErrNotArchived) {
			t.Errorf("NewArchived(%q) = %v; want a digest error", bad, err)
		}
	}

	if err := os.Chmod(data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(data, []byte(`{"rules": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := NewArchived(ctx, cfg, root, e.Digest(), zap.NewNop()); err == nil || !strings.Contains(err.Error(), "altered") {
		t.Errorf("NewArchived(altered) = %v; want it refused as altered", err)
	}
}
