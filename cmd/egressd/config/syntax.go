package config

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// yamlErrRE splits a yaml.v3 syntax error into its line and message.
var yamlErrRE = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// maxLocateLines bounds locateSyntax's work: it parses every prefix of
// the file, and a config is far shorter.
const maxLocateLines = 5000

// syntaxError rewrites a yaml.v3 syntax error so that its line is the
// one to fix. yaml.v3 cites, for parser errors, the 0-based line where the
// enclosing construct began (so `- id: a` then a mis-indented key is
// reported a line or more early) and, for scanner errors, the 1-based line
// of the problem. The line to fix is the first whose prefix of the file
// fails with the same message; a tab in that line's indentation is named
// as such, since the scanner only says it "cannot start any token".
func syntaxError(src []byte, err error) error {
	m := yamlErrRE.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	msg := m[2]
	line, ok := locateSyntax(src, msg)
	if !ok {
		if m[1] == "" {
			return fmt.Errorf("yaml: %s", msg)
		}
		line, _ = strconv.Atoi(m[1])
	}
	text := lineText(src, line)
	if indent := text[:len(text)-len(strings.TrimLeft(text, " \t"))]; strings.Contains(indent, "\t") {
		return fmt.Errorf("line %d: tabs are not allowed in YAML indentation; indent with spaces", line)
	}
	if strings.Contains(text, "\t") && strings.Contains(msg, "cannot start any token") {
		return fmt.Errorf("line %d: a tab where YAML expects a value; use spaces", line)
	}
	return fmt.Errorf("line %d: %s", line, msg)
}

// locateSyntax returns the first line n such that lines 1..n fail to
// parse with msg, the error src as a whole has.
func locateSyntax(src []byte, msg string) (int, bool) {
	lines := bytes.SplitAfter(src, []byte("\n"))
	if len(lines) > maxLocateLines {
		return 0, false
	}
	for n := 1; n <= len(lines); n++ {
		var node yaml.Node
		err := yaml.Unmarshal(bytes.Join(lines[:n], nil), &node)
		if err == nil {
			continue
		}
		if m := yamlErrRE.FindStringSubmatch(err.Error()); m != nil && m[2] == msg {
			return n, true
		}
	}
	return 0, false
}

// lineText is line n (1-based) of src without its newline, "" past the end.
func lineText(src []byte, n int) string {
	lines := strings.Split(string(src), "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	return lines[n-1]
}

// isSyntaxError reports an error of yaml.v3's scanner or parser, as
// opposed to a *yaml.TypeError about a value.
func isSyntaxError(err error) bool {
	var te *yaml.TypeError
	return !errors.As(err, &te) && strings.HasPrefix(err.Error(), "yaml: ")
}
