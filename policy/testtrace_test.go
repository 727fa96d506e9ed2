package policy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/fstest"
)

// TestFailedTestTrace is issue 25 item 8: a failed Rego test says which
// expression failed and the values it compared, as the test names them,
// bounded however large the values or however many expressions fail.
func TestFailedTestTrace(t *testing.T) {
	fsys := fstest.MapFS{
		"data.json": {Data: []byte(`{"rules": []}`)},
		"http.rego": {Data: []byte("package egress.http\n\ndecision := {\"allow\": false, \"reason\": \"no_matching_rule\", \"rule\": \"\"}\n")},
		"t_test.rego": {Data: []byte(`package t_test

decision := {"allow": false, "reason": "no_matching_rule", "rule": ""}

test_reason if {
	d := decision
	d.reason == "allowed"
}

test_big if {
	s := concat("", [x | some i in numbers.range(1, 300); x := "ab"])
	s == "ab"
}

test_passes if {
	decision.allow == false
}
`)},
	}
	passed, err := Test(context.Background(), fsys)
	var te *TestError
	if !errors.As(err, &te) || passed != 1 || len(te.Failures) != 2 {
		t.Fatalf("Test = %d, %v; want 1 passed and 2 failures", passed, err)
	}
	traces := map[string]string{}
	for _, f := range te.Failures {
		traces[f.Name] = f.Trace
	}
	want := "t_test.rego:7: fail d.reason = \"allowed\"\n  d = {\"allow\": false, \"reason\": \"no_matching_rule\", \"rule\": \"\"}"
	if got := traces["data.t_test.test_reason"]; got != want {
		t.Errorf("trace of test_reason = %q; want %q", got, want)
	}
	big := traces["data.t_test.test_big"]
	if !strings.Contains(big, "fail s = \"ab\"") || !strings.Contains(big, "  s = \"abab") || !strings.HasSuffix(big, "…") || len(big) > 2*maxValueBytes {
		t.Errorf("trace of test_big = %q; want the expression and s cut to %d bytes", big, maxValueBytes)
	}
}
