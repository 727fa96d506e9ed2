// Package version says which egressd this binary is: the version and commit
// deploy/build.sh stamps in with -ldflags -X, and the Go toolchain and
// libpg_query binding read from the binary's own build information. Both
// `egressd version` and the egressd_build_info metric report it.
package version

import (
	"runtime"
	"runtime/debug"
)

// Stamped by deploy/build.sh (and so the Dockerfile):
//
//	-X github.com/egressd/egressd/internal/version.version=v1.2.3
//	-X github.com/egressd/egressd/internal/version.commit=<sha>
//
// Left empty by a plain `go build`, which Get fills from the build's VCS
// information instead.
var (
	version string
	commit  string
)

// pgQueryModule is the module of the libpg_query binding; its version is
// the Postgres grammar the gate parses with.
const pgQueryModule = "github.com/pganalyze/pg_query_go/v5"

// Info is what Get reports. No field is empty: an unknown one is "unknown".
type Info struct {
	Version        string `json:"version"`
	Commit         string `json:"commit"`
	GoVersion      string `json:"go_version"`
	PgQueryVersion string `json:"pg_query_version"`
}

// Get returns this binary's Info.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuild(version, commit, bi)
}

// fromBuild is Get over explicit inputs, for tests. Without a stamped
// version the binary is "devel" (a plain go build of a checkout); without a
// stamped commit it is the VCS revision go build recorded, with "-dirty"
// when the tree had changes.
func fromBuild(stampedVersion, stampedCommit string, bi *debug.BuildInfo) Info {
	in := Info{Version: stampedVersion, Commit: stampedCommit, GoVersion: runtime.Version(), PgQueryVersion: "unknown"}
	if bi != nil {
		in.GoVersion = bi.GoVersion
		for _, d := range bi.Deps {
			if d.Path == pgQueryModule {
				in.PgQueryVersion = d.Version
				if d.Replace != nil {
					in.PgQueryVersion = d.Replace.Version
				}
			}
		}
		if in.Commit == "" {
			in.Commit = vcsCommit(bi.Settings)
		}
	}
	if in.Version == "" {
		in.Version = "devel"
	}
	if in.Commit == "" {
		in.Commit = "unknown"
	}
	if in.PgQueryVersion == "" {
		in.PgQueryVersion = "unknown"
	}
	return in
}

func vcsCommit(settings []debug.BuildSetting) string {
	var rev string
	var dirty bool
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" && dirty {
		rev += "-dirty"
	}
	return rev
}
