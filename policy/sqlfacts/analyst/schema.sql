-- The schema the analyst corpus (*.sql beside this file, package
-- analyst) is written against: a small shop's database in schema public.
CREATE TABLE customers (
    id         int PRIMARY KEY,
    name       text NOT NULL,
    email      text NOT NULL,
    country    text NOT NULL,
    created_at timestamptz NOT NULL,
    attrs      jsonb NOT NULL DEFAULT '{}',
    tags       text[] NOT NULL DEFAULT '{}'
);
CREATE TABLE products (
    id       int PRIMARY KEY,
    name     text NOT NULL,
    category text NOT NULL,
    price    numeric(10, 2) NOT NULL,
    active   boolean NOT NULL DEFAULT true,
    specs    jsonb NOT NULL DEFAULT '{}'
);
CREATE TABLE orders (
    id          int PRIMARY KEY,
    customer_id int NOT NULL REFERENCES customers,
    status      text NOT NULL,
    created_at  timestamptz NOT NULL,
    shipped_at  timestamptz,
    total       numeric(12, 2) NOT NULL,
    currency    text NOT NULL DEFAULT 'EUR',
    meta        jsonb NOT NULL DEFAULT '{}'
);
CREATE TABLE order_items (
    order_id   int NOT NULL REFERENCES orders,
    product_id int NOT NULL REFERENCES products,
    quantity   int NOT NULL,
    unit_price numeric(10, 2) NOT NULL,
    PRIMARY KEY (order_id, product_id)
);
CREATE TABLE events (
    id          bigint PRIMARY KEY,
    customer_id int REFERENCES customers,
    kind        text NOT NULL,
    occurred_at timestamptz NOT NULL,
    session_id  uuid,
    payload     jsonb NOT NULL DEFAULT '{}'
);
CREATE TABLE subscriptions (
    id          int PRIMARY KEY,
    customer_id int NOT NULL REFERENCES customers,
    plan        text NOT NULL,
    started_on  date NOT NULL,
    ended_on    date,
    mrr         numeric(10, 2) NOT NULL
);

INSERT INTO customers VALUES
    (1, 'Ada', 'ada@example.com', 'GB', '2024-01-05 10:00+00', '{"tier": "gold", "ref": "ads"}', '{vip,beta}'),
    (2, 'Grace', 'grace@example.com', 'US', '2024-02-11 12:30+00', '{"tier": "silver"}', '{beta}'),
    (3, 'Edsger', 'edsger@example.nl', 'NL', '2024-03-20 08:15+00', '{}', '{}');
INSERT INTO products VALUES
    (1, 'Widget', 'tools', 9.99, true, '{"weight": 1.2, "colors": ["red", "blue"]}'),
    (2, 'Gadget', 'tools', 24.50, true, '{"weight": 0.4}'),
    (3, 'Manual', 'books', 5.00, false, '{}');
INSERT INTO orders VALUES
    (1, 1, 'shipped', '2024-04-01 09:00+00', '2024-04-02 15:00+00', 34.49, 'EUR', '{"coupon": "SPRING"}'),
    (2, 1, 'pending', '2024-04-15 18:20+00', NULL, 9.99, 'EUR', '{}'),
    (3, 2, 'shipped', '2024-05-03 11:45+00', '2024-05-06 10:00+00', 49.00, 'USD', '{"gift": true}'),
    (4, 3, 'cancelled', '2024-05-20 07:00+00', NULL, 5.00, 'EUR', '{}');
INSERT INTO order_items VALUES (1, 1, 1, 9.99), (1, 2, 1, 24.50), (2, 1, 1, 9.99), (3, 2, 2, 24.50), (4, 3, 1, 5.00);
INSERT INTO events VALUES
    (1, 1, 'login', '2024-04-01 08:55+00', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"ip": "192.0.2.1"}'),
    (2, 1, 'view', '2024-04-01 08:57+00', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"product": 1}'),
    (3, 2, 'login', '2024-05-03 11:40+00', NULL, '{}'),
    (4, NULL, 'view', '2024-05-04 09:00+00', NULL, '{"product": 2}');
INSERT INTO subscriptions VALUES
    (1, 1, 'pro', '2024-01-10', NULL, 49.00),
    (2, 2, 'basic', '2024-02-15', '2024-06-15', 9.00),
    (3, 3, 'basic', '2024-03-21', NULL, 9.00);
