package main

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"os"
	"strconv"

	"github.com/egressd/egressd/internal/version"
	"github.com/egressd/egressd/policy"
)

// startedDetail is what the started record of this start says (see
// audit.KindStarted): a restart after a clean stop, or after a crash that
// left a whole last line, appends to the same segment, and without it the
// chain would not show that the process (and perhaps its config or bundle)
// changed.
//
// policyDigest carries the revision of a bundle from a bundle service
// ("sha256:…@REV"); such a start also names bundle_url, and
// bundle_insecure_unsigned "true" when unsigned bundles are accepted, so
// that the chain shows a start that did not verify its policy.
func startedDetail(cfgPath, policyDigest string, p policy.Config) map[string]string {
	v := version.Get()
	d := map[string]string{
		"version": v.Version,
		"commit":  v.Commit,
		"config":  configDigest(cfgPath),
		"policy":  policyDigest,
		"pid":     strconv.Itoa(os.Getpid()),
	}
	if p.BundleURL != "" {
		d["bundle_url"] = p.BundleURL
		if u, err := url.Parse(p.BundleURL); err == nil && u.RawQuery != "" {
			// A query may hold a token (a pre-signed URL): the record
			// names the service and path, not the credential.
			u.RawQuery = ""
			d["bundle_url"] = u.String() + "?…"
		}
		if p.BundleVerification.InsecureUnsigned {
			d["bundle_insecure_unsigned"] = "true"
		}
	}
	return d
}

// configDigest is the SHA-256 of the config file as it is on disk now
// (config.Load read it a moment ago), or "embedded" for the defaults.
func configDigest(path string) string {
	if path == "" {
		return "embedded"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
