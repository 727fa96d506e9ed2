// Package deepsql generates deep SQL constructs, one for every recursive
// production of PostgreSQL's grammar, at any size: the inputs that run
// libpg_query off its C stack. The sqlparse tests use it to measure where
// each production crashes and to show that none of them, at any size up to
// the gate's limits, ends the process; the e2e tests send its largest cases
// through the built binary.
package deepsql

import "strings"

// Construct is one recursive production.
type Construct struct {
	Name string
	// prefix, unit (repeated n times), middle, close (repeated n times),
	// suffix make the text.
	prefix, unit, middle, close, suffix string
}

// Text is the construct with n repetitions.
func (c Construct) Text(n int) string {
	var b strings.Builder
	b.Grow(len(c.prefix) + n*(len(c.unit)+len(c.close)) + len(c.middle) + len(c.suffix))
	b.WriteString(c.prefix)
	for range n {
		b.WriteString(c.unit)
	}
	b.WriteString(c.middle)
	for range n {
		b.WriteString(c.close)
	}
	b.WriteString(c.suffix)
	return b.String()
}

// MaxN is the largest n whose text fits in limit bytes.
func (c Construct) MaxN(limit int) int {
	fixed := len(c.prefix) + len(c.middle) + len(c.suffix)
	per := len(c.unit) + len(c.close)
	if limit <= fixed {
		return 0
	}
	return (limit - fixed) / per
}

// Constructs are the productions: left-deep chains (the ones a bracket and
// operator count misses), right-nested prefixes and brackets (which also
// fill the grammar's own stack), and wide lists.
var Constructs = []Construct{
	{Name: "isnull", prefix: "SELECT 1", unit: " ISNULL"},
	{Name: "notnull", prefix: "SELECT 1", unit: " NOTNULL"},
	{Name: "is_null", prefix: "SELECT 1", unit: " IS NULL"},
	{Name: "is_true", prefix: "SELECT true", unit: " IS TRUE"},
	{Name: "is_not_distinct", prefix: "SELECT 1", unit: " IS NOT DISTINCT FROM 1"},
	{Name: "natural_join", prefix: "SELECT 1 FROM t", unit: " NATURAL JOIN t"},
	{Name: "cross_join", prefix: "SELECT 1 FROM t", unit: " CROSS JOIN t"},
	{Name: "left_join_using", prefix: "SELECT 1 FROM t", unit: " LEFT JOIN t USING (a)"},
	{Name: "union", prefix: "SELECT 1", unit: " UNION SELECT 1"},
	{Name: "intersect", prefix: "SELECT 1", unit: " INTERSECT SELECT 1"},
	{Name: "except", prefix: "SELECT 1", unit: " EXCEPT SELECT 1"},
	{Name: "plus", prefix: "SELECT 1", unit: "+1"},
	{Name: "concat", prefix: "SELECT 'a'", unit: "||'a'"},
	{Name: "unary_minus", prefix: "SELECT ", unit: "- ", middle: "1"},
	{Name: "plus_minus", prefix: "SELECT 1", unit: "+-1"},
	{Name: "and", prefix: "SELECT true", unit: " AND true"},
	{Name: "or", prefix: "SELECT true", unit: " OR true"},
	{Name: "not", prefix: "SELECT ", unit: "NOT ", middle: "true"},
	{Name: "cast", prefix: "SELECT 1", unit: "::int"},
	{Name: "cast_func", prefix: "SELECT ", unit: "CAST(", middle: "1", close: " AS int)"},
	{Name: "collate", prefix: "SELECT 'a'", unit: ` COLLATE "C"`},
	{Name: "at_time_zone", prefix: "SELECT now()", unit: " AT TIME ZONE 'UTC'"},
	{Name: "between", prefix: "SELECT 1", unit: " BETWEEN 0 AND 2 = true"},
	{Name: "like", prefix: "SELECT 'a'", unit: " LIKE 'a' = true"},
	{Name: "subscript", prefix: "SELECT a", unit: "[1]", suffix: " FROM t"},
	{Name: "field", prefix: "SELECT (a)", unit: ".f", suffix: " FROM t"},
	{Name: "case", prefix: "SELECT ", unit: "CASE WHEN true THEN ", middle: "1", close: " END"},
	{Name: "case_operand", prefix: "SELECT ", unit: "CASE 1 WHEN 1 THEN 1 ELSE ", middle: "1", close: " END"},
	{Name: "func", prefix: "SELECT ", unit: "f(", middle: "1", close: ")"},
	{Name: "coalesce", prefix: "SELECT ", unit: "coalesce(", middle: "1", close: ")"},
	{Name: "array", prefix: "SELECT ", unit: "ARRAY[", middle: "1", close: "]"},
	{Name: "row", prefix: "SELECT ", unit: "ROW(", middle: "1", close: ")"},
	{Name: "parens", prefix: "SELECT ", unit: "(", middle: "1", close: ")"},
	{Name: "subselect", prefix: "SELECT ", unit: "(SELECT ", middle: "1", close: ")"},
	{Name: "exists", prefix: "SELECT ", unit: "EXISTS (SELECT ", middle: "1", close: ")"},
	{Name: "in_subselect", prefix: "SELECT 1", unit: " IN (SELECT 1", close: ")"},
	{Name: "join_parens", prefix: "SELECT 1 FROM ", unit: "(t JOIN ", middle: "t", close: " ON true)"},
	{Name: "cte", prefix: "WITH ", unit: "a AS (WITH ", middle: "b AS (SELECT 1) SELECT 1", close: ") SELECT 1"},
	{Name: "in_list", prefix: "SELECT 1 IN (1", unit: ",1", suffix: ")"},
	{Name: "values", prefix: "VALUES (1)", unit: ",(1)"},
	{Name: "columns", prefix: "SELECT 1", unit: ",1"},
	{Name: "from_list", prefix: "SELECT 1 FROM t", unit: ",t"},
	{Name: "statements", prefix: "SELECT 1", unit: ";SELECT 1"},
}
