package golden_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/egressd/egressd/dnsguard"
	"github.com/egressd/egressd/internal/egressdbin"
	"github.com/egressd/egressd/policy"
	defaultbundle "github.com/egressd/egressd/rego"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from the current decisions")

// goldenCase is one request → decision row of testdata/golden_*.json.
type goldenCase struct {
	Name       string         `json:"name"`
	Kind       string         `json:"kind"` // http, redirect or connect
	Method     string         `json:"method,omitempty"`
	Target     string         `json:"target"`
	HostHeader string         `json:"host_header,omitempty"`
	Identity   string         `json:"identity,omitempty"`
	Want       map[string]any `json:"want"`
}

// goldenBundles maps each golden file to the bundle it is decided with:
// "" is the embedded default.
var goldenBundles = []struct{ file, bundle string }{
	{"golden_default.json", ""},
	{"golden_shapes.json", "shapes"},
}

// shapesBundle is the embedded modules (without their tests, which assume
// the default data, but with the fixture index check) and the rules of
// testdata/shapes/data.json.
func shapesBundle(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	err := fs.WalkDir(defaultbundle.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		isModule := strings.HasSuffix(p, ".rego")
		isData := filepath.Base(p) == "data.json" || filepath.Base(p) == "data.yaml"
		isTest := strings.HasSuffix(p, "_test.rego")
		if p == "data.json" || (isTest && p != "fixtures_test.rego") || (!isModule && !isData) {
			return nil
		}
		b, err := fs.ReadFile(defaultbundle.FS, p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, p), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("testdata", "shapes", "data.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readGolden(t *testing.T, file string) []goldenCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var cases []goldenCase
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return cases
}

// decideCase answers a case through the Go API exactly as `egressd check`
// prints it (policy.PreDial: facts, address floor, policy), minus the
// bundle digest.
func decideCase(d *policy.PreDial, e *policy.Engine, c goldenCase) map[string]any {
	id := policy.Identity{ID: c.Identity}
	if id.ID == "" {
		id.ID = "anonymous"
	}
	var o policy.Outcome
	kind := policy.KindHTTP
	switch c.Kind {
	case "connect":
		kind = policy.KindConnect
		o = d.DecideConnect(context.Background(), id, c.Target)
	case "redirect":
		kind = policy.KindRedirect
		fallthrough
	default:
		o = d.DecideRequest(context.Background(), id, kind, policy.HTTPRequest{Method: c.Method, Target: c.Target, HostHeader: c.HostHeader})
	}
	out := map[string]any{
		"kind": kind.String(), "identity": id.ID,
		"allow": o.Decision.Allow, "reason": o.Decision.Reason, "rule": o.Decision.Rule, "facts": o.Facts,
	}
	if o.Decision.TLS {
		out["tls"] = true
	}
	if o.Decision.Inspect {
		out["inspect"] = true
	}
	if o.Inspected {
		out["inspected"] = true
	}
	var de *policy.DenyError
	if errors.As(o.Err, &de) && de.Detail != "" {
		out["detail"] = de.Detail
	}
	return normalize(out)
}

// normalize round-trips v through JSON so Go values compare with decoded
// golden ones.
func normalize(v any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(err)
	}
	delete(m, "policy")
	return m
}

func TestGolden(t *testing.T) {
	for _, g := range goldenBundles {
		t.Run(g.file, func(t *testing.T) {
			// A long eval timeout: under -race on a loaded machine the
			// 100ms default could turn a decision into policy_timeout.
			cfg := policy.Config{EvalTimeout: 10 * time.Second}
			if g.bundle == "shapes" {
				cfg.Dir = shapesBundle(t)
			}
			e, err := policy.New(context.Background(), cfg, zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			floor, err := dnsguard.NewFloor(nil)
			if err != nil {
				t.Fatal(err)
			}
			d := &policy.PreDial{Engine: e, Floor: floor}
			cases := readGolden(t, g.file)
			if len(cases) == 0 {
				t.Fatalf("%s has no cases", g.file)
			}
			for i := range cases {
				c := &cases[i]
				got := decideCase(d, e, *c)
				if *update {
					c.Want = got
					continue
				}
				t.Run(c.Name, func(t *testing.T) {
					if !reflect.DeepEqual(got, c.Want) {
						t.Errorf("decide(%s %s %q) = %v; want %v", c.Kind, c.Method, c.Target, got, c.Want)
					}
				})
			}
			if *update {
				var buf bytes.Buffer
				enc := json.NewEncoder(&buf)
				enc.SetEscapeHTML(false)
				enc.SetIndent("", " ")
				if err := enc.Encode(cases); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join("testdata", g.file), buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestGoldenThroughBinary runs every golden case through the built
// `egressd check`, so the table holds for the CLI, not only the Go API.
func TestGoldenThroughBinary(t *testing.T) {
	if *update {
		t.Skip("-update rewrites the files from the Go path; rerun without it")
	}
	bin := egressdbin.Build(t)
	for _, g := range goldenBundles {
		t.Run(g.file, func(t *testing.T) {
			cfgFile := filepath.Join(t.TempDir(), "egressd.yaml")
			if err := os.WriteFile(cfgFile, []byte("policy:\n  eval_timeout: 10s\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			policyArgs := []string{"--config", cfgFile}
			if g.bundle == "shapes" {
				policyArgs = append(policyArgs, "--policy", shapesBundle(t))
			}
			cases := readGolden(t, g.file)
			var mu sync.Mutex
			sem := make(chan struct{}, runtime.GOMAXPROCS(0))
			var wg sync.WaitGroup
			for _, c := range cases {
				wg.Go(func() {
					sem <- struct{}{}
					defer func() { <-sem }()
					got, code, stderr := runCheck(t, bin, c, policyArgs)
					mu.Lock()
					defer mu.Unlock()
					wantCode := 1
					if allow, _ := c.Want["allow"].(bool); allow {
						wantCode = 0
					}
					if code != wantCode {
						t.Errorf("%s: egressd check exit %d; want %d (stderr %s)", c.Name, code, wantCode, stderr)
					}
					// The CLI adds a deny's class (policy.Reason.Class);
					// the goldens hold what the Go path decides.
					if reason, _ := got["reason"].(string); got["allow"] == false {
						if cl, _ := got["class"].(string); cl != policy.Reason(reason).Class().String() {
							t.Errorf("%s: egressd check class %q; want %q, the class of %s", c.Name, cl, policy.Reason(reason).Class(), reason)
						}
						delete(got, "class")
					}
					if !reflect.DeepEqual(got, c.Want) {
						t.Errorf("%s: egressd check = %v; want %v", c.Name, got, c.Want)
					}
				})
			}
			wg.Wait()
		})
	}
}

func runCheck(t *testing.T, bin string, c goldenCase, policyArgs []string) (map[string]any, int, string) {
	kind := c.Kind
	args := []string{"check"}
	if kind == "redirect" {
		args = append(args, "http", "--redirect")
	} else {
		args = append(args, kind)
	}
	args = append(args, policyArgs...)
	if c.HostHeader != "" {
		args = append(args, "--host-header", c.HostHeader)
	}
	if c.Identity != "" {
		args = append(args, "--identity", c.Identity)
	}
	args = append(args, "--")
	if c.Kind != "connect" {
		args = append(args, c.Method)
	}
	args = append(args, c.Target)
	stdout, stderr, code := egressdbin.Output(t, exec.Command(bin, args...))
	var m map[string]any
	if err := json.Unmarshal([]byte(stdout), &m); err != nil {
		return map[string]any{"stdout": stdout}, code, stderr
	}
	delete(m, "policy")
	return m, code, strings.TrimSpace(stderr)
}

// TestMain removes the binary egressdbin.Build built.
func TestMain(m *testing.M) { os.Exit(egressdbin.Main(m)) }
