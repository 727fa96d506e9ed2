// Package broker brokers credentials for sandboxes that must never hold
// them: it loads the config's secrets (from files or the environment, never
// inline), puts them into the requests a rule binds them to (a header from
// a template, HTTP Basic, or a placeholder the sandbox sends swapped for
// the value), refuses requests that would send a placeholder elsewhere or
// a literal key instead, and scrubs secret values from responses as they
// stream. Values never leave this package except in the upstream request:
// errors, records and logs name secrets, never their values.
package broker

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync/atomic"

	"github.com/egressd/egressd/internal/redact"
	"github.com/egressd/egressd/policy"
)

// Config is the top-level `secrets:` key.
type Config []Spec

// Spec is one secret: a name the policy refers to and where the value is
// kept. Exactly one of File and Env is set; a value is never written in
// the config itself.
type Spec struct {
	Name string `yaml:"name"`
	// File holds the value; one trailing newline is trimmed.
	File string `yaml:"file"`
	// Env names the environment variable holding the value.
	Env string `yaml:"env"`
}

// Bounds of a secret value. The shortest a real key is; the longest keeps
// the scrubber's per-read look-back small.
const (
	MinSecretBytes = 8
	MaxSecretBytes = 4096
)

// Validate checks the entries without I/O. Errors name the entry's index
// and never print File or Env, into which a secret is easily pasted.
func (c Config) Validate() error {
	seen := map[string]int{}
	for i, s := range c {
		if !policy.IsSecretName(s.Name) {
			return fmt.Errorf("[%d].name must be 1-64 letters, digits, '_' or '-', got %q", i, s.Name)
		}
		if j, dup := seen[s.Name]; dup {
			return fmt.Errorf("[%d].name %q is also secrets[%d].name", i, s.Name, j)
		}
		seen[s.Name] = i
		if (s.File == "") == (s.Env == "") {
			return fmt.Errorf("[%d] (secret %q) must set exactly one of file and env: a value is never written inline", i, s.Name)
		}
		if s.Env != "" && !IsEnvName(s.Env) {
			return fmt.Errorf("[%d].env (secret %q) must be the name of an environment variable (letters, digits, '_'), "+
				"not the secret itself (value not shown)", i, s.Name)
		}
		if strings.ContainsAny(s.File, "\n\x00") {
			return fmt.Errorf("[%d].file (secret %q) must be the path of a file holding the secret, not the secret itself (value not shown)", i, s.Name)
		}
	}
	return nil
}

// IsEnvName reports whether s is a portable environment variable name
// (letters, digits and '_', not starting with a digit), as every key that
// names a variable must be: a value of another shape is usually the
// secret itself, pasted in by mistake.
func IsEnvName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return s != ""
}

// Secrets is one loaded set of values, immutable; a reload loads a new
// one. The zero value and nil hold no secret.
type Secrets struct {
	values map[string]string
	// patterns are what responses are scrubbed of: each value and the
	// escaped forms an echo may carry it in.
	patterns []pattern
	scrub    *Scrubber // of patterns; nil when there is no secret
}

// Load reads every secret's value. lookupEnv is os.LookupEnv outside
// tests. Errors name the secret (and its file or variable), never a
// value.
func Load(c Config, lookupEnv func(string) (string, bool)) (*Secrets, error) {
	s := &Secrets{values: make(map[string]string, len(c))}
	for i, sp := range c {
		var v string
		if sp.File != "" {
			b, err := os.ReadFile(sp.File)
			if err != nil {
				return nil, fmt.Errorf("secrets[%d].file (secret %q): %w", i, sp.Name, pathless(err))
			}
			v = string(b)
			v = strings.TrimSuffix(v, "\n")
			v = strings.TrimSuffix(v, "\r")
		} else {
			var ok bool
			if v, ok = lookupEnv(sp.Env); !ok {
				return nil, fmt.Errorf("secrets[%d] (secret %q): environment variable %s is not set", i, sp.Name, sp.Env)
			}
		}
		if err := checkValue(v); err != nil {
			return nil, fmt.Errorf("secrets[%d] (secret %q): %w (value not shown)", i, sp.Name, err)
		}
		s.values[sp.Name] = v
	}
	for name, v := range s.values {
		for _, p := range variants(v) {
			p.repl, p.name = redacted(name), name
			s.patterns = append(s.patterns, p)
		}
	}
	s.scrub = newScrubber(s.patterns)
	for name := range s.values {
		if r := string(redacted(name)); s.scrub.String(r) != r {
			return nil, fmt.Errorf("secret %q: a value must not be part of the text that replaces secrets in responses (%q)", name, r)
		}
	}
	return s, nil
}

