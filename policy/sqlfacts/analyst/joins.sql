-- Joins, subqueries, CTEs and LATERAL. One query per block; blocks are
-- separated by blank lines.
SELECT c.name, count(o.id) AS orders
FROM customers c LEFT JOIN orders o ON o.customer_id = c.id
GROUP BY c.name ORDER BY orders DESC, c.name;

SELECT o.id, c.email, o.total FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.status = 'shipped';

SELECT p.category, sum(oi.quantity * oi.unit_price) AS revenue
FROM order_items oi JOIN products p ON p.id = oi.product_id
GROUP BY p.category ORDER BY revenue DESC;

SELECT c.id, c.name FROM customers c WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id AND o.status = 'shipped');

SELECT * FROM products WHERE id IN (SELECT product_id FROM order_items GROUP BY product_id HAVING sum(quantity) > 1);

SELECT c.name, o.id, o.total
FROM customers c CROSS JOIN LATERAL (SELECT id, total FROM orders WHERE customer_id = c.id ORDER BY created_at DESC LIMIT 1) o;

WITH shipped AS (SELECT * FROM orders WHERE status = 'shipped')
SELECT customer_id, sum(total) FROM shipped GROUP BY customer_id;

WITH per_customer AS (
    SELECT customer_id, count(*) AS n, sum(total) AS spent FROM orders GROUP BY customer_id
), ranked AS (
    SELECT *, rank() OVER (ORDER BY spent DESC) AS r FROM per_customer
)
SELECT c.name, r.n, r.spent, r.r FROM ranked r JOIN customers c ON c.id = r.customer_id ORDER BY r.r;

WITH RECURSIVE days(d) AS (
    SELECT date '2024-04-01'
    UNION ALL
    SELECT d + 1 FROM days WHERE d < date '2024-04-07'
)
SELECT d, (SELECT count(*) FROM orders WHERE created_at::date = d) AS orders FROM days;

SELECT c.country, p.category, count(*) FROM orders o
JOIN customers c USING (id)
JOIN order_items oi ON oi.order_id = o.id
JOIN products p ON p.id = oi.product_id
GROUP BY 1, 2;

SELECT o.* FROM orders o FULL OUTER JOIN customers c ON c.id = o.customer_id WHERE c.id IS NULL OR o.id IS NULL;

SELECT a.id AS first_order, b.id AS later_order
FROM orders a JOIN orders b ON a.customer_id = b.customer_id AND a.created_at < b.created_at;

SELECT name FROM customers UNION SELECT name FROM products ORDER BY 1;

SELECT customer_id FROM orders EXCEPT SELECT customer_id FROM subscriptions WHERE ended_on IS NOT NULL;

SELECT customer_id FROM orders INTERSECT SELECT customer_id FROM events;

SELECT c.name, (SELECT max(total) FROM orders o WHERE o.customer_id = c.id) AS biggest FROM customers c;

SELECT * FROM orders WHERE total > ALL (SELECT price FROM products WHERE category = 'books');

SELECT * FROM orders WHERE customer_id = ANY (ARRAY[1, 2]) ORDER BY id LIMIT 10 OFFSET 0;

SELECT DISTINCT ON (customer_id) customer_id, id, created_at FROM orders ORDER BY customer_id, created_at DESC;

SELECT p.name, coalesce(s.sold, 0) AS sold
FROM products p LEFT JOIN (SELECT product_id, sum(quantity) AS sold FROM order_items GROUP BY product_id) s ON s.product_id = p.id;

SELECT * FROM (VALUES (1, 'one'), (2, 'two')) AS v(n, word) JOIN orders o ON o.id = v.n;

SELECT o.id, x.n FROM orders o, generate_series(1, 2) AS x(n) WHERE o.id < 3;

SELECT c.name, t.tag FROM customers c, unnest(c.tags) AS t(tag);

SELECT c.name, t.tag, t.ord FROM customers c CROSS JOIN LATERAL unnest(c.tags) WITH ORDINALITY AS t(tag, ord);

SELECT * FROM orders o WHERE EXISTS (SELECT 1 FROM order_items i JOIN products p ON p.id = i.product_id WHERE i.order_id = o.id AND NOT p.active);

SELECT count(*) FILTER (WHERE status = 'shipped') AS shipped, count(*) FILTER (WHERE status <> 'shipped') AS other FROM orders;

SELECT * FROM orders TABLESAMPLE BERNOULLI (50) REPEATABLE (42);

TABLE products;

VALUES (1, 2), (3, 4);

SELECT o.id FROM orders o WHERE (o.customer_id, o.status) IN (SELECT customer_id, 'shipped' FROM subscriptions);
