package egress.sql_test

import data.egress.sql
import data.egress.sql_fixtures as fixtures

ro := {"id": "agent", "attributes": {"sql_profile": "read_only"}}

rw := {"id": "agent", "attributes": {"sql_profile": "read_write"}}

req(identity, stmt) := {"kind": "sql", "identity": identity, "database": "app", "statement": stmt}

select_users := {"command": "select", "relations": [{"schema": "public", "name": "users", "role": "read"}], "functions": [{"schema": "", "name": "lower"}]}

# decide and decide_in evaluate egress.sql on the fixture data (or data
# derived from it), never on the loaded sql/data.json, which is the
# operator's to edit.
decide(identity, stmt) := decide_in(fixtures.sql, identity, stmt)

decide_in(sql_data, identity, stmt) := d if {
	d := sql.decision with input as req(identity, stmt) with data.sql as sql_data
}

reason_of(identity, stmt) := r if {
	r := decide(identity, stmt).reason
}

test_read_only_select_allowed if {
	d := decide(ro, select_users)
	d.allow
	d.rule == "sql.read_only"
}

test_profile_from_identity_map if {
	d := decide_in(json.patch(fixtures.sql, [{"op": "add", "path": "/identities", "value": {"bot": "read_only"}}]), {"id": "bot"}, select_users)
	d.allow
}

test_no_profile_denied if {
	reason_of({"id": "nobody"}, select_users) == "sql_no_profile"
}

test_database_denied if {
	d := decide_in(json.patch(fixtures.sql, [{"op": "replace", "path": "/profiles/read_only/databases", "value": ["other"]}]), ro, select_users)
	d.reason == "sql_database_denied"
}

test_read_only_denials if {
	reason_of(ro, {"command": "insert", "relations": [{"schema": "public", "name": "t", "role": "write"}]}) == "write_denied"
	reason_of(ro, {"command": "select", "relations": [{"schema": "pg_catalog", "name": "pg_shadow", "role": "read"}]}) == "table_not_allowed"
	reason_of(ro, {"command": "select", "functions": [{"schema": "", "name": "pg_read_file"}]}) == "function_not_allowed"
	reason_of(ro, {"command": "select", "functions": [{"schema": "", "name": "nextval"}]}) == "function_not_allowed"
	reason_of(ro, {"command": "select", "functions": [{"schema": "public", "name": "lower"}]}) == "function_not_allowed"
	reason_of(ro, {"command": "select", "locking": true}) == "locking_denied"
	reason_of(ro, {"command": "copy", "copy": {"direction": "to", "table": true}}) == "copy_table_denied"
	reason_of(ro, {"command": "explain", "explain_analyze": true, "inner": {"command": "delete"}}) == "write_denied"
	reason_of(ro, {"command": "select", "writable_cte": true}) == "writable_cte_denied"
	reason_of(ro, {"command": "set", "set": {"name": "enable_seqscan", "action": "set"}}) == "set_denied"
}

test_read_only_allows if {
	decide(ro, {"command": "copy", "copy": {"direction": "to", "table": false}}).allow
	decide(ro, {"command": "transaction", "transaction": "begin"}).allow
	decide(ro, {"command": "set", "set": {"name": "statement_timeout", "action": "set", "value": "5000", "time_ms": 5000}}).allow
	decide(ro, {"command": "set", "set": {"name": "", "action": "reset_all"}}).allow
	decide(ro, {"command": "explain", "inner": {"command": "select"}}).allow
}

