package sqlfacts

import (
	"slices"
	"testing"
)

// TestSettingsFromTheTree: every form of changing a setting lists the
// setting PostgreSQL changes, read from the parse tree (item 7 of issue
// 21: SET SESSION CHARACTERISTICS, BEGIN READ WRITE and SET TRANSACTION
// READ WRITE changed the read-only settings without naming them).
func TestSettingsFromTheTree(t *testing.T) {
	tests := []struct {
		sql  string
		want []Setting
	}{
		{"SET default_transaction_read_only = off", []Setting{{"default_transaction_read_only", "off"}}},
		{"SET LOCAL transaction_read_only TO false", []Setting{{"transaction_read_only", "false"}}},
		{"RESET default_transaction_read_only", []Setting{{"default_transaction_read_only", ""}}},
		{"SET search_path TO DEFAULT", []Setting{{"search_path", ""}}},
		{"RESET ALL", nil},
		{"SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE", []Setting{{"default_transaction_read_only", "off"}}},
		{"SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ ONLY, DEFERRABLE",
			[]Setting{{"default_transaction_isolation", "serializable"}, {"default_transaction_read_only", "on"}, {"default_transaction_deferrable", "on"}}},
		{"SET TRANSACTION READ WRITE", []Setting{{"transaction_read_only", "off"}}},
		{"BEGIN READ WRITE", []Setting{{"transaction_read_only", "off"}}},
		{"START TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", []Setting{{"transaction_isolation", "repeatable read"}, {"transaction_read_only", "on"}}},
		{"BEGIN", nil},
		{"COMMIT AND CHAIN", nil},
		{"SELECT set_config('Default_Transaction_Read_Only', 'off', false)", []Setting{{"default_transaction_read_only", "off"}}},
		{"PREPARE p AS SELECT set_config('search_path', $1, false)", []Setting{{"search_path", "?"}}},
	}
	for _, tt := range tests {
		t.Run(tt.sql, func(t *testing.T) {
			st := parseAll(t, tt.sql)[0]
			if !slices.Equal(st.Settings, tt.want) {
				t.Errorf("Parse(%q).Settings = %v; want %v", tt.sql, st.Settings, tt.want)
			}
		})
	}
	st := parseAll(t, "SELECT set_config(name, 'off', false) FROM t")[0]
	if !st.DynamicName {
		t.Errorf("set_config of a column: DynamicName = false; want true (it may name any setting)")
	}
}
