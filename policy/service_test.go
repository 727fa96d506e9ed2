package policy

import (
	"context"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
)

// TestFetchedLoadsAsItsDirectory: a fetched bundle's files load through
// the same reader as a directory's, so the same files give the same
// content digest, decisions and test run; its revision joins the digest
// (every record's policy field) after "@".
func TestFetchedLoadsAsItsDirectory(t *testing.T) {
	files := map[string]string{"http.rego": miniHTTP, "extra/data.json": `{"x": 1}`}
	dir := writeBundle(t, "", files)
	local, err := New(context.Background(), Config{Dir: dir}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	raw := map[string][]byte{}
	for p, b := range files {
		raw["/"+p] = []byte(b) // the tarball's spelling
	}
	f, err := NewFetched("https://bundles.test/egress.tar.gz", "r7", raw)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{BundleURL: "https://bundles.test/egress.tar.gz", Fetched: f,
		BundleVerification: BundleVerification{PublicKey: "-----BEGIN PUBLIC KEY-----"}}
	remote, err := New(context.Background(), cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if want := local.Digest() + "@r7"; remote.Digest() != want {
		t.Errorf("fetched Digest() = %q; want %q", remote.Digest(), want)
	}
	d := remote.Decide(context.Background(), Input{Facts: mustParse(t, "GET", "http://ok.test/")})
	if !d.Allow || d.Policy != remote.Digest() {
		t.Errorf("Decide = %+v; want allowed, policy %q", d, remote.Digest())
	}
	g, err := remote.WithGrants(context.Background(), nil)
	if err != nil || g.Digest() != remote.Digest() {
		t.Errorf("WithGrants Digest() = %q, %v; want %q", g.Digest(), err, remote.Digest())
	}
	archive := t.TempDir()
	if _, err := remote.Archive(archive); err != nil {
		t.Fatal(err)
	}
	back, err := NewArchived(context.Background(), Config{}, archive, remote.Digest(), zap.NewNop())
	if err != nil || back.Digest() != remote.Digest() {
		t.Errorf("NewArchived(%q) Digest() = %v, %v; want the same", remote.Digest(), back, err)
	}
}

func TestNewFetchedRefuses(t *testing.T) {
	tests := []struct {
		name     string
		revision string
		files    map[string][]byte
		want     string
	}{
		{"parent path", "r1", map[string][]byte{"/../x.rego": nil}, "not a relative slash path"},
		{"same file twice", "r1", map[string][]byte{"/a.rego": nil, "a.rego": nil}, "twice"},
		{"revision with a newline", "r1\nr2", nil, "not printable"},
		{"revision with a space", "r 1", nil, "space"},
		{"revision not UTF-8", "00\xe3", nil, "not UTF-8"},
		{"long revision", strings.Repeat("r", maxRevision+1), nil, "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewFetched("https://b.test/b", tt.revision, tt.files)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewFetched() error = %v; want one saying %q", err, tt.want)
			}
		})
	}
}

func TestBundleServiceValidate(t *testing.T) {
	key := BundleVerification{PublicKeyFile: "/k.pem"}
	tests := []struct {
		name string
		cfg  Config
		want string // "" for valid
	}{
		{"signed https", Config{BundleURL: "https://b.test/b.tar.gz", BundleVerification: key}, ""},
		{"insecure http", Config{BundleURL: "http://b.test/b", BundleVerification: BundleVerification{InsecureUnsigned: true}}, ""},
		{"with dir", Config{Dir: "/p", BundleURL: "https://b.test/b", BundleVerification: key}, "exclusive"},
		{"http", Config{BundleURL: "http://b.test/b", BundleVerification: key}, "must be https://"},
		{"no key", Config{BundleURL: "https://b.test/b"}, "exactly one of public_key_file and public_key"},
		{"two keys", Config{BundleURL: "https://b.test/b", BundleVerification: BundleVerification{PublicKeyFile: "/k", PublicKey: "pem"}}, "exactly one"},
		{"credentials", Config{BundleURL: "https://u:p@b.test/b", BundleVerification: key}, "credentials"},
		{"no host", Config{BundleURL: "https:///b", BundleVerification: key}, "https://HOST/PATH"},
		{"algorithm", Config{BundleURL: "https://b.test/b", BundleVerification: BundleVerification{PublicKey: "k", Algorithm: "none"}}, "algorithm must be one of"},
		{"poll max below min", Config{BundleURL: "https://b.test/b", BundleVerification: key, BundlePollMin: time.Minute, BundlePollMax: time.Second}, "bundle_poll_max"},
		{"key without url", Config{BundleVerification: key}, "need bundle_url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.cfg
			c.Provision()
			err := c.Validate()
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate() = %v; want %q", err, tt.want)
			}
		})
	}
}

// TestNewRefusesBundleURLWithoutBundle: check and policy commands have no
// fetched bundle; New says how to give them one rather than deciding with
// nothing or with the embedded bundle.
func TestNewRefusesBundleURLWithoutBundle(t *testing.T) {
	_, err := New(context.Background(), Config{BundleURL: "https://b.test/b", BundleVerification: BundleVerification{PublicKey: "k"}}, zap.NewNop())
	if err == nil || !strings.Contains(err.Error(), "--policy DIR") {
		t.Errorf("New() error = %v; want one naming --policy DIR", err)
	}
}

func TestSplitDigest(t *testing.T) {
	for _, tt := range []struct{ id, digest, rev string }{
		{"sha256:ab", "sha256:ab", ""},
		{"sha256:ab@r1", "sha256:ab", "r1"},
		{"sha256:ab@r@1", "sha256:ab", "r@1"},
	} {
		if d, r := SplitDigest(tt.id); d != tt.digest || r != tt.rev {
			t.Errorf("SplitDigest(%q) = %q, %q; want %q, %q", tt.id, d, r, tt.digest, tt.rev)
		}
	}
}

// FuzzNewFetched: what a bundle service sends as file paths and revision
// either is refused or loads as given: every accepted path reads back its
// own bytes through the filesystem readBundle walks, below the root (no
// "..", no absolute path), and an accepted revision is one line of
// printable text without spaces, within the bound.
func FuzzNewFetched(f *testing.F) {
	f.Add("/http.rego", "dns/data.json", "r1")
	f.Add("/../x.rego", "a//b.rego", "r 1")
	f.Add("./x.rego", "/", "\x00")
	f.Fuzz(func(t *testing.T, p1, p2, rev string) {
		files := map[string][]byte{p1: []byte("one"), p2: []byte("two")}
		fe, err := NewFetched("https://b.test/b", rev, files)
		if err != nil {
			return
		}
		if len(rev) > maxRevision || strings.ContainsFunc(rev, func(r rune) bool { return r < 0x21 || r == 0x7f || r == utf8.RuneError }) {
			t.Errorf("NewFetched accepted revision %q", rev)
		}
		for p, want := range files {
			rel := strings.TrimPrefix(p, "/")
			if strings.HasPrefix(rel, "/") || slices.Contains(strings.Split(rel, "/"), "..") {
				t.Errorf("NewFetched accepted path %q outside the root", p)
			}
			got, err := fs.ReadFile(fe.files, rel)
			if err != nil || string(got) != string(want) {
				t.Errorf("file %q reads back %q, %v; want %q", p, got, err, want)
			}
		}
	})
}
