package pggate

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// sqlGen generates statements over the oracle's scratch schema
// (testdata/oracle/schema.sql) from a small grammar: SELECT with joins,
// subqueries, LATERAL, grouping and set operations; INSERT, UPDATE,
// DELETE and MERGE with and without WHERE and RETURNING; COPY (query) TO
// STDOUT; WITH, including writable CTEs and CTEs named like the tables
// they shadow; EXPLAIN [ANALYZE]; built-in and user functions, user
// operators and casts, ::regclass, typed NULLs of row types, sequences;
// a view and a row-level security policy calling a user function, a
// domain CHECK reached through a composite type; every form of changing a
// pinned setting.
// The same seed yields the same statements.
type sqlGen struct {
	r *rand.Rand
}

// genCol is a column of a generated relation: "i" int-like, "t" text.
type genCol struct{ name, typ string }

type genRel struct {
	name string // as written in FROM
	cols []genCol
	// writable relations may be DML targets.
	writable bool
	// insert is an INSERT column list and VALUES generator's columns.
	insert []genCol
}

var genRels = []genRel{
	{name: "t", cols: []genCol{{"id", "i"}, {"a", "i"}, {"b", "t"}}, writable: true, insert: []genCol{{"id", "i"}, {"a", "i"}, {"b", "t"}}},
	{name: "public.t", cols: []genCol{{"id", "i"}, {"a", "i"}, {"b", "t"}}, writable: true, insert: []genCol{{"id", "i"}, {"a", "i"}, {"b", "t"}}},
	{name: "orders", cols: []genCol{{"id", "i"}, {"t_id", "i"}, {"amount", "i"}, {"note", "t"}}, writable: true, insert: []genCol{{"t_id", "i"}, {"amount", "i"}, {"note", "t"}}},
	{name: "x", cols: []genCol{{"id", "i"}, {"v", "t"}}, writable: true, insert: []genCol{{"id", "i"}, {"v", "t"}}},
	{name: "private.vault", cols: []genCol{{"k", "t"}, {"v", "t"}}, writable: true, insert: []genCol{{"k", "t"}, {"v", "t"}}},
	{name: "v_t", cols: []genCol{{"id", "i"}, {"a", "i"}}, writable: true, insert: []genCol{{"id", "i"}, {"a", "i"}}},
	{name: "users", cols: []genCol{{"id", "i"}, {"name", "t"}}, writable: true, insert: []genCol{{"id", "i"}, {"name", "t"}}},
	{name: "pg_catalog.pg_class", cols: []genCol{{"relname", "t"}, {"relpages", "i"}}},
	// A view whose query calls a user function, a table whose row-level
	// security policy does.
	{name: "v_fmt", cols: []genCol{{"id", "i"}, {"f", "t"}}},
	{name: "guarded", cols: []genCol{{"id", "i"}, {"v", "t"}}, writable: true, insert: []genCol{{"id", "i"}, {"v", "t"}}},
}

// scope is what a generated expression may refer to: an alias and its
// columns.
type scope struct {
	alias string
	cols  []genCol
}

func (g *sqlGen) pick(n int) int { return g.r.IntN(n) }

func (g *sqlGen) chance(p float64) bool { return g.r.Float64() < p }

func oneOf[T any](g *sqlGen, xs ...T) T { return xs[g.pick(len(xs))] }

// statement returns one statement.
func (g *sqlGen) statement() string {
	switch g.pick(13) {
	case 12:
		return g.misc()
	case 0, 1, 2, 3:
		return g.with(1, g.selectStmt)
	case 4:
		return g.with(1, g.insert)
	case 5:
		return g.with(1, g.update)
	case 6:
		return g.with(1, g.delete)
	case 7:
		return g.merge()
	case 8:
		return "COPY (" + oneOf(g, g.selectStmt, g.dmlReturning)(2) + ") TO STDOUT"
	case 9:
		return oneOf(g, "EXPLAIN ", "EXPLAIN ANALYZE ", "EXPLAIN (ANALYZE, COSTS OFF) ") + oneOf(g, g.selectStmt, g.update, g.delete)(1)
	case 10:
		return "(" + g.selectStmt(1) + ")" + oneOf(g, " UNION ", " UNION ALL ", " EXCEPT ", " INTERSECT ") + "(" + g.selectStmt(1) + ")"
	default:
		return g.withWritable()
	}
}

