package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"sort"
	"strconv"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// The line layout is fixed: keys always appear in the order of Record's
// fields, "prev" and "hash" always last, so the verifier can find them by
// position and the hash covers exactly the bytes on disk:
//
//	{"seq":1,"ts":"…",…,"prev":"<64 hex>","hash":"<64 hex>"}\n
//
// hash = SHA-256(prev as 32 raw bytes ‖ the line up to and including the
// prev value ‖ "}"), i.e. the line as it would read without its hash field.
const (
	hexLen     = 2 * sha256.Size
	hashSuffix = len(`,"hash":"`) + hexLen + len(`"}`)
	prevSuffix = len(`,"prev":"`) + hexLen + len(`"`)
	// minLine is the shortest line that can hold seq, ts, kind, prev and hash.
	minLine = len(`{"seq":0,"ts":"","kind":""`) + prevSuffix + hashSuffix
)

// tsLayout is RFC 3339 in UTC with microseconds, always six digits so that
// lines sort and align.
const tsLayout = "2006-01-02T15:04:05.000000Z07:00"

var closeBrace = []byte{'}'}

// encoder turns records into lines. It is owned by one goroutine and reuses
// its digest, so encoding allocates nothing.
type encoder struct {
	h   hash.Hash
	sum [sha256.Size]byte
	// sec and secText cache the formatted second of the last timestamp:
	// records arrive in bursts within one second.
	sec     int64
	secText []byte
}

func newEncoder() *encoder { return &encoder{h: sha256.New()} }

// appendLine appends r as one line (with its trailing newline) to b, with
// the given seq and prev, and returns the extended buffer and the line's
// hash. r's own Seq, Prev and Hash fields are ignored.
func (e *encoder) appendLine(b []byte, r *Record, seq uint64, prev *[sha256.Size]byte) ([]byte, [sha256.Size]byte) {
	start := len(b)
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"ts":"`...)
	b = e.appendTS(b, r.TS)
	b = append(b, '"')
	b = appendStr(b, `,"kind":`, r.Kind)
	b = appendOpt(b, `,"request":`, r.Request)
	b = appendOpt(b, `,"identity":`, r.Identity)
	b = appendOpt(b, `,"user":`, r.User)
	b = appendOpt(b, `,"client":`, r.Client)
	b = appendOpt(b, `,"via":`, r.Via)
	b = appendOpt(b, `,"traceparent":`, r.Traceparent)
	b = appendOpt(b, `,"method":`, r.Method)
	b = appendOpt(b, `,"scheme":`, r.Scheme)
	b = appendOpt(b, `,"host":`, r.Host)
	if r.Port != 0 {
		b = append(b, `,"port":`...)
		b = strconv.AppendUint(b, uint64(r.Port), 10)
	}
	b = appendOpt(b, `,"path":`, r.Path)
	b = appendOpt(b, `,"query":`, r.Query)
	if r.Inspected {
		b = append(b, `,"inspected":true`...)
	}
	b = appendOpt(b, `,"name":`, r.Name)
	b = appendOpt(b, `,"qtype":`, r.QType)
	b = appendOpt(b, `,"database":`, r.Database)
	b = appendOpt(b, `,"sql":`, r.SQL)
	b = appendOpt(b, `,"fingerprint":`, r.Fingerprint)
	b = appendOpt(b, `,"ip":`, r.IP)
	b = appendOpt(b, `,"decision":`, r.Decision)
	b = appendOpt(b, `,"reason":`, r.Reason)
	b = appendOpt(b, `,"rule":`, r.Rule)
	b = appendOpt(b, `,"policy":`, r.Policy)
	b = appendOpt(b, `,"would_deny":`, r.WouldDeny)
	b = appendOpt(b, `,"observed_by":`, r.ObservedBy)
	if len(r.Credentials) > 0 {
		b = appendObject(b, `,"credentials":{`, r.Credentials)
	}
	b = appendOpt(b, `,"mcp_method":`, r.MCPMethod)
	b = appendOpt(b, `,"tool":`, r.Tool)
	b = appendOpt(b, `,"rpc_id":`, r.RPCID)
	b = appendOpt(b, `,"args_hmac":`, r.ArgsHMAC)
	b = appendOpt(b, `,"model":`, r.Model)
	b = appendInt(b, `,"tokens_in":`, r.TokensIn)
	b = appendInt(b, `,"tokens_out":`, r.TokensOut)
	b = appendOpt(b, `,"secret":`, r.Secret)
	b = appendOpt(b, `,"secret_pattern":`, r.SecretPattern)
	b = appendInt(b, `,"status":`, int64(r.Status))
	b = appendInt(b, `,"bytes_in":`, r.BytesIn)
	b = appendInt(b, `,"bytes_out":`, r.BytesOut)
	b = appendInt(b, `,"duration_us":`, r.DurationUS)
	b = appendOpt(b, `,"error":`, r.Error)
	b = appendInt(b, `,"count":`, r.Count)
	b = appendOpt(b, `,"truncated":`, r.Truncated)
	if len(r.Detail) > 0 {
		b = appendObject(b, `,"detail":{`, r.Detail)
	}
	b = append(b, `,"prev":"`...)
	b = hex.AppendEncode(b, prev[:])
	b = append(b, '"')

	e.h.Reset()
	e.h.Write(prev[:])
	e.h.Write(b[start:])
	e.h.Write(closeBrace)
	e.h.Sum(e.sum[:0])

	b = append(b, `,"hash":"`...)
	b = hex.AppendEncode(b, e.sum[:])
	b = append(b, "\"}\n"...)
	return b, e.sum
}

