package pggate

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy/sqlfacts"
)

// readOnlyWitness is FuzzSession's oracle: a statement's effect judged in
// Go, without the Rego policy, against the read_only profile the fuzzed
// session runs under. What it checks of every query text that reached the
// upstream:
//   - the text is allowed by one audit record per statement, for agent-ro,
//     carrying exactly that statement's redacted SQL;
//   - no statement writes (a written relation, DDL, SELECT INTO, a writable
//     WITH) or calls a function outside the profile's allow list.
type readOnlyWitness struct {
	// functions is the profile's function allow list, from the bundle's
	// data (data, not the rules that apply it).
	functions map[string]bool
}

func newReadOnlyWitness(t testing.TB) *readOnlyWitness {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "rego", "sql", "data.json"))
	if err != nil {
		t.Fatal(err)
	}
	var data struct {
		Profiles map[string]struct {
			Functions []string `json:"functions"`
		} `json:"profiles"`
		FunctionSets map[string][]string `json:"function_sets"`
	}
	if err := json.Unmarshal(b, &data); err != nil {
		t.Fatalf("rego/sql/data.json: %v", err)
	}
	w := &readOnlyWitness{functions: map[string]bool{}}
	for _, set := range data.Profiles["read_only"].Functions {
		for _, f := range data.FunctionSets[set] {
			w.functions[f] = true
		}
	}
	if len(w.functions) == 0 {
		t.Fatal("rego/sql/data.json: the read_only profile allows no function; the witness would refuse every call")
	}
	return w
}

// check says how a text in arrived breaks the witness, nil when none
// does; recs are the session's audit records.
func (w *readOnlyWitness) check(g *Gate, arrived []string, recs []audit.Record) error {
	allowed := map[string]int{}
	for _, r := range recs {
		if r.Kind == audit.KindSQL && r.Decision == audit.DecisionAllow && r.Identity == "agent-ro" && r.Database == "app" {
			allowed[r.SQL]++
		}
	}
	for _, text := range arrived {
		if strings.HasPrefix(text, g.marker) {
			// The gate's own statement that fails a transaction after a
			// deny (the upstream answers it with an error).
			continue
		}
		sts, err := sqlfacts.ParseContext(context.Background(), text, g.parseOptions("app", nil))
		if err != nil {
			return fmt.Errorf("the upstream received %q, which does not parse: %w", text, err)
		}
		for _, st := range sts {
			if why := w.violation(st); why != "" {
				return fmt.Errorf("the upstream received %q: %s, which the read_only profile never allows", text, why)
			}
			sql := auditSQL(st.AuditSQL)
			if allowed[sql] == 0 {
				return fmt.Errorf("the upstream received %q with no audit record allowing %q for agent-ro (records: %+v)", text, sql, recs)
			}
			allowed[sql]--
		}
	}
	return nil
}

// violation says what in st (or a statement it wraps) the read_only
// profile refuses; "" when nothing.
func (w *readOnlyWitness) violation(st *sqlfacts.Statement) string {
	for ; st != nil; st = st.Inner {
		switch {
		case st.DDL:
			return "DDL " + st.Command
		case st.SelectInto:
			return "SELECT INTO"
		case st.WritableCTE:
			return "a writable WITH"
		}
		for _, r := range st.Relations {
			if r.Role == sqlfacts.RoleWrite {
				return "a write to " + r.Schema + "." + r.Name
			}
		}
		for _, f := range st.Functions {
			if !w.functionAllowed(f) {
				return "a call of " + f.Schema + "." + f.Name
			}
		}
	}
	return ""
}

// functionAllowed mirrors the profile's meaning of its list: a bare name
// is the built-in (unqualified or pg_catalog), anything else needs its
// qualified name listed.
func (w *readOnlyWitness) functionAllowed(f sqlfacts.Function) bool {
	if f.Schema == "" || f.Schema == "pg_catalog" {
		return w.functions[f.Name]
	}
	return w.functions[f.Schema+"."+f.Name]
}

// TestFuzzSessionWitness keeps FuzzSession honest: its sessions reach the
// upstream (a session built without the login's identity state read as
// revoked and refused every input, so the target exercised nothing past
// that check), denied statements do not, and the witness refuses what it
// must.
func TestFuzzSessionWitness(t *testing.T) {
	g, rec := auditedFuzzGate(t)
	w := newReadOnlyWitness(t)
	tests := []struct {
		name    string
		msgs    []pgproto3.FrontendMessage
		arrived []string
	}{
		{"read", []pgproto3.FrontendMessage{&pgproto3.Query{String: "SELECT name FROM users"}}, []string{"SELECT name FROM users"}},
		{"write denied", []pgproto3.FrontendMessage{&pgproto3.Query{String: "DELETE FROM users"}}, nil},
		{"extended read", []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}}, []string{"SELECT 1"}},
		{"function denied", []pgproto3.FrontendMessage{&pgproto3.Query{String: "SELECT pg_read_file('x')"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := rec.Len()
			got := runSession(t, g, encode(tt.msgs...))
			var clientTexts []string
			for _, text := range got {
				if !strings.HasPrefix(text, g.marker) {
					clientTexts = append(clientTexts, text)
				}
			}
			if !slices.Equal(clientTexts, tt.arrived) {
				t.Errorf("upstream received %q; want %q", clientTexts, tt.arrived)
			}
			if err := w.check(g, got, rec.Since(n)); err != nil {
				t.Error(err)
			}
		})
	}
	forged := []struct {
		name    string
		arrived []string
	}{
		{"write", []string{"DELETE FROM users WHERE id = 1"}},
		{"function outside the list", []string{"SELECT pg_read_file('x')"}},
		{"read with no record", []string{"SELECT name FROM users"}},
	}
	for _, tt := range forged {
		t.Run("forged "+tt.name, func(t *testing.T) {
			if err := w.check(g, tt.arrived, nil); err == nil {
				t.Errorf("witness passed %q arriving with no record; want a failure", tt.arrived)
			}
		})
	}
}