// misc is one of the rarer forms: TABLE, VALUES, sequences read as
// relations, LOCK, INSERT … ON CONFLICT, window functions, set-returning
// functions in FROM, JSON operators.
func (g *sqlGen) misc() string {
	rel := genRels[g.pick(len(genRels))]
	sc := []scope{{alias: "w", cols: rel.cols}}
	switch g.pick(9) {
	case 8:
		// Every way to change a setting the profiles pin, and the
		// transaction modes (the harness runs them inside its own
		// transaction; the pinned-settings witness checks the rest).
		return oneOf(g, "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE", "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED",
			"SET TRANSACTION READ WRITE", "SET TRANSACTION READ ONLY", "BEGIN READ WRITE", "START TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ WRITE",
			"SET default_transaction_read_only = off", "SET LOCAL default_transaction_read_only TO DEFAULT", "RESET default_transaction_read_only",
			"RESET ALL", "SET transaction_read_only = off", "SELECT set_config('default_transaction_read_only', 'off', false)",
			"SELECT set_config('search_path', 'private', true)", "SET search_path = private", "SET application_name = 'oracle'")
	case 0:
		return "TABLE " + rel.name
	case 1:
		return "VALUES (" + g.expr(3, "i", []scope{{cols: []genCol{{"1", "i"}}}}) + "), (2)"
	case 2:
		return "SELECT last_value, is_called FROM " + oneOf(g, "s", "orders_id_seq", "public.s")
	case 3:
		return "LOCK TABLE " + g.target().name + " IN " + oneOf(g, "ACCESS SHARE", "ROW EXCLUSIVE", "SHARE", "ACCESS EXCLUSIVE") + " MODE"
	case 4:
		return "INSERT INTO t (id, a, b) VALUES (" + fmt.Sprint(1+g.pick(8)) + ", 1, 'c') ON CONFLICT (id) DO " +
			oneOf(g, "NOTHING", "UPDATE SET a = excluded.a + t.a", "UPDATE SET b = 'u' WHERE t.id > 2")
	case 5:
		return "SELECT " + g.col(sc, "i") + ", row_number() OVER (ORDER BY " + g.col(sc, "i") + "), sum(" + g.col(sc, "i") + ") OVER () FROM " + rel.name + " w"
	case 6:
		return "SELECT g, " + g.expr(3, "t", sc) + " FROM generate_series(1, 3) g, " + rel.name + " w WHERE g = " + g.col(sc, "i")
	default:
		return "SELECT jsonb_build_object('k', " + g.col(sc, "t") + ") ->> 'k', to_jsonb(w) -> 'id' FROM " + rel.name + " w"
	}
}

// with prefixes main with a WITH clause (sometimes), whose CTE may shadow
// a table's name and has that table's columns.
func (g *sqlGen) with(depth int, main func(int) string) string {
	if !g.chance(0.3) {
		return main(depth)
	}
	rel := genRels[g.pick(len(genRels)-1)]
	name := oneOf(g, "c1", "t", "x", "orders", "users")
	if strings.Contains(rel.name, ".") || rel.name == "v_t" {
		rel = genRels[0]
	}
	var body string
	if g.chance(0.5) {
		cols := make([]string, len(rel.cols))
		for i, c := range rel.cols {
			cols[i] = g.literal(c.typ) + " AS " + c.name
		}
		body = "SELECT " + strings.Join(cols, ", ")
	} else {
		body = "SELECT * FROM " + rel.name
	}
	return "WITH " + name + " AS (" + body + ") " + main(depth)
}

// withWritable is a WITH whose CTE writes.
func (g *sqlGen) withWritable() string {
	name := oneOf(g, "d", "t", "x", "orders")
	tail := oneOf(g, "SELECT count(*) FROM "+name, "SELECT * FROM "+name, "SELECT 1")
	return "WITH " + name + " AS (" + g.dmlReturning(2) + ") " + tail
}

func (g *sqlGen) dmlReturning(depth int) string {
	return oneOf(g, g.insert, g.update, g.delete)(depth) + " RETURNING *"
}

func (g *sqlGen) fromItem(depth int) (string, scope) {
	alias := fmt.Sprintf("r%d", g.pick(1000))
	if depth < 3 && g.chance(0.15) {
		rel := genRels[g.pick(len(genRels))]
		sub := "SELECT * FROM " + rel.name
		if g.chance(0.5) {
			sub += " WHERE " + g.cond(depth+1, []scope{{alias: "", cols: rel.cols}})
		}
		return "(" + sub + ") " + alias, scope{alias: alias, cols: rel.cols}
	}
	rel := genRels[g.pick(len(genRels))]
	return rel.name + " " + alias, scope{alias: alias, cols: rel.cols}
}

