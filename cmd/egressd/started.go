package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strconv"

	"github.com/egressd/egressd/internal/version"
)

// startedDetail is what the started record of this start says (see
// audit.KindStarted): a restart after a clean stop, or after a crash that
// left a whole last line, appends to the same segment, and without it the
// chain would not show that the process (and perhaps its config or bundle)
// changed.
func startedDetail(cfgPath, policyDigest string) map[string]string {
	v := version.Get()
	return map[string]string{
		"version": v.Version,
		"commit":  v.Commit,
		"config":  configDigest(cfgPath),
		"policy":  policyDigest,
		"pid":     strconv.Itoa(os.Getpid()),
	}
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