// pathless is a file error without the path it names: a path that cannot
// be read is often the secret itself, pasted in the wrong place, and the
// error reaches the log and the reload's answer. errors.Is still sees the
// cause (fs.ErrNotExist).
func pathless(err error) error {
	what := "cannot read it"
	var pe *fs.PathError
	if errors.As(err, &pe) {
		// The cause alone ("is a directory") names no path.
		err, what = pe.Err, pe.Err.Error()
	}
	if errors.Is(err, fs.ErrNotExist) {
		what = "no such file"
	}
	return fileError{what: what, err: err}
}

type fileError struct {
	what string
	err  error
}

func (e fileError) Error() string { return e.what + " (path not shown: it may be a pasted secret)" }

func (e fileError) Unwrap() error { return e.err }

// checkValue keeps values to what a header carries and the scrubber can
// find: visible ASCII, so that no value can span the non-ASCII bounds of a
// replacement, and no placeholder marker, so that a substituted value is
// never read as a placeholder again.
func checkValue(v string) error {
	switch {
	case v == "":
		return fmt.Errorf("value is empty")
	case len(v) < MinSecretBytes:
		return fmt.Errorf("value is shorter than %d bytes", MinSecretBytes)
	case len(v) > MaxSecretBytes:
		return fmt.Errorf("value is longer than %d bytes", MaxSecretBytes)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x21 || v[i] > 0x7e {
			return fmt.Errorf("value must be visible ASCII (no spaces or control characters); byte %d is not", i)
		}
	}
	if markerAt(v, 0) >= 0 || strings.Contains(strings.ToLower(v), "egressd") {
		return fmt.Errorf("value must not contain \"egressd\"")
	}
	return nil
}

// variants are the patterns of v an upstream may echo. The scrubber
// matches on the decoded views (percent escapes of any subset of bytes in
// either hex case; those and JSON escapes), so v itself covers it
// query-escaped, Python's quote(), JSON-escaped and mixed; it is matched
// in any letter case (an upper-cased echo). Added: v as each decoded view
// reads it when v holds what looks like an escape, v in hex (any case), and v in
// base64 and base64url at each of the 3 alignments inside a longer
// encoded text: the characters that depend on v's bytes alone.
func variants(v string) []pattern {
	var out []pattern
	add := func(s string, fold bool) {
		for _, o := range out {
			if string(o.text) == s && o.fold == fold {
				return
			}
		}
		out = append(out, pattern{text: []byte(s), fold: fold})
	}
	add(v, true)
	for _, esc := range []escapes{percentEscapes, percentEscapes | jsonEscapes} {
		var dv view
		dv.decode([]byte(v), true, esc)
		add(string(dv.ex), true)
	}
	add(hex.EncodeToString([]byte(v)), true)
	for a, skip := range []int{0, 2, 3} {
		src := append(make([]byte, a), v...)
		for _, e := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			add(e.EncodeToString(src)[skip:8*len(src)/6], false)
		}
	}
	return out
}

// redacted is what replaces a secret in a response. Its first and last
// bytes are not visible ASCII, so no value can overlap it.
func redacted(name string) []byte { return []byte("«egressd:redacted:" + name + "»") }

// Value returns the named secret's value.
func (s *Secrets) Value(name string) (string, bool) {
	if s == nil {
		return "", false
	}
	v, ok := s.values[name]
	return v, ok
}

// Len is the number of secrets.
func (s *Secrets) Len() int {
	if s == nil {
		return 0
	}
	return len(s.values)
}

// Has reports whether name is loaded.
func (s *Secrets) Has(name string) bool {
	_, ok := s.Value(name)
	return ok
}

// Store holds the secrets in force; a reload swaps them whole, and a
// request reads them once.
type Store struct{ p atomic.Pointer[Secrets] }

// NewStore returns a store holding s.
func NewStore(s *Secrets) *Store {
	st := &Store{}
	st.Set(s)
	return st
}

// Load returns the secrets in force; nil (no secret) on a nil store.
func (st *Store) Load() *Secrets {
	if st == nil {
		return nil
	}
	return st.p.Load()
}

// Set replaces the secrets for every later request.
func (st *Store) Set(s *Secrets) { st.p.Store(s) }

// Redact returns err with every loaded value its message quotes replaced
// by the secret's name, for errors about to be logged or printed. No code
// of egressd quotes a value; this is the last guard. errors.Is and
// errors.As still see err.
func (s *Secrets) Redact(err error) error {
	if err == nil || s == nil {
		return err
	}
	subs := make([]redact.Sub, 0, len(s.values))
	for name, v := range s.values {
		subs = append(subs, redact.Sub{Value: v, With: "<secret " + name + ": not shown>"})
	}
	return redact.Error(err, subs)
}

// Scrub returns v with every value in force, in each form the response
// scrubber finds, replaced as in a response: for text egressd writes
// itself and cannot vouch for (the operational log's lines, which quote
// what libraries print).
func (st *Store) Scrub(v string) string {
	s := st.Load()
	if s == nil {
		return v
	}
	return s.scrub.String(v)
}
