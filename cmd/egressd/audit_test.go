package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/export"
)

// writeAuditLog writes n records (alternating identities and decisions)
// into small segments and returns the directory.
func writeAuditLog(t *testing.T, n int) string {
	t.Helper()
	w, dir := openAuditLog(t)
	for i := range n {
		if err := w.Append(testAuditRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// openAuditLog opens an audit log in a fresh directory with segments small
// enough that a few dozen records rotate several times.
func openAuditLog(t *testing.T) (*audit.Writer, string) {
	t.Helper()
	c := audit.DefaultConfig()
	c.Dir = filepath.Join(t.TempDir(), "audit")
	c.MaxSegmentBytes = 4096
	w, err := audit.Open(c, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	return w, c.Dir
}

func testAuditRecord(i int) *audit.Record {
	r := &audit.Record{Kind: "http", Request: fmt.Sprintf("req-%d", i), Identity: "sb-a",
		Method: "GET", Scheme: "https", Host: "pypi.org", Port: 443, Path: "/simple/",
		Decision: "allow", Rule: "pypi"}
	switch {
	case i%3 == 0:
		r.Identity, r.Decision, r.Reason, r.Rule = "sb-b", "deny", "no_rule", ""
		r.Path = "/evil\x1b[2J"
	case i%5 == 1:
		// Allowed by the bundle's observe mode (4 of 30 records).
		r.Reason, r.Rule, r.WouldDeny, r.ObservedBy = "allowed", "", "no_rule", "bundle"
		r.Path = "/observed"
	}
	return r
}

func TestAuditVerifyCLI(t *testing.T) {
	dir := writeAuditLog(t, 40)
	segs, _ := audit.ListSegments(dir)
	broken := writeAuditLog(t, 40)
	bsegs, _ := audit.ListSegments(broken)
	b, _ := os.ReadFile(bsegs[1])
	if err := os.WriteFile(bsegs[1], bytes.Replace(b, []byte("sb-a"), []byte("sb-c"), 1), 0o640); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
	}{
		{"intact dir", []string{"audit", "verify", dir}, 0, "ok: "},
		{"intact files", append([]string{"audit", "verify"}, segs...), 0, "ok: "},
		{"broken", []string{"audit", "verify", broken}, 1, "broken: " + bsegs[1] + ":"},
		{"missing", []string{"audit", "verify", filepath.Join(dir, "nope")}, 2, ""},
		{"empty dir", []string{"audit", "verify", t.TempDir()}, 2, ""},
		{"bad checkpoint flag", []string{"audit", "verify", "--checkpoint", "x", dir}, 2, ""},
		{"no subcommand", []string{"audit"}, 2, ""},
		{"replicas", []string{"audit", "verify", dir, writeAuditLog(t, 5)}, 0, dir + ": ok: "},
		{"replicas, one broken", []string{"audit", "verify", dir, broken}, 1, dir + ": ok: "},
		{"ocsf", []string{"audit", "verify", "--ocsf", ocsfOf(t, dir, "")}, 0, "replica r1 chain "},
		{"ocsf edited", []string{"audit", "verify", "--ocsf", ocsfOf(t, dir, "sb-a")}, 1, "replica r1 chain "},
		{"ocsf and the replica's dir", []string{"audit", "verify", "--ocsf", ocsfOf(t, dir, ""), dir}, 0, dir + ": ok: "},
		{"ocsf with a checkpoint but no dir", []string{"audit", "verify", "--checkpoint", "1:" + strings.Repeat("0", 64), "--ocsf", ocsfOf(t, dir, "")}, 2, ""},
		{"ocsf missing", []string{"audit", "verify", "--ocsf", filepath.Join(dir, "nope")}, 2, ""},
		{"otlp-json not OTLP", []string{"audit", "verify", "--otlp-json", ocsfOf(t, dir, "")}, 2, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCLI(tt.args...)
			if code != tt.wantCode || !strings.HasPrefix(out, tt.wantOut) {
				t.Errorf("egressd %v = %d, %q (stderr %q); want %d, %q…", tt.args, code, out, errOut, tt.wantCode, tt.wantOut)
			}
		})
	}
}

// ocsfOf writes dir's log as replica r1's OCSF stream and returns the
// file; with edit set, the first mapped identity equal to it is changed.
func ocsfOf(t *testing.T, dir, edit string) string {
	t.Helper()
	rd, err := audit.NewReader([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var evs []export.Event
	for {
		rec, err := rd.Next()
		if err != nil {
			break
		}
		chain := rec.Hash
		if len(evs) > 0 {
			chain = evs[0].Chain
		}
		evs = append(evs, export.Event{Line: bytes.Clone(rd.Raw), Rec: *rec, Replica: "r1", Chain: chain})
	}
	var buf bytes.Buffer
	if err := export.WriteOCSF(&buf, evs); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if edit != "" {
		b = bytes.Replace(b, []byte(`"user":{"name":"`+edit+`"}`), []byte(`"user":{"name":"someone-else"}`), 1)
	}
	p := filepath.Join(t.TempDir(), "ocsf.jsonl")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAuditShowCLI(t *testing.T) {
	dir := writeAuditLog(t, 30)
	tests := []struct {
		name      string
		args      []string
		wantLines int
		wantIn    string
		wantNotIn string
	}{
		{"all json", []string{"--json", "--kind", "http"}, 30, `"request":"req-0"`, ""},
		{"identity", []string{"--json", "--identity", "sb-b"}, 10, `"identity":"sb-b"`, `"identity":"sb-a"`},
		{"decision and reason", []string{"--json", "--decision", "deny", "--reason", "no_rule"}, 10, `"decision":"deny"`, `"allow"`},
		{"until long ago", []string{"--json", "--until", "24h"}, 0, "", ""},
		{"since long ago", []string{"--json", "--since", "24h", "--kind", "http"}, 30, "", ""},
		{"table", []string{"--table", "--identity", "sb-b"}, 11, `GET https://pypi.org:443/evil\u001b[2J`, "\x1b"},
		{"would deny", []string{"--json", "--would-deny"}, 4, `"would_deny":"no_rule","observed_by":"bundle"`, `"decision":"deny"`},
		{"reason of an observed allow", []string{"--json", "--decision", "allow", "--reason", "no_rule"}, 4, `"path":"/observed"`, `"path":"/simple/"`},
		{"would deny table", []string{"--table", "--would-deny"}, 5, "would_deny  no_rule", "/simple/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCLI(append(append([]string{"audit", "show"}, tt.args...), dir)...)
			lines := strings.Count(out, "\n")
			if code != 0 || lines != tt.wantLines || !strings.Contains(out, tt.wantIn) ||
				(tt.wantNotIn != "" && strings.Contains(out, tt.wantNotIn)) {
				t.Errorf("audit show %v = %d, %d lines (stderr %q):\n%s\nwant 0, %d lines containing %q and not %q",
					tt.args, code, lines, errOut, out, tt.wantLines, tt.wantIn, tt.wantNotIn)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	// lines counts the newlines written; reached, when set, is closed once
	// lines gets to want.
	lines, want int
	reached     chan struct{}
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines += bytes.Count(p, []byte("\n"))
	if s.reached != nil && s.lines >= s.want {
		close(s.reached)
		s.reached = nil
	}
	return s.b.Write(p)
}

// linesWritten returns a channel closed once n lines have been written.
func (s *syncBuffer) linesWritten(n int) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := make(chan struct{})
	if s.lines >= n {
		close(c)
		return c
	}
	s.want, s.reached = n, c
	return c
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAuditShowFollow follows a log while a writer appends across several
// rotations; the follow is bounded by a context.
func TestAuditShowFollow(t *testing.T) {
	w, dir := openAuditLog(t)
	defer w.Close()
	o, err := parseShow([]string{"-f", "--json", "--kind", "http", dir}, &bytes.Buffer{}, &bytes.Buffer{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 60
	var out syncBuffer
	followed := out.linesWritten(n)
	done := make(chan error, 1)
	go func() { done <- showAudit(ctx, o, &out) }()

	for i := range n {
		if err := w.Append(testAuditRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-followed:
	case <-ctx.Done():
		// Reported below as the records the output lacks.
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("showAudit -f = %v", err)
	}
	if segs, _ := audit.ListSegments(dir); len(segs) < 3 {
		t.Fatalf("log has %d segments; want rotations while following", len(segs))
	}
	for i := range n {
		if !strings.Contains(out.String(), fmt.Sprintf(`"request":"req-%d"`, i)) {
			t.Errorf("followed output lacks req-%d", i)
		}
	}
}

// TestAuditSignedCLI generates a key with keygen, has the writer sign
// checkpoints with it, and verifies them with the printed public key.
func TestAuditSignedCLI(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "audit.key")
	code, pub, errOut := runCLI("audit", "keygen", "--out", key)
	if code != 0 || !strings.Contains(pub, "BEGIN PUBLIC KEY") {
		t.Fatalf("audit keygen = %d, %q, %q", code, pub, errOut)
	}
	// keygen writes the public key next to the private one, as README's
	// `verify --public-key FILE.pub` needs.
	pubPath := key + ".pub"
	if b, err := os.ReadFile(pubPath); err != nil || string(b) != pub {
		t.Fatalf("audit keygen wrote %s = %q, %v; want the printed public key", pubPath, b, err)
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("private key %s mode = %v, %v; want 0600", key, fi.Mode(), err)
	}
	if code, _, _ := runCLI("audit", "keygen", "--out", key); code != 2 {
		t.Errorf("audit keygen over an existing key = %d; want 2", code)
	}
	other := filepath.Join(dir, "other.key")
	if err := os.WriteFile(other+".pub", []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := runCLI("audit", "keygen", "--out", other); code != 2 {
		t.Errorf("audit keygen with FILE.pub left over = %d; want 2 (it must not replace a public key others check against)", code)
	}
	if _, err := os.Stat(other); err == nil {
		t.Errorf("audit keygen refused FILE.pub but wrote %s", other)
	}

	c := audit.DefaultConfig()
	c.Dir = filepath.Join(dir, "log")
	c.Sync = "always"
	c.SigningKey = key
	c.CheckpointInterval = 5 * time.Millisecond
	w, err := audit.Open(c, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	// Bounded: append until the writer has added a checkpoint record.
	for i := 0; i < 2000 && w.Stats().Written <= w.Stats().Appended+w.Stats().Segments; i++ {
		if err := w.Append(testAuditRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	seq, head := w.Head()

	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
	}{
		{"signed", []string{"--public-key", pubPath}, 0, "signatures verified"},
		{"checkpoint matches", []string{"--checkpoint", fmt.Sprintf("%d:%s", seq, head)}, 0, "ok: "},
		{"checkpoint beyond the end", []string{"--checkpoint", fmt.Sprintf("%d:%s", seq+5, head)}, 1, "broken: "},
		{"checkpoint hash differs", []string{"--checkpoint", fmt.Sprintf("%d:%s", seq, strings.Repeat("a", 64))}, 1, "broken: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append(append([]string{"audit", "verify"}, tt.args...), c.Dir)
			code, out, errOut := runCLI(args...)
			if code != tt.wantCode || !strings.Contains(out, tt.wantOut) {
				t.Errorf("egressd %v = %d, %q (stderr %q); want %d, %q", args, code, out, errOut, tt.wantCode, tt.wantOut)
			}
		})
	}
}

// TestAuditShowEscapesSpoofing is issue 11 item 11: a client-chosen path
// with bidi controls, separators or invisible characters must reach the
// operator's terminal escaped, in the table and in the JSON lines.
func TestAuditShowEscapesSpoofing(t *testing.T) {
	hidden := []struct{ r, want string }{
		{"\u202e", `\u202e`}, {"\u202a", `\u202a`}, {"\u2066", `\u2066`}, {"\u2069", `\u2069`},
		{"\u2028", `\u2028`}, {"\u2029", `\u2029`}, {"\u200b", `\u200b`}, {"\u200d", `\u200d`},
		{"\ufeff", `\ufeff`}, {"\u0085", `\u0085`}, {"\U000e0041", `\U000e0041`},
	}
	var path strings.Builder
	path.WriteString("/invoice")
	for _, h := range hidden {
		path.WriteString(h.r + "x")
	}
	c := audit.DefaultConfig()
	c.Dir = filepath.Join(t.TempDir(), "audit")
	w, err := audit.Open(c, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(&audit.Record{Kind: "http", Identity: "sb-a", Method: "GET", Scheme: "http", Host: "h.test",
		Path: path.String(), Decision: "deny", Reason: "no_rule\u202e"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"--table", "--json"} {
		t.Run(mode, func(t *testing.T) {
			code, out, errOut := runCLI("audit", "show", mode, "--kind", "http", c.Dir)
			if code != 0 {
				t.Fatalf("audit show %s = %d (%s)", mode, code, errOut)
			}
			for _, h := range hidden {
				if strings.Contains(out, h.r) {
					t.Errorf("audit show %s printed U+%04X raw:\n%q", mode, []rune(h.r)[0], out)
				}
			}
			if mode == "--table" {
				for _, h := range hidden {
					if !strings.Contains(out, h.want) {
						t.Errorf("audit show --table = %q; want %s shown", out, h.want)
					}
				}
			}
		})
	}
}
