-- Window functions, aggregates and GROUPING SETS.
SELECT id, customer_id, total, sum(total) OVER (PARTITION BY customer_id ORDER BY created_at) AS running FROM orders;

SELECT id, total, row_number() OVER w, rank() OVER w, dense_rank() OVER w FROM orders WINDOW w AS (ORDER BY total DESC);

SELECT id, total, lag(total) OVER (ORDER BY created_at) AS prev, lead(total, 1, 0) OVER (ORDER BY created_at) AS next FROM orders;

SELECT id, total, avg(total) OVER (ORDER BY created_at ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS moving_avg FROM orders;

SELECT id, first_value(id) OVER (PARTITION BY customer_id ORDER BY created_at), last_value(id) OVER (PARTITION BY customer_id ORDER BY created_at RANGE BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) FROM orders;

SELECT id, ntile(4) OVER (ORDER BY total), percent_rank() OVER (ORDER BY total), cume_dist() OVER (ORDER BY total) FROM orders;

SELECT customer_id, nth_value(total, 2) OVER (PARTITION BY customer_id ORDER BY created_at ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) FROM orders;

SELECT * FROM (SELECT o.*, row_number() OVER (PARTITION BY customer_id ORDER BY total DESC) AS rn FROM orders o) t WHERE rn = 1;

SELECT status, total / sum(total) OVER () AS share FROM orders;

SELECT country, count(*), round(100.0 * count(*) / sum(count(*)) OVER (), 1) AS pct FROM customers GROUP BY country;

SELECT c.country, o.status, sum(o.total) FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY GROUPING SETS ((c.country, o.status), (c.country), ());

SELECT c.country, o.status, sum(o.total), grouping(c.country, o.status) FROM orders o JOIN customers c ON c.id = o.customer_id GROUP BY ROLLUP (c.country, o.status);

SELECT p.category, p.active, count(*) FROM products p GROUP BY CUBE (p.category, p.active) ORDER BY 1, 2;

SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY total) AS median, percentile_disc(0.9) WITHIN GROUP (ORDER BY total) AS p90 FROM orders;

SELECT mode() WITHIN GROUP (ORDER BY status) FROM orders;

SELECT stddev(total), variance(total), stddev_pop(total), var_samp(total) FROM orders;

SELECT corr(quantity, unit_price), regr_slope(unit_price, quantity), covar_pop(quantity, unit_price) FROM order_items;

SELECT customer_id, array_agg(id ORDER BY created_at) AS order_ids, string_agg(status, ', ' ORDER BY id) FROM orders GROUP BY customer_id;

SELECT bool_and(active), bool_or(active), every(price > 1) FROM products;

SELECT count(DISTINCT customer_id), count(*), min(created_at), max(created_at) FROM orders;

SELECT status, sum(total) FILTER (WHERE currency = 'EUR') AS eur FROM orders GROUP BY status HAVING count(*) > 0;

SELECT width_bucket(total, 0, 100, 4) AS bucket, count(*) FROM orders GROUP BY 1 ORDER BY 1;

SELECT plan, sum(mrr) AS mrr, sum(sum(mrr)) OVER (ORDER BY plan) AS cumulative FROM subscriptions GROUP BY plan;
