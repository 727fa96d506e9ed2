package config

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

var lineRE = regexp.MustCompile(`^line (\d+): (.*)$`)

// nameKeys rewrites yaml.v3's decode errors, which cite only a line number,
// so that each names the key it is about: a user fixing a file wants
// `audit.sync_interval: cannot unmarshal …`, not `line 2: …`.
func nameKeys(src []byte, err error) error {
	if isSyntaxError(err) {
		return syntaxError(src, err)
	}
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	var root yaml.Node
	if yaml.Unmarshal(src, &root) != nil {
		return err
	}
	msgs := make([]string, 0, len(te.Errors))
	for _, e := range te.Errors {
		m := lineRE.FindStringSubmatch(e)
		if m == nil {
			msgs = append(msgs, e)
			continue
		}
		line, _ := strconv.Atoi(m[1])
		if path := keyAt(&root, line, ""); path != "" {
			msgs = append(msgs, fmt.Sprintf("%s: %s (line %d)", path, typeProblem(m[2], secretPath.MatchString(path)), line))
		} else {
			msgs = append(msgs, e)
		}
	}
	return errors.New(strings.Join(msgs, "; "))
}

// lastLine is the last line n or its descendants start on.
func lastLine(n *yaml.Node) int {
	l := n.Line
	for _, c := range n.Content {
		l = max(l, lastLine(c))
	}
	return l
}

// keyAt returns the dotted path of the deepest key or value on line.
func keyAt(n *yaml.Node, line int, prefix string) string {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if p := keyAt(c, line, prefix); p != "" {
				return p
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			path := k.Value
			if prefix != "" {
				path = prefix + "." + k.Value
			}
			if secretPath.MatchString(path) {
				// Never name what lies inside a secret key's value.
				if k.Line <= line && line <= lastLine(v) {
					return path
				}
				continue
			}
			if p := keyAt(v, line, path); p != "" {
				return p
			}
			if k.Line == line || v.Line == line {
				return path
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			path := fmt.Sprintf("%s[%d]", prefix, i)
			if p := keyAt(c, line, path); p != "" {
				return p
			}
			if c.Line == line {
				return path
			}
		}
	}
	return ""
}

// durationRE matches yaml.v3's complaint about a number where a
// time.Duration goes.
var durationRE = regexp.MustCompile("^cannot unmarshal !!(?:int|float) `([^`]*)` into time.Duration$")

// durationStrRE matches a string that time.ParseDuration refused.
var durationStrRE = regexp.MustCompile("^cannot unmarshal !!str `([^`]*)` into time.Duration$")

// unknownKeyRE matches yaml.v3's strict-decoding complaint, which names
// a Go type the user never wrote.
var unknownKeyRE = regexp.MustCompile(`^field \S+ not found in type \S+$`)

// typeProblem is yaml.v3's complaint about a value, said so that the
// user knows what to write: a bare number for a duration means seconds
// to most people, but egressd would have to guess the unit.
func typeProblem(msg string, secret bool) string {
	if m := durationRE.FindStringSubmatch(msg); m != nil && !secret {
		return fmt.Sprintf("a duration needs a unit: write %ss (or ms, m, h), got %s", m[1], m[1])
	}
	if m := durationStrRE.FindStringSubmatch(msg); m != nil && !secret {
		return fmt.Sprintf("want a duration such as 10ms, 5s, 1m or 1h30m, got %q", m[1])
	}
	if unknownKeyRE.MatchString(msg) {
		return "unknown key (deploy/egressd.yaml lists every key)"
	}
	return msg
}
