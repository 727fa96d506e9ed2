package pggate

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/egressd/egressd/policy/sqlfacts"
)

func TestEffectsOf(t *testing.T) {
	tests := []struct {
		name, text string
		want       []effect
	}{
		{"select", "SELECT 1", nil},
		{"prepare", "PREPARE Del(int) AS DELETE FROM t WHERE id = $1", []effect{{kind: effPrepare, name: "del", text: "PREPARE Del(int) AS DELETE FROM t WHERE id = $1"}}},
		{"prepare transaction", "PREPARE TRANSACTION 'x'", nil},
		{"declare with hold", "DECLARE c NO SCROLL CURSOR WITH HOLD FOR SELECT 1", []effect{{kind: effDeclare, name: "c", holdable: true, text: "DECLARE c NO SCROLL CURSOR WITH HOLD FOR SELECT 1"}}},
		{"declare without hold", "DECLARE c CURSOR WITHOUT HOLD FOR SELECT 'with hold'", []effect{{kind: effDeclare, name: "c", text: "DECLARE c CURSOR WITHOUT HOLD FOR SELECT 'with hold'"}}},
		{"hold after for is the query's", `DECLARE c CURSOR FOR SELECT "with", hold FROM t`, []effect{{kind: effDeclare, name: "c", text: `DECLARE c CURSOR FOR SELECT "with", hold FROM t`}}},
		{"deallocate prepare", "DEALLOCATE PREPARE x", []effect{{kind: effDeallocate, name: "x"}}},
		{"deallocate all", "deallocate all", []effect{{kind: effDeallocate, name: "all", all: true}}},
		{"deallocate a statement named prepare", "DEALLOCATE PREPARE", []effect{{kind: effDeallocate, name: "prepare"}}},
		{"close all", "CLOSE ALL", []effect{{kind: effCloseCursor, name: "all", all: true}}},
		{"discard all among others", "SELECT 1; /* c */ DISCARD ALL; DISCARD PLANS", []effect{{kind: effDiscardAll, all: true}}},
		{"quoted name", `CLOSE "My Cur"`, []effect{{kind: effCloseCursor, name: "My Cur"}}},
		// The reported hiding: PostgreSQL ends a -- comment at a lone CR,
		// so the PREPARE and the WITH HOLD cursor after it are real.
		{"prepare after a comment ending at CR", "SELECT 1 --x\r; PREPARE del AS DELETE FROM t", []effect{{kind: effPrepare, name: "del", text: "PREPARE del AS DELETE FROM t"}}},
		{"hold after a comment ending at CR", "DECLARE c CURSOR --x\rWITH HOLD FOR SELECT 1", []effect{{kind: effDeclare, name: "c", holdable: true, text: "DECLARE c CURSOR --x\rWITH HOLD FOR SELECT 1"}}},
		// PostgreSQL truncates names to 63 bytes: so does the tracking.
		{"long name", "PREPARE " + strings.Repeat("p", 70) + " AS SELECT 1", []effect{{kind: effPrepare, name: strings.Repeat("p", 63), text: "PREPARE " + strings.Repeat("p", 70) + " AS SELECT 1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := effectsOf(tt.text); err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("effectsOf(%q) = %+v, %v; want %+v", tt.text, got, err, tt.want)
			}
		})
	}
}

func TestUsesOf(t *testing.T) {
	type use struct {
		portal bool
		name   string
	}
	tests := []struct {
		name, text string
		want       []use
	}{
		{"execute", "EXECUTE del(1)", []use{{false, "del"}}},
		{"explain execute", "EXPLAIN (ANALYZE) EXECUTE del(1)", []use{{false, "del"}}},
		{"create table as", "CREATE TABLE x AS EXECUTE del(1)", []use{{false, "del"}}},
		{"fetch", "FETCH BACKWARD 2 IN cur", []use{{true, "cur"}}},
		{"move", "SELECT 1; MOVE cur", []use{{true, "cur"}}},
		{"none", "SELECT 'execute del'", nil},
		// Another spelling of a revoked statement's name is the same name.
		{"unicode escape", `EXECUTE U&"d\0065l"(1)`, []use{{false, "del"}}},
		{"unicode uescape", `EXECUTE U&"d!0065l" UESCAPE '!' (1)`, []use{{false, "del"}}},
		{"unicode cursor", `FETCH NEXT FROM u&"c\+000075r"`, []use{{true, "cur"}}},
		{"execute after a comment ending at CR", "SELECT 1 --x\r; EXECUTE del(0)", []use{{false, "del"}}},
		{"long name", "EXECUTE " + strings.Repeat("d", 64) + "(0)", []use{{false, strings.Repeat("d", 63)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []use
			err := usesOf(tt.text, func(portal bool, name string) bool {
				got = append(got, use{portal, name})
				return true
			})
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("usesOf(%q) = %v, %v; want %v", tt.text, got, err, tt.want)
			}
		})
	}
}

