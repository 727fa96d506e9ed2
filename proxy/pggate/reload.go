package pggate

import "github.com/egressd/egressd/policy"

// redecideObjects decides every prepared statement and cursor the session
// may hold again under the policy and identity now in force (each decision
// audited, as a new statement's is): a profile narrowed by a reload must
// not leave `PREPARE del AS DELETE …`, a protocol-level prepared DELETE or
// a WITH HOLD cursor runnable. A refused one is revoked: its use (Bind,
// Execute, EXECUTE, FETCH, MOVE) is denied with the reason, until the
// client drops or re-creates it.
func (s *session) redecideObjects() {
	texts := s.objs.allTexts()
	denied := map[string]policy.Reason{}
	for _, t := range texts {
		if v := s.decide(t); !v.allow {
			denied[t] = v.reason
		}
	}
	s.objs.setDenied(denied)
}

// recordEffects records what an allowed text creates and drops (effects,
// from effectsOf). It reports false when the session is past its bounds;
// the text is then denied.
func (s *session) recordEffects(effects []effect) bool {
	for _, e := range effects {
		op := objOp{confirm: 'C', tag: e.tag(), name: e.name, all: e.all}
		switch e.kind {
		case effPrepare:
			op.create, op.texts = true, []string{e.text}
		case effDeclare:
			op.portal, op.create, op.texts, op.holdable = true, true, []string{e.text}, e.holdable
		case effCloseCursor:
			op.portal = true
		case effDiscardAll:
			op.both = true
		}
		if !s.objs.record(op) {
			return false
		}
	}
	return true
}

// portalAllow checks an Execute of portal: a revoked portal is denied, and
// its statement text is checked as a query's is (it may EXECUTE or FETCH,
// DEALLOCATE or DECLARE).
func (s *session) portalAllow(portal string) policy.Reason {
	if reason := s.objs.revokedReason(true, portal); reason != "" {
		return reason
	}
	for _, t := range s.objs.textsOf(true, portal) {
		if reason := s.usesRevoked(t); reason != "" {
			return reason
		}
		effects, ok := s.parsed.effectsOf(t)
		if !ok {
			var err error
			if effects, err = effectsOf(t); err != nil {
				return policy.ReasonSQLParseError
			}
		}
		if !s.recordEffects(effects) {
			return policy.ReasonSessionLimit
		}
	}
	return ""
}

// usesRevoked returns the reason of the first revoked prepared statement
// or cursor text runs, or "".
func (s *session) usesRevoked(text string) policy.Reason {
	if !s.objs.anyRevoked() {
		return ""
	}
	var reason policy.Reason
	if err := usesOf(text, func(portal bool, name string) bool {
		reason = s.objs.revokedReason(portal, name)
		return reason == ""
	}); err != nil {
		return policy.ReasonSQLParseError
	}
	return reason
}

// parsedText is a text an allowed verdict was given for, with the
// verdict's effects (effectsOf of that exact text, see forText).
type parsedText struct {
	text    string
	effects []effect
	ok      bool
}

// effectsOf returns the effects of text if p holds that text.
func (p *parsedText) effectsOf(text string) ([]effect, bool) {
	if !p.ok || p.text != text {
		return nil, false
	}
	return p.effects, true
}
