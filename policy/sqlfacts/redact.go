package sqlfacts

import (
	"slices"
	"sort"
	"strings"

	"github.com/egressd/egressd/policy/sqlfacts/internal/jsontree"
	"github.com/egressd/egressd/policy/sqlparse"
)

// RedactionFailed is the audit text of a statement whose redaction the
// parse tree contradicts: better no SQL in the log than a literal.
const RedactionFailed = "<redaction failed>"

// Keys of the tree the redaction check reads.
const (
	keyAConst   = "A_Const"
	keyLocation = "location"
	keyDefElem  = "DefElem"
)

// literalField reports whether key is a string field of a utility
// statement that holds a string constant of the text (NOTIFY's payload,
// COMMENT's text, a subscription's connection string, COPY's file name):
// not A_Const nodes, so they carry no location. A switch, not a map: it
// runs for every key of every tree.
func literalField(key string) bool {
	switch key {
	case "payload", "comment", "conninfo", "filename":
		return true
	}
	return false
}

// tokens are PostgreSQL's scanner's tokens of a whole query text, for
// looking up the token at a tree location.
type tokens struct {
	src  string
	toks []sqlparse.Token
}

// within is the tokens that lie wholly inside sql[from:to].
func (t *tokens) within(from, to int) []sqlparse.Token {
	i := sort.Search(len(t.toks), func(i int) bool { return t.toks[i].Start >= from })
	j := i
	for j < len(t.toks) && t.toks[j].End <= to {
		j++
	}
	return t.toks[i:j]
}

// at is the index of the token starting exactly at byte off, or -1.
func (t *tokens) at(off int) int {
	i := sort.Search(len(t.toks), func(i int) bool { return t.toks[i].Start >= off })
	if i < len(t.toks) && t.toks[i].Start == off {
		return i
	}
	return -1
}

// text is token i's text.
func (t *tokens) text(i int) string { return t.toks[i].Text(t.src) }

// auditText is the redacted text of the statement whose RawStmt is raw and
// whose text is text, checked against the tree: every A_Const must sit on a
// token the redaction replaced (or on the identifier or keyword it was
// written as: SET x = on, a typmod's DAY), and no string constant of a
// utility statement may be left in the redacted text. A contradiction
// means the tree and PostgreSQL's scanner disagree about where a literal
// is, and the statement is logged as RedactionFailed. all is the whole
// text's tokens, scanned once for every statement; stmt is this
// statement's.
//
// literals reports the other direction: every literal token of stmt is
// where the tree has a constant node (A_Const), so the statement's
// literals are all constants, none an option value, a type modifier or a
// utility statement's string, whose value a fact may have been read
// from. That is what sharing a verdict between texts of one
// sqlparse.Key needs; it is false whenever red is RedactionFailed.
func auditText(d *jsontree.Doc, all *tokens, raw int32, stmt []sqlparse.Token) (red string, literals bool) {
	red = strings.TrimRight(strings.TrimSpace(sqlparse.RedactTokens(all.src, stmt)), ";")
	var buf [32]int
	locs := buf[:0]
	checks := 0
	for obj := raw; obj < d.Next(raw); obj++ {
		if d.Kind(obj) != jsontree.Object {
			continue
		}
		for k := obj + 1; k < d.Next(obj); k = d.Next(k + 1) {
			key, val := d.Raw(k), k+1
			switch {
			case key == keyAConst:
				loc, err := d.Int(d.Get(val, keyLocation))
				if err != nil {
					// pg_query omits a zero location.
					loc = 0
				}
				if loc >= 0 {
					locs = append(locs, int(loc))
				}
			case key == keyDefElem, literalField(key) && d.Kind(val) == jsontree.String:
				// Each of these checks searches the whole text: bounded
				// in number, so the check stays linear in the text.
				if checks++; checks > maxStringChecks {
					return RedactionFailed, false
				}
				if key == keyDefElem && !defElemRedacted(d, all, val, red) || key != keyDefElem && containsBounded(red, d.Str(val)) {
					return RedactionFailed, false
				}
			}
		}
	}
	if !constantsOnLiterals(all, locs) {
		return RedactionFailed, false
	}
	return red, literalsOnConstants(all, stmt, locs)
}

