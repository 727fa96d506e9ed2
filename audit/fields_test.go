package audit

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// readRaw returns the lines of the first segment in dir.
func readRaw(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, SegmentName(1)))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// TestAppendCapsClientStrings is issue 11 item 5: a refusal carrying a
// path near the 32 KiB header limit must not cost 32 KiB of log. Every
// client-chosen string is cut to max_field_bytes and the record says which.
func TestAppendCapsClientStrings(t *testing.T) {
	c := testConfig(t, "always")
	w := mustOpen(t, c)
	big := strings.Repeat("A", 32<<10)
	r := &Record{Kind: "http", Client: "10.0.0.7", Method: "GET", Host: "h.test", Path: "/" + big,
		Decision: "deny", Reason: "proxy_auth_required", Error: big,
		// A multi-byte rune straddling the cap must not be split.
		SQL: strings.Repeat("é", 1000)}
	if err := w.Append(r); err != nil {
		t.Fatal(err)
	}
	if len(r.Path) != 1+len(big) {
		t.Errorf("Append changed the caller's record: len(Path) = %d", len(r.Path))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, c.Dir)
	lines := readRaw(t, c.Dir)
	line := lines[len(lines)-1]
	if max := 4 * 1024; len(line) > max {
		t.Errorf("record of a %d-byte path is %d bytes; want at most %d", len(big), len(line), max)
	}
	if want := `"truncated":"path,sql,error"`; !strings.Contains(line, want) {
		t.Errorf("line = %.200s…; want it to name the cut fields: %s", line, want)
	}
	var got Record
	if err := ParseRecord([]byte(line), &got); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"path": got.Path, "error": got.Error, "sql": got.SQL} {
		if len(v) > 1024 || len(v) < 1024-utf8.UTFMax {
			t.Errorf("len(%s) = %d; want about %d", name, len(v), 1024)
		}
		if !utf8.ValidString(v) || strings.ContainsRune(v, utf8.RuneError) {
			t.Errorf("%s cut inside a rune: %q", name, v[len(v)-4:])
		}
	}
	if got.Host != "h.test" || got.Method != "GET" {
		t.Errorf("short fields changed: host %q method %q", got.Host, got.Method)
	}
}

// TestAppendCapsNewFields covers the fields added with the cap: the claimed
// user and the query are client-chosen too.
func TestAppendCapsNewFields(t *testing.T) {
	c := testConfig(t, "always")
	c.MaxFieldBytes = 64
	w := mustOpen(t, c)
	big := strings.Repeat("B", 1000)
	if err := w.Append(&Record{Kind: "http", User: big, Query: "q=" + big, Decision: "deny"}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	mustVerify(t, c.Dir)
	lines := readRaw(t, c.Dir)
	var got Record
	if err := ParseRecord([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatal(err)
	}
	if got.Truncated != "user,query" || len(got.User) != 64 || len(got.Query) != 64 {
		t.Errorf("record = truncated %q, user %d bytes, query %d bytes; want user,query at 64 bytes",
			got.Truncated, len(got.User), len(got.Query))
	}
}

func TestRedactQuery(t *testing.T) {
	frags := DefaultRedactQueryParams()
	tests := []struct{ name, in, want string }{
		{"plain", "q=secret-in-query&page=2", "q=secret-in-query&page=2"},
		{"token", "q=1&access_token=abc123&x", "q=1&access_token=[redacted:6]&x"},
		{"case and encoding", "API_KEY=k&%74oken=tt&Sig=zz", "API_KEY=[redacted:1]&%74oken=[redacted:2]&Sig=[redacted:2]"},
		{"semicolon", "a=1;password=hunter2", "a=1;password=[redacted:7]"},
		{"empty value", "token=&b=2", "token=[redacted:0]&b=2"},
		{"no value", "token&b=2", "token&b=2"},
		{"value with equals", "auth=a=b=c", "auth=[redacted:5]"},
		{"plus in name", "x+secret=v", "x+secret=[redacted:1]"},
		{"bad escape", "%zztoken=v&%2", "%zztoken=[redacted:1]&%2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := redactQuery(tt.in, frags); got != tt.want {
				t.Errorf("redactQuery(%q) = %q; want %q", tt.in, got, tt.want)
			}
		})
	}
	if got := redactQuery("token=v", nil); got != "token=v" {
		t.Errorf("redactQuery with no fragments = %q; want it unchanged", got)
	}
}

