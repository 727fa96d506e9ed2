package dnsguard

import (
	"bytes"
	"testing"

	"github.com/miekg/dns"
	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/egressd/egressd/policy"
)

func TestFacts(t *testing.T) {
	f, err := NewFacts("API.Example.COM.", dns.TypeAAAA)
	if err != nil {
		t.Fatalf("NewFacts: %v", err)
	}
	if f.Name != "api.example.com" || f.QType != "AAAA" || f.Kind() != policy.KindDNS {
		t.Errorf("NewFacts = %+v, kind %s; want api.example.com AAAA, kind dns", f, f.Kind())
	}
	in := ast.NewObject()
	f.AddTo(in)
	want := `{"host": "api.example.com", "host_suffixes": ["example.com", "com"], "name": "api.example.com", "qtype": "AAAA"}`
	if got := in.String(); got != want {
		t.Errorf("AddTo = %s; want %s", got, want)
	}
	if u, _ := NewFacts("x", 65280); u.QType != "TYPE65280" {
		t.Errorf("unknown qtype = %q; want TYPE65280", u.QType)
	}
}

func TestFactsAppendKey(t *testing.T) {
	keys := map[string]string{}
	for _, c := range []struct {
		name  string
		qtype uint16
	}{
		{"a.test", dns.TypeA}, {"a.test", dns.TypeAAAA}, {"a.tes", dns.TypeA}, {"b.test", dns.TypeA},
	} {
		f, err := NewFacts(c.name, c.qtype)
		if err != nil {
			t.Fatal(err)
		}
		k := string(f.AppendKey(nil))
		if prev, dup := keys[k]; dup {
			t.Errorf("AppendKey(%s %s) = AppendKey(%s)", c.name, f.QType, prev)
		}
		keys[k] = c.name + " " + f.QType
		if !bytes.Equal(f.AppendKey([]byte("p")), append([]byte("p"), k...)) {
			t.Errorf("AppendKey does not append to dst")
		}
	}
}
