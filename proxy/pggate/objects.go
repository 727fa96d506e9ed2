package pggate

import (
	"slices"
	"sync"

	"github.com/egressd/egressd/policy"
)

// Bounds of what one session may keep prepared: past them a new prepared
// statement or cursor is denied session_limit (a normal application keeps
// a few hundred, each a query of a few hundred bytes).
const (
	maxObjectTextBytes = 8 << 20
	maxPendingOps      = 1 << 16
)

// objects tracks the prepared statements and the portals (protocol portals
// and SQL cursors share one namespace) that may exist upstream, with the
// texts they were made from, so that a reload can decide them again under
// the new policy (issue 12 item 2). What is tracked is always a superset of
// what exists: a creation counts from the moment it is sent, a removal only
// once the server confirms it, in the order it answers.
//
// The run goroutine records; the relay confirms. Every method locks mu,
// and none blocks while holding it.
type objects struct {
	mu             sync.Mutex
	stmts, portals map[string]*object
	pending        []objOp
	sent, ready    uint64 // exchanges (Query, Sync) sent, and ReadyForQuery seen
	textBytes      int
	revoked        int                      // objects with a revoked reason
	denied         map[string]policy.Reason // text → reason, from the last re-decision
}

// object is one prepared statement or portal.
type object struct {
	// texts are every text it may have been made from: more than one while
	// a re-creation under the same name is unconfirmed.
	texts    []string
	holdable bool
	// revoked is the deny reason when the current policy refuses one of
	// texts; a use of the object is then denied with it.
	revoked policy.Reason
}

// objOp is one message or statement sent upstream that creates or removes
// an object once the server confirms it.
type objOp struct {
	seg     uint64 // the exchange it belongs to: ReadyForQuery number sent+1
	confirm byte   // '1' ParseComplete, '2' BindComplete, '3' CloseComplete, 'C' CommandComplete
	tag     string // for 'C', the command tag
	portal  bool
	name    string
	// For a creation: the texts, else a removal (of all when all is set;
	// both namespaces when both is set, as DISCARD ALL).
	create    bool
	texts     []string
	holdable  bool
	all, both bool
}

func newObjects() *objects {
	return &objects{stmts: map[string]*object{}, portals: map[string]*object{}}
}

func (o *objects) space(portal bool) map[string]*object {
	if portal {
		return o.portals
	}
	return o.stmts
}

// record notes op as sent upstream; a creation counts at once. It reports
// false when the session is past its bounds (the caller denies instead of
// sending). op.texts must not change afterwards: text slices are shared,
// never written.
func (o *objects) record(op objOp) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.pending) >= maxPendingOps {
		return false
	}
	if op.create && !o.add(op.portal, op.name, op.texts, op.holdable, true) {
		return false
	}
	op.seg = o.sent + 1
	o.pending = append(o.pending, op)
	return true
}

// add merges texts into the named object, creating it. With bounded set it
// reports false past the text bound and adds nothing; a merge of texts
// already in flight is never refused.
func (o *objects) add(portal bool, name string, texts []string, holdable, bounded bool) bool {
	m := o.space(portal)
	obj := m[name]
	if obj == nil {
		obj = &object{}
	}
	added, missing := 0, 0
	for _, t := range texts {
		if !slices.Contains(obj.texts, t) {
			added += len(t)
			missing++
		}
	}
	if bounded && o.textBytes+added > maxObjectTextBytes {
		return false
	}
	switch {
	case len(obj.texts) == 0:
		obj.texts = texts
	case missing > 0:
		merged := slices.Clip(obj.texts)
		for _, t := range texts {
			if !slices.Contains(merged, t) {
				merged = append(merged, t)
			}
		}
		obj.texts = merged
	}
	o.textBytes += added
	obj.holdable = obj.holdable || holdable
	m[name] = obj
	o.judge(obj)
	return true
}

// synced notes a message that ends an exchange (Query, Sync) as sent.
func (o *objects) synced() {
	o.mu.Lock()
	o.sent++
	o.mu.Unlock()
}

// wantsTag reports whether a CommandComplete's tag may confirm an op, so
// the relay decodes it only then.
func (o *objects) wantsTag() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, op := range o.pending {
		if op.seg == o.ready+1 && op.confirm == 'C' {
			return true
		}
	}
	return false
}

