package sqlfacts

import (
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/egressd/egressd/policy/sqlfacts/internal/jsontree"
)

// analyzeArg is the argument of one ANALYZE option of EXPLAIN: typ is its
// Node type key ("" when there is none).
type analyzeArg struct {
	typ     string
	boolval bool
	sval    string
	ival    int64
}

// on reports whether the option turns ANALYZE on: the old syntax `EXPLAIN
// ANALYZE` and `(ANALYZE)` carry no argument, `(ANALYZE false)` turns it
// off.
func (a analyzeArg) on() bool {
	switch a.typ {
	case nodeBoolean:
		return a.boolval
	case nodeString:
		switch strings.ToLower(a.sval) {
		case "false", "off", "no", "0":
			return false
		}
		return true
	case nodeInteger:
		return a.ival != 0
	}
	return true
}

// explainAnalyze reports whether EXPLAIN's options (a list of DefElem
// Nodes) turn ANALYZE on; the last ANALYZE option wins. exact is false
// when the JSON cannot tell: pg_query writes an Integer's ival only when
// it is positive, so `(ANALYZE 0)` (off) and `(ANALYZE -1)` (which
// PostgreSQL rejects; on here, failing closed) look alike.
func explainAnalyze(d *jsontree.Doc, opts int32) (on, exact bool) {
	on, exact = false, true
	_ = d.Items(opts, func(o int32) error {
		de := d.Get(o, nodeDefElem)
		if de < 0 || !strings.EqualFold(d.Str(d.Get(de, keyDefname)), "analyze") {
			return nil
		}
		var a analyzeArg
		var v int32
		a.typ, v = nodeType(d, d.Get(de, keyArg))
		switch a.typ {
		case nodeBoolean:
			a.boolval = d.Truthy(d.Get(v, keyBoolval))
		case nodeString:
			a.sval = d.Str(d.Get(v, keySval))
		case nodeInteger:
			iv := d.Get(v, keyIval)
			if iv < 0 {
				exact = false
			}
			a.ival, _ = d.Int(iv)
		}
		on = a.on()
		return nil
	})
	return on, exact
}

// explainAnalyzeExact decides ANALYZE for the i-th statement of the text
// from pg_query's protobuf tree, for the rare text the JSON leaves
// ambiguous.
func explainAnalyzeExact(tree *protoTree, i int) (bool, error) {
	stmt, err := tree.stmt(i)
	if err != nil {
		return false, err
	}
	on := false
	for _, o := range stmt.GetExplainStmt().GetOptions() {
		d := o.GetDefElem()
		if d == nil || !strings.EqualFold(d.Defname, "analyze") {
			continue
		}
		var a analyzeArg
		switch v := d.Arg.GetNode().(type) {
		case nil:
		case *pg_query.Node_Boolean:
			a.typ, a.boolval = nodeBoolean, v.Boolean.Boolval
		case *pg_query.Node_String_:
			a.typ, a.sval = nodeString, v.String_.Sval
		case *pg_query.Node_Integer:
			a.typ, a.ival = nodeInteger, int64(v.Integer.Ival)
		default:
			a.typ = "other"
		}
		on = a.on()
	}
	return on, nil
}
