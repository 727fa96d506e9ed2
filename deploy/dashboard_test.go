package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/egressdbin"
)

const dashboardFile = "grafana/egressd.json"

// dashboardExprs returns every PromQL expression the dashboard queries:
// each panel target's expr, and each query variable's query.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var exprs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(string); ok && v.Type == "query" {
			// label_values(selector, label): the selector is a query.
			q = strings.TrimSuffix(strings.TrimPrefix(q, "label_values("), ")")
			if i := strings.LastIndex(q, ","); i >= 0 {
				q = q[:i]
			}
			exprs = append(exprs, q)
		}
	}
	return exprs
}

// selector is one metric a PromQL expression reads, with the label values
// its equality matchers require.
type selector struct {
	name   string
	labels map[string]string
}

var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\{[^}]*\})?(\s*\()?`)
	promEqual    = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"$]*)"`)
	promKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true,
		"group_right": true, "and": true, "or": true, "unless": true, "bool": true, "offset": true}
)

// selectors strips an expression's functions, aggregations, groupings,
// ranges and literals and returns the metrics left, with their matchers.
func selectors(expr string) []selector {
	// Matchers are read before strings are blanked, and restored after.
	var matchers []string
	e := promMatchers.ReplaceAllStringFunc(expr, func(m string) string {
		matchers = append(matchers, m)
		return fmt.Sprintf("{%d}", len(matchers)-1)
	})
	e = promString.ReplaceAllString(e, " ")
	e = promRange.ReplaceAllString(e, " ")
	e = promGrouping.ReplaceAllString(e, " ")
	var out []selector
	for _, m := range promIdent.FindAllStringSubmatch(e, -1) {
		full := m[0]
		if strings.HasSuffix(strings.TrimSpace(full), "(") {
			continue // a function or aggregation
		}
		name := strings.TrimSpace(strings.SplitN(full, "{", 2)[0])
		if promKeywords[name] {
			continue
		}
		s := selector{name: name, labels: map[string]string{}}
		if m[1] != "" {
			var i int
			// m[1] is a placeholder this function wrote itself ({0}, {1}, …).
			fmt.Sscanf(strings.TrimSpace(m[1]), "{%d}", &i) //nolint:errcheck // see above
			for _, eq := range promEqual.FindAllStringSubmatch(matchers[i], -1) {
				s.labels[eq[1]] = eq[2]
			}
		}
		out = append(out, s)
	}
	return out
}

func TestSelectors(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`sum by (kind, decision) (rate(egressd_decisions_total{instance=~"$instance"}[$__rate_interval]))`, []string{"egressd_decisions_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(a_bucket{x="y"}[5m])))`, []string{`a_bucket{x=y}`}},
		{`time() - b_seconds`, []string{"b_seconds"}},
		{`topk(15, sum by (kind) (rate(c_total{decision="deny",kind=~"a|b"}[1m]))) or d`, []string{`c_total{decision=deny}`, "d"}},
	}
	for _, tt := range tests {
		var got []string
		for _, s := range selectors(tt.expr) {
			got = append(got, s.String())
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("selectors(%q) = %q; want %q", tt.expr, got, tt.want)
		}
	}
}

func (s selector) String() string {
	if len(s.labels) == 0 {
		return s.name
	}
	var kv []string
	for k, v := range s.labels {
		kv = append(kv, k+"="+v)
	}
	slices.Sort(kv)
	return s.name + "{" + strings.Join(kv, ",") + "}"
}

// TestDashboard runs egressd with the metrics-only listener, scrapes its
// /metrics, and checks that every series the Grafana dashboard queries is
// exported, with the label values its matchers name (issue 17 item 6).
func TestDashboard(t *testing.T) {
	exposition, series := scrapeRunningEgressd(t)
	var checked int
	for _, expr := range dashboardExprs(t) {
		sels := selectors(expr)
		if len(sels) == 0 {
			t.Errorf("dashboard expr %q reads no metric", expr)
		}
		for _, s := range sels {
			checked++
			if !slices.ContainsFunc(series[s.name], func(labels map[string]string) bool {
				for k, v := range s.labels {
					if labels[k] != v {
						return false
					}
				}
				return true
			}) {
				t.Errorf("dashboard queries %s (in %q); egressd exports no such series", s, expr)
			}
		}
	}
	if checked < 20 {
		t.Errorf("checked %d selectors; the dashboard should cover decisions, latency, tunnels, audit, DNS and SQL", checked)
	}
	if t.Failed() {
		t.Logf("exposition:\n%s", exposition)
	}
}

// scrapeRunningEgressd builds and starts egressd (proxy, loopback admin,
// metrics-only listener), waits for its "serving" line, scrapes /metrics
// on the metrics-only listener and returns the exposition and its series
// by name.
func scrapeRunningEgressd(t *testing.T) (string, map[string][]map[string]string) {
	t.Helper()
	dir := t.TempDir()
	bin := egressdbin.Build(t)
	// DNS and Postgres series are exported whether or not those
	// listeners run (zero-initialised), so the proxy alone suffices.
	cfg := fmt.Sprintf("proxy:\n  listen: %s\nadmin:\n  listen: %s\nmetrics:\n  listen: %s\naudit:\n  dir: %s\n",
		freeAddr(t), freeAddr(t), freeAddr(t), filepath.Join(dir, "audit"))
	cfgPath := filepath.Join(dir, "egressd.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--config", cfgPath)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}()
	var serving struct {
		Msg     string `json:"msg"`
		Metrics string `json:"metrics"`
	}
	sc := bufio.NewScanner(stderr)
	for serving.Msg != "serving" {
		if !sc.Scan() {
			t.Fatalf("egressd exited before serving: %v", sc.Err())
		}
		serving.Msg = ""
		json.Unmarshal(sc.Bytes(), &serving) //nolint:errcheck // non-JSON lines (a build's output) are skipped
	}
	go io.Copy(io.Discard, stderr)
	if serving.Metrics == "" {
		t.Fatalf("serving line %q names no metrics listener", sc.Text())
	}
	base := "http://" + serving.Metrics
	resp, err := http.Post(base+"/-/reload", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST /-/reload on the metrics-only listener = %d; want 404", resp.StatusCode)
	}
	resp, err = http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d, %v", resp.StatusCode, err)
	}
	return string(b), parseExposition(string(b))
}

// freeAddr returns a loopback TCP address whose port was free a moment
// ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

var expositionLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? `)

// parseExposition reads Prometheus text format into series by name, each
// a map of its labels.
func parseExposition(s string) map[string][]map[string]string {
	out := map[string][]map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		m := expositionLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		labels := map[string]string{}
		for _, kv := range promEqual.FindAllStringSubmatch(m[2], -1) {
			labels[kv[1]] = kv[2]
		}
		out[m[1]] = append(out[m[1]], labels)
	}
	return out
}
