package decisiontest

import "testing"

func TestParse(t *testing.T) {
	tests := []struct {
		name, v string
		want    Decision
	}{
		{"reason", "deny; reason=private_address", Decision{Verdict: "deny", Reason: "private_address"}},
		{"reason and rule", "deny; reason=credential_wrong_destination; rule=gh", Decision{"deny", "credential_wrong_destination", "gh"}},
		{"none", "", Decision{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Parse(tt.v); got != tt.want {
				t.Errorf("Parse(%q) = %+v; want %+v", tt.v, got, tt.want)
			}
		})
	}
}