// TestAppendRedactsQuery is issue 11 item 18 at the writer: the query is
// kept, sensitive values are not, and a value cut by the cap stays hidden.
func TestAppendRedactsQuery(t *testing.T) {
	c := testConfig(t, "always")
	w := mustOpen(t, c)
	for _, q := range []string{
		"q=secret-in-query&api_key=SEKRIT",
		strings.Repeat("a", c.MaxFieldBytes-10) + "&token=SEKRITSEKRIT",
	} {
		if err := w.Append(&Record{Kind: "http", Path: "/x", Query: q, Decision: "allow"}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	mustVerify(t, c.Dir)
	lines := readRaw(t, c.Dir)
	if !strings.Contains(lines[1], `"query":"q=secret-in-query&api_key=[redacted:6]"`) {
		t.Errorf("line = %s; want the query with api_key redacted", lines[1])
	}
	for _, l := range lines {
		if strings.Contains(l, "SEKRIT") {
			t.Errorf("a sensitive value reached the log: %s", l)
		}
	}
}

func FuzzRedactQuery(f *testing.F) {
	f.Add("q=1&access_token=abc;x=%74oken=v&token")
	frags := DefaultRedactQueryParams()
	f.Fuzz(func(t *testing.T, q string) {
		got := redactQuery(q, frags)
		// Oracle: every parameter whose decoded name matches has lost its
		// value, and the rest is untouched.
		in, out := splitParams(q), splitParams(got)
		if len(in) != len(out) {
			t.Fatalf("redactQuery(%q) = %q: %d parameters, want %d", q, got, len(out), len(in))
		}
		for i := range in {
			name, _, hasValue := strings.Cut(in[i], "=")
			switch {
			case hasValue && sensitive(name, frags):
				if !strings.HasPrefix(out[i], name+"=[redacted:") {
					t.Fatalf("redactQuery(%q): %q kept its value: %q", q, in[i], out[i])
				}
			case out[i] != in[i]:
				t.Fatalf("redactQuery(%q): %q changed to %q", q, in[i], out[i])
			}
		}
	})
}

func splitParams(q string) []string {
	return strings.FieldsFunc(q, func(r rune) bool { return r == '&' || r == ';' })
}

// TestOpenWritesStarted: every Open with Started set adds a started record,
// also when it appends to a segment that ended cleanly, and the log
// verifies.
func TestOpenWritesStarted(t *testing.T) {
	c := testConfig(t, "interval")
	c.Started = map[string]string{"version": "v1", "config": "embedded", "policy": "sha256:00"}
	for range 2 {
		w := mustOpen(t, c)
		if err := w.Append(decisionRecord(1)); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	mustVerify(t, c.Dir)
	var kinds []string
	for _, l := range readRaw(t, c.Dir) {
		var r Record
		if err := ParseRecord([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, r.Kind.String())
	}
	if got, want := strings.Join(kinds, ","), "segment,started,http,started,http"; got != want {
		t.Errorf("records = %s; want %s", got, want)
	}
}

// TestCredentialsRoundTrip: "credentials" is written after "policy" with
// sorted keys, read back, and an empty object (never written) is refused.
func TestCredentialsRoundTrip(t *testing.T) {
	enc := newEncoder()
	r := &Record{TS: time.Unix(1, 0), Kind: KindHTTP, Path: "/x", Decision: DecisionAllow, Policy: "sha256:00",
		Credentials: map[string]string{"openai": "query:key", "github": "header:Authorization"}}
	line, _ := enc.appendLine(nil, r, 1, &zeroHash)
	line = bytes.TrimSuffix(line, []byte("\n"))
	if want := `"policy":"sha256:00","credentials":{"github":"header:Authorization","openai":"query:key"},"prev"`; !bytes.Contains(line, []byte(want)) {
		t.Errorf("line %s; want it to hold %s", line, want)
	}
	var back Record
	if err := ParseRecord(line, &back); err != nil || back.Credentials["github"] != "header:Authorization" || len(back.Credentials) != 2 {
		t.Errorf("ParseRecord(%s) = %v, credentials %v; want both back", line, err, back.Credentials)
	}
	empty := []byte(`{"seq":1,"ts":"1970-01-01T00:00:01.000000Z","kind":"http","credentials":{},"prev":"` + strings.Repeat("0", 64) + `","hash":"` + strings.Repeat("0", 64) + `"}`)
	if err := ParseRecord(empty, &back); err == nil {
		t.Errorf("ParseRecord(credentials:{}) = nil; want an error")
	}
}

// TestInspectedRoundTrip: "inspected" is written after the target fields
// only when true, read back, and any other value is refused.
func TestInspectedRoundTrip(t *testing.T) {
	enc := newEncoder()
	for _, in := range []bool{true, false} {
		r := &Record{TS: time.Unix(1, 0), Kind: KindHTTP, Scheme: "https", Host: "a.test", Port: 443, Path: "/x", Inspected: in, Decision: DecisionAllow}
		line, _ := enc.appendLine(nil, r, 1, &zeroHash)
		line = bytes.TrimSuffix(line, []byte("\n"))
		if got := bytes.Contains(line, []byte(`"path":"/x","inspected":true,"decision"`)); got != in {
			t.Errorf("line %s: has inspected = %v; want %v", line, got, in)
		}
		var back Record
		if err := ParseRecord(line, &back); err != nil || back.Inspected != in {
			t.Errorf("ParseRecord(%s) = %v, inspected %v; want nil, %v", line, err, back.Inspected, in)
		}
	}
	bad := []byte(`{"seq":1,"ts":"1970-01-01T00:00:01.000000Z","kind":"http","inspected":false,"prev":"` + strings.Repeat("0", 64) + `","hash":"` + strings.Repeat("0", 64) + `"}`)
	var r Record
	if err := ParseRecord(bad, &r); err == nil {
		t.Errorf("ParseRecord(inspected:false) = nil; want an error")
	}
}
