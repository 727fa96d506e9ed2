package pggate

import (
	"strings"

	"github.com/egressd/egressd/policy/sqlparse"
)

// respell writes stmt again, sometimes, in spellings PostgreSQL reads as
// the same statement but a lexer of its own could read otherwise (issue 21
// item 1): a -- comment ended by a lone CR before some token, and a string
// constant continued on the next line (E'ab' as E'a' CR/LF 'b', which
// PostgreSQL lexes in the first part's state). The gate must decide the
// respelled text exactly as the server runs it.
func (g *sqlGen) respell(stmt string) string {
	toks, err := sqlparse.Scan(stmt)
	if err != nil || len(toks) < 2 {
		return stmt
	}
	if g.chance(0.25) {
		// A string without backslashes means the same as an E'' string:
		// split it into a continued one.
		for _, i := range g.r.Perm(len(toks)) {
			t := toks[i]
			body := t.Text(stmt)
			if t.Kind != sqlparse.String || len(body) < 4 || body[0] != '\'' || strings.ContainsAny(body, `\`) || strings.Contains(body[1:len(body)-1], "'") {
				continue
			}
			cut := 2 + g.pick(len(body)-3)
			sep := oneOf(g, "\n", "\r", "\r\n", " \t\r ")
			return stmt[:t.Start] + "E" + body[:cut] + "'" + sep + "'" + body[cut:] + stmt[t.End:]
		}
	}
	if g.chance(0.25) {
		at := toks[1+g.pick(len(toks)-1)].Start
		return stmt[:at] + " --" + oneOf(g, "x", ";", "'", "/*") + "\r" + stmt[at:]
	}
	return stmt
}
