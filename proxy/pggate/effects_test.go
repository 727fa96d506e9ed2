package pggate

import (
	"reflect"
	"testing"
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
		{"close all", "CLOSE ALL", []effect{{kind: effCloseCursor, name: "all", all: true}}},
		{"discard all among others", "SELECT 1; /* c */ DISCARD ALL; DISCARD PLANS", []effect{{kind: effDiscardAll, all: true}}},
		{"quoted name", `CLOSE "My Cur"`, []effect{{kind: effCloseCursor, name: "My Cur"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := effectsOf(tt.text); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("effectsOf(%q) = %+v; want %+v", tt.text, got, tt.want)
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []use
			usesOf(tt.text, func(portal bool, name string) bool {
				got = append(got, use{portal, name})
				return true
			})
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("usesOf(%q) = %v; want %v", tt.text, got, tt.want)
			}
		})
	}
}
