-- Strings and pattern matching.
SELECT lower(email), upper(country), initcap(name) FROM customers;

SELECT split_part(email, '@', 2) AS domain, count(*) FROM customers GROUP BY 1;

SELECT * FROM customers WHERE email LIKE '%@example.com';

SELECT * FROM customers WHERE email ILIKE '%EXAMPLE%';

SELECT * FROM products WHERE name LIKE 'W!_%' ESCAPE '!';

SELECT * FROM customers WHERE name SIMILAR TO '(Ada|Grace)%';

SELECT * FROM customers WHERE name SIMILAR TO 'A#_%' ESCAPE '#';

SELECT * FROM customers WHERE email ~ '^[a-z]+@example\.(com|nl)$';

SELECT regexp_replace(email, '@.*$', '') AS local_part, regexp_match(email, '@(.*)$') FROM customers;

SELECT concat(name, ' <', email, '>'), concat_ws(' / ', name, country), name || ' (' || country || ')' FROM customers;

SELECT trim(both ' ' FROM '  x  '), ltrim('xxabc', 'x'), rtrim('abcyy', 'y'), btrim('  y ');

SELECT substring(email FROM 1 FOR 3), substring(email FROM '@(.*)'), position('@' IN email), strpos(email, '.') FROM customers;

SELECT left(name, 2), right(name, 2), length(name), char_length(name), octet_length(name), reverse(name) FROM customers;

SELECT lpad(id::text, 6, '0'), rpad(name, 10, '.'), repeat('-', 5) FROM customers;

SELECT replace(email, 'example', 'redacted'), translate(name, 'aeiou', 'AEIOU'), overlay(name PLACING 'XX' FROM 2 FOR 2) FROM customers;

SELECT format('%s ordered %s times', c.name, count(o.id)) FROM customers c LEFT JOIN orders o ON o.customer_id = c.id GROUP BY c.name;

SELECT md5(email), encode(sha256(email::bytea), 'hex') FROM customers;

SELECT string_to_array('a,b,c', ','), array_to_string(tags, ';') FROM customers;

SELECT t FROM string_to_table('red,green,blue', ',') AS t;

SELECT regexp_split_to_table('one two  three', '\s+') AS word;

SELECT starts_with(name, 'G'), name ^@ 'E' FROM customers;

SELECT quote_ident(name), quote_literal(email), quote_nullable(NULL::text) FROM customers;

SELECT name FROM customers ORDER BY name COLLATE "C";

SELECT normalize(name), name IS NFC NORMALIZED FROM customers;
