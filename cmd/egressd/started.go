package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"runtime/debug"
	"strconv"
)

// startedDetail is what the started record of this start says (see
// audit.KindStarted): a restart after a clean stop, or after a crash that
// left a whole last line, appends to the same segment, and without it the
// chain would not show that the process (and perhaps its config or bundle)
// changed.
func startedDetail(cfgPath, policyDigest string) map[string]string {
	return map[string]string{
		"version": buildVersion(),
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

// buildVersion is the module version and VCS revision the binary was
// built from, as the Go toolchain stamped them.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v += " " + s.Value
		case "vcs.modified":
			if s.Value == "true" {
				v += "+dirty"
			}
		}
	}
	return v
}
