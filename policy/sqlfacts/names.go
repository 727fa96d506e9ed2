package sqlfacts

import (
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/egressd/egressd/policy/sqlfacts/internal/jsontree"
)

// Names that reach the server as values rather than as identifiers: a
// type that is a table's row type (`NULL::pg_authid`,
// `jsonb_populate_record(NULL::users, …)`), a string cast to a reg* type
// (`'vault.credentials'::regclass`), a sequence named to nextval. Each
// resolves a relation or function the statement never names in its FROM
// list, so the walker records it as one; a name it cannot resolve — a
// column, a parameter, an OID, a string that is not a name — sets
// DynamicName, which every profile denies.

// regKind is what a reg* type's input function resolves a string to.
type regKind uint8

const (
	regClass     regKind = iota + 1 // a relation
	regType                         // a type, possibly a relation's row type
	regProc                         // a function by name
	regProcedure                    // a function by name and argument types
)

// regTypes are the reg* types whose input resolves a relation or function.
var regTypes = map[string]regKind{
	"regclass": regClass, "regtype": regType, "regproc": regProc, "regprocedure": regProcedure,
}

// regFuncs are the built-in functions that resolve their text argument as
// the reg* input does.
var regFuncs = map[string]regKind{
	"regclass": regClass, "to_regclass": regClass,
	"regtype": regType, "to_regtype": regType,
	"regproc": regProc, "to_regproc": regProc,
	"regprocedure": regProcedure, "to_regprocedure": regProcedure,
}

// seqFuncs are the sequence functions that take the sequence as regclass,
// with the role their call plays: nextval and setval change the sequence.
// lastval is not here: it names no sequence (see nameArgs).
var seqFuncs = map[string]string{"nextval": RoleWrite, "setval": RoleWrite, "currval": RoleRead}

// builtinTypes are the pg_catalog types that are not a relation's row
// type, by the names a TypeName carries (the grammar turns `integer` into
// pg_catalog.int4) and by the SQL names a regtype string may use. A type
// not listed counts as a read of the relation of that name: a user's enum
// or domain is then a read of a relation that does not exist, which a
// narrow read list denies (fail closed).
var builtinTypes = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range strings.Fields(`bool boolean bytea char name int8 int2 int4 int2vector
		text oid tid xid xid8 cid oidvector json xml point lseg path box polygon line
		float4 float8 unknown circle money macaddr macaddr8 inet cidr aclitem bpchar
		varchar date time timestamp timestamptz interval timetz bit varbit numeric
		decimal dec refcursor regproc regprocedure regoper regoperator regclass
		regcollation regtype regrole regnamespace regconfig regdictionary uuid
		pg_lsn pg_snapshot txid_snapshot tsvector tsquery jsonb jsonpath record
		cstring void int4range int8range numrange tsrange tstzrange daterange
		int4multirange int8multirange nummultirange tsmultirange tstzmultirange
		datemultirange anyelement anyarray anynonarray anyenum anyrange
		integer int smallint bigint real float character`) {
		m[n] = true
	}
	for _, n := range []string{"double precision", "character varying", "national character",
		"national character varying", "char varying", "bit varying", "time with time zone",
		"time without time zone", "timestamp with time zone", "timestamp without time zone"} {
		m[n] = true
	}
	return m
}()

func builtinType(schema, name string) bool {
	return (schema == "" || schema == "pg_catalog") && builtinTypes[strings.TrimPrefix(name, "_")]
}

// typeName records the relation whose row type the TypeName object tn
// names, if it is not a built-in type, and the type as a cast target if a
// user cast or a domain CHECK is reached by making a value of it. Every
// TypeName counts, not only a cast's: a column definition list
// (jsonb_to_record(…) AS x(a d)), a PREPARE's parameter types and a
// function's argument types make values of their types too.
func (w *walker) typeName(tn int32) {
	schema, name, n := lastTwo(w.d, w.d.Get(tn, keyNames))
	if n > 0 && w.cat.castTarget(name) && !slices.Contains(w.st.casts, name) {
		w.st.casts = append(w.st.casts, strings.Clone(name))
	}
	if n == 0 || builtinType(schema, name) {
		return
	}
	w.relation(schema, name, RoleRead)
}

// cast records what a cast of arg to the TypeName object tn resolves
// when the type is a reg* type. A cast to an array of one (`'{a,b}'::
// regclass[]`) resolves every element: dynamic.
func (w *walker) cast(arg, tn int32) {
	d := w.d
	schema, name, n := lastTwo(d, d.Get(tn, keyNames))
	if n == 0 || (schema != "" && schema != "pg_catalog") {
		return
	}
	if k, ok := regTypes[strings.TrimPrefix(name, "_")]; ok {
		if strings.HasPrefix(name, "_") || d.NonEmpty(d.Get(tn, keyArrayBounds)) {
			w.st.ConstantFacts = true
			if !isNullConst(d, arg) {
				w.st.DynamicName = true
			}
			return
		}
		w.regName(k, arg, name)
	}
}

