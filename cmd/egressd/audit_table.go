package main

import (
	"bufio"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy"
)

// The table has fixed minimum widths so rows line up while following:
// KIND, DECISION and REASON fit every value egressd writes, REQUEST a
// proxy request id; a longer identity or rule id pushes its row right.
var columns = []struct {
	name  string
	width int
}{{"TIME", 27}, {"SEQ", 6}, {"REQUEST", 14}, {"KIND", longest(audit.Kinds())}, {"IDENTITY", 16},
	{"DECISION", len(wouldDeny)}, {"REASON", longest(policy.Reasons())}, {"RULE", 14}, {"TARGET", 0}}

// wouldDeny is the decision column of an allow an observe mode let
// through, whose reason column is the reason it would have denied with.
const wouldDeny = "would_deny"

// longest is the length of the longest of ss.
func longest[S ~string](ss []S) int {
	n := 0
	for _, s := range ss {
		n = max(n, len(s))
	}
	return n
}

func writeHeader(w *bufio.Writer) {
	cells := make([]string, len(columns))
	for i, c := range columns {
		cells[i] = c.name
	}
	writeCells(w, cells)
}

func writeRow(w *bufio.Writer, r *audit.Record) {
	writeCells(w, []string{
		r.TS.UTC().Format("2006-01-02T15:04:05.000000Z"), strconv.FormatUint(r.Seq, 10), dash(r.Request), r.Kind.String(),
		identityCell(r), decisionCell(r), reasonCell(r), dash(r.Rule), dash(strings.TrimPrefix(target(r)+outcome(r), " ")),
	})
}

// identityCell is the identity column: a refusal of credentials that did
// not authenticate shows the user they claimed instead.
func identityCell(r *audit.Record) string {
	if r.Identity == "" && r.User != "" {
		return "claimed:" + r.User
	}
	return dash(r.Identity)
}

// decisionCell is the decision column: an allow an observe mode let
// through is "would_deny", and its reason column the reason it would have
// been denied with (reasonCell).
func decisionCell(r *audit.Record) string {
	if r.WouldDeny != "" {
		return wouldDeny
	}
	return dash(r.Decision.String())
}

// reasonCell is the reason column: an observed allow shows what it would
// have been denied with, and by whose observe mode it was let through.
func reasonCell(r *audit.Record) string {
	if r.WouldDeny != "" {
		return r.WouldDeny
	}
	return dash(r.Reason)
}

func writeCells(w *bufio.Writer, cells []string) {
	for i, c := range cells {
		if i > 0 {
			w.WriteString("  ")
		}
		c = printable(c)
		w.WriteString(c)
		if i < len(cells)-1 {
			for n := utf8.RuneCountInString(c); n < columns[i].width; n++ {
				w.WriteByte(' ')
			}
		}
	}
	w.WriteByte('\n')
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// target summarizes what a record is about, by kind.
func target(r *audit.Record) string {
	var b strings.Builder
	detail := r.Detail
	switch {
	case r.Method != "" || r.Path != "":
		if r.Scheme == "" {
			// A CONNECT names an authority, not a URL.
			fmt.Fprintf(&b, "%s %s%s", r.Method, hostPort(r), r.Path)
		} else {
			fmt.Fprintf(&b, "%s %s://%s%s", r.Method, r.Scheme, hostPort(r), r.Path)
		}
		if r.Query != "" {
			b.WriteString("?" + r.Query)
		}
	case r.Host != "":
		b.WriteString(hostPort(r))
	case r.Name != "":
		b.WriteString(r.Name)
		if r.QType != "" {
			b.WriteString(" " + r.QType)
		}
	case r.SQL != "":
		if r.Database != "" {
			b.WriteString(r.Database + ": ")
		}
		b.WriteString(r.SQL)
	case r.Count > 0:
		fmt.Fprintf(&b, "%d more refusals from %s, %s to %s", r.Count, dash(r.Client), r.Detail["first"], r.Detail["last"])
		detail = nil
	}
	if r.Inspected {
		b.WriteString(" (inspected)")
	}
	if r.ObservedBy != "" {
		b.WriteString(" (allowed by " + r.ObservedBy + " observe mode)")
	}
	if r.IP != "" {
		b.WriteString(" [" + r.IP + "]")
	}
	if len(r.Credentials) > 0 {
		// Names and places only: a record never holds a secret's value.
		b.WriteString(" credentials:")
		for _, k := range sortedKeys(r.Credentials) {
			b.WriteString(" " + k + "=" + r.Credentials[k])
		}
	}
	for _, k := range sortedKeys(detail) {
		b.WriteString(" " + k + "=" + detail[k])
	}
	return b.String()
}

// outcome is what a record says happened beyond its decision: a
// completion's status, bytes and duration, what a request carried, and
// the error that ended or refused it (last, as it may hold spaces).
func outcome(r *audit.Record) string {
	var b strings.Builder
	add := func(k, v string) {
		if v != "" && v != "0" {
			b.WriteString(" " + k + "=" + v)
		}
	}
	add("status", strconv.Itoa(r.Status))
	add("in", strconv.FormatInt(r.BytesIn, 10))
	add("out", strconv.FormatInt(r.BytesOut, 10))
	if r.DurationUS > 0 {
		add("took", showDuration(time.Duration(r.DurationUS)*time.Microsecond))
	}
	add("mcp", r.MCPMethod)
	add("tool", r.Tool)
	add("model", r.Model)
	add("tokens_in", strconv.FormatInt(r.TokensIn, 10))
	add("tokens_out", strconv.FormatInt(r.TokensOut, 10))
	add("secret", r.Secret)
	add("secret_pattern", r.SecretPattern)
	add("truncated", r.Truncated)
	if r.Error != "" {
		b.WriteString(" error: " + r.Error)
	}
	return b.String()
}

// showDuration rounds d to what a reader compares: microseconds below a
// millisecond, milliseconds below a minute.
func showDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.String()
	case d < time.Minute:
		return d.Round(10 * time.Microsecond).String()
	default:
		return d.Round(time.Millisecond).String()
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// printable keeps client-supplied text (hosts, paths, SQL) from driving
// the terminal or disguising itself: control characters, format characters
// (bidi overrides and isolates U+202A–202E and U+2066–2069, zero-width
// characters, U+FEFF, tag characters), and the line and paragraph
// separators U+2028/2029 are shown as \uXXXX (\U0010XXXX beyond the BMP),
// and a backslash as \\, so an escape cannot be forged either.
func printable(s string) string {
	clean := true
	for _, c := range s {
		if c == '\\' || mustEscape(c) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, c := range s {
		switch {
		case c == '\\':
			b.WriteString(`\\`)
		case !mustEscape(c):
			b.WriteRune(c)
		case c > 0xffff:
			fmt.Fprintf(&b, `\U%08x`, c)
		default:
			fmt.Fprintf(&b, `\u%04x`, c)
		}
	}
	return b.String()
}

// mustEscape reports whether c may not reach the terminal as it is.
func mustEscape(c rune) bool {
	return c < 0x20 || (c >= 0x7f && c < 0xa0) || c == utf8.RuneError ||
		unicode.In(c, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Co, unicode.Cs)
}

func hostPort(r *audit.Record) string {
	if r.Port == 0 {
		return r.Host
	}
	if strings.Contains(r.Host, ":") {
		return "[" + r.Host + "]:" + strconv.Itoa(int(r.Port))
	}
	return r.Host + ":" + strconv.Itoa(int(r.Port))
}