// appendTS appends t in tsLayout.
func (e *encoder) appendTS(b []byte, t time.Time) []byte {
	t = t.UTC()
	if sec := t.Unix(); sec != e.sec || e.secText == nil {
		e.sec = sec
		e.secText = t.Truncate(time.Second).AppendFormat(e.secText[:0], "2006-01-02T15:04:05.")
	}
	b = append(b, e.secText...)
	us := t.Nanosecond() / 1000
	var d [6]byte
	for i := 5; i >= 0; i-- {
		d[i] = byte('0' + us%10)
		us /= 10
	}
	b = append(b, d[:]...)
	return append(b, 'Z')
}

// appendStr and appendOpt take any string type, so that Kind and Decision
// are written as they are spelled.
func appendStr[S ~string](b []byte, key string, v S) []byte {
	b = append(b, key...)
	return appendJSONString(b, string(v))
}

func appendOpt[S ~string](b []byte, key string, v S) []byte {
	if v == "" {
		return b
	}
	return appendStr(b, key, v)
}

func appendInt(b []byte, key string, v int64) []byte {
	if v == 0 {
		return b
	}
	b = append(b, key...)
	return strconv.AppendInt(b, v, 10)
}

// appendObject writes a string map with sorted keys after key (which opens
// the object). Only writer records and requests that carried a secret
// have one, so the sort's allocation is off the hot path.
func appendObject(b []byte, key string, d map[string]string) []byte {
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b = append(b, key...)
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendJSONString(b, d[k])
	}
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. Control characters, quote
// and backslash are escaped; invalid UTF-8 becomes U+FFFD, so every line is
// valid UTF-8 JSON whatever a client sent; characters that are invisible or
// reorder text (see hidden) are escaped too, so a line read in a terminal
// or pasted into JavaScript shows what a client sent, not what it wanted
// an operator to see.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if hidden(r) {
			b = append(b, s[start:i]...)
			if r > 0xffff {
				r1, r2 := utf16.EncodeRune(r)
				b = appendU(appendU(b, r1), r2)
			} else {
				b = appendU(b, r)
			}
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// hidden reports whether r must be written as an escape: C1 controls,
// format characters (bidi overrides and isolates, zero-width characters,
// U+FEFF, tag characters) and the line and paragraph separators.
func hidden(r rune) bool {
	return r < 0xa0 || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}

// appendU appends the escape \uXXXX of a BMP code unit.
func appendU(b []byte, r rune) []byte {
	return append(b, '\\', 'u', hexDigits[r>>12&0xf], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
}
