package sqlfacts

import (
	"strconv"
	"strings"

	"github.com/egressd/egressd/policy/sqlfacts/internal/jsontree"
)

// A SET's value is a fact: a profile bounds some settings
// (statement_timeout only lowered, work_mem capped), so the value, and
// what the server makes of it, must be what the server will read.

// setValue renders the SET arguments (the list args) as Set.Value. exact
// is false when the JSON cannot tell: pg_query writes an Integer
// constant's ival only when it is positive, so `= 0` and `= -5` look
// alike (setValueExact reads the protobuf tree then).
func setValue(d *jsontree.Doc, args int32) (value string, n int, exact bool) {
	var parts []string
	defer func() { n = len(parts) }()
	exact = true
	_ = d.Items(args, func(e int32) error {
		typ, v := nodeType(d, e)
		if typ != nodeAConst {
			parts = append(parts, "?")
			return nil
		}
		switch {
		case d.Present(d.Get(v, keyConstSval)):
			parts = append(parts, d.Str(d.Get(d.Get(v, keyConstSval), keySval)))
		case d.Present(d.Get(v, keyConstIval)):
			iv := d.Get(d.Get(v, keyConstIval), keyIval)
			if iv < 0 {
				exact = false
			}
			n, _ := d.Int(iv)
			parts = append(parts, strconv.FormatInt(n, 10))
		case d.Present(d.Get(v, keyConstFval)):
			parts = append(parts, d.Str(d.Get(d.Get(v, keyConstFval), keyFval)))
		case d.Present(d.Get(v, keyConstBool)):
			parts = append(parts, strconv.FormatBool(d.Truthy(d.Get(d.Get(v, keyConstBool), keyBoolval))))
		default:
			parts = append(parts, "?")
		}
		return nil
	})
	return strings.Join(parts, ", "), 0, exact
}

// setValueExact renders the i-th statement's SET arguments of the text
// from pg_query's protobuf tree, for the text the JSON leaves ambiguous.
func setValueExact(tree *protoTree, i int) (string, error) {
	stmt, err := tree.stmt(i)
	if err != nil {
		return "", err
	}
	var parts []string
	for _, a := range stmt.GetVariableSetStmt().GetArgs() {
		c := a.GetAConst()
		switch {
		case c == nil || c.Isnull:
			parts = append(parts, "?")
		case c.GetSval() != nil:
			parts = append(parts, c.GetSval().Sval)
		case c.GetIval() != nil:
			parts = append(parts, strconv.FormatInt(int64(c.GetIval().Ival), 10))
		case c.GetFval() != nil:
			parts = append(parts, c.GetFval().Fval)
		case c.GetBoolval() != nil:
			parts = append(parts, strconv.FormatBool(c.GetBoolval().Boolval))
		default:
			parts = append(parts, "?")
		}
	}
	return strings.Join(parts, ", "), nil
}

// quantity reads value the way PostgreSQL's parse_int and parse_real read
// a setting with units: a number, optional spaces, an optional unit (case
// matters), optional trailing spaces. The number is decimal digits with an
// optional fraction; signs, exponents, hexadecimal and octal (which
// PostgreSQL also accepts) are refused here, so nothing is read that the
// server could read differently. units maps each unit to its size in the
// base unit; a bare number is in the base unit.
func quantity(value string, units map[string]float64) (*float64, bool) {
	s := strings.TrimLeft(value, " \t\n\r\f\v")
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	digits := i
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		digits += i - digits - 1
	}
	if digits == 0 {
		return nil, false
	}
	n, err := strconv.ParseFloat(s[:i], 64)
	if err != nil {
		return nil, false
	}
	unit := strings.Trim(s[i:], " \t\n\r\f\v")
	if unit == "" {
		return &n, true
	}
	f, ok := units[unit]
	if !ok {
		return nil, false
	}
	n *= f
	return &n, true
}

var (
	timeUnits   = map[string]float64{"us": 0.001, "ms": 1, "s": 1000, "min": 60000, "h": 3600000, "d": 86400000}
	memoryUnits = map[string]float64{"B": 1.0 / 1024, "kB": 1, "MB": 1024, "GB": 1024 * 1024, "TB": 1024 * 1024 * 1024}
)

// setQuantities fills s's TimeMS and MemoryKB from its value, if it is a
// single constant.
func setQuantities(s *Set, n int) {
	if n != 1 {
		return
	}
	s.TimeMS, _ = quantity(s.Value, timeUnits)
	s.MemoryKB, _ = quantity(s.Value, memoryUnits)
}
