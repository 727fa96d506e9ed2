package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"testing"

	"github.com/egressd/egressd/internal/version"
	"github.com/egressd/egressd/policy"
)

// TestVersion: `egressd version` prints version, commit, Go and pg_query
// versions and exits 0; --json prints the same as one object (issue 17
// item 5).
func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := exitCode(run([]string{"version"}, &stdout, &stderr), &stderr); code != 0 {
		t.Fatalf("egressd version exit = %d; want 0 (stderr %q)", code, stderr.String())
	}
	// An unstamped test binary: version devel; go test records no VCS
	// information, so the commit is unknown.
	want := regexp.MustCompile(`^egressd devel\ncommit: \S+\ngo: go1\.\S+\npg_query: v5\.\S+\n$`)
	if !want.Match(stdout.Bytes()) {
		t.Errorf("egressd version = %q; want it to match %s", stdout.String(), want)
	}
	stdout.Reset()
	if code := exitCode(run([]string{"version", "--json"}, &stdout, &stderr), &stderr); code != 0 {
		t.Fatalf("egressd version --json exit = %d; want 0", code)
	}
	var v map[string]string
	if err := json.Unmarshal(stdout.Bytes(), &v); err != nil {
		t.Fatalf("egressd version --json = %q: %v", stdout.String(), err)
	}
	for _, k := range []string{"version", "commit", "go_version", "pg_query_version"} {
		if v[k] == "" {
			t.Errorf("egressd version --json lacks %s: %v", k, v)
		}
	}
	if code := exitCode(run([]string{"version", "extra"}, &stdout, &stderr), &stderr); code != 2 {
		t.Errorf("egressd version extra exit = %d; want 2", code)
	}
}

// TestStartedRecordNamesTheBuild: the audit log's started record names the
// same version and commit as `egressd version` (before, it read the
// module version, "(devel)" in every binary deploy/build.sh made).
func TestStartedRecordNamesTheBuild(t *testing.T) {
	d := startedDetail("", "sha256:x", policy.Config{})
	v := version.Get()
	if d["version"] != v.Version || d["commit"] != v.Commit {
		t.Errorf("started detail version, commit = %q, %q; want %q, %q", d["version"], d["commit"], v.Version, v.Commit)
	}
}

// TestVersionFlag (issue 25 item 7): `egressd --version` is `egressd
// version`, as most tools have it.
func TestVersionFlag(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-version"}, {"--version", "--json"}} {
		code, stdout, stderr := runCLI(args...)
		_, want, _ := runCLI(append([]string{"version"}, args[1:]...)...)
		if code != 0 || stdout != want || stderr != "" {
			t.Errorf("egressd %v: exit %d, stdout %q, stderr %q; want exit 0 and %q", args, code, stdout, stderr, want)
		}
	}
}

// TestStartedRecordNamesTheBundleService: a start from a bundle service
// names it, without a query (a pre-signed URL's token), and says when it
// accepts unsigned bundles.
func TestStartedRecordNamesTheBundleService(t *testing.T) {
	for _, tt := range []struct {
		p        policy.Config
		url, ins string
	}{
		{policy.Config{}, "", ""},
		{policy.Config{BundleURL: "https://b.test/e.tar.gz"}, "https://b.test/e.tar.gz", ""},
		{policy.Config{BundleURL: "https://b.test/e.tar.gz?X-Amz-Signature=secret"}, "https://b.test/e.tar.gz?…", ""},
		{policy.Config{BundleURL: "http://b.test/e", BundleVerification: policy.BundleVerification{InsecureUnsigned: true}}, "http://b.test/e", "true"},
	} {
		d := startedDetail("", "sha256:x@r1", tt.p)
		if d["bundle_url"] != tt.url || d["bundle_insecure_unsigned"] != tt.ins || d["policy"] != "sha256:x@r1" {
			t.Errorf("startedDetail(%q) = %v; want bundle_url %q, bundle_insecure_unsigned %q", tt.p.BundleURL, d, tt.url, tt.ins)
		}
	}
}