// confirm applies the first op of the current exchange that a server
// message of type typ (and tag, for CommandComplete) answers. The server
// answers in order and stops at the first error, so the n-th confirmation
// of a kind belongs to the n-th op of that kind.
func (o *objects) confirm(typ byte, tag string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, op := range o.pending {
		if op.seg != o.ready+1 || op.confirm != typ || op.tag != tag {
			continue
		}
		o.pending = slices.Delete(o.pending, i, i+1)
		switch {
		case op.create:
			// The object is now exactly what op made, plus whatever
			// re-creations are still in flight.
			o.rebuild(op.portal, op.name, op.texts, op.holdable)
		case op.both:
			o.removeAll(false)
			o.removeAll(true)
		case op.all:
			o.removeAll(op.portal)
		default:
			o.rebuild(op.portal, op.name, nil, false)
		}
		return
	}
}

// readyForQuery ends the current exchange: its unconfirmed ops did not
// happen (their creations stay tracked, a superset). Outside a
// transaction, only holdable portals survive.
func (o *objects) readyForQuery(status byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ready++
	n := 0
	for _, op := range o.pending {
		if op.seg > o.ready {
			o.pending[n] = op
			n++
		}
	}
	clear(o.pending[n:])
	o.pending = o.pending[:n]
	if status == 'I' {
		for name, obj := range o.portals {
			if !obj.holdable {
				o.rebuild(true, name, nil, false)
			}
		}
	}
}

func (o *objects) removeAll(portal bool) {
	for name := range o.space(portal) {
		o.rebuild(portal, name, nil, false)
	}
}

// rebuild sets name's texts to texts plus those of creations still in
// flight, dropping the object when none remain. The common cases (nothing
// in flight for the name) allocate nothing.
func (o *objects) rebuild(portal bool, name string, texts []string, holdable bool) {
	m := o.space(portal)
	old := m[name]
	if old != nil {
		for _, t := range old.texts {
			o.textBytes -= len(t)
		}
		if old.revoked != "" {
			o.revoked--
		}
		old.texts, old.holdable, old.revoked = nil, false, ""
	}
	inFlight := false
	for _, op := range o.pending {
		inFlight = inFlight || op.create && op.portal == portal && op.name == name
	}
	if len(texts) == 0 && !inFlight {
		if name != "" {
			delete(m, name)
		}
		// The unnamed statement and portal are replaced all the time:
		// their emptied object stays for the next one.
		return
	}
	obj := old
	if obj == nil {
		obj = &object{}
	}
	obj.texts, obj.holdable = texts, holdable
	for _, t := range texts {
		o.textBytes += len(t)
	}
	m[name] = obj
	for _, op := range o.pending {
		if op.create && op.portal == portal && op.name == name {
			o.add(portal, name, op.texts, op.holdable, false)
		}
	}
	o.judge(obj)
}

// judge sets obj.revoked from the last re-decision, keeping the count.
func (o *objects) judge(obj *object) {
	was := obj.revoked != ""
	obj.revoked = ""
	for _, t := range obj.texts {
		if r, ok := o.denied[t]; ok {
			obj.revoked = r
			break
		}
	}
	switch now := obj.revoked != ""; {
	case now && !was:
		o.revoked++
	case was && !now:
		o.revoked--
	}
}

// texts returns every tracked text, for a re-decision.
func (o *objects) allTexts() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, m := range []map[string]*object{o.stmts, o.portals} {
		for _, obj := range m {
			for _, t := range obj.texts {
				if !slices.Contains(out, t) {
					out = append(out, t)
				}
			}
		}
	}
	return out
}

// setDenied installs the outcome of a re-decision: the texts the current
// policy refuses, with their reasons.
func (o *objects) setDenied(denied map[string]policy.Reason) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.denied = denied
	for _, m := range []map[string]*object{o.stmts, o.portals} {
		for _, obj := range m {
			o.judge(obj)
		}
	}
}

// revokedReason is the deny reason of a use of the named object, or "".
func (o *objects) revokedReason(portal bool, name string) policy.Reason {
	o.mu.Lock()
	defer o.mu.Unlock()
	if obj := o.space(portal)[name]; obj != nil {
		return obj.revoked
	}
	return ""
}

// anyRevoked reports whether some object is revoked: only then are query
// texts searched for uses of one.
func (o *objects) anyRevoked() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.revoked > 0
}

// textsOf returns the texts of the named object; the caller must not
// change the slice.
func (o *objects) textsOf(portal bool, name string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if obj := o.space(portal)[name]; obj != nil {
		return obj.texts
	}
	return nil
}
