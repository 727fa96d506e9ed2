package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// The checks here refuse bundles that compile but could never decide as
// their author meant: each would otherwise load silently and deny (or
// never match) at run time. Their errors name the file, the key and what
// to do.

// checkDir reports a policy.dir that is missing or not a directory; read
// through os.DirFS, it would fail as "stat .: no such file or directory".
func checkDir(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("policy.dir %q does not exist: write a bundle there with `egressd policy init %s`, "+
			"or leave policy.dir empty to use the embedded bundle", dir, dir)
	case err != nil:
		return fmt.Errorf("policy.dir %q: %w", dir, err)
	case !st.IsDir():
		return fmt.Errorf("policy.dir %q is not a directory: point it at a bundle directory (`egressd policy init DIR` writes one)", dir)
	}
	return nil
}

// checkEntryPoints refuses a bundle none of whose modules is an entry
// point: every request would be denied no_decision.
func checkEntryPoints(modules map[string]*ast.Module) error {
	for name, m := range modules {
		if isTestModule(name) {
			continue
		}
		for _, ref := range entryRefs {
			if m.Package.Path.Equal(ref) {
				return nil
			}
		}
	}
	return errors.New("bundle has no .rego module declaring an entry point (package egress.http, egress.connect, " +
		"egress.dns or egress.sql), so every request would be denied no_decision: start from `egressd policy init DIR`")
}

// entryRefs are the packages of entryPoints as module paths.
var entryRefs = func() []ast.Ref {
	refs := make([]ast.Ref, 0, len(entryPoints))
	for _, pkg := range entryPoints {
		refs = append(refs, ast.MustParseRef("data.egress."+pkg))
	}
	return refs
}()

// origins maps a mounted data key ("rules", "sql.identities", or "sql"
// when data.json holds {"sql": …}) to the file that defined it.
type origins map[string]string

func (o origins) add(dir string, v map[string]any, file string) {
	prefix := ""
	if dir != "." {
		prefix = strings.ReplaceAll(dir, "/", ".") + "."
	}
	for k := range v {
		o[prefix+k] = file
	}
}

// of returns the file that defined key or its nearest parent.
func (o origins) of(key string) string {
	for {
		if f, ok := o[key]; ok {
			return f
		}
		i := strings.LastIndexByte(key, '.')
		if i < 0 {
			return "data"
		}
		key = key[:i]
	}
}

// SQLProfileAttribute is the identity attribute that names an identity's
// SQL profile (read by egress.sql before data.sql.identities).
const SQLProfileAttribute = "sql_profile"

// sqlProfiles resolves each profile's extends (resolveExtends) in root,
// returns the names in data.sql.profiles, sorted, and checks that every
// data.sql.identities entry names one of them.
func sqlProfiles(root map[string]any, o origins) ([]string, error) {
	sql, _ := root["sql"].(map[string]any)
	if sql == nil {
		return nil, nil
	}
	profiles, _ := sql["profiles"].(map[string]any)
	if err := resolveExtends(profiles); err != nil {
		return nil, fmt.Errorf("%s: %w", o.of("sql.profiles"), err)
	}
	names := make([]string, 0, len(profiles))
	for n := range profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	ids, _ := sql["identities"].(map[string]any)
	keys := make([]string, 0, len(ids))
	for id := range ids {
		keys = append(keys, id)
	}
	sort.Strings(keys)
	for _, id := range keys {
		p, ok := ids[id].(string)
		if !ok || !slices.Contains(names, p) {
			return nil, fmt.Errorf("%s: sql.identities[%q] names SQL profile %s, which sql.profiles lacks (have %s): "+
				"fix the name or add the profile", o.of("sql.identities"), id, jsonString(ids[id]), strings.Join(names, ", "))
		}
	}
	return names, nil
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// CheckIdentity reports an identity whose sql_profile attribute names a
// profile the active bundle's data.sql.profiles lacks: its every statement
// would be denied sql_no_profile.
func (e *Engine) CheckIdentity(id Identity) error {
	p, ok := id.Attributes[SQLProfileAttribute]
	if !ok {
		return nil
	}
	c := e.cur
	if slices.Contains(c.sqlProfiles, p) {
		return nil
	}
	return fmt.Errorf("attributes.%s %q is not a profile of the policy bundle's data.sql.profiles (have %s): "+
		"fix the attribute or add the profile to the bundle", SQLProfileAttribute, p, strings.Join(c.sqlProfiles, ", "))
}

// decodeJSON decodes a data file as OPA does (numbers kept exact) and
// places a syntax error at file:line:column.
func decodeJSON(name string, b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	if err == nil {
		off := int(dec.InputOffset())
		for off < len(b) && isJSONSpace(b[off]) {
			off++
		}
		if off < len(b) {
			return nil, fmt.Errorf("%s: unexpected data after the top-level value", position(name, b, off+1))
		}
		return v, nil
	}
	off := len(b)
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		off = int(se.Offset)
	case errors.As(err, &te):
		off = int(te.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		err = errors.New("unexpected end of file")
	}
	return nil, fmt.Errorf("%s: %w", position(name, b, off), err)
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// position is "name:line:column" of the byte before offset (the one the
// decoder stopped at), counting from 1; columns count bytes.
func position(name string, b []byte, offset int) string {
	i := min(max(offset-1, 0), len(b))
	line := 1 + bytes.Count(b[:i], []byte{'\n'})
	col := i - bytes.LastIndexByte(b[:i], '\n')
	return fmt.Sprintf("%s:%d:%d", name, line, col)
}
