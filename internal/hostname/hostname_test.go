package hostname

import (
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	label63 := strings.Repeat("a", 63)
	tests := []struct {
		name, in, want string
		fault          Fault
	}{
		{name: "lower", in: "pypi.org", want: "pypi.org"},
		{name: "upper folded", in: "PyPI.Org", want: "pypi.org"},
		{name: "digits hyphen underscore", in: "_dmarc.a-1.example", want: "_dmarc.a-1.example"},
		{name: "63-byte label", in: label63 + ".example", want: label63 + ".example"},
		{name: "253 bytes", in: strings.Repeat("a.", 126) + "a", want: strings.Repeat("a.", 126) + "a"},
		{name: "empty", in: "", fault: EmptyName},
		{name: "254 bytes", in: strings.Repeat("a.", 126) + "ab", fault: TooLong},
		{name: "double dot", in: "a..b", fault: EmptyLabel},
		{name: "leading dot", in: ".a", fault: EmptyLabel},
		{name: "trailing dot", in: "a.", fault: EmptyLabel},
		{name: "space", in: "a b", fault: BadByte},
		{name: "non-ASCII", in: "bücher.example", fault: BadByte},
		{name: "64-byte label", in: label63 + "a.example", fault: LabelTooLong},
		{name: "first fault wins", in: "a..b c", fault: EmptyLabel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, f := Normalize(tt.in)
			if got != tt.want || f != tt.fault {
				t.Errorf("Normalize(%q) = %q, %d; want %q, %d", tt.in, got, f, tt.want, tt.fault)
			}
		})
	}
}

// sink keeps the compiler from dropping the call under measurement.
var sink string

// TestNormalizeAllocatesOnlyToFold: a lower-case name is returned as is.
func TestNormalizeAllocatesOnlyToFold(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { sink, _ = Normalize("files.pythonhosted.org") }); n != 0 {
		t.Errorf("Normalize of a lower-case name: %v allocations; want 0", n)
	}
}

func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"pypi.org", "PyPI.Org", "a..b", "", "x\x00y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, fault := Normalize(s)
		if fault != OK {
			if n != "" {
				t.Fatalf("Normalize(%q) = %q with fault %d; want no name", s, n, fault)
			}
			return
		}
		if n != strings.ToLower(s) {
			t.Fatalf("Normalize(%q) = %q; want it lower-cased", s, n)
		}
		for _, l := range strings.Split(n, ".") {
			if l == "" || len(l) > MaxLabelLen {
				t.Fatalf("Normalize(%q) accepted label %q", s, l)
			}
		}
		if again, f2 := Normalize(n); again != n || f2 != OK {
			t.Fatalf("Normalize not idempotent on %q: %q, %d", n, again, f2)
		}
	})
}
