package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuild(t *testing.T) {
	deps := []*debug.Module{{Path: pgQueryModule, Version: "v5.1.0"}, {Path: "example.com/other", Version: "v9.9.9"}}
	tests := []struct {
		name            string
		version, commit string
		bi              *debug.BuildInfo
		want            Info
	}{
		{"stamped", "v1.2.3", "abc123", &debug.BuildInfo{GoVersion: "go1.26.0", Deps: deps,
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "fromvcs"}}},
			Info{"v1.2.3", "abc123", "go1.26.0", "v5.1.0"}},
		{"plain go build of a clean checkout", "", "", &debug.BuildInfo{GoVersion: "go1.26.0", Deps: deps,
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "fromvcs"}, {Key: "vcs.modified", Value: "false"}}},
			Info{"devel", "fromvcs", "go1.26.0", "v5.1.0"}},
		{"plain go build of a dirty checkout", "", "", &debug.BuildInfo{GoVersion: "go1.26.0", Deps: deps,
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "fromvcs"}, {Key: "vcs.modified", Value: "true"}}},
			Info{"devel", "fromvcs-dirty", "go1.26.0", "v5.1.0"}},
		{"replaced binding", "v1", "c", &debug.BuildInfo{GoVersion: "go1.26.0",
			Deps: []*debug.Module{{Path: pgQueryModule, Version: "v5.1.0", Replace: &debug.Module{Path: "../pg_query_go", Version: "v5.1.1"}}}},
			Info{"v1", "c", "go1.26.0", "v5.1.1"}},
		{"no vcs, no binding", "", "", &debug.BuildInfo{GoVersion: "go1.26.0"},
			Info{"devel", "unknown", "go1.26.0", "unknown"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fromBuild(tt.version, tt.commit, tt.bi); got != tt.want {
				t.Errorf("fromBuild(%q, %q, …) = %+v; want %+v", tt.version, tt.commit, got, tt.want)
			}
		})
	}
}
