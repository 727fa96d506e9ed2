-- Session settings, introspection an analyst may use, ranges, types.
SET work_mem = '64MB';

SET statement_timeout = '30s';

SET LOCAL lock_timeout = '5s';

SET TIME ZONE 'UTC';

SET application_name = 'analyst-notebook';

RESET work_mem;

SHOW work_mem;

SHOW timezone;

SELECT current_database(), version(), current_schema();

SELECT pg_typeof(total), pg_typeof(created_at), pg_typeof(meta) FROM orders LIMIT 1;

SELECT int4range(1, 10) @> 5, numrange(1.5, 2.5, '[]'), daterange(started_on, ended_on) FROM subscriptions;

SELECT s.plan, tstzrange(o.created_at, o.shipped_at) AS shipping FROM orders o JOIN subscriptions s ON s.customer_id = o.customer_id;

SELECT int8range(1, 100), tsrange('2024-01-01', '2024-02-01'), lower(int4range(3, 7)), upper(int4range(3, 7)), isempty(int4range(1, 1));

SELECT * FROM subscriptions WHERE daterange(started_on, ended_on) && daterange('2024-06-01', '2024-07-01');

SELECT CAST(total AS int), total::text, created_at::date, '42'::numeric, NULL::int FROM orders;

SELECT CASE WHEN total > 30 THEN 'large' WHEN total > 10 THEN 'medium' ELSE 'small' END AS size, count(*) FROM orders GROUP BY 1;

SELECT nullif(currency, 'EUR'), coalesce(shipped_at, created_at), greatest(total, 10), least(total, 10) FROM orders;

SELECT abs(-total), ceil(total), floor(total), round(total, 1), trunc(total), sqrt(total), power(total, 2), mod(id, 2) FROM orders;

SELECT random() < 2 AS always, num_nonnulls(shipped_at, meta) FROM orders;

EXPLAIN SELECT * FROM orders WHERE customer_id = 1;

EXPLAIN (ANALYZE, BUFFERS) SELECT count(*) FROM events;

BEGIN READ ONLY;

COMMIT;

COPY (SELECT id, total FROM orders ORDER BY id) TO STDOUT WITH (FORMAT csv, HEADER);

SELECT 'orders'::regclass;
