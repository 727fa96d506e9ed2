// Package grants owns time-bound grants while `serve` runs: the grants
// file, the admin routes that create, list and revoke grants, the timer
// that expires them, and their audit records and metrics. A grant itself
// is policy.Grant, data the engine appends to the bundle's rules; putting
// a set of grants in force is generation.Running.SetGrants.
//
// Grants are per replica: each egressd keeps its own file and applies
// only the grants made through its own admin listener.
package grants

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/egressd/egressd/internal/atomicfile"
	"github.com/egressd/egressd/policy"
)

// FileName is the grants file's name in audit.dir: egressd's state beside
// the log that records every change to it.
const FileName = "grants.json"

// maxFile bounds the grants file read at start: MaxGrants grants of at
// most a few KiB each.
const maxFile = 16 << 20

// Path is the grants file of an audit directory.
func Path(auditDir string) string { return filepath.Join(auditDir, FileName) }

// file is the grants file's JSON: {"grants": [grant, …]}, soonest expiry
// first.
type file struct {
	Grants []policy.Grant `json:"grants"`
}

// Load reads the grants file at path and splits it into the grants still
// in force at now (soonest expiry first) and those expired. A missing file
// holds none. A grant the file holds that does not validate is an error
// naming it: the file is egressd's, and a hand edit must not be half
// applied.
func Load(path string, now time.Time) (live, expired []policy.Grant, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("load grants %s: %w", path, err)
	}
	if len(b) > maxFile {
		return nil, nil, fmt.Errorf("load grants %s: larger than %d bytes", path, maxFile)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f file
	if err := dec.Decode(&f); err != nil {
		return nil, nil, fmt.Errorf("load grants %s: %w (move the file away to start without grants)", path, err)
	}
	if len(f.Grants) > MaxGrants {
		return nil, nil, fmt.Errorf("load grants %s: %d grants, more than %d", path, len(f.Grants), MaxGrants)
	}
	for i := range f.Grants {
		g := &f.Grants[i]
		if err := g.Validate(); err != nil {
			return nil, nil, fmt.Errorf("load grants %s: grants[%d]: %w", path, i, err)
		}
		if slices.ContainsFunc(f.Grants[:i], func(o policy.Grant) bool { return o.ID == g.ID }) {
			return nil, nil, fmt.Errorf("load grants %s: grants[%d]: id %q is listed twice", path, i, g.ID)
		}
		if g.Expires.After(now) {
			live = append(live, *g)
		} else {
			expired = append(expired, *g)
		}
	}
	sortByExpiry(live)
	return live, expired, nil
}

func sortByExpiry(gs []policy.Grant) {
	slices.SortStableFunc(gs, func(a, b policy.Grant) int { return a.Expires.Compare(b.Expires) })
}

// save writes gs to path atomically: a temporary file in the same
// directory, fsynced, renamed over path, and the directory fsynced, so a
// crash leaves the old file or the new one, never a torn one.
func save(path string, gs []policy.Grant) error {
	if gs == nil {
		gs = []policy.Grant{}
	}
	b, err := json.MarshalIndent(file{Grants: gs}, "", "  ")
	if err != nil {
		return fmt.Errorf("save grants: %w", err)
	}
	b = append(b, '\n')
	// Readable by the log's readers (segments are 0640): egressd check
	// reads it to answer as the proxy would.
	if err := atomicfile.Write(path, b, 0o640); err != nil {
		return fmt.Errorf("save grants: %w", err)
	}
	return nil
}