func (g *sqlGen) selectStmt(depth int) string {
	from, sc := g.fromItem(depth)
	scopes := []scope{sc}
	if g.chance(0.3) {
		f2, sc2 := g.fromItem(depth)
		join := oneOf(g, " JOIN ", " LEFT JOIN ", " FULL JOIN ")
		scopes = append(scopes, sc2)
		from += join + f2 + " ON " + g.cond(depth+1, scopes)
	} else if depth < 3 && g.chance(0.1) {
		rel := genRels[g.pick(len(genRels))]
		from += ", LATERAL (SELECT * FROM " + rel.name + " WHERE " + g.cond(depth+1, append([]scope{{cols: rel.cols}}, scopes...)) + ") l"
	}
	var list []string
	for range 1 + g.pick(3) {
		list = append(list, g.expr(depth+1, oneOf(g, "i", "t"), scopes))
	}
	s := "SELECT " + strings.Join(list, ", ") + " FROM " + from
	if g.chance(0.6) {
		s += " WHERE " + g.cond(depth+1, scopes)
	}
	if g.chance(0.15) {
		s = "SELECT count(*), " + g.col(scopes, "i") + " FROM " + from + " GROUP BY 2"
	}
	if g.chance(0.2) {
		s += " ORDER BY 1"
	}
	if g.chance(0.05) {
		s += " FOR " + oneOf(g, "UPDATE", "SHARE")
	}
	return s + " LIMIT 5"
}

func (g *sqlGen) col(scopes []scope, typ string) string {
	for range 4 {
		sc := scopes[g.pick(len(scopes))]
		c := sc.cols[g.pick(len(sc.cols))]
		if c.typ == typ {
			if sc.alias == "" {
				return c.name
			}
			return sc.alias + "." + c.name
		}
	}
	return g.literal(typ)
}

func (g *sqlGen) literal(typ string) string {
	if typ == "i" {
		return fmt.Sprint(g.pick(7))
	}
	return oneOf(g, "'a'", "'b1'", "'x'", "NULL::text")
}

// expr is an expression of type typ ("i" or "t").
func (g *sqlGen) expr(depth int, typ string, scopes []scope) string {
	if depth > 4 {
		return g.col(scopes, typ)
	}
	if typ == "i" {
		switch g.pick(14) {
		case 0, 1, 2:
			return g.col(scopes, "i")
		case 3:
			return g.literal("i")
		case 4:
			return "(" + g.expr(depth+1, "i", scopes) + oneOf(g, " + ", " * ", " - ") + g.expr(depth+1, "i", scopes) + ")"
		case 5:
			e := g.expr(depth+1, "i", scopes)
			return oneOf(g, "abs("+e+")", "length(app_fmt("+e+"))", "coalesce("+e+", 0)")
		case 6:
			return "length(" + g.expr(depth+1, "t", scopes) + ")"
		case 7:
			return "(SELECT count(*) FROM " + genRels[g.pick(len(genRels))].name + ")::int"
		case 8:
			return oneOf(g, "nextval('s')::int", "currval('s')::int", "nextval('orders_id_seq')::int", "setval('s', 5)::int")
		case 9:
			return "(" + g.expr(depth+1, "i", scopes) + " #!# " + g.expr(depth+1, "i", scopes) + ")"
		case 10:
			return oneOf(g, "app_cents(", "abs(") + g.col(scopes, "i") + ")"
		case 11:
			return "CASE " + g.col(scopes, "i") + " WHEN 1 THEN 2 ELSE 3 END"
		case 12:
			return "('" + oneOf(g, "t", "private.vault", "orders", "s") + "'::regclass::oid::int % 7)"
		default:
			return "(" + g.col(scopes, "i") + "::cents).v"
		}
	}
	switch g.pick(9) {
	case 0, 1, 2:
		return g.col(scopes, "t")
	case 3:
		return g.literal("t")
	case 4:
		return oneOf(g, "lower(", "upper(", "btrim(") + g.expr(depth+1, "t", scopes) + ")"
	case 5:
		return oneOf(g, "lower(", "app_fmt(") + g.expr(depth+1, "i", scopes) + ")"
	case 6:
		return "(" + g.expr(depth+1, "t", scopes) + " || " + g.expr(depth+1, "t", scopes) + ")"
	case 7:
		return oneOf(g, "(NULL::private.vault).v", "jsonb_populate_record(NULL::private.vault, '{}')::text", "(NULL::t).b", "(SELECT v FROM private.vault LIMIT 1)",
			// A domain CHECK made through a composite type.
			"('(y)'::boxed).x::text", `(jsonb_populate_record(NULL::boxed, '{"x": "z"}')).x::text`,
			`(SELECT x FROM jsonb_to_record('{"x": "w"}') AS r(x checked_text))::text`)
	default:
		return g.col(scopes, "i") + "::text"
	}
}

