-- Statements from the issue 12 review and similar; one per line. TestOracle
-- runs them (with the corpora of the Go tests) before the generated ones.
COPY (WITH t AS (SELECT 1) DELETE FROM t RETURNING *) TO STDOUT
COPY (WITH orders AS (SELECT 1) UPDATE orders SET note = 'x' RETURNING id) TO STDOUT
COPY (WITH x AS (SELECT 1) INSERT INTO x VALUES (9, 'ins') RETURNING *) TO STDOUT
COPY (DELETE FROM x RETURNING id) TO STDOUT
WITH d AS (DELETE FROM x RETURNING *) SELECT count(*) FROM d
WITH x AS (SELECT 1) DELETE FROM x WHERE true
WITH t AS (SELECT 1 AS id) UPDATE t SET a = 0 WHERE id > 0
MERGE INTO orders o USING (SELECT 1) s ON true WHEN MATCHED THEN UPDATE SET note = 'm'
MERGE INTO t USING (SELECT 1 AS id) s ON t.id = s.id WHEN MATCHED THEN DELETE
INSERT INTO orders (t_id, amount, note) VALUES (1, 2, 'n') RETURNING id
SELECT nextval('s')
SELECT nextval('orders_id_seq')
SELECT currval('s')
SELECT setval('s', 100)
SELECT 1 #!# 2
SELECT app_purge(1, 2)
SELECT lower(42)
SELECT lower('A')
SELECT app_fmt(id) FROM t
SELECT 1::cents
SELECT 'a'::checked_text
SELECT CAST(b AS checked_text) FROM t
SELECT jsonb_populate_record(NULL::private.vault, '{}')
SELECT 'private.vault'::regclass
SELECT 'private.vault'::regclass::oid
SELECT (NULL::private.vault).v
SELECT * FROM v_t WHERE a > 10
UPDATE v_t SET a = a + 1 WHERE id = 1
DELETE FROM v_t WHERE id = 2
SELECT * FROM private.vault
SELECT * FROM t WHERE id IN (SELECT t_id FROM orders)
SELECT date(created_at) FROM users
SELECT name FROM users WHERE name SIMILAR TO 'a%'
SELECT name FROM users WHERE name LIKE 'a!%' ESCAPE '!'
SELECT (DATE '2020-01-01', DATE '2020-02-01') OVERLAPS (DATE '2020-01-15', DATE '2020-03-01')
SELECT current_database(), version()
SELECT pg_typeof(1), string_to_table('a,b', ',')
SELECT int4range(1, 5) @> 3
TABLE t
TABLE private.vault
SELECT * FROM t FOR UPDATE
EXPLAIN ANALYZE DELETE FROM x WHERE id = 1
EXPLAIN ANALYZE WITH d AS (DELETE FROM x RETURNING *) SELECT 1
SHOW ALL
SELECT * FROM pg_settings
