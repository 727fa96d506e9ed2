package policy

import (
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

func TestVcacheFollowsTopdownContract(t *testing.T) {
	c := getVcache()
	defer c.put()
	a, b := ast.MustParseRef("data.a.x"), ast.MustParseRef("data.b")
	buf := a.Copy()
	c.Put(buf, ast.StringTerm("va"))
	buf[2] = ast.StringTerm("overwritten") // topdown reuses the buffers it passes
	c.Put(b, nil)
	tests := []struct {
		name      string
		ref       ast.Ref
		value     *ast.Term
		undefined bool
	}{
		{"value", a, ast.StringTerm("va"), false},
		{"undefined", b, nil, true},
		{"not cached", ast.MustParseRef("data.a"), nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, undef := c.Get(tt.ref)
			if !v.Equal(tt.value) && !(v == nil && tt.value == nil) || undef != tt.undefined {
				t.Errorf("Get(%v) = %v, %v; want %v, %v", tt.ref, v, undef, tt.value, tt.undefined)
			}
		})
	}
	c.Push()
	if v, undef := c.Get(a); v != nil || undef {
		t.Errorf("Get(%v) in a new frame = %v, %v; want nil, false", a, v, undef)
	}
	c.Put(a, ast.StringTerm("inner"))
	if keys := c.Keys(); len(keys) != 1 || !keys[0].Equal(a) {
		t.Errorf("Keys() = %v; want [%v]", keys, a)
	}
	c.Pop()
	if v, _ := c.Get(a); !v.Equal(ast.StringTerm("va")) {
		t.Errorf("Get(%v) after Pop = %v; want \"va\"", a, v)
	}
	for i := range maxVcacheEntries + 5 {
		c.Put(ast.MustParseRef("data.n").Append(ast.IntNumberTerm(i)), ast.BooleanTerm(true))
	}
	if n := len(c.Keys()); n != maxVcacheEntries-1 {
		t.Errorf("len(Keys()) = %d; want %d (the frame is full)", n, maxVcacheEntries-1)
	}
}
