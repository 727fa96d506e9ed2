package pggate

import (
	"strings"

	"github.com/egressd/egressd/policy/sqlfacts"
)

// effectKind is what one statement does to the session's prepared
// statements and cursors.
type effectKind uint8

const (
	effPrepare     effectKind = iota + 1 // PREPARE name AS …
	effDeclare                           // DECLARE name … CURSOR … FOR …
	effDeallocate                        // DEALLOCATE [PREPARE] name | ALL
	effCloseCursor                       // CLOSE name | ALL
	effDiscardAll                        // DISCARD ALL
)

// effect is one statement's effect on a named object. The server confirms
// each with a CommandComplete whose tag is tag().
type effect struct {
	kind     effectKind
	name     string
	all      bool
	holdable bool
	// text is the statement that creates the object, re-decided when
	// the session's policy changes.
	text string
}

func (e effect) tag() string {
	switch e.kind {
	case effPrepare:
		return "PREPARE"
	case effDeclare:
		return "DECLARE CURSOR"
	case effDeallocate:
		if e.all {
			return "DEALLOCATE ALL"
		}
		return "DEALLOCATE"
	case effCloseCursor:
		if e.all {
			return "CLOSE CURSOR ALL"
		}
		return "CLOSE CURSOR"
	case effDiscardAll:
		return "DISCARD ALL"
	}
	return ""
}

// effectsOf lists what the statements of text do to named objects, in
// order; nil for the common text that creates or drops none. It reads only
// the first words of each statement (sqlfacts.Words), as the server's
// grammar fixes where the name is.
func effectsOf(text string) []effect {
	if strings.IndexByte(text, ';') < 0 && !isEffectVerb(sqlfacts.FirstWord(text)) {
		// One statement, and its first word is no verb of ours: the
		// common query costs a look at that word, not a scan of the text.
		return nil
	}
	var out []effect
	for stmt := range sqlfacts.Split(text) {
		var w [3]string
		n := 0
		holdable, sawWith := false, false
		for word := range sqlfacts.Words(stmt) {
			if n < len(w) {
				w[n] = word
				n++
				if n == 1 && !isEffectVerb(word) {
					break
				}
				continue
			}
			if w[0] != "declare" {
				break
			}
			// DECLARE name … CURSOR [WITH HOLD | WITHOUT HOLD] FOR query
			if word == "for" {
				break
			}
			holdable = holdable || sawWith && word == "hold"
			sawWith = word == "with"
		}
		if n < 2 {
			continue
		}
		switch w[0] {
		case "prepare":
			if w[1] != "transaction" {
				out = append(out, effect{kind: effPrepare, name: w[1], text: stmt})
			}
		case "declare":
			out = append(out, effect{kind: effDeclare, name: w[1], holdable: holdable, text: stmt})
		case "deallocate":
			// DEALLOCATE PREPARE x drops x; DEALLOCATE PREPARE alone
			// drops a statement named prepare.
			name := w[1]
			if name == "prepare" && n == 3 {
				name = w[2]
			}
			out = append(out, effect{kind: effDeallocate, name: name, all: name == "all"})
		case "close":
			out = append(out, effect{kind: effCloseCursor, name: w[1], all: w[1] == "all"})
		case "discard":
			if w[1] == "all" {
				out = append(out, effect{kind: effDiscardAll, all: true})
			}
		}
	}
	return out
}

// isEffectVerb reports whether w, in any case, is a verb that creates or
// drops a named object.
func isEffectVerb(w string) bool {
	for _, v := range [...]string{"prepare", "declare", "deallocate", "close", "discard"} {
		if strings.EqualFold(w, v) {
			return true
		}
	}
	return false
}

// usesOf calls use for every prepared statement (EXECUTE name, also inside
// EXPLAIN or CREATE TABLE AS) and cursor (FETCH or MOVE … name) that text
// runs; use returns false to stop. Only called while the session has
// revoked objects.
func usesOf(text string, use func(portal bool, name string) bool) {
	for stmt := range sqlfacts.Split(text) {
		first, prev, last := "", "", ""
		for word := range sqlfacts.Words(stmt) {
			if first == "" {
				first = word
			}
			if prev == "execute" && !use(false, word) {
				return
			}
			prev, last = word, word
		}
		if (first == "fetch" || first == "move") && !use(true, last) {
			return
		}
	}
}
