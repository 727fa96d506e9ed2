package sqlfacts

import (
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/egressd/egressd/policy/sqlfacts/internal/jsontree"
)

// A setting is changed by more than SET name = value: PostgreSQL's
// ExecSetVariableStmt turns SET TRANSACTION's modes into
// transaction_isolation, transaction_read_only and transaction_deferrable,
// SET SESSION CHARACTERISTICS AS TRANSACTION's into their default_
// counterparts, and BEGIN and START TRANSACTION apply their modes the same
// way; set_config() sets any setting by name. Statement.Settings lists
// every change by the name PostgreSQL sets, read from the parse tree, so
// that a policy pinning default_transaction_read_only sees `BEGIN READ
// WRITE` as the change it is. RESET ALL is not listed: it leaves the
// transaction_* settings alone (they are GUC_NO_RESET_ALL) and restores
// every other one to the value the session started with, which is where
// the gate pins what it pins.

// Setting is one setting a statement changes.
type Setting struct {
	// Name is the setting PostgreSQL changes, lower-cased.
	Name string `json:"name"`
	// Value is the new value: as Set.Value for SET; "on" or "off" for a
	// read-only or deferrable mode; the level for an isolation mode; ""
	// for RESET and SET … TO DEFAULT (the session's starting value); "?"
	// when it is not a constant.
	Value string `json:"value"`
}

var (
	keyTransOptions = jsonName(&pg_query.TransactionStmt{}, "options")
	// multiSettings are the VAR_SET_MULTI names whose DefElem arguments
	// name settings, with the prefix PostgreSQL gives those names.
	multiSettings = map[string]string{"transaction": "", "session characteristics": "default_"}
)

// modeSettings appends to st.Settings the transaction modes of the list of
// DefElem nodes opts (BEGIN's options, SET TRANSACTION's arguments), each
// named with prefix before its defname (transaction_read_only).
func modeSettings(d *jsontree.Doc, st *Statement, opts int32, prefix string) {
	_ = d.Items(opts, func(e int32) error {
		de := d.Get(e, nodeDefElem)
		name := strings.ToLower(d.Str(d.Get(de, keyDefname)))
		if de < 0 || name == "" {
			// Not a mode the grammar writes: what it changes is unknown.
			st.Settings = append(st.Settings, Setting{Name: "?", Value: "?"})
			return nil
		}
		st.Settings = append(st.Settings, Setting{Name: prefix + name, Value: modeValue(d, d.Get(de, keyArg))})
		return nil
	})
}

// modeValue is a transaction mode's value: the grammar writes READ ONLY
// and DEFERRABLE as integer constants 1 and 0 (which pg_query's JSON omits
// for 0), an isolation level as a string.
func modeValue(d *jsontree.Doc, arg int32) string {
	typ, v := nodeType(d, arg)
	if typ != nodeAConst {
		return "?"
	}
	switch {
	case d.Present(d.Get(v, keyConstSval)):
		return strings.Clone(d.Str(d.Get(d.Get(v, keyConstSval), keySval)))
	case d.Present(d.Get(v, keyConstIval)):
		if n, err := d.Int(d.Get(d.Get(v, keyConstIval), keyIval)); err == nil && n > 0 {
			return "on"
		}
		return "off"
	}
	return "?"
}

// setSettings lists the setting a SET or RESET of one name changes, once
// its value is exact.
func setSettings(st *Statement) {
	s := st.Set
	if s == nil {
		return
	}
	switch s.Action {
	case "set", "set_default", "set_current", "reset":
		st.Settings = append(st.Settings, Setting{Name: s.Name, Value: s.Value})
	}
}

// setConfig records the setting a set_config(name, value, is_local) call
// with the arguments args changes; a name that is not a constant sets
// DynamicName, as it may name any setting.
func (w *walker) setConfig(args int32) {
	var name, value int32 = -1, -1
	i := 0
	_ = w.d.Items(args, func(e int32) error {
		switch i {
		case 0:
			name = e
		case 1:
			value = e
		}
		i++
		return nil
	})
	w.st.ConstantFacts = true
	n, null, ok := constString(w.d, name, "")
	if null {
		// set_config(NULL, …) is an error, and changes nothing.
		return
	}
	if !ok {
		w.st.DynamicName = true
		return
	}
	v, null, ok := constString(w.d, value, "")
	switch {
	case null:
		v = ""
	case !ok:
		v = "?"
	}
	w.st.Settings = append(w.st.Settings, Setting{Name: strings.Clone(strings.ToLower(strings.TrimSpace(n))), Value: strings.Clone(v)})
}
