# The SQL entry point: one decision per statement that reaches the Postgres
# gate. Go computes the statement's facts with PostgreSQL's own parser
# (input.statement: command, relations with read/write role, every function
# called, COPY, SET, transaction control, …, and the flags this module
# refuses on; input.database) and this module decides them against the
# identity's profile in data.sql.
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
} else := object.union(base.allow(rule_id), {"read_only": read_only_profile}) if {
	# The gate asks once per login whether the identity may use the
	# database at all, and starts the upstream session read-only when the
	# profile may write nothing.
	stmt.command == "connect"
} else := base.deny(reason, "sql.always") if {
	reason := forbidden
} else := base.deny(reason, rule_id) if {
	reason := refusal
} else := base.allow(rule_id)

database_ok if "*" in profile.databases

database_ok if input.database in profile.databases

# forbidden holds in every profile, whatever its data says. Each check is
# a lookup rather than a branch per reason: the command that runs in
# always_refused (first, so LOAD or TRUNCATE is refused for what it is,
# not for being DDL), then the first of the statement's flags that
# always_refused names, then SET of a setting the gate pins.
forbidden := r if {
	r := always_refused[eff.command]
} else := r if {
	r := [always_refused[f] | some f in flags][0]
} else := "set_role_denied" if {
	stmt.set.name in {"role", "session_authorization"}
} else := "set_denied" if {
	stmt.set.name in data.sql.pinned_settings
} else := "set_role_denied" if {
	some c in stmt.settings
	c.name in {"role", "session_authorization"}
} else := "set_denied" if {
	# Every other way to change a pinned setting: SET TRANSACTION and SET
	# SESSION CHARACTERISTICS modes, BEGIN/START TRANSACTION modes,
	# set_config(), as the facts name what PostgreSQL changes.
	some c in stmt.settings
	c.name in data.sql.pinned_settings
	not read_only_mode(c)
}

# read_only_mode: READ ONLY only narrows what a session may do (pg_dump's
# `START TRANSACTION …, READ ONLY`), so it is allowed where READ WRITE,
# which would undo a pinned read-only session, is not.
read_only_mode(c) if {
	c.name in {"transaction_read_only", "default_transaction_read_only"}
	c.value == "on"
}

# always_refused maps the commands and the flags refused in every profile
# to their reasons.
always_refused := {
	"do": "do_denied",
	"call": "call_denied",
	"load": "load_denied",
	"alter_system": "alter_system_denied",
	"create_extension": "create_extension_denied",
	"create_server": "create_server_denied",
	"create_fdw": "create_server_denied",
	"create_user_mapping": "create_server_denied",
	"create_foreign_table": "create_server_denied",
	"create_subscription": "create_subscription_denied",
	"truncate": "truncate_denied",
	"copy_program": "copy_program_denied",
	"copy_file": "copy_file_denied",
	"dynamic_name": "dynamic_name_denied",
	"select_into": "select_into_denied",
	"ddl": "ddl_denied",
	"prepared_transaction": "prepared_transaction_denied",
}

# flags are the statement's facts the decision refuses on, in a fixed
# order (rego/README.md lists them). Go computes them with the facts
# (input.statement.flags); for an input written without them, such as a
# test's, derived_flags computes the same list from the other facts (a Go
# test checks that the two agree).
flags := f if {
	f := stmt.flags
} else := derived_flags

derived_flags := [f | some f in flag_order; derived_flag[f]]

flag_order := [
	"copy_program", "copy_file", "dynamic_name", "select_into", "ddl", "prepared_transaction",
	"explain_analyze_write", "writable_cte", "locking", "copy_table_out", "unfiltered_write", "user_operator",
]

derived_flag contains "copy_program" if stmt.copy.program

derived_flag contains "copy_file" if stmt.copy.file

# A relation or function named by a value the facts cannot resolve
# (nextval(col), $1::regclass, an OID) cannot be checked against any list.
derived_flag contains "dynamic_name" if stmt.dynamic_name

derived_flag contains "select_into" if eff.select_into

derived_flag contains "ddl" if {
	some s in [stmt, eff]
	s.ddl
}

derived_flag contains "prepared_transaction" if stmt.transaction in {"prepare", "commit_prepared", "rollback_prepared"}

derived_flag contains "explain_analyze_write" if {
	stmt.explain_analyze
	eff.command != "select"
}

derived_flag contains "writable_cte" if stmt.writable_cte

derived_flag contains "locking" if stmt.locking

derived_flag contains "copy_table_out" if {
	stmt.copy.table
	stmt.copy.direction == "to"
}

derived_flag contains "unfiltered_write" if {
	some s in [stmt, eff]
	unfiltered_write(s)
}

# OPERATOR(app.#!#) names a user operator outright; call its function by
# name instead, where the function sets can allow it.
derived_flag contains "user_operator" if {
	some o in stmt.operators
	not o.schema in {"", "pg_catalog"}
}

# read_only_profile: a profile with no write command and an empty write
# list may write nothing, so the gate starts its sessions with
# default_transaction_read_only on and PostgreSQL refuses a write the facts
# missed (a user function that writes, say); the settings that would undo
# it are pinned (data.sql.pinned_settings, settings above).
default read_only_profile := false

read_only_profile if {
	count(object.get(profile, "write", [])) == 0
	not profile_writes
}

profile_writes if {
	some c in profile.commands
	c in write_commands
}

write_commands := {"insert", "update", "delete", "merge", "lock", "notify"}

commands := {stmt.command, eff.command}

# refusal is the first thing the profile does not allow. The flags it
# weighs (profile_refused) are looked up in one pass, in flag order.
refusal := "write_denied" if {
	some c in commands
	c in write_commands
	not c in profile.commands
} else := "statement_denied" if {
	some c in commands
	not c in profile.commands
} else := r if {
	r := [r | some f in flags; r := profile_refused(f)][0]
} else := "write_denied" if {
	# A read or write list matches "schema.table" or "schema.*".
	some r in stmt.relations
	r.role == "write"
	not concat(".", [r.schema, r.name]) in profile.write
	not concat(".", [r.schema, "*"]) in profile.write
} else := "table_not_allowed" if {
	some r in stmt.relations
	r.role == "read"
	not concat(".", [r.schema, r.name]) in profile.read
	not concat(".", [r.schema, "*"]) in profile.read
} else := "function_not_allowed" if {
	some f in stmt.functions
	not function_allowed(f)
} else := "function_not_allowed" if {
	"user_operator" in flags
} else := "set_denied" if {
	stmt.set.name != ""
	not stmt.set.name in profile.settings
} else := "setting_value_denied" if {
	bounds := profile.setting_bounds[stmt.set.name]
	not stmt.set.action in {"set_default", "reset"}
	not within_bounds(bounds, stmt.set)
}

# profile_refused(flag) is the reason a flag is refused for unless the
# profile allows it.
profile_refused("explain_analyze_write") := "explain_analyze_denied" if not profile.explain_analyze_writes

profile_refused("writable_cte") := "writable_cte_denied" if not profile.writable_cte

profile_refused("locking") := "locking_denied" if not profile.locking

profile_refused("copy_table_out") := "copy_table_denied" if not profile.copy_table_out

profile_refused("unfiltered_write") := "missing_where" if profile.require_where

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