// literalsOnConstants reports whether every literal token of stmt starts
// at an offset in locs (the constants' locations), or follows a minus
// sign that does (PostgreSQL folds -1 into one constant located at the
// sign), and none is a U&'…' string.
func literalsOnConstants(t *tokens, stmt []sqlparse.Token, locs []int) bool {
	slices.Sort(locs)
	for i, tok := range stmt {
		if tok.Kind != sqlparse.String && tok.Kind != sqlparse.Number {
			continue
		}
		if tok.Kind == sqlparse.String && (t.src[tok.Start] == 'U' || t.src[tok.Start] == 'u') {
			// PostgreSQL decodes a U&'…' string's escapes after the
			// scanner, in the grammar's token filter: one text of a Key
			// may parse and another not.
			return false
		}
		if _, ok := slices.BinarySearch(locs, tok.Start); ok {
			continue
		}
		if i > 0 && stmt[i-1].Kind == sqlparse.Op && stmt[i-1].Text(t.src) == "-" {
			if _, ok := slices.BinarySearch(locs, stmt[i-1].Start); ok {
				continue
			}
		}
		return false
	}
	return true
}

// maxStringChecks bounds the string constants of utility statements one
// statement may have and still be logged (a CREATE SERVER has a handful).
const maxStringChecks = 64

// constantsOnLiterals reports whether each byte offset in locs starts a
// token the redaction replaces, a word, or a minus sign right before a
// number (PostgreSQL folds -1 into one constant located at the sign).
func constantsOnLiterals(t *tokens, locs []int) bool {
	for _, loc := range locs {
		i := t.at(loc)
		if i < 0 {
			return false
		}
		switch t.toks[i].Kind {
		case sqlparse.String, sqlparse.Number, sqlparse.Word:
		case sqlparse.Op:
			if t.text(i) != "-" || i+1 >= len(t.toks) || t.toks[i+1].Kind != sqlparse.Number {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// defElemRedacted checks a DefElem's String argument: absent from the
// redacted text, or written as the identifier after the option name
// (FORMAT csv, which the tree cannot tell from FORMAT 'csv').
func defElemRedacted(d *jsontree.Doc, t *tokens, de int32, red string) bool {
	val := d.Str(d.Get(d.Get(d.Get(de, keyArg), nodeString), keySval))
	if val == "" || !containsBounded(red, val) {
		return true
	}
	loc, err := d.Int(d.Get(de, keyLocation))
	if err != nil || loc < 0 {
		return false
	}
	i := t.at(int(loc))
	if i < 0 || !strings.EqualFold(t.text(i), d.Str(d.Get(de, keyDefname))) {
		return false
	}
	i++
	if i < len(t.toks) && t.text(i) == "=" {
		i++
	}
	return i < len(t.toks) && (t.toks[i].Kind == sqlparse.Word || t.toks[i].Kind == sqlparse.QuotedIdent) &&
		strings.EqualFold(strings.Trim(t.text(i), `"`), val)
}

// containsBounded reports whether v occurs in s not glued to identifier
// characters on a side where v itself starts or ends with one: "ch" is in
// "NOTIFY ch, $1" but not in "$1", "ch2" or "chan".
//
// A long v is searched for once, glued or not: it is unlikely to be glued
// to an identifier by chance, and the bounded search costs len(v) per
// occurrence.
func containsBounded(s, v string) bool {
	if v == "" {
		return false
	}
	if len(v) > 64 {
		return strings.Contains(s, v)
	}
	for off := 0; ; {
		i := strings.Index(s[off:], v)
		if i < 0 {
			return false
		}
		i += off
		j := i + len(v)
		before := i == 0 || !identByte(s[i-1]) || !identByte(v[0])
		after := j == len(s) || !identByte(s[j]) || !identByte(v[len(v)-1])
		if before && after {
			return true
		}
		off = i + 1
	}
}

func identByte(c byte) bool {
	return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}
