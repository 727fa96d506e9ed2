package broker

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy"
)

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := map[string]string{"GH": ghValue, "EMPTY": "", "SPACE": "has a space in it"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	tests := []struct {
		name    string
		cfg     Config
		want    map[string]string
		wantErr string
	}{
		{name: "file, trailing newline trimmed", cfg: Config{{Name: "f", File: write("f", oaValue+"\n")}}, want: map[string]string{"f": oaValue}},
		{name: "file, CRLF trimmed", cfg: Config{{Name: "f", File: write("crlf", oaValue+"\r\n")}}, want: map[string]string{"f": oaValue}},
		{name: "env", cfg: Config{{Name: "g", Env: "GH"}}, want: map[string]string{"g": ghValue}},
		{name: "empty file", cfg: Config{{Name: "e", File: write("e", "\n")}}, wantErr: `(secret "e"): value is empty`},
		{name: "empty env", cfg: Config{{Name: "e", Env: "EMPTY"}}, wantErr: `(secret "e"): value is empty`},
		{name: "unset env", cfg: Config{{Name: "u", Env: "NOPE"}}, wantErr: "NOPE is not set"},
		{name: "missing file", cfg: Config{{Name: "m", File: filepath.Join(dir, "none")}}, wantErr: `secret "m"`},
		{name: "space", cfg: Config{{Name: "s", Env: "SPACE"}}, wantErr: "visible ASCII"},
		{name: "short", cfg: Config{{Name: "s", File: write("short", "abc")}}, wantErr: "shorter than 8"},
		{name: "marker", cfg: Config{{Name: "s", File: write("marker", "xxegressd:secret:y")}}, wantErr: `must not contain "egressd"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Load(tt.cfg, lookup)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load error = %v; want one containing %q", err, tt.wantErr)
				}
				for _, v := range []string{"has a space", "xxegressd", "abc\""} {
					if strings.Contains(err.Error(), v) {
						t.Errorf("Load error %q quotes the value", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			for k, v := range tt.want {
				if got, _ := s.Value(k); got != v {
					t.Errorf("Value(%s) = %q; want %q", k, got, v)
				}
			}
		})
	}
}

// TestLoadNeverEchoesFilePath: a secret pasted as secrets[].file is a path
// that does not exist; the error names the entry and the cause, never the
// path, and still is fs.ErrNotExist. The os error with the path was
// wrapped whole.
func TestLoadNeverEchoesFilePath(t *testing.T) {
	pasted := ghValue
	for _, path := range []string{pasted, filepath.Join(t.TempDir(), pasted)} {
		_, err := Load(Config{{Name: "gh", File: path}}, nil)
		if err == nil {
			t.Fatalf("Load of a missing file succeeded")
		}
		if msg := err.Error(); strings.Contains(msg, pasted) || !strings.Contains(msg, `secrets[0].file (secret "gh"): no such file`) {
			t.Errorf("Load error = %q; want the entry and \"no such file\", never the path", msg)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("errors.Is(%v, fs.ErrNotExist) = false; want true", err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	const pasted = "ghp_PastedRealToken123"
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"both", Config{{Name: "a", File: "/f", Env: "E"}}, "exactly one of file and env"},
		{"neither", Config{{Name: "a"}}, "exactly one of file and env"},
		{"bad name", Config{{Name: "a b", Env: "E"}}, "[0].name must be"},
		{"duplicate", Config{{Name: "a", Env: "E"}, {Name: "a", Env: "F"}}, `[1].name "a" is also secrets[0].name`},
		{"value pasted into env", Config{{Name: "a", Env: pasted + "-x"}}, "[0].env (secret \"a\") must be the name of an environment variable"},
		{"value pasted into file", Config{{Name: "a", File: pasted + "\n"}}, "[0].file (secret \"a\") must be the path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v; want one containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), pasted) {
				t.Errorf("Validate error %q echoes the value", err)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	s := testSecrets(t, map[string]string{"github": ghValue})
	inner := errors.New("upstream said " + ghValue)
	err := s.Redact(fmt.Errorf("send: %w", inner))
	if strings.Contains(err.Error(), ghValue) || !strings.Contains(err.Error(), "<secret github: not shown>") {
		t.Errorf("Redact = %q; want the value replaced by the name", err)
	}
	if !errors.Is(err, inner) {
		t.Errorf("errors.Is(Redact(err), inner) = false")
	}
}

type fakeFloor struct{ internal []netip.Prefix }

func (f fakeFloor) CoversInternal(p netip.Prefix, port uint16) bool {
	for _, q := range f.internal {
		if q.Bits() <= p.Bits() && q.Contains(p.Addr()) && port == 8080 {
			return true
		}
	}
	return false
}

func TestCheckRules(t *testing.T) {
	floor := fakeFloor{internal: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")}}
	secrets := Config{{Name: "github", Env: "E"}}
	cred := []policy.Credential{{Secret: "github", Header: "Authorization"}}
	tests := []struct {
		name string
		rule policy.CredentialRule
		want string // "" accepted
	}{
		{"inspected public name", policy.CredentialRule{Index: 0, ID: "gh", Hosts: []string{"api.github.com"}, Ports: []int{443}, Inspect: true, Credentials: cred}, ""},
		{"internal address and port", policy.CredentialRule{Index: 1, ID: "gw", Hosts: []string{"10.20.1.2", "10.20.3.0/24"}, Ports: []int{8080}, Credentials: cred}, ""},
		{"public name over plain HTTP", policy.CredentialRule{Index: 2, ID: "plain", Hosts: []string{"api.github.com"}, Ports: []int{80}, Credentials: cred},
			`rules[2] (rule "plain") binds credentials but would send them in cleartext: host "api.github.com" port 80`},
		{"internal address, port not allowed", policy.CredentialRule{Index: 3, ID: "port", Hosts: []string{"10.20.1.2"}, Ports: []int{8080, 80}, Credentials: cred},
			`host "10.20.1.2" port 80`},
		{"public address", policy.CredentialRule{Index: 4, ID: "pub", Hosts: []string{"140.82.112.3"}, Ports: []int{8080}, Credentials: cred}, "cleartext"},
		{"CIDR wider than internal", policy.CredentialRule{Index: 5, ID: "wide", Hosts: []string{"10.0.0.0/8"}, Ports: []int{8080}, Credentials: cred}, "cleartext"},
		{"unknown secret", policy.CredentialRule{Index: 6, ID: "typo", Hosts: []string{"api.github.com"}, Ports: []int{443}, Inspect: true,
			Credentials: []policy.Credential{{Secret: "githb", Header: "Authorization"}}},
			`rules[6].credentials[0].secret "githb" is not in the config's secrets: (rule "typo")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckRules([]policy.CredentialRule{tt.rule}, secrets, floor)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("CheckRules = %v; want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("CheckRules = %v; want one containing %q", err, tt.want)
			}
		})
	}
}

