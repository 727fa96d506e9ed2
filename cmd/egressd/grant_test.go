package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/cmd/egressd/grants"
	"github.com/egressd/egressd/policy"
)

// check reads serve's grants file and names the grant that decided, with
// its expiry; an expired grant in the file decides nothing.
func TestCheckShowsGrant(t *testing.T) {
	dir := t.TempDir()
	auditDir := filepath.Join(dir, "audit")
	if err := os.Mkdir(auditDir, 0o750); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	b, err := json.Marshal(map[string][]policy.Grant{"grants": {
		{ID: "live", Identity: "anonymous", Method: "GET", Host: "granted.test", Port: 80, Path: "/x", Expires: exp, GrantedBy: "approver", FromRequest: "r-1"},
		{ID: "gone", Identity: "anonymous", Method: "GET", Host: "granted.test", Port: 80, Path: "/old", Expires: time.Now().Add(-time.Hour)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(grants.Path(auditDir), b, 0o640); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, dir, goldenConfig+"audit:\n  dir: "+auditDir+"\n")
	code, out, errs := runCLI("check", "http", "--config", cfg, "GET", "http://granted.test/x")
	var got checkOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 {
		t.Fatalf("check under a grant: exit %d, %s%s", code, out, errs)
	}
	if got.Rule != "grant:live" || got.Grant == nil || !got.Grant.Expires.Equal(exp) || got.Grant.GrantedBy != "approver" || got.Grant.FromRequest != "r-1" {
		t.Errorf("check under a grant = %s; want rule grant:live with its expiry, who and request", out)
	}
	if code, out, _ := runCLI("check", "http", "--config", cfg, "GET", "http://granted.test/old"); code != 1 || strings.Contains(out, "grant:gone") {
		t.Errorf("check under an expired grant: exit %d, %s; want denied", code, out)
	}
}