test_always_forbidden if {
	every identity in [ro, rw] {
		reason_of(identity, {"command": "do"}) == "do_denied"
		reason_of(identity, {"command": "call"}) == "call_denied"
		reason_of(identity, {"command": "copy", "copy": {"direction": "from", "program": true, "file": true}}) == "copy_program_denied"
		reason_of(identity, {"command": "copy", "copy": {"direction": "to", "file": true}}) == "copy_file_denied"
		reason_of(identity, {"command": "load", "ddl": true}) == "load_denied"
		reason_of(identity, {"command": "alter_system", "ddl": true}) == "alter_system_denied"
		reason_of(identity, {"command": "create_extension", "ddl": true}) == "create_extension_denied"
		reason_of(identity, {"command": "create_server", "ddl": true}) == "create_server_denied"
		reason_of(identity, {"command": "create_subscription", "ddl": true}) == "create_subscription_denied"
		reason_of(identity, {"command": "set", "set": {"name": "role", "action": "set"}}) == "set_role_denied"
		reason_of(identity, {"command": "set", "set": {"name": "session_authorization", "action": "set"}}) == "set_role_denied"
		reason_of(identity, {"command": "set", "set": {"name": "standard_conforming_strings", "action": "set"}}) == "set_denied"
		reason_of(identity, {"command": "set", "set": {"name": "client_encoding", "action": "set"}}) == "set_denied"
		reason_of(identity, {"command": "create_table", "ddl": true}) == "ddl_denied"
		reason_of(identity, {"command": "truncate", "ddl": true}) == "truncate_denied"
		reason_of(identity, {"command": "select", "select_into": true}) == "select_into_denied"
		reason_of(identity, {"command": "transaction", "transaction": "prepare"}) == "prepared_transaction_denied"
	}
}

test_read_write if {
	upd := {"command": "update", "has_where": true, "relations": [{"schema": "public", "name": "t", "role": "write"}]}
	decide(rw, upd).allow
	reason_of(rw, object.union(upd, {"has_where": false})) == "missing_where"
	reason_of(rw, {"command": "delete", "relations": [{"schema": "public", "name": "t", "role": "write"}]}) == "missing_where"
	reason_of(rw, {"command": "merge", "relations": [{"schema": "audit", "name": "t", "role": "write"}]}) == "write_denied"
	decide(rw, {"command": "insert", "functions": [{"schema": "", "name": "nextval"}], "relations": [{"schema": "public", "name": "t", "role": "write"}]}).allow
	decide(rw, {"command": "select", "locking": true}).allow
}

test_connect if {
	decide(ro, {"command": "connect"}).allow
	decide(ro, {"command": "connect"}).read_only
	not decide(rw, {"command": "connect"}).read_only
	d := decide_in(json.patch(fixtures.sql, [{"op": "replace", "path": "/profiles/read_only/databases", "value": ["other"]}]), ro, {"command": "connect"})
	d.reason == "sql_database_denied"
	reason_of({"id": "nobody"}, {"command": "connect"}) == "sql_no_profile"
}

test_missing_where_anywhere if {
	del := {"command": "delete", "has_where": false, "missing_where": true, "relations": [{"schema": "public", "name": "x", "role": "write"}]}

	# COPY (DELETE … RETURNING) TO STDOUT: the inner statement runs.
	reason_of(rw, {"command": "copy", "copy": {"direction": "to"}, "missing_where": true, "relations": del.relations, "inner": del}) == "missing_where"

	# A writable CTE's DELETE under a SELECT.
	reason_of(rw, {"command": "select", "writable_cte": true, "missing_where": true, "relations": del.relations, "functions": [{"schema": "", "name": "count"}]}) == "missing_where"

	# MERGE … WHEN MATCHED THEN UPDATE with no AND condition.
	reason_of(rw, {"command": "merge", "missing_where": true, "relations": [{"schema": "public", "name": "orders", "role": "write"}]}) == "missing_where"
	decide(rw, {"command": "merge", "relations": [{"schema": "public", "name": "orders", "role": "write"}]}).allow
}

test_copy_query_runs_its_dml if {
	reason_of(ro, {"command": "copy", "copy": {"direction": "to"}, "relations": [{"schema": "public", "name": "t", "role": "write"}], "inner": {"command": "delete", "has_where": true}}) == "write_denied"
}

test_dynamic_name_denied if {
	every identity in [ro, rw] {
		reason_of(identity, {"command": "select", "dynamic_name": true, "functions": [{"schema": "", "name": "nextval"}]}) == "dynamic_name_denied"
	}
}

seq(schema, name, fn, role) := {"command": "select", "functions": [{"schema": "", "name": fn}], "relations": [{"schema": schema, "name": name, "role": role}]}