// nameArgs records what the built-in function schema.name resolves from
// its arguments (the list args): the sequence of nextval, the relation of
// to_regclass.
func (w *walker) nameArgs(schema, name string, args int32) {
	if schema != "" && schema != "pg_catalog" {
		return
	}
	if name == "set_config" {
		w.setConfig(args)
		return
	}
	if name == "lastval" {
		// It reads whichever sequence the session last advanced, which
		// no text names: also one a column default advanced, or one a
		// nextval allowed before a reload narrowed the profile. The
		// oracle (TestOracle) saw it read a sequence the facts gave no
		// right to.
		w.st.DynamicName = true
		return
	}
	role, seq := seqFuncs[name]
	k, reg := regFuncs[name]
	if !seq && !reg {
		return
	}
	first := int32(-1)
	_ = w.d.Items(args, func(e int32) error {
		if first < 0 {
			first = e
		}
		return nil
	})
	if first < 0 {
		return
	}
	if seq {
		w.st.ConstantFacts = true
		s, null, ok := constString(w.d, first, "regclass")
		switch {
		case null:
		case !ok || isOID(s):
			w.st.DynamicName = true
		default:
			w.relationName(s, role)
		}
		return
	}
	w.regName(k, first, name)
}

// regName records what the reg* input of kind k resolves the value arg
// (a Node) to. self is the reg* type's name: a nested cast to it is the
// same value.
func (w *walker) regName(k regKind, arg int32, self string) {
	// Whatever arg holds, the facts now depend on a value: the gate must
	// not share this verdict with texts that differ only in constants.
	w.st.ConstantFacts = true
	s, null, ok := constString(w.d, arg, strings.TrimPrefix(self, "to_"))
	if null || (ok && s == "-") {
		// NULL and '-' (InvalidOid) resolve nothing.
		return
	}
	if !ok || isOID(s) {
		w.st.DynamicName = true
		return
	}
	switch k {
	case regClass:
		w.relationName(s, RoleRead)
	case regType:
		w.typeString(s)
	case regProc, regProcedure:
		if k == regProcedure {
			s = beforeParen(s)
		}
		schema, name, ok := objectName(s)
		if !ok {
			w.st.DynamicName = true
			return
		}
		w.addFunction(schema, name)
	}
}

// relationName records the relation the string s names, as regclass's
// input reads it.
func (w *walker) relationName(s, role string) {
	schema, name, ok := objectName(s)
	if !ok {
		w.st.DynamicName = true
		return
	}
	w.relation(schema, name, role)
}

// typeString records the relation a regtype string names when it is not
// a built-in type. regtype's input parses the full type grammar; this
// reads the common forms (a qualified name, SQL's multi-word names, a
// typmod, array brackets) and treats anything else as dynamic.
func (w *walker) typeString(s string) {
	s = strings.TrimSpace(s)
	for {
		t := strings.TrimSpace(strings.TrimSuffix(s, "[]"))
		if t == s {
			break
		}
		s = t
	}
	if i := strings.LastIndexByte(s, '('); i > 0 && strings.HasSuffix(s, ")") &&
		strings.Trim(s[i+1:len(s)-1], "0123456789, ") == "" {
		s = strings.TrimSpace(s[:i])
	}
	if !strings.Contains(s, `"`) && builtinTypes[strings.Join(strings.Fields(strings.ToLower(s)), " ")] {
		return
	}
	schema, name, ok := objectName(s)
	if !ok {
		w.st.DynamicName = true
		return
	}
	if !builtinType(schema, name) {
		w.relation(schema, name, RoleRead)
	}
}

// constString is the string constant the Node n holds, looking through
// casts to text, name, unbounded varchar and the type self (`'s'::
// regclass` given to nextval). null is set for a NULL constant; ok is
// false for anything else (a column, a parameter, a number, an
// expression), whose value the facts cannot know.
func constString(d *jsontree.Doc, n int32, self string) (s string, null, ok bool) {
	for {
		typ, v := nodeType(d, n)
		switch typ {
		case nodeAConst:
			if d.Truthy(d.Get(v, keyIsnull)) {
				return "", true, false
			}
			sv := d.Get(v, keyConstSval)
			if !d.Present(sv) {
				return "", false, false
			}
			return d.Str(d.Get(sv, keySval)), false, true
		case nodeTypeCast:
			tn := d.Get(v, keyTypeName)
			schema, name, cnt := lastTwo(d, d.Get(tn, keyNames))
			if cnt == 0 || (schema != "" && schema != "pg_catalog") || d.NonEmpty(d.Get(tn, keyTypmods)) ||
				d.NonEmpty(d.Get(tn, keyArrayBounds)) {
				return "", false, false
			}
			switch name {
			case "text", "name", "varchar", self:
			default:
				return "", false, false
			}
			n = d.Get(v, keyCastArg)
		default:
			return "", false, false
		}
	}
}

func isNullConst(d *jsontree.Doc, n int32) bool {
	_, null, _ := constString(d, n, "")
	return null
}

// isOID reports whether s is all digits, which reg* input reads as an OID.
func isOID(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// beforeParen is s up to its first '(' outside double quotes: the name
// part of a regprocedure string.
func beforeParen(s string) string {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			quoted = !quoted
		case '(':
			if !quoted {
				return s[:i]
			}
		}
	}
	return s
}

