-- Date and time arithmetic.
SELECT date(created_at) AS day, count(*) FROM orders GROUP BY date(created_at) ORDER BY day;

SELECT date_trunc('month', created_at) AS month, sum(total) FROM orders GROUP BY 1 ORDER BY 1;

SELECT extract(year FROM created_at) AS y, extract(month FROM created_at) AS m, count(*) FROM orders GROUP BY 1, 2;

SELECT date_part('dow', occurred_at) AS weekday, count(*) FROM events GROUP BY 1;

SELECT id, shipped_at - created_at AS lead_time FROM orders WHERE shipped_at IS NOT NULL;

SELECT avg(extract(epoch FROM shipped_at - created_at) / 3600) AS avg_hours FROM orders WHERE shipped_at IS NOT NULL;

SELECT name, age(now(), created_at) AS customer_for FROM customers;

SELECT to_char(created_at, 'YYYY-MM-DD HH24:MI') AS at, total FROM orders;

SELECT to_date('2024-05-01', 'YYYY-MM-DD') AS d, to_timestamp('2024-05-01 10:00', 'YYYY-MM-DD HH24:MI') AS ts;

SELECT make_date(2024, 5, 1) AS d, make_timestamp(2024, 5, 1, 10, 30, 0) AS ts, make_interval(days => 3) AS i;

SELECT make_timestamptz(2024, 5, 1, 10, 30, 0, 'UTC') AS tstz, make_time(10, 30, 0) AS t;

SELECT * FROM orders WHERE created_at >= now() - interval '30 days';

SELECT * FROM orders WHERE created_at BETWEEN '2024-04-01' AND '2024-04-30 23:59:59';

SELECT current_date - started_on AS days_subscribed, plan FROM subscriptions;

SELECT s.id FROM subscriptions s WHERE (s.started_on, coalesce(s.ended_on, current_date)) OVERLAPS (date '2024-03-01', date '2024-03-31');

SELECT date_bin('15 minutes', occurred_at, timestamptz '2024-01-01') AS bucket, count(*) FROM events GROUP BY 1;

SELECT created_at AT TIME ZONE 'Europe/Berlin' AS local_time FROM orders;

SELECT justify_interval(interval '40 days 30 hours'), justify_days(interval '35 days'), justify_hours(interval '27 hours');

SELECT d::date FROM generate_series(timestamp '2024-04-01', timestamp '2024-04-30', interval '1 week') AS g(d);

SELECT id FROM orders WHERE created_at::date = current_date - 1;

SELECT EXTRACT(quarter FROM started_on) AS q, sum(mrr) FROM subscriptions GROUP BY 1;

SELECT current_timestamp, localtimestamp, current_time, clock_timestamp() > statement_timestamp() AS later;

SELECT isfinite(date '2024-01-01'), date 'infinity' > current_date;

SELECT to_char(date_trunc('week', occurred_at), 'IYYY-IW') AS iso_week, count(DISTINCT session_id) FROM events GROUP BY 1;
