package pggate

import (
	"strings"

	"github.com/egressd/egressd/policy/sqlfacts"
	"github.com/egressd/egressd/policy/sqlparse"
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
// the first words of each statement (sqlfacts.WordsOf, on PostgreSQL's
// scanner's tokens, names as the server truncates them), as the server's
// grammar fixes where the name is. A text the scanner refuses has no
// effects to read: its error is returned, and the caller refuses it.
func effectsOf(text string) ([]effect, error) {
	toks, err := sqlparse.Scan(text)
	if err != nil {
		return nil, err
	}
	return statementEffects(text, sqlfacts.Statements(text, toks)), nil
}

// statementEffects is effectsOf a scanned text, given its statements.
func statementEffects(text string, stmts []sqlfacts.Stmt) []effect {
	var out []effect
	for _, st := range stmts {
		stmt := st.Text
		words := sqlfacts.WordsOf(text, st.Toks)
		if len(words) < 2 || !isEffectVerb(words[0]) {
			continue
		}
		holdable := false
		if words[0] == "declare" {
			// DECLARE name … CURSOR [WITH HOLD | WITHOUT HOLD] FOR query
			for i := 2; i < len(words) && words[i] != "for"; i++ {
				holdable = holdable || words[i] == "hold" && words[i-1] == "with"
			}
		}
		switch words[0] {
		case "prepare":
			if words[1] != "transaction" {
				out = append(out, effect{kind: effPrepare, name: words[1], text: stmt})
			}
		case "declare":
			out = append(out, effect{kind: effDeclare, name: words[1], holdable: holdable, text: stmt})
		case "deallocate":
			// DEALLOCATE PREPARE x drops x; DEALLOCATE PREPARE alone
			// drops a statement named prepare.
			name := words[1]
			if name == "prepare" && len(words) >= 3 {
				name = words[2]
			}
			out = append(out, effect{kind: effDeallocate, name: name, all: name == "all"})
		case "close":
			out = append(out, effect{kind: effCloseCursor, name: words[1], all: words[1] == "all"})
		case "discard":
			if words[1] == "all" {
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
// revoked objects. A text the scanner refuses returns its error: the
// caller refuses it.
func usesOf(text string, use func(portal bool, name string) bool) error {
	toks, err := sqlparse.Scan(text)
	if err != nil {
		return err
	}
	for _, st := range sqlfacts.Statements(text, toks) {
		words := sqlfacts.WordsOf(text, st.Toks)
		for i := 1; i < len(words); i++ {
			if words[i-1] == "execute" && !use(false, words[i]) {
				return nil
			}
		}
		if len(words) > 0 && (words[0] == "fetch" || words[0] == "move") && !use(true, words[len(words)-1]) {
			return nil
		}
	}
	return nil
}
