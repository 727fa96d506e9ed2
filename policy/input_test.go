package policy

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
)

// TestRegoInputIsWhatRegoSees: RegoInput prints exactly the input the
// entry point evaluated (the oracle is Rego's own json.marshal(input)).
func TestRegoInputIsWhatRegoSees(t *testing.T) {
	dir := writeBundle(t, "", map[string]string{
		"http.rego":    echoModule("http"),
		"connect.rego": echoModule("connect"),
	})
	e := newTestEngine(t, Config{Dir: dir, CacheSize: -1})
	conn, err := ParseConnect("10.0.0.1:443")
	if err != nil {
		t.Fatalf("ParseConnect: %v", err)
	}
	id := Identity{ID: "team", Attributes: map[string]string{"tier": "1"}}
	tests := []struct {
		name  string
		facts Facts
	}{
		{"http with flags", mustParse(t, "GET", "http://ok.test/a/%2e%2e/b?q=1")},
		{"connect", conn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{Identity: id, Facts: tt.facts}
			d := e.Decide(context.Background(), in)
			if !d.Allow {
				t.Fatalf("Decide = %+v; want the echo allow", d)
			}
			var seen any
			if err := json.Unmarshal([]byte(d.Reason), &seen); err != nil {
				t.Fatalf("echoed input %q: %v", d.Reason, err)
			}
			got, err := e.RegoInput(in)
			if err != nil {
				t.Fatalf("RegoInput: %v", err)
			}
			if g := roundTrip(t, got); !reflect.DeepEqual(g, seen) {
				t.Errorf("RegoInput = %v; want what Rego saw, %v", g, seen)
			}
		})
	}
	if _, err := e.RegoInput(Input{Identity: id}); err == nil {
		t.Errorf("RegoInput(no facts) = nil error; want an error: Decide evaluates nothing")
	}
}

// echoModule is an entry point that answers every request with its own
// input as the reason, so the test sees the object Rego evaluated.
func echoModule(kind string) string {
	return "package egress." + kind + "\n\ndecision := {\"allow\": true, \"reason\": json.marshal(input), \"rule\": \"echo\"}\n"
}

func roundTrip(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %v: %v", v, err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	return out
}