test_sequences_follow_the_write_list if {
	decide(rw, seq("public", "s", "nextval", "write")).allow
	reason_of(rw, seq("private", "s", "nextval", "write")) == "write_denied"
	decide(rw, seq("public", "s", "currval", "read")).allow
	reason_of(rw, seq("private", "s", "currval", "read")) == "table_not_allowed"
}

set_stmt(name, extra) := {"command": "set", "set": object.union({"name": name, "action": "set"}, extra)}

test_setting_bounds if {
	decide(ro, set_stmt("statement_timeout", {"value": "5s", "time_ms": 5000})).allow
	reason_of(ro, set_stmt("statement_timeout", {"value": "0", "time_ms": 0})) == "setting_value_denied"
	reason_of(ro, set_stmt("statement_timeout", {"value": "-5"})) == "setting_value_denied"
	reason_of(ro, set_stmt("lock_timeout", {"value": "1d", "time_ms": 86400000})) == "setting_value_denied"
	reason_of(ro, set_stmt("idle_in_transaction_session_timeout", {"value": "soon"})) == "setting_value_denied"
	decide(ro, set_stmt("work_mem", {"value": "64MB", "time_ms": 64, "memory_kb": 65536})).allow
	reason_of(ro, set_stmt("work_mem", {"value": "100GB", "memory_kb": 104857600})) == "setting_value_denied"
	decide(ro, set_stmt("statement_timeout", {"action": "set_default"})).allow
	decide(ro, set_stmt("statement_timeout", {"action": "reset"})).allow
	decide(ro, set_stmt("application_name", {"value": "x"})).allow
}

test_show_all_is_a_settings_read if {
	reason_of(ro, {"command": "show", "relations": [{"schema": "pg_catalog", "name": "pg_settings", "role": "read"}]}) == "table_not_allowed"
	decide(ro, {"command": "show"}).allow
}

test_user_functions_need_a_qualified_allow if {
	# What the gate adds for `SELECT lower(42)` when the database has a
	# public.lower(int) overload.
	overload := {"command": "select", "functions": [{"schema": "", "name": "lower"}, {"schema": "public", "name": "lower"}]}
	reason_of(ro, overload) == "function_not_allowed"
	d := decide_in(json.patch(fixtures.sql, [{"op": "replace", "path": "/function_sets/common", "value": ["lower", "public.lower"]}]), ro, overload)
	d.allow
	# The function behind a user operator (`SELECT 1 #!# 2`).
	operator := {"command": "select", "operators": [{"schema": "", "name": "#!#"}], "functions": [{"schema": "public", "name": "app_purge"}]}
	reason_of(ro, operator) == "function_not_allowed"
}

test_qualified_user_operator_denied if {
	reason_of(ro, {"command": "select", "operators": [{"schema": "public", "name": "#!#"}]}) == "function_not_allowed"
	d := decide(ro, {"command": "select", "operators": [{"schema": "pg_catalog", "name": "+"}, {"schema": "", "name": "="}]})
	d.allow
}

# Every way to change a pinned setting is denied in every profile, except
# narrowing a transaction to READ ONLY.
test_pinned_settings_every_form if {
	every identity in [ro, rw] {
		reason_of(identity, {"command": "set", "set": {"name": "session characteristics", "action": "set_multi"}, "settings": [{"name": "default_transaction_read_only", "value": "off"}]}) == "set_denied"
		reason_of(identity, {"command": "transaction", "transaction": "begin", "settings": [{"name": "transaction_read_only", "value": "off"}]}) == "set_denied"
		reason_of(identity, {"command": "select", "functions": [{"schema": "", "name": "set_config"}], "settings": [{"name": "search_path", "value": "evil"}]}) == "set_denied"
		reason_of(identity, {"command": "select", "functions": [{"schema": "", "name": "set_config"}], "settings": [{"name": "role", "value": "postgres"}]}) == "set_role_denied"
		decide(identity, {"command": "transaction", "transaction": "begin", "settings": [{"name": "transaction_read_only", "value": "on"}, {"name": "transaction_isolation", "value": "serializable"}]}).allow
	}
}
