-- JSON and jsonb.
SELECT attrs ->> 'tier' AS tier, count(*) FROM customers GROUP BY 1;

SELECT id, meta -> 'coupon' AS coupon FROM orders WHERE meta ? 'coupon';

SELECT * FROM customers WHERE attrs @> '{"tier": "gold"}';

SELECT name, specs #>> '{colors,0}' AS first_color FROM products;

SELECT p.name, c.color FROM products p, jsonb_array_elements_text(p.specs -> 'colors') AS c(color);

SELECT key, value FROM customers, jsonb_each_text(attrs) WHERE id = 1;

SELECT jsonb_object_keys(specs) AS k, count(*) FROM products GROUP BY 1;

SELECT json_agg(json_build_object('id', id, 'total', total) ORDER BY id) FROM orders;

SELECT jsonb_build_object('customer', c.name, 'orders', jsonb_agg(o.id)) FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.name;

SELECT row_to_json(o) FROM orders o WHERE id = 1;

SELECT to_jsonb(p) - 'specs' FROM products p;

SELECT jsonb_pretty(specs) FROM products WHERE id = 1;

SELECT jsonb_path_query_array(specs, '$.colors[*]') FROM products;

SELECT * FROM products WHERE jsonb_path_exists(specs, '$.weight ? (@ > 1)');

SELECT x.* FROM jsonb_to_recordset('[{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]') AS x(a int, b text);

SELECT (payload ->> 'product')::int AS product_id, count(*) FROM events WHERE kind = 'view' GROUP BY 1;

SELECT jsonb_typeof(specs -> 'weight'), jsonb_array_length(coalesce(specs -> 'colors', '[]')) FROM products;

SELECT jsonb_set(attrs, '{tier}', '"platinum"') FROM customers WHERE id = 1;

SELECT jsonb_strip_nulls(jsonb_build_object('a', 1, 'b', NULL));

SELECT json_object_agg(name, price) FROM products;

SELECT specs -> 'colors' ->> 1 FROM products WHERE specs ? 'colors';
