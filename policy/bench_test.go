package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	defaultbundle "github.com/egressd/egressd/rego"
)

// bundleWithRules returns the default bundle's modules with n generated
// rules in data.json: a mix of exact, wildcard, method and path rules, the
// shape a large operator bundle has.
func bundleWithRules(t testing.TB, n int) string {
	t.Helper()
	rules := make([]map[string]any, 0, n)
	for i := range n {
		r := map[string]any{"id": fmt.Sprintf("r%d", i), "ports": []int{443}}
		switch i % 4 {
		case 0:
			r["hosts"] = []string{fmt.Sprintf("h%d.example.com", i)}
		case 1:
			r["hosts"] = []string{fmt.Sprintf("*.w%d.example.net", i)}
		case 2:
			r["hosts"] = []string{fmt.Sprintf("api%d.example.org", i)}
			r["methods"] = []string{"GET", "HEAD"}
			r["paths"] = []string{"/v1/*/items", "/v2/**"}
		default:
			r["hosts"] = []string{fmt.Sprintf("d%d.example.com", i)}
			r["action"] = "deny"
		}
		rules = append(rules, r)
	}
	b, err := json.Marshal(map[string]any{"rules": rules})
	if err != nil {
		t.Fatal(err)
	}
	return modulesWithData(t, string(b))
}

// filepathGlobFS returns the embedded bundle's production modules (tests
// are left out: their fixtures assume the default data).
func filepathGlobFS() (map[string][]byte, error) {
	srcs, err := readBundle(defaultbundle.FS)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, s := range srcs {
		if isModule(s.name) && !isTestModule(s.name) && filepath.Dir(s.name) == "." {
			out[s.name] = s.data
		}
	}
	return out, nil
}

func benchEngine(b *testing.B, rules int, cacheSize int) *Engine {
	dir := bundleWithRules(b, rules)
	e, err := New(context.Background(), Config{Dir: dir, CacheSize: cacheSize}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// benchRequests are matched against the generated rules: an allowed path
// rule, an exact host-wide rule, a wildcard, and a miss.
func benchRequests(b *testing.B) []Input {
	urls := []string{
		"https://api2.example.org/v1/x/items",
		"https://h0.example.com/anything",
		"https://a.w1.example.net/",
		"https://nowhere.example/",
	}
	ins := make([]Input, len(urls))
	for i, u := range urls {
		f, err := ParseHTTP(KindHTTP, "GET", u, "")
		if err != nil {
			b.Fatal(err)
		}
		ins[i] = Input{Identity: Identity{ID: "bench"}, Facts: f}
	}
	return ins
}

func benchDecide(b *testing.B, rules, cacheSize int) {
	e := benchEngine(b, rules, cacheSize)
	ins := benchRequests(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		e.Decide(ctx, ins[i%len(ins)])
	}
}

// BenchmarkDecideUncachedFloor is the OPA floor on this machine: the same
// input and engine with a one-expression policy. The real policy's cost is
// best read relative to it on a shared machine.
func BenchmarkDecideUncachedFloor(b *testing.B) {
	dir := b.TempDir()
	mod := "package egress.http\n\ndecision := {\"allow\": false, \"reason\": \"floor\", \"rule\": \"\"} if input.host\n"
	if err := os.WriteFile(filepath.Join(dir, "http.rego"), []byte(mod), 0o644); err != nil {
		b.Fatal(err)
	}
	e, err := New(context.Background(), Config{Dir: dir, CacheSize: -1}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	ins := benchRequests(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e.Decide(context.Background(), ins[i%len(ins)])
	}
}

func BenchmarkDecideCached(b *testing.B)           { benchDecide(b, 500, 10000) }
func BenchmarkDecideUncached5Rules(b *testing.B)   { benchDecide(b, 5, -1) }
func BenchmarkDecideUncached500Rules(b *testing.B) { benchDecide(b, 500, -1) }

// BenchmarkDecideUncachedConnect decides CONNECTs against the generated
// rules: a host-wide allow, a wildcard, a deny, a path rule (which cannot
// open a tunnel) and a miss.
func BenchmarkDecideUncachedConnect(b *testing.B) {
	e := benchEngine(b, 500, -1)
	var ins []Input
	for _, target := range []string{"h0.example.com:443", "a.w1.example.net:443", "d3.example.com:443", "api2.example.org:443", "nowhere.example:443"} {
		f, err := ParseConnect(target)
		if err != nil {
			b.Fatal(err)
		}
		ins = append(ins, Input{Identity: Identity{ID: "bench"}, Facts: f})
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e.Decide(context.Background(), ins[i%len(ins)])
	}
}
