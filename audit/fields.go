package audit

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Every string in a record may come from a client (a path, a query, a
// claimed user, SQL, an error quoting input), so each is capped before the
// record is queued: one request can never cost more than a few KiB of log,
// whatever its head held. Capping happens here, in Append, so every kind
// of record gets it without each entry point remembering to.

// capNames are the capped string fields, named for the "truncated" mark,
// in layout order; capField returns field i of r.
var capNames = [...]string{"request", "identity", "user", "client", "method", "scheme", "host", "path",
	"query", "name", "qtype", "database", "sql", "fingerprint", "ip", "decision", "reason", "rule",
	"policy", "would_deny", "observed_by", "mcp_method", "tool", "rpc_id", "model", "secret", "secret_pattern", "via", "traceparent", "error"}

// capQuery is the index of "query" in capNames.
const capQuery = 8

// capField is a switch rather than a table of funcs so that the record
// does not escape: Append keeps its copy on the stack.
func capField(r *Record, i int) *string {
	switch i {
	case 0:
		return &r.Request
	case 1:
		return &r.Identity
	case 2:
		return &r.User
	case 3:
		return &r.Client
	case 4:
		return &r.Method
	case 5:
		return &r.Scheme
	case 6:
		return &r.Host
	case 7:
		return &r.Path
	case capQuery:
		return &r.Query
	case 9:
		return &r.Name
	case 10:
		return &r.QType
	case 11:
		return &r.Database
	case 12:
		return &r.SQL
	case 13:
		return &r.Fingerprint
	case 14:
		return &r.IP
	case 15:
		return (*string)(&r.Decision)
	case 16:
		return &r.Reason
	case 17:
		return &r.Rule
	case 18:
		return &r.Policy
	case 19:
		return &r.WouldDeny
	case 20:
		return &r.ObservedBy
	case 21:
		return &r.MCPMethod
	case 22:
		return &r.Tool
	case 23:
		return &r.RPCID
	case 24:
		return &r.Model
	case 25:
		return &r.Secret
	case 26:
		return &r.SecretPattern
	case 27:
		return &r.Via
	case 28:
		return &r.Traceparent
	}
	return &r.Error
}

// prepare redacts r's query and caps its fields in place (r is the
// writer's own copy). Work is linear in the capped sizes: a value is cut
// before anything else looks at it.
func (w *Writer) prepare(r *Record) {
	max := w.cfg.MaxFieldBytes
	var cutBuf [len(capNames)]string
	cut := cutBuf[:0]
	for i, name := range capNames {
		p := capField(r, i)
		long := len(*p) > max
		if long {
			*p, _ = capString(*p, max)
		}
		if i == capQuery && *p != "" {
			// Redact after the cut, so the work is bounded; the
			// [redacted:N] markers may lengthen it past the cap again.
			if *p = redactQuery(*p, w.redact); len(*p) > max {
				*p, long = capString(*p, max)
			}
		}
		if long {
			cut = append(cut, name)
		}
	}
	if longDetail(r.Detail, max) {
		d := make(map[string]string, len(r.Detail))
		for k, v := range r.Detail {
			d[k], _ = capString(v, max)
		}
		r.Detail = d
		cut = append(cut, "detail")
	}
	if len(cut) > 0 {
		if r.Truncated != "" {
			cut = append([]string{r.Truncated}, cut...)
		}
		r.Truncated = strings.Join(cut, ",")
	}
}

// longDetail reports whether a detail value exceeds max; only then is the
// map (shared with the caller) copied.
func longDetail(d map[string]string, max int) bool {
	for _, v := range d {
		if len(v) > max {
			return true
		}
	}
	return false
}

// capString cuts s to at most max bytes at a rune boundary, copying the
// prefix so the record does not pin the client's whole request in memory.
func capString(s string, max int) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	n := max
	for n > 0 && n > max-utf8.UTFMax && !utf8.RuneStart(s[n]) {
		n--
	}
	return strings.Clone(s[:n]), true
}

// redactQuery replaces the value of every parameter whose name contains one
// of frags with [redacted:N]. Parameters are split on '&' and ';' (servers
// differ; splitting on both redacts in either reading), the name is
// percent-decoded and lower-cased before matching, and a parameter without
// '=' has no value to hide.
func redactQuery(q string, frags []string) string {
	if len(frags) == 0 {
		return q
	}
	var b []byte
	last := 0 // q[last:] is not yet copied to b
	for start := 0; start < len(q); {
		end := start + strings.IndexAny(q[start:], "&;")
		if end < start {
			end = len(q)
		}
		if eq := strings.IndexByte(q[start:end], '='); eq >= 0 {
			name := q[start : start+eq]
			if sensitive(name, frags) {
				if b == nil {
					b = make([]byte, 0, len(q))
				}
				b = append(b, q[last:start+eq+1]...)
				b = append(b, "[redacted:"...)
				b = strconv.AppendInt(b, int64(end-start-eq-1), 10)
				b = append(b, ']')
				last = end
			}
		}
		start = end + 1
	}
	if b == nil {
		return q
	}
	return string(append(b, q[last:]...))
}

// sensitive reports whether a raw parameter name, decoded, contains a
// fragment. Decoding is lenient: a malformed escape stays as written, so
// "%74oken" and "%2" both have a name to test.
func sensitive(raw string, frags []string) bool {
	var buf [128]byte
	name := buf[:0]
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c == '%' && i+2 < len(raw) && isHex(raw[i+1]) && isHex(raw[i+2]) {
			c = unhex(raw[i+1])<<4 | unhex(raw[i+2])
			i += 2
		} else if c == '+' {
			c = ' '
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		name = append(name, c)
	}
	for _, f := range frags {
		if strings.Contains(string(name), f) {
			return true
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// Rewrite replaces every string of r a client or upstream may have
// supplied — each capped field, and the keys and values of Credentials
// and Detail — with f of it, before r is appended. The maps are copied,
// not changed in place: a caller may share them.
func (r *Record) Rewrite(f func(string) string) {
	for i := range capNames {
		p := capField(r, i)
		*p = f(*p)
	}
	r.Credentials = rewriteMap(r.Credentials, f)
	r.Detail = rewriteMap(r.Detail, f)
}

func rewriteMap(m map[string]string, f func(string) string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[f(k)] = f(v)
	}
	return out
}
