# The SQL entry point: one decision per statement that reaches the Postgres
# gate. Go computes the statement's facts with PostgreSQL's own parser
# (input.statement: command, relations with read/write role, every function
# called, COPY, SET, transaction control, …; input.database) and this module
# decides them against the identity's profile in data.sql.
#
# Some statements are refused in every profile (DO, CALL, COPY PROGRAM or a
# server file, LOAD, ALTER SYSTEM, CREATE EXTENSION/SERVER/SUBSCRIPTION,
# SET ROLE/SESSION AUTHORIZATION, the SETs that would change how the gate
# parses, any DDL). Everything else must be allowed by the profile:
# commands, tables (per role), functions (allow-listed, never deny-listed)
# and settings.
package egress.sql

import data.egress.base

# The profile comes from the identity: an operator-set attribute wins over
# the data.sql.identities map.
profile_name := n if {
	n := input.identity.attributes.sql_profile
} else := n if {
	n := data.sql.identities[input.identity.id]
}

profile := data.sql.profiles[profile_name]

stmt := input.statement

# eff is the statement that actually runs: what EXPLAIN, PREPARE,
# DECLARE CURSOR and COPY (query) wrap, or the statement itself. The outer
# statement's relation and function lists and its flags already include
# the inner ones.
eff := s if {
	s := stmt.inner
} else := stmt

rule_id := concat(".", ["sql", profile_name])

decision := base.deny("sql_no_profile", "") if {
	not profile
} else := base.deny("sql_database_denied", rule_id) if {
	not database_ok
} else := base.allow(rule_id) if {
	# The gate asks once per login whether the identity may use the
	# database at all.
	stmt.command == "connect"
} else := base.deny(reason, "sql.always") if {
	reason := forbidden
} else := base.deny(reason, rule_id) if {
	reason := refusal
} else := base.allow(rule_id)

database_ok if "*" in profile.databases

database_ok if input.database in profile.databases

# forbidden holds in every profile, whatever its data says.
forbidden := "do_denied" if {
	eff.command == "do"
} else := "call_denied" if {
	eff.command == "call"
} else := "copy_program_denied" if {
	stmt.copy.program
} else := "copy_file_denied" if {
	stmt.copy.file
} else := "load_denied" if {
	eff.command == "load"
} else := "alter_system_denied" if {
	eff.command == "alter_system"
} else := "create_extension_denied" if {
	eff.command == "create_extension"
} else := "create_server_denied" if {
	eff.command in {"create_server", "create_fdw", "create_user_mapping", "create_foreign_table"}
} else := "create_subscription_denied" if {
	eff.command == "create_subscription"
} else := "dynamic_name_denied" if {
	# A relation or function named by a value the facts cannot resolve
	# (nextval(col), $1::regclass, an OID) cannot be checked against any
	# list.
	stmt.dynamic_name
} else := "set_role_denied" if {
	stmt.set.name in {"role", "session_authorization"}
} else := "set_denied" if {
	stmt.set.name in data.sql.pinned_settings
} else := "truncate_denied" if {
	eff.command == "truncate"
} else := "select_into_denied" if {
	eff.select_into
} else := "ddl_denied" if {
	some s in [stmt, eff]
	s.ddl
} else := "prepared_transaction_denied" if {
	stmt.transaction in {"prepare", "commit_prepared", "rollback_prepared"}
}

write_commands := {"insert", "update", "delete", "merge", "lock", "notify"}

# refusal is the first thing the profile does not allow.
refusal := "write_denied" if {
	some s in [stmt, eff]
	s.command in write_commands
	not s.command in profile.commands
} else := "statement_denied" if {
	some s in [stmt, eff]
	not s.command in profile.commands
} else := "explain_analyze_denied" if {
	stmt.explain_analyze
	eff.command != "select"
	not profile.explain_analyze_writes
} else := "writable_cte_denied" if {
	stmt.writable_cte
	not profile.writable_cte
} else := "locking_denied" if {
	stmt.locking
	not profile.locking
} else := "copy_table_denied" if {
	stmt.copy.table
	stmt.copy.direction == "to"
	not profile.copy_table_out
} else := "missing_where" if {
	profile.require_where
	some s in [stmt, eff]
	unfiltered_write(s)
} else := "write_denied" if {
	some r in stmt.relations
	r.role == "write"
	not table_allowed(profile.write, r)
} else := "table_not_allowed" if {
	some r in stmt.relations
	r.role == "read"
	not table_allowed(profile.read, r)
} else := "function_not_allowed" if {
	some f in stmt.functions
	not function_allowed(f)
} else := "function_not_allowed" if {
	# OPERATOR(app.#!#) names a user operator outright; call its function
	# by name instead, where the function sets can allow it.
	some o in stmt.operators
	not o.schema in {"", "pg_catalog"}
} else := "set_denied" if {
	stmt.set.name != ""
	not stmt.set.name in profile.settings
} else := "setting_value_denied" if {
	bounds := profile.setting_bounds[stmt.set.name]
	not stmt.set.action in {"set_default", "reset"}
	not within_bounds(bounds, stmt.set)
}

# unfiltered_write: an UPDATE or DELETE anywhere in the statement (a WITH
# query, COPY's query, what EXPLAIN or PREPARE wraps) without WHERE, or a
# MERGE that updates or deletes matched rows with no AND condition.
unfiltered_write(s) if s.missing_where

unfiltered_write(s) if {
	s.command in {"update", "delete"}
	not s.has_where
}

# within_bounds: a bounded setting may be set only to a value the server
# reads as a number of the bound's unit within [min, max]; SET … TO
# DEFAULT and RESET restore what the role or database set.
within_bounds(b, v) if {
	v.time_ms >= b.min_ms
	v.time_ms <= b.max_ms
}

within_bounds(b, v) if {
	v.memory_kb >= b.min_kb
	v.memory_kb <= b.max_kb
}

# table_allowed matches "schema.table" or "schema.*" patterns.
table_allowed(patterns, r) if concat(".", [r.schema, r.name]) in patterns

table_allowed(patterns, r) if concat(".", [r.schema, "*"]) in patterns

# A function by bare name or in pg_catalog is the built-in of that name:
# the gate resolves every call, operator and cast against the upstream
# catalog and adds, qualified, each function outside pg_catalog that it can
# reach (a user's public.lower(int) overload, the function behind a user
# operator), so a listed bare name never lets a user function through.
function_allowed(f) if {
	f.schema in {"", "pg_catalog"}
	f.name in data.sql.function_sets[profile.functions[_]]
}

# A function outside pg_catalog needs its qualified name in a function set.
function_allowed(f) if {
	not f.schema in {"", "pg_catalog"}
	concat(".", [f.schema, f.name]) in data.sql.function_sets[profile.functions[_]]
}
