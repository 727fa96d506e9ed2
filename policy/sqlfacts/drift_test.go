package sqlfacts

import (
	"strings"
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/egressd/egressd/policy/sqlfacts/internal/jsontree"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// driftCorpus covers the statement forms the walker relies on.
var driftCorpus = []string{
	"SELECT u.id, lower(u.name) FROM users u LEFT JOIN items i ON i.uid = u.id WHERE u.id > 10 ORDER BY 1 DESC LIMIT 5",
	"SELECT * FROM a, LATERAL (SELECT * FROM b WHERE b.id = a.id) s",
	"WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM r WHERE n < 5) SELECT * FROM r",
	"WITH d AS (DELETE FROM a WHERE x RETURNING *), u AS (UPDATE b SET y = 1 RETURNING *) SELECT * FROM d, u",
	"SELECT * INTO TEMP newt FROM a FOR UPDATE OF a NOWAIT",
	"SELECT CAST(nextval('s') AS text), '1'::int[], x::numeric(10,2), -1, -2.5, B'101', NULL, true, false",
	"SELECT CASE WHEN a > 0 THEN 'p' WHEN a < 0 THEN 'n' ELSE 'z' END, COALESCE(a, b), NULLIF(a, 0) FROM t",
	"SELECT a[1:2], (f(x)).y, ARRAY[1,2], ROW(1, 2), $1, t.* FROM t WHERE a IN (1, 2) AND b = ANY($2)",
	"SELECT count(*) FILTER (WHERE x) OVER (PARTITION BY y ORDER BY z ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM t GROUP BY CUBE (a, b)",
	"SELECT 'a\"b\\c\n<>' || E'\\x41', U&'\\0041', $$dollar$$, \"Quoted\"\"Ident\" FROM \"Sch\".\"T>\"",
	"VALUES (1, 'a'), (2, 'b') UNION SELECT 3, 'c' EXCEPT SELECT 4, 'd' INTERSECT SELECT 5, 'e'",
	"INSERT INTO a (x, y) SELECT x, y FROM b ON CONFLICT (x) DO UPDATE SET y = excluded.y RETURNING *",
	"INSERT INTO t VALUES (DEFAULT, set_config('role', 'x', false))",
	"UPDATE a SET x = b.x FROM b WHERE a.id = b.id",
	"DELETE FROM a USING b WHERE a.id = b.id",
	"MERGE INTO a USING b ON a.id = b.id WHEN MATCHED AND b.x THEN UPDATE SET x = b.x WHEN NOT MATCHED THEN INSERT VALUES (b.id, b.x)",
	"COPY a (x, y) FROM STDIN WITH (FORMAT csv, HEADER true)",
	"COPY (SELECT * FROM a) TO PROGRAM 'gzip > /tmp/x'",
	"COPY a TO '/tmp/x'",
	"SET LOCAL search_path TO a, b; RESET ALL; SET TIME ZONE DEFAULT; SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
	"SET ROLE admin; SET SESSION AUTHORIZATION DEFAULT; SHOW work_mem",
	"BEGIN; SAVEPOINT s; ROLLBACK TO SAVEPOINT s; PREPARE TRANSACTION 'x'; COMMIT PREPARED 'x'; END",
	"LISTEN ch; NOTIFY ch, 'payload'; UNLISTEN *",
	"EXPLAIN (ANALYZE, BUFFERS, FORMAT json) DELETE FROM t WHERE a = 1",
	"EXPLAIN (ANALYZE -1, COSTS 0) SELECT 1",
	"PREPARE p (int) AS SELECT * FROM t WHERE id = $1; EXECUTE p(1); DEALLOCATE p",
	"DECLARE c CURSOR WITH HOLD FOR SELECT * FROM t; FETCH 10 FROM c; CLOSE c",
	"CALL do_things(1, 'x'); DO $$BEGIN PERFORM 1; END$$",
	"LOCK TABLE a, s.b IN ACCESS EXCLUSIVE MODE; TRUNCATE a, b RESTART IDENTITY CASCADE",
	"CREATE TABLE x (a int PRIMARY KEY DEFAULT nextval('s'), b text CHECK (b <> '') REFERENCES y(b) ON DELETE CASCADE, c int GENERATED ALWAYS AS (a * 2) STORED)",
	"CREATE INDEX CONCURRENTLY i ON t USING gin (lower(a)) WHERE b IS NOT NULL",
	"ALTER TABLE t ADD COLUMN c int, ALTER COLUMN d TYPE text USING d::text, DROP CONSTRAINT k",
	"CREATE VIEW v AS SELECT * FROM t; CREATE MATERIALIZED VIEW m AS SELECT 1 WITH NO DATA",
	"CREATE FUNCTION f(a int) RETURNS int LANGUAGE sql AS 'SELECT a + 1'",
	"CREATE EXTENSION dblink; CREATE SERVER s FOREIGN DATA WRAPPER w; ALTER SYSTEM SET work_mem = '1GB'",
	"GRANT SELECT ON t TO r; REVOKE ALL ON SCHEMA s FROM PUBLIC",
	"VACUUM (ANALYZE) t; ANALYZE t; CHECKPOINT; LOAD 'x'; DISCARD ALL",
	"SELECT * FROM t TABLESAMPLE SYSTEM (10) REPEATABLE (1), generate_series(1, 3) WITH ORDINALITY g(n, o)",
	"SELECT xmlelement(name foo, xmlattributes(1 AS a)), jsonb_build_object('a', 1) -> 'a', x IS DISTINCT FROM y FROM t",
	"SELECT 1" + strings.Repeat("+1", 1500),
	"SELECT " + strings.Repeat("(SELECT ", 200) + "x FROM t" + strings.Repeat(")", 200),
	"SELECT " + strings.Repeat("f(", 250) + "1" + strings.Repeat(")", 250),
}

// TestJSONCarriesTheTree shows that pg_query's JSON holds the whole tree
// the walker relies on: decoded with protojson it equals the protobuf
// tree, and its keys come in the descriptors' field order (the walker
// visits fields in document order, so relations and functions are listed
// in tree order). One known difference is normalized away: pg_query
// writes an Integer's ival only when it is positive (see explainAnalyze).
func TestJSONCarriesTheTree(t *testing.T) {
	for _, sql := range driftCorpus {
		t.Run(shortName(sql), func(t *testing.T) {
			js, err := pg_query.ParseToJSON(sql)
			if err != nil {
				t.Fatalf("ParseToJSON(%q) = %v", sql, err)
			}
			pb, err := pg_query.Parse(sql)
			if err != nil {
				t.Fatalf("Parse(%q) = %v", sql, err)
			}
			fromJSON := &pg_query.ParseResult{}
			if err := protojson.Unmarshal([]byte(js), fromJSON); err != nil {
				t.Fatalf("protojson.Unmarshal(ParseToJSON(%q)) = %v", sql, err)
			}
			clearNonPositiveIntegers(pb.ProtoReflect())
			if !proto.Equal(fromJSON, pb) {
				t.Errorf("JSON tree of %q differs from the protobuf tree:\n%v\n%v", sql, fromJSON, pb)
			}
			d := jsontree.Acquire()
			defer d.Release()
			if err := d.Parse(js); err != nil {
				t.Fatal(err)
			}
			checkFieldOrder(t, d, 0, pb.ProtoReflect().Descriptor())
		})
	}
}

func shortName(sql string) string {
	if len(sql) > 40 {
		return sql[:40]
	}
	return sql
}

// clearNonPositiveIntegers sets every Integer's ival ≤ 0 to 0, as the
// JSON has it.
func clearNonPositiveIntegers(m protoreflect.Message) {
	if i, ok := m.Interface().(*pg_query.Integer); ok && i.Ival < 0 {
		i.Ival = 0
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Kind() != protoreflect.MessageKind || fd.IsMap():
		case fd.IsList():
			for i := 0; i < v.List().Len(); i++ {
				clearNonPositiveIntegers(v.List().Get(i).Message())
			}
		default:
			clearNonPositiveIntegers(v.Message())
		}
		return true
	})
}

func checkFieldOrder(t *testing.T, d *jsontree.Doc, v int32, md protoreflect.MessageDescriptor) {
	t.Helper()
	if d.Kind(v) != jsontree.Object {
		return
	}
	last := -1
	for k := v + 1; k < d.Next(v); k = d.Next(k + 1) {
		fd := md.Fields().ByJSONName(d.Raw(k))
		if fd == nil {
			t.Fatalf("%s has no field %q", md.FullName(), d.Raw(k))
		}
		if fd.Index() <= last {
			t.Errorf("%s.%s comes after a later field in the JSON", md.FullName(), fd.Name())
		}
		last = fd.Index()
		if fd.Kind() != protoreflect.MessageKind {
			continue
		}
		if fd.IsList() {
			_ = d.Items(k+1, func(e int32) error {
				checkFieldOrder(t, d, e, fd.Message())
				return nil
			})
			continue
		}
		checkFieldOrder(t, d, k+1, fd.Message())
	}
}
