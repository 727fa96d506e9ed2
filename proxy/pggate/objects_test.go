package pggate

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy"
)

// step is one event of a session as objects sees it.
type step struct {
	op      *objOp // recorded as sent
	sync    bool   // a Query or Sync sent
	confirm byte   // the server's confirmation
	tag     string
	ready   byte // the server's ReadyForQuery status
}

func (o *objects) apply(st step) bool {
	switch {
	case st.op != nil:
		return o.record(*st.op)
	case st.sync:
		o.synced()
	case st.confirm != 0:
		o.confirm(st.confirm, st.tag)
	case st.ready != 0:
		o.readyForQuery(st.ready)
	}
	return true
}

// tracked lists "name=text|text" of a namespace, sorted.
func (o *objects) tracked(portal bool) []string {
	var out []string
	for name, obj := range o.space(portal) {
		if len(obj.texts) > 0 {
			out = append(out, name+"="+strings.Join(obj.texts, "|"))
		}
	}
	slices.Sort(out)
	return out
}

func TestObjectsTracking(t *testing.T) {
	parse := func(name, text string) step {
		return step{op: &objOp{confirm: '1', name: name, create: true, texts: []string{text}}}
	}
	closeStmt := func(name string) step { return step{op: &objOp{confirm: '3', name: name}} }
	bind := func(portal, text string) step {
		return step{op: &objOp{confirm: '2', portal: true, name: portal, create: true, texts: []string{text}}}
	}
	sync := step{sync: true}
	ok := func(typ byte) step { return step{confirm: typ} }
	tag := func(tg string) step { return step{confirm: 'C', tag: tg} }
	ready := func(status byte) step { return step{ready: status} }
	tests := []struct {
		name           string
		steps          []step
		stmts, portals []string
	}{
		{"parse confirmed", []step{parse("x", "A"), sync, ok('1'), ready('I')}, []string{"x=A"}, nil},
		{"parse failed stays tracked", []step{parse("x", "A"), sync, ready('I')}, []string{"x=A"}, nil},
		{"close confirmed", []step{parse("x", "A"), sync, ok('1'), ready('I'), closeStmt("x"), sync, ok('3'), ready('I')}, nil, nil},
		{"close skipped after an error", []step{parse("x", "A"), sync, ok('1'), ready('I'), parse("", "bad"), closeStmt("x"), sync, ready('I')}, []string{"=bad", "x=A"}, nil},
		{"confirmation of another exchange ignored", []step{parse("x", "A"), sync, ok('1'), ready('I'), closeStmt("x"), sync, ready('I'), sync, ok('3'), ready('I')}, []string{"x=A"}, nil},
		{"unnamed replaced", []step{parse("", "A"), sync, ok('1'), ready('I'), parse("", "B"), sync, ok('1'), ready('I')}, []string{"=B"}, nil},
		{"re-creation in flight kept", []step{parse("", "A"), parse("", "B"), sync, ok('1')}, []string{"=A|B"}, nil},
		{"portal ends with the transaction", []step{bind("p", "A"), sync, ok('2'), ready('T')}, nil, []string{"p=A"}},
		{"portal gone when idle", []step{bind("p", "A"), sync, ok('2'), ready('T'), sync, ready('I')}, nil, nil},
		{"holdable cursor survives", []step{{op: &objOp{confirm: 'C', tag: "DECLARE CURSOR", portal: true, name: "c", create: true, texts: []string{"D"}, holdable: true}}, sync, tag("DECLARE CURSOR"), ready('I')}, nil, []string{"c=D"}},
		{"deallocate confirmed", []step{parse("x", "A"), sync, ok('1'), ready('I'), {op: &objOp{confirm: 'C', tag: "DEALLOCATE", name: "x"}}, sync, tag("DEALLOCATE"), ready('I')}, nil, nil},
		{"deallocate all needs its own tag", []step{parse("x", "A"), sync, ok('1'), ready('I'), {op: &objOp{confirm: 'C', tag: "DEALLOCATE ALL", all: true}}, sync, tag("DEALLOCATE"), ready('I')}, []string{"x=A"}, nil},
		{"discard all", []step{parse("x", "A"), bind("p", "A"), sync, ok('1'), ok('2'), ready('T'), {op: &objOp{confirm: 'C', tag: "DISCARD ALL", all: true, both: true}}, sync, tag("DISCARD ALL"), ready('T')}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newObjects()
			for i, st := range tt.steps {
				if !o.apply(st) {
					t.Fatalf("step %d refused", i)
				}
			}
			if got := o.tracked(false); !slices.Equal(got, tt.stmts) {
				t.Errorf("statements = %q; want %q", got, tt.stmts)
			}
			if got := o.tracked(true); !slices.Equal(got, tt.portals) {
				t.Errorf("portals = %q; want %q", got, tt.portals)
			}
		})
	}
}

func TestObjectsRevocation(t *testing.T) {
	o := newObjects()
	o.record(objOp{confirm: '1', name: "del", create: true, texts: []string{"DELETE"}})
	o.record(objOp{confirm: '2', portal: true, name: "p", create: true, texts: []string{"DELETE"}})
	o.record(objOp{confirm: '1', name: "sel", create: true, texts: []string{"SELECT"}})
	o.setDenied(map[string]policy.Reason{"DELETE": "write_denied"})
	if !o.anyRevoked() || o.revokedReason(false, "del") != "write_denied" || o.revokedReason(true, "p") != "write_denied" || o.revokedReason(false, "sel") != "" {
		t.Fatalf("after a re-decision: del %q, p %q, sel %q; want del and p write_denied", o.revokedReason(false, "del"), o.revokedReason(true, "p"), o.revokedReason(false, "sel"))
	}
	// Dropped and made again from an allowed text, the name is usable.
	o.synced()
	o.confirm('1', "")
	o.confirm('2', "")
	o.confirm('1', "")
	o.readyForQuery('I')
	o.record(objOp{confirm: '3', name: "del"})
	o.synced()
	o.confirm('3', "")
	o.readyForQuery('I')
	o.record(objOp{confirm: '1', name: "del", create: true, texts: []string{"SELECT 2"}})
	if o.revokedReason(false, "del") != "" || o.anyRevoked() {
		t.Fatalf("re-created del = %q, any revoked %v; want usable", o.revokedReason(false, "del"), o.anyRevoked())
	}
}

func TestObjectsBounded(t *testing.T) {
	o := newObjects()
	big := strings.Repeat("x", 1<<20)
	n := 0
	for ; n < 100; n++ {
		if !o.record(objOp{confirm: '1', name: fmt.Sprint("s", n), create: true, texts: []string{big + fmt.Sprint(n)}}) {
			break
		}
	}
	if n != maxObjectTextBytes>>20-1 && n != maxObjectTextBytes>>20 {
		t.Fatalf("recorded %d one-MiB statements before the bound; want about %d", n, maxObjectTextBytes>>20)
	}
}
