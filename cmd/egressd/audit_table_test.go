package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
)

// tableRecords is one record of every kind a reviewer meets, at fixed
// times on 2026-01-02, so that the table's golden output is stable.
func tableRecords() []string {
	return []string{
		`{"kind":"http","request":"5f0c9a1e-1","identity":"sb-a","client":"10.0.0.7","method":"GET","scheme":"https","host":"pypi.org","port":443,"path":"/simple/requests/","query":"format=json","ip":"151.101.0.223","decision":"allow","reason":"allowed","rule":"pypi","credentials":{"pypi_token":"header:Authorization"}}`,
		`{"kind":"http_done","request":"5f0c9a1e-1","identity":"sb-a","client":"10.0.0.7","method":"GET","scheme":"https","host":"pypi.org","port":443,"path":"/simple/requests/","status":200,"bytes_in":48213,"bytes_out":412,"duration_us":183512}`,
		`{"kind":"connect","request":"5f0c9a1e-2","identity":"sb-a","client":"10.0.0.7","method":"CONNECT","host":"github.com","port":443,"ip":"140.82.112.3","decision":"allow","reason":"allowed","rule":"github"}`,
		`{"kind":"connect_done","request":"5f0c9a1e-2","identity":"sb-a","client":"10.0.0.7","method":"CONNECT","host":"github.com","port":443,"bytes_in":1048576,"bytes_out":5120,"duration_us":12500000,"error":"upstream closed: connection reset by peer"}`,
		"{\"kind\":\"connect_done\",\"request\":\"5f0c9a1e-3\",\"identity\":\"sb-a\",\"client\":\"10.0.0.7\",\"method\":\"CONNECT\",\"host\":\"api.openai.com\",\"port\":443,\"inspected\":true,\"bytes_in\":517,\"bytes_out\":1460,\"duration_us\":2140," +
			"\"error\":\"client TLS handshake: the client rejected egressd's certificate (local error: tls: bad record MAC): does the sandbox trust `egressd ca export --identity sb-a`?\"}",
		`{"kind":"http","request":"5f0c9a1e-4","identity":"sb-a","client":"10.0.0.7","method":"POST","scheme":"https","host":"mcp.example.com","port":443,"path":"/mcp","inspected":true,"mcp_method":"tools/call","tool":"delete_repo","decision":"deny","reason":"mcp_tool_denied","rule":"mcp"}`,
		`{"kind":"dns","identity":"sb-b","client":"10.0.0.8","name":"pypi.org.","qtype":"AAAA","decision":"allow","reason":"allowed","rule":"pypi"}`,
		`{"kind":"sql","request":"5f0c9a1e-5","identity":"sb-b","client":"10.0.0.8","database":"app","sql":"DELETE FROM users WHERE id = $1","decision":"deny","reason":"other_statement_denied"}`,
		`{"kind":"http","request":"5f0c9a1e-6","user":"mallory","client":"10.0.0.9","method":"GET","scheme":"http","host":"example.com","port":80,"path":"/","decision":"deny","reason":"proxy_auth_invalid"}`,
		`{"kind":"grant","identity":"sb-b","method":"GET","host":"files.example.com","port":443,"path":"/report.csv","rule":"grant:g-7","detail":{"by":"admin","event":"created","expires":"2026-01-02T11:00:00Z","from_request":"5f0c9a1e-7","id":"g-7"}}`,
		`{"kind":"http","request":"5f0c9a1e-8","identity":"sb-b","client":"10.0.0.8","method":"GET","scheme":"https","host":"example.org","port":443,"path":"/","decision":"allow","reason":"allowed","would_deny":"no_matching_rule","observed_by":"identity"}`,
		`{"kind":"http","identity":"sb-b","client":"10.0.0.8","decision":"deny","reason":"rate_limited","count":41,"detail":{"first":"2026-01-02T10:00:00Z","last":"2026-01-02T10:00:59Z"}}`,
	}
}

