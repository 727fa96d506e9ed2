package dnsguard

import (
	"encoding/binary"
	"strconv"

	"github.com/miekg/dns"
	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/egressd/egressd/policy"
)

// Facts are the facts of one DNS question, decided by egress.dns. The name
// is also given as input.host with input.host_suffixes, so the bundle's rule
// index (data.rule_index) matches names exactly as it matches HTTP hosts.
type Facts struct {
	// Name is lower-case, without the trailing dot, checked by
	// normalizeName.
	Name string `json:"name"`
	// QType is the record type's mnemonic, e.g. "AAAA", or "TYPE65280".
	QType string `json:"qtype"`
}

// NewFacts normalizes a question. A name that is not a host name is a
// *policy.DenyError.
func NewFacts(name string, qtype uint16) (*Facts, error) {
	n, err := normalizeName(name)
	if err != nil {
		return nil, err
	}
	return &Facts{Name: n, QType: qtypeString(qtype)}, nil
}

func qtypeString(t uint16) string {
	if s, ok := dns.TypeToString[t]; ok {
		return s
	}
	return "TYPE" + strconv.Itoa(int(t))
}

// Kind is policy.KindDNS.
func (f *Facts) Kind() policy.Kind { return policy.KindDNS }

// AppendKey encodes every field AddTo puts in the input.
func (f *Facts) AppendKey(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(f.Name)))
	dst = append(dst, f.Name...)
	return append(dst, f.QType...)
}

var (
	termName         = ast.StringTerm("name")
	termHost         = ast.StringTerm("host")
	termHostSuffixes = ast.StringTerm("host_suffixes")
	termQType        = ast.StringTerm("qtype")
)

// AddTo inserts name, host, host_suffixes ("a.b.c" → ["b.c", "c"]) and
// qtype.
func (f *Facts) AddTo(in ast.Object) {
	name := ast.StringTerm(f.Name)
	in.Insert(termName, name)
	in.Insert(termHost, name)
	var sfx []*ast.Term
	for i := 0; i < len(f.Name); i++ {
		if f.Name[i] == '.' {
			sfx = append(sfx, ast.StringTerm(f.Name[i+1:]))
		}
	}
	in.Insert(termHostSuffixes, ast.ArrayTerm(sfx...))
	in.Insert(termQType, ast.StringTerm(f.QType))
}
