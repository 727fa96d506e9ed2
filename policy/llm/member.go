package llm

import (
	"bytes"
	"encoding/json"
)

// isObject reports whether raw is one valid JSON object: what member
// reads.
func isObject(raw []byte) bool {
	// JSON's whitespace only: bytes.TrimSpace would also take \v, \f and
	// Unicode spaces, which no JSON text may hold.
	raw = bytes.Trim(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '{' && json.Valid(raw)
}

// member returns the value of obj's member key (the last, if repeated, as
// encoding/json keeps), matched exactly once unescaped. obj must be valid
// JSON (isObject): member scans it once, without decoding or allocating
// what it skips, so each event of a stream costs one validation and one
// scan however many chunks carry "usage": null.
func member(obj []byte, key string) (json.RawMessage, bool) {
	i := ws(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return nil, false
	}
	var found json.RawMessage
	ok := false
	for i = ws(obj, i+1); i < len(obj) && obj[i] == '"'; {
		end := skipString(obj, i)
		k := obj[i:end]
		i = ws(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return nil, false
		}
		v := ws(obj, i+1)
		i = skipValue(obj, v)
		if keyIs(k, key) {
			found, ok = obj[v:i], true
		}
		if i = ws(obj, i); i < len(obj) && obj[i] == ',' {
			i = ws(obj, i+1)
		}
	}
	return found, ok
}

// keyIs reports whether the quoted key k is key once unescaped.
func keyIs(k []byte, key string) bool {
	if bytes.IndexByte(k, '\\') < 0 {
		return len(k) == len(key)+2 && string(k[1:len(k)-1]) == key
	}
	var s string
	return json.Unmarshal(k, &s) == nil && s == key
}

// ws skips JSON whitespace from i.
func ws(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the end of the string starting at b[i] == '"'.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the end of the value starting at i.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
		i++
	}
	return i
}
