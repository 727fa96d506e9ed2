package policy

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxFactText bounds one fact's value in the text (a body's JSON can be
// long): the facts in full are `egressd check`'s JSON.
const maxFactText = 200

// WriteText writes x for a person to read: the facts, the refusal before
// any rule, the entry point's checks, each candidate rule with its
// conditions (ok or MISS, the request's value, what the rule says), the
// bundle's body refusals, and the decision.
func (x *Explanation) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s decision for identity %s, policy %s\n", x.Kind, cmp.Or(x.Identity.ID, "none"), cmp.Or(x.Decision.Policy, "none"))
	writeFacts(&b, x.Facts)
	x.writeRefusal(&b)
	if len(x.Checks) > 0 {
		b.WriteString("checks:\n")
		for _, c := range x.Checks {
			writeCondition(&b, "  ", c, "want")
		}
	}
	x.writeCandidates(&b)
	if (x.Kind == KindHTTP || x.Kind == KindRedirect) && (x.Refusal == nil || !x.Refusal.BeforePolicy) {
		if len(x.BodyDenials) == 0 {
			b.WriteString("bundle body rules (egress.body): none refuse\n")
		} else {
			b.WriteString("bundle body rules (egress.body) refuse, the least first, which is taken after the base refusal:\n")
			for _, d := range x.BodyDenials {
				fmt.Fprintf(&b, "  %s (rule %s)\n", d.Reason, cmp.Or(d.Rule, "none"))
			}
		}
	}
	b.WriteString("decision: " + decisionText(x.Decision) + "\n")
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("write explanation: %w", err)
	}
	return nil
}

func (x *Explanation) writeRefusal(b *strings.Builder) {
	r := x.Refusal
	switch {
	case r != nil && r.BeforePolicy:
		fmt.Fprintf(b, "refused before the policy: %s", r.Reason)
		if r.Detail != "" {
			fmt.Fprintf(b, " (%s)", r.Detail)
		}
		b.WriteString("; no rule was asked\n")
	case x.Kind == KindSQL:
		if len(x.Flags) > 0 {
			fmt.Fprintf(b, "statement flags: %s\n", strings.Join(x.Flags, ", "))
		}
	case r != nil:
		fmt.Fprintf(b, "base refusal: %s (input.flags[0]; flags: %s)", r.Reason, strings.Join(x.Flags, ", "))
		if r.Fired {
			b.WriteString(", refused before any rule\n")
		} else {
			b.WriteString(", which the bundle does not refuse\n")
		}
	case x.Kind == KindHTTP || x.Kind == KindRedirect || x.Kind == KindConnect:
		b.WriteString("base refusal: none (input.flags is empty)\n")
	}
}

func (x *Explanation) writeCandidates(b *strings.Builder) {
	if x.Kind == KindSQL || x.Facts == nil {
		return
	}
	if len(x.Candidates) == 0 {
		b.WriteString("candidate rules: none names this host, its parent or a name under it\n")
		return
	}
	order := "the first match decides"
	switch x.Kind {
	case KindConnect:
		order = "a matching deny decides, else the first matching inspected rule, else the first match"
	case KindDNS:
		order = "in data.rules order; the first match decides"
	}
	fmt.Fprintf(b, "candidate rules, in the order the policy tries them (%s):\n", order)
	for _, c := range x.Candidates {
		action := "allow"
		if c.Deny {
			action = "deny"
		}
		state := "no match"
		if c.Matches {
			state = "matches"
			if c.Verdict.Reason != "" && c.Verdict.Reason != ReasonAllowed {
				state += ", " + c.Verdict.Reason.String()
			}
		}
		if c.Decided {
			state += " <- decided"
		}
		fmt.Fprintf(b, "  %s (rules[%d], %s): %s\n", c.Rule, c.Index, action, state)
		for _, cond := range c.Conditions {
			writeCondition(b, "    ", cond, "rule")
		}
	}
	if x.Omitted > 0 {
		fmt.Fprintf(b, "  … %d more candidate rules left out\n", x.Omitted)
	}
}

func writeCondition(b *strings.Builder, indent string, c Condition, label string) {
	mark := "ok"
	if !c.OK {
		mark = "MISS"
	}
	fmt.Fprintf(b, "%s%-9s %-4s  %s", indent, c.Name, mark, quoteControl(cmp.Or(c.Got, "none")))
	if c.Want != "" {
		fmt.Fprintf(b, " (%s: %s)", label, c.Want)
	}
	if !c.OK && c.Reason != "" {
		fmt.Fprintf(b, " -> %s", c.Reason)
	}
	b.WriteString("\n")
}

func decisionText(d Decision) string {
	s := "deny"
	if d.Allow {
		s = "allow"
	}
	s += " " + cmp.Or(d.Reason.String(), "none") + ", rule " + cmp.Or(d.Rule, "none")
	if d.Inspect {
		s += ", inspect"
	}
	if o := d.WouldDeny; o != nil {
		s += " (observe mode of the " + o.By.String() + ": enforced, it would deny " + o.Reason.String() + ")"
	}
	return s
}

// writeFacts writes the facts' JSON fields in their order, one a line.
func writeFacts(b *strings.Builder, facts any) {
	if facts == nil {
		b.WriteString("facts: none (the request did not parse)\n")
		return
	}
	raw, err := json.Marshal(facts)
	if err != nil {
		fmt.Fprintf(b, "facts: %v\n", err)
		return
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		fmt.Fprintf(b, "facts: %s\n", clip(string(raw)))
		return
	}
	var rows [][2]string
	width := 0
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			break
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			break
		}
		key := fmt.Sprint(k)
		width = max(width, len(key))
		rows = append(rows, [2]string{key, factText(v)})
	}
	b.WriteString("facts:\n")
	for _, r := range rows {
		fmt.Fprintf(b, "  %-*s  %s\n", width, r[0], r[1])
	}
}

// factText is a fact's value: a string as it is, anything else as
// compact JSON.
func factText(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) == nil && s != "" {
		return clip(quoteControl(s))
	}
	var c bytes.Buffer
	if json.Compact(&c, v) != nil {
		return clip(string(v))
	}
	return clip(c.String())
}

func clip(s string) string {
	if len(s) <= maxFactText {
		return s
	}
	n := maxFactText
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// quoteControl is s, quoted when it holds a control character (a path
// flagged control_character), so that the text never carries one.
func quoteControl(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return strconv.Quote(s)
	}
	return s
}