// writeAuditRecords appends records given as JSON lines, the i-th at
// 10:00 plus 1.5 s times i on 2026-01-02, and returns the log's directory.
func writeAuditRecords(t *testing.T, lines []string) string {
	t.Helper()
	w, dir := openAuditLog(t)
	start := time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC)
	for i, l := range lines {
		var r audit.Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		r.TS = start.Add(time.Duration(i) * 1500 * time.Millisecond)
		if err := w.Append(&r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestAuditShowTable is issue 25 item 4: the table of one record of every
// kind answers a reviewer's first questions (status, bytes, duration and
// error of a completion, the query, the claimed user, a CONNECT's
// authority, a grant's terms) in aligned columns; compared with
// testdata/audit/table.golden, rewritten with -update.
func TestAuditShowTable(t *testing.T) {
	dir := writeAuditRecords(t, tableRecords())
	// --until drops the writer's own segment record, stamped now.
	code, out, errOut := runCLI("audit", "show", "--table", "--until", "2026-01-03", dir)
	if code != 0 {
		t.Fatalf("audit show --table = %d (%s)", code, errOut)
	}
	matchGolden(t, testdataDir("audit"), "table", out, []string{"audit", "show", "--table"})
	// Every row's columns begin where the header's do, up to TARGET.
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	at := strings.Index(lines[0], "TARGET")
	for _, l := range lines[1:] {
		if len(l) < at || l[at-2:at] != "  " || l[at] == ' ' {
			t.Errorf("row misaligned at TARGET (column %d):\n%s\n%s", at, lines[0], l)
		}
	}
}

// TestAuditShowFilters: each filter keeps exactly the records it names.
func TestAuditShowFilters(t *testing.T) {
	dir := writeAuditRecords(t, tableRecords())
	tests := []struct {
		name string
		args []string
		want int // records (lines of --json)
	}{
		{"request", []string{"--request", "5f0c9a1e-2"}, 2},
		{"host", []string{"--host", "pypi.org"}, 3},
		{"host matches a DNS name with its dot, any case", []string{"--host", "PyPI.org."}, 3},
		{"host wildcard", []string{"--host", "*.example.com"}, 2},
		{"rule", []string{"--rule", "github"}, 1},
		{"grant rule", []string{"--rule", "grant:g-7"}, 1},
		{"client", []string{"--client", "10.0.0.8"}, 4},
		{"client prefix", []string{"--client", "10.0.0.0/24", "--identity", "sb-a"}, 6},
		{"kind completion", []string{"--kind", "connect_done"}, 2},
		{"since days", []string{"--since", "36500d", "--until", "2026-01-03"}, 12},
		{"since date: the writer's segment records", []string{"--since", "2026-01-03"}, 2},
		{"until days and hours", []string{"--until", "1d12h"}, 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCLI(append(append([]string{"audit", "show", "--json"}, tt.args...), dir)...)
			if got := strings.Count(out, "\n"); code != 0 || got != tt.want {
				t.Errorf("audit show %v = %d, %d records (stderr %q):\n%s\nwant 0, %d", tt.args, code, got, errOut, out, tt.want)
			}
		})
	}
}

// TestAuditShowRefusesBadFilters: a filter that cannot match is a usage
// error saying what it takes, never an empty listing.
func TestAuditShowRefusesBadFilters(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown kind", []string{"--kind", "htpp"}, "kinds are http, connect, dns, sql"},
		{"since unparseable", []string{"--since", "yesterday"}, "a duration ago (90m, 36h, 7d, 1d12h)"},
		{"since negative", []string{"--since", "-1h"}, "got \"-1h\""},
		{"until fractional days", []string{"--until", "1.5d"}, "RFC 3339"},
		{"host as URL", []string{"--host", "https://pypi.org/"}, "not a URL or host:port"},
		{"host with port", []string{"--host", "pypi.org:443"}, "not a URL or host:port"},
		{"host inner wildcard", []string{"--host", "a.*.org"}, "leading *."},
		{"client name", []string{"--client", "sandbox"}, "an IP address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCLI(append(append([]string{"audit", "show", "--json"}, tt.args...), t.TempDir())...)
			if code != 2 || out != "" || !strings.Contains(errOut, tt.want) {
				t.Errorf("audit show %v = %d, stdout %q, stderr %q; want 2 and a message containing %q", tt.args, code, out, errOut, tt.want)
			}
		})
	}
}

// TestParseAgo: days combine with Go's units, and nothing negative or
// overflowing passes.
func TestParseAgo(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1d", 24 * time.Hour, true},
		{"1d12h", 36 * time.Hour, true},
		{"90m", 90 * time.Minute, true},
		{"0d", 0, true},
		{"d", 0, false},
		{"1d-1h", 0, false},
		{"-1d", 0, false},
		{"999999d", 0, false},
		{"1dd", 0, false},
	}
	for _, tt := range tests {
		if got, ok := parseAgo(tt.in); got != tt.want || ok != tt.ok {
			t.Errorf("parseAgo(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