func (g *sqlGen) cond(depth int, scopes []scope) string {
	switch g.pick(8) {
	case 0, 1:
		return g.expr(depth, "i", scopes) + oneOf(g, " = ", " < ", " > ", " <> ") + g.expr(depth, "i", scopes)
	case 2:
		return g.expr(depth, "t", scopes) + oneOf(g, " LIKE 'a%'", " ILIKE '%1'", " IS NULL", " SIMILAR TO 'b%'")
	case 3:
		return g.col(scopes, "i") + " IN (1, 2, 3)"
	case 4:
		if depth < 3 {
			rel := genRels[g.pick(len(genRels))]
			return "EXISTS (SELECT 1 FROM " + rel.name + " s WHERE " + g.cond(depth+1, append([]scope{{alias: "s", cols: rel.cols}}, scopes...)) + ")"
		}
		return "true"
	case 5:
		if depth < 3 {
			return g.col(scopes, "i") + " IN (" + g.selectOneCol(depth+1) + ")"
		}
		return "false"
	case 6:
		return g.col(scopes, "i") + " BETWEEN 1 AND 3"
	default:
		return g.cond(depth+1, scopes) + oneOf(g, " AND ", " OR ") + g.cond(depth+1, scopes)
	}
}

func (g *sqlGen) selectOneCol(depth int) string {
	rel := genRels[g.pick(len(genRels))]
	return "SELECT " + g.col([]scope{{cols: rel.cols}}, "i") + " FROM " + rel.name
}

func (g *sqlGen) target() genRel {
	for {
		if rel := genRels[g.pick(len(genRels))]; rel.writable {
			return rel
		}
	}
}

func (g *sqlGen) insert(depth int) string {
	rel := g.target()
	names := make([]string, len(rel.insert))
	vals := make([]string, len(rel.insert))
	for i, c := range rel.insert {
		names[i] = c.name
		if c.name == "id" {
			vals[i] = fmt.Sprint(100 + g.pick(1_000_000))
			continue
		}
		vals[i] = g.expr(depth+2, c.typ, []scope{{cols: []genCol{{"1", "i"}, {"'v'", "t"}}}})
	}
	s := "INSERT INTO " + rel.name + " (" + strings.Join(names, ", ") + ") "
	if g.chance(0.3) {
		src := genRels[g.pick(len(genRels))]
		sc := []scope{{cols: src.cols}}
		for i, c := range rel.insert {
			if c.name != "id" {
				vals[i] = g.col(sc, c.typ)
			}
		}
		return s + "SELECT " + strings.Join(vals, ", ") + " FROM " + src.name + " LIMIT 1"
	}
	return s + "VALUES (" + strings.Join(vals, ", ") + ")"
}

func (g *sqlGen) update(depth int) string {
	rel := g.target()
	sc := []scope{{cols: rel.cols}}
	c := rel.cols[g.pick(len(rel.cols))]
	for c.name == "id" {
		c = rel.cols[g.pick(len(rel.cols))]
	}
	s := "UPDATE " + rel.name + " SET " + c.name + " = " + g.expr(depth+1, c.typ, sc)
	return s + g.otherAndWhere(depth, "FROM", "f", sc)
}

func (g *sqlGen) delete(depth int) string {
	rel := g.target()
	sc := []scope{{cols: rel.cols}}
	return "DELETE FROM " + rel.name + g.otherAndWhere(depth, "USING", "u", sc)
}

// otherAndWhere is the tail of an UPDATE or DELETE: sometimes a second
// relation (after kw, named alias), mostly a WHERE over sc and it.
func (g *sqlGen) otherAndWhere(depth int, kw, alias string, sc []scope) string {
	var s string
	if g.chance(0.2) {
		src := genRels[g.pick(len(genRels))]
		s += " " + kw + " " + src.name + " " + alias
		sc = append(sc, scope{alias: alias, cols: src.cols})
	}
	if g.chance(0.85) {
		s += " WHERE " + g.cond(depth+1, sc)
	}
	return s
}

func (g *sqlGen) merge() string {
	rel := g.target()
	for rel.name == "v_t" {
		rel = g.target()
	}
	src := genRels[g.pick(len(genRels))]
	sc := []scope{{alias: "m", cols: rel.cols}, {alias: "src", cols: src.cols}}
	c := rel.cols[len(rel.cols)-1]
	s := "MERGE INTO " + rel.name + " m USING " + oneOf(g, src.name+" src", "(SELECT 1 AS one) src") + " ON " + oneOf(g, "true", "false", g.cond(2, sc))
	switch g.pick(3) {
	case 0:
		s += " WHEN MATCHED THEN UPDATE SET " + c.name + " = " + g.literal(c.typ)
	case 1:
		s += " WHEN MATCHED AND " + g.cond(2, sc) + " THEN DELETE"
	default:
		s += " WHEN MATCHED THEN DO NOTHING"
	}
	if g.chance(0.5) {
		vals := make([]string, len(rel.insert))
		names := make([]string, len(rel.insert))
		for i, ic := range rel.insert {
			names[i] = ic.name
			vals[i] = g.literal(ic.typ)
		}
		s += " WHEN NOT MATCHED THEN INSERT (" + strings.Join(names, ", ") + ") VALUES (" + strings.Join(vals, ", ") + ")"
	}
	return s
}
