package replay

import (
	"testing"

	"github.com/egressd/egressd/policy"
)

// TestStagesCoverReasons: every declared reason an entry point refuses
// with is placed on its path. One the replay re-runs (stageDecided) must
// come from the policy, the floor or a parser; a limit, an identity
// check, an upstream or an outage happens outside them, and a reason of
// that kind left unclassified would be compared as if a bundle had
// decided it.
func TestStagesCoverReasons(t *testing.T) {
	kinds := []policy.Kind{policy.KindHTTP, policy.KindConnect, policy.KindRedirect, policy.KindDNS, policy.KindSQL}
	for _, r := range policy.Reasons() {
		for _, k := range kinds {
			if !r.Refuses(k) || stageOf(k, r) != stageDecided {
				continue
			}
			if c := r.Class(); c != policy.ClassPolicy && c != policy.ClassMalformed {
				t.Errorf("%s refuses %s, class %s, and replay takes it for a decision it re-runs: place it in stage.go", r, k, c)
			}
		}
	}
}