func gzipped(t testing.TB, s string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	io.WriteString(zw, s)
	zw.Close()
	return b.Bytes()
}

func TestScrubResponse(t *testing.T) {
	secrets := testSecrets(t, map[string]string{"github": ghValue})
	plan, reason := Prepare([]policy.Credential{{Secret: "github", Basic: &policy.BasicAuth{User: "u"}}}, secrets, http.Header{}, "/", "")
	if reason != "" {
		t.Fatal(reason)
	}
	echo := `{"token":"` + ghValue + `","auth":"Basic ` + basicToken("u", ghValue) + `"}`
	clean := []byte("\x89PNG no secret here")
	tests := []struct {
		name     string
		ctype    []string
		encoding string
		body     []byte
		// length is the declared length; 0 means len(body), -1 unknown.
		length int64
		// wantErr is Scrub's error; readErr the body read's.
		wantErr, readErr error
		// scrubbed says the body comes out scrubbed and uncompressed.
		scrubbed bool
		status   int
	}{
		{name: "json", ctype: []string{"application/json"}, body: []byte(echo), scrubbed: true},
		{name: "no type", body: []byte(echo), scrubbed: true},
		{name: "event stream", ctype: []string{"text/event-stream"}, body: []byte("data: " + echo + "\n\n"), scrubbed: true},
		{name: "gzip json", ctype: []string{"application/json; charset=utf-8"}, encoding: "gzip", body: gzipped(t, echo), scrubbed: true},
		{name: "br refused", ctype: []string{"text/plain"}, encoding: "br", body: []byte("?"), wantErr: ErrUnscrubbable},
		{name: "binary without a secret untouched", ctype: []string{"image/png"}, body: clean},
		{name: "streamed binary without a secret untouched", ctype: []string{"image/png"}, body: clean, length: -1},
		{name: "upgraded connection untouched", status: http.StatusSwitchingProtocols, body: []byte(echo)},
		// Bypasses of a scrubber that trusted the labels.
		{name: "binary holding a secret refused", ctype: []string{"image/png"}, body: []byte(echo), wantErr: ErrSecretInBody},
		{name: "TRACE echo as message/http refused", ctype: []string{"message/http"}, body: []byte("GET / HTTP/1.1\r\nAuthorization: Bearer " + ghValue + "\r\n\r\n"), wantErr: ErrSecretInBody},
		{name: "two Content-Types refused", ctype: []string{"image/png", "text/plain"}, body: []byte(echo), wantErr: ErrUnscrubbable},
		{name: "unlabelled gzip binary refused", ctype: []string{"application/octet-stream"}, body: gzipped(t, echo), wantErr: ErrSecretInBody},
		{name: "labelled gzip binary refused", ctype: []string{"application/octet-stream"}, encoding: "gzip", body: gzipped(t, echo), wantErr: ErrSecretInBody},
		{name: "streamed binary holding a secret cut", ctype: []string{"application/grpc"}, body: []byte(echo), length: -1, readErr: ErrSecretInBody},
		{name: "streamed unlabelled gzip binary cut", ctype: []string{"application/octet-stream"}, body: gzipped(t, echo), length: -1, readErr: ErrSecretInBody},
		{name: "streamed unlabelled gzip text cut", ctype: []string{"text/plain"}, body: gzipped(t, echo), length: -1, readErr: ErrSecretInBody},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			length := tt.length
			if length == 0 {
				length = int64(len(tt.body))
			}
			resp := &http.Response{Header: http.Header{"X-Echo": {"Bearer " + ghValue}}, Trailer: http.Header{"Grpc-Message": {"bad " + ghValue}},
				Body: io.NopCloser(bytes.NewReader(tt.body)), ContentLength: length, StatusCode: tt.status}
			if length >= 0 {
				resp.Header.Set("Content-Length", fmt.Sprint(length))
			}
			if resp.StatusCode == 0 {
				resp.StatusCode = http.StatusOK
			}
			resp.Header["Content-Type"] = tt.ctype
			if tt.encoding != "" {
				resp.Header.Set("Content-Encoding", tt.encoding)
			}
			err := plan.Scrub(resp)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Scrub = %v; want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(resp.Header.Get("X-Echo"), ghValue) {
				t.Errorf("header X-Echo = %q; holds the secret", resp.Header.Get("X-Echo"))
			}
			got, err := io.ReadAll(resp.Body)
			if tt.status != http.StatusSwitchingProtocols && (bytes.Contains(got, []byte(ghValue)) || bytes.Contains(got, []byte(basicToken("u", ghValue)))) {
				t.Errorf("body = %q; holds the secret", got)
			}
			if tt.readErr != nil {
				if !errors.Is(err, tt.readErr) {
					t.Errorf("reading the body = %v; want %v", err, tt.readErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.status != http.StatusSwitchingProtocols && strings.Contains(resp.Trailer.Get("Grpc-Message"), ghValue) {
				t.Errorf("trailer Grpc-Message = %q; holds the secret", resp.Trailer.Get("Grpc-Message"))
			}
			if !tt.scrubbed {
				if !bytes.Equal(got, tt.body) || length >= 0 && resp.Header.Get("Content-Length") != fmt.Sprint(length) {
					t.Errorf("body = %q; want it untouched", got)
				}
				return
			}
			if !bytes.Contains(got, redacted("github")) || resp.Header.Get("Content-Encoding") != "" || resp.Header.Get("Content-Length") != "" {
				t.Errorf("body = %q, Content-Encoding %q, Content-Length %q; want scrubbed, decoded, no length", got,
					resp.Header.Get("Content-Encoding"), resp.Header.Get("Content-Length"))
			}
		})
	}
}

func TestScrubResponseOverCap(t *testing.T) {
	secrets := testSecrets(t, map[string]string{"github": ghValue})
	plan, _ := Prepare([]policy.Credential{{Secret: "github", Header: "Authorization"}}, secrets, http.Header{}, "/", "")
	resp := &http.Response{Header: http.Header{"Content-Type": {"text/plain"}, "Content-Encoding": {"gzip"}},
		Body: io.NopCloser(bytes.NewReader(gzipped(t, "x")))}
	if err := plan.Scrub(resp); err != nil {
		t.Fatal(err)
	}
	// Each decoded stage reads the stage before; the raw stage reads the
	// source.
	sr := resp.Body.(readCloser).Reader.(*scrubReader)
	for stages := 1; ; stages++ {
		next, ok := sr.src.(*scrubReader)
		if !ok {
			if stages != 3 {
				t.Fatalf("Scrub's body has %d stages; want 3 (raw, percent, percent and JSON)", stages)
			}
			break
		}
		sr = next
	}
	if c, ok := sr.src.(*capReader); !ok || c.left != MaxDecompressedBytes {
		t.Fatalf("Scrub's body source = %T; want a capReader of MaxDecompressedBytes", sr.src)
	}
	const limit = 1 << 16
	bomb := gzipped(t, strings.Repeat("a", 4*limit))
	c := &capReader{r: &decoder{src: bytes.NewReader(bomb), enc: "gzip"}, left: limit}
	n, err := io.Copy(io.Discard, c)
	if !errors.Is(err, errOverCap) || n != limit {
		t.Errorf("read %d bytes, error %v; want %d and errOverCap", n, err, limit)
	}
}

// grpcMessage frames payload as one uncompressed gRPC message.
func grpcMessage(payload string) []byte {
	n := len(payload)
	return append([]byte{0, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}, payload...)
}

// TestScanGRPCStreamNotHeld: a streamed gRPC body is searched message by
// message, so a message whose last bytes could begin a secret reaches the
// client whole before the next is sent (a bidirectional stream would
// otherwise wait for ever), and a message holding a secret is cut.
func TestScanGRPCStreamNotHeld(t *testing.T) {
	secrets := testSecrets(t, map[string]string{"github": ghValue})
	plan, _ := Prepare([]policy.Credential{{Secret: "github", Header: "Authorization"}}, secrets, http.Header{}, "/", "")
	pr, pw := io.Pipe()
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/grpc"}}, Body: pr, ContentLength: -1}
	if err := plan.Scrub(resp); err != nil {
		t.Fatal(err)
	}
	first := grpcMessage("reply ends in " + ghValue[:6])
	go pw.Write(first)
	got := make([]byte, len(first))
	if _, err := io.ReadFull(resp.Body, got); err != nil || !bytes.Equal(got, first) {
		t.Fatalf("first message = %q, %v; want it whole before the next is sent", got, err)
	}
	go func() {
		pw.Write(grpcMessage("leak " + ghValue))
		pw.Close()
	}()
	rest, err := io.ReadAll(resp.Body)
	if !errors.Is(err, ErrSecretInBody) || bytes.Contains(rest, []byte(ghValue)) {
		t.Errorf("second message = %q, %v; want it cut with ErrSecretInBody", rest, err)
	}
}