// parsedEffects is what pg_query says text's top-level statements do to
// named objects, and which prepared statements and cursors they run.
func parsedEffects(res *pg_query.ParseResult) (effects []effect, uses []string) {
	for _, raw := range res.Stmts {
		n := raw.Stmt
		switch {
		case n.GetPrepareStmt() != nil:
			effects = append(effects, effect{kind: effPrepare, name: n.GetPrepareStmt().Name})
		case n.GetDeclareCursorStmt() != nil:
			d := n.GetDeclareCursorStmt()
			const cursorOptHold = 0x20
			effects = append(effects, effect{kind: effDeclare, name: d.Portalname, holdable: d.Options&cursorOptHold != 0})
		case n.GetDeallocateStmt() != nil:
			name := n.GetDeallocateStmt().Name
			effects = append(effects, effect{kind: effDeallocate, name: name, all: name == ""})
		case n.GetClosePortalStmt() != nil:
			name := n.GetClosePortalStmt().Portalname
			effects = append(effects, effect{kind: effCloseCursor, name: name, all: name == ""})
		case n.GetDiscardStmt() != nil && n.GetDiscardStmt().Target == pg_query.DiscardMode_DISCARD_ALL:
			effects = append(effects, effect{kind: effDiscardAll, all: true})
		}
		for _, q := range []*pg_query.Node{n, n.GetExplainStmt().GetQuery(), n.GetCreateTableAsStmt().GetQuery()} {
			if e := q.GetExecuteStmt(); e != nil {
				uses = append(uses, "stmt "+e.Name)
			}
		}
		if f := n.GetFetchStmt(); f != nil {
			uses = append(uses, "portal "+f.Portalname)
		}
	}
	return effects, uses
}

// FuzzEffects checks the gate's word-level reading of object names against
// the parser: the same creations and removals with the same names, and
// every EXECUTE and FETCH target found.
func FuzzEffects(f *testing.F) {
	for _, s := range []string{
		"PREPARE del(int) AS DELETE FROM t WHERE id = $1", `PREPARE "Q""x" AS SELECT 1`, "DEALLOCATE PREPARE all",
		"DECLARE c BINARY INSENSITIVE NO SCROLL CURSOR WITH HOLD FOR SELECT 1", "CLOSE ALL; DISCARD ALL",
		"EXPLAIN (ANALYZE) EXECUTE p(1)", "CREATE TABLE t AS EXECUTE p", "FETCH ABSOLUTE -2 FROM c", "MOVE c",
		"/* x */ prepare P as select 1; execute p", "DECLARE Ä CURSOR FOR SELECT 1",
		"SELECT 1 --x\r; EXECUTE del(0)", "DECLARE c CURSOR --\rWITH HOLD FOR SELECT 1",
		"PREPARE " + strings.Repeat("n", 70) + " AS SELECT 1", `EXECUTE U&"d\0065l"`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		// A protocol string ends at its first NUL, so no query text holds
		// one (and the parser, a C library, would stop there).
		if len(text) > 4096 || strings.IndexByte(text, 0) >= 0 || sqlfacts.Prescan(text, sqlfacts.Limits{}) != nil {
			return
		}
		res, err := pg_query.Parse(text)
		if err != nil {
			return
		}
		want, wantUses := parsedEffects(res)
		got, err := effectsOf(text)
		if err != nil {
			t.Fatalf("effectsOf(%q) = %v; the text parses", text, err)
		}
		for i := range got {
			got[i].text = ""
			// DEALLOCATE "all" and CLOSE "all" name an object called
			// all; read as ALL here, they wait for a tag the server
			// never sends for them, so nothing is dropped.
			if got[i].all && got[i].name == "all" && i < len(want) && !want[i].all {
				got[i] = want[i]
			}
			if got[i].all {
				got[i].name = ""
			}
		}
		if !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("effectsOf(%q) = %+v; the parser says %+v", text, got, want)
		}
		var gotUses []string
		if err := usesOf(text, func(portal bool, name string) bool {
			if portal {
				gotUses = append(gotUses, "portal "+name)
			} else {
				gotUses = append(gotUses, "stmt "+name)
			}
			return true
		}); err != nil {
			t.Fatalf("usesOf(%q) = %v; the text parses", text, err)
		}
		for _, u := range wantUses {
			if !slices.Contains(gotUses, u) {
				t.Fatalf("usesOf(%q) = %q; misses %q", text, gotUses, u)
			}
		}
	})
}