// maxIdentLen is NAMEDATALEN-1: PostgreSQL truncates longer identifiers.
const maxIdentLen = 63

// objectName reads the string s as the reg* input functions read an
// object's name: a qualified name of at most three parts (database,
// schema, name), of which it returns the schema ("" when unqualified) and
// the name. ok is false when s is no such name.
func objectName(s string) (schema, name string, ok bool) {
	parts, ok := qualifiedName(s)
	if !ok || len(parts) > 3 {
		return "", "", false
	}
	if len(parts) > 1 {
		schema = parts[len(parts)-2]
	}
	return schema, parts[len(parts)-1], true
}

// qualifiedName splits a dotted name the way PostgreSQL's
// stringToQualifiedNameList does (SplitIdentifierString): parts separated
// by '.', whitespace around them ignored, a double-quoted part taken as
// written with "" for a quote, an unquoted part lower-cased (ASCII only,
// as for a UTF-8 database), each truncated to 63 bytes. ok is false where
// PostgreSQL reports invalid name syntax.
func qualifiedName(s string) (parts []string, ok bool) {
	i := skipIdentSpace(s, 0)
	if i == len(s) {
		return nil, false
	}
	for {
		var part string
		if s[i] == '"' {
			var b strings.Builder
			i++
			for {
				j := strings.IndexByte(s[i:], '"')
				if j < 0 {
					return nil, false
				}
				b.WriteString(s[i : i+j])
				i += j + 1
				if i < len(s) && s[i] == '"' {
					b.WriteByte('"')
					i++
					continue
				}
				break
			}
			part = b.String()
		} else {
			j := i
			for j < len(s) && s[j] != '.' && !isIdentSpace(s[j]) {
				j++
			}
			if j == i {
				return nil, false
			}
			part = asciiLower(s[i:j])
			i = j
		}
		if part == "" {
			return nil, false
		}
		parts = append(parts, truncateIdent(part))
		i = skipIdentSpace(s, i)
		if i == len(s) {
			return parts, true
		}
		if s[i] != '.' {
			return nil, false
		}
		i = skipIdentSpace(s, i+1)
		if i == len(s) {
			return nil, false
		}
	}
}

// isIdentSpace is PostgreSQL's scanner_isspace.
func isIdentSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func skipIdentSpace(s string, i int) int {
	for i < len(s) && isIdentSpace(s[i]) {
		i++
	}
	return i
}

// asciiLower lower-cases ASCII letters only, as PostgreSQL folds unquoted
// identifiers in UTF-8: folding more would merge names the server keeps
// apart.
func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// truncateIdent cuts s to 63 bytes at a character boundary, as
// truncate_identifier does. (The parse tree is valid UTF-8, so a boundary
// is at most three bytes back; bytes that are not UTF-8 are cut at 63.)
func truncateIdent(s string) string {
	if len(s) <= maxIdentLen {
		return s
	}
	n := maxIdentLen
	for n > maxIdentLen-utf8.UTFMax+1 && !utf8.RuneStart(s[n]) {
		n--
	}
	if !utf8.RuneStart(s[n]) {
		n = maxIdentLen
	}
	return s[:n]
}

// mergeUnfiltered reports whether a MERGE's WHEN clauses (the list
// clauses) update or delete matched rows with no condition of their own.
// MERGE always has a join condition, but `ON true` matches every row, and
// no static reading of ON can tell a key match from that; so for
// require_where a WHEN MATCHED UPDATE or DELETE counts as filtered only
// with its own `AND condition`, the counterpart of UPDATE's WHERE.
func mergeUnfiltered(d *jsontree.Doc, clauses int32) bool {
	unfiltered := false
	_ = d.Items(clauses, func(e int32) error {
		c := d.Get(e, nodeMergeWhenClause)
		if c < 0 || !d.Truthy(d.Get(c, keyMatched)) {
			return nil
		}
		switch d.Str(d.Get(c, keyCommandType)) {
		case cmdUpdate, cmdDelete:
			if !d.Present(d.Get(c, keyMergeCond)) {
				unfiltered = true
			}
		}
		return nil
	})
	return unfiltered
}

// upsertUnfiltered reports whether the InsertStmt object ins updates, ON
// CONFLICT DO UPDATE with no WHERE of its own, rows that a query chooses:
// `INSERT INTO t SELECT * FROM t ON CONFLICT (id) DO UPDATE SET …`
// updates every row of t. Rows written out in VALUES (or DEFAULT VALUES)
// bound what the upsert can touch, as an UPDATE's WHERE would.
func upsertUnfiltered(d *jsontree.Doc, ins int32) bool {
	oc := d.Get(ins, keyOnConflict)
	if !d.Present(oc) || d.Str(d.Get(oc, keyConflictAct)) != conflictUpdate || d.Present(d.Get(oc, keyConflictWhr)) {
		return false
	}
	typ, sel := nodeType(d, d.Get(ins, keyInsertSelect))
	return typ != "" && !(typ == nodeSelectStmt && d.NonEmpty(d.Get(sel, keyValuesLists)))
}
