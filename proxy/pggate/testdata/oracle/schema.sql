-- The oracle's scratch database (TestOracle). Everything the generated
-- statements touch lives in public and private; the witnesses live in
-- schema oracle, which no profile may name.

CREATE SCHEMA oracle;
CREATE TABLE oracle.writes (tbl text, op text);
CREATE TABLE oracle.ddl (tag text);

-- Row and TRUNCATE triggers on every table record what the server changed.
-- SECURITY DEFINER: the restricted role the statement runs as has no
-- privilege on oracle.*.
CREATE FUNCTION oracle.log_write() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
	INSERT INTO oracle.writes VALUES (TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME, lower(TG_OP));
	RETURN NULL;
END $$;

-- DDL of any kind is recorded while the harness has marked a statement
-- under test (its own GRANTs are DDL too).
CREATE FUNCTION oracle.log_ddl() RETURNS event_trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
	IF current_setting('oracle.active', true) = 'on' THEN
		INSERT INTO oracle.ddl VALUES (tg_tag);
	END IF;
END $$;
CREATE EVENT TRIGGER oracle_ddl ON ddl_command_end EXECUTE FUNCTION oracle.log_ddl();

CREATE SCHEMA private;
CREATE TABLE public.t (id int PRIMARY KEY, a int, b text);
CREATE TABLE public.orders (id serial PRIMARY KEY, t_id int, amount numeric, note text);
CREATE TABLE public.x (id int, v text);
CREATE TABLE private.vault (k text, v text);
-- Tables the existing test corpora name.
CREATE TABLE public.users (id int PRIMARY KEY, name text, created_at timestamptz DEFAULT now());
CREATE TABLE public.items (id int PRIMARY KEY, note text);
CREATE TABLE public.a (id int, x int);
CREATE TABLE public.b (id int, x int);
CREATE TABLE public.secret (id int, s text);
CREATE VIEW public.v_t AS SELECT id, a FROM public.t;
CREATE SEQUENCE public.s;

INSERT INTO public.t SELECT i, i * 10, 'b' || i FROM generate_series(1, 5) i;
INSERT INTO public.orders (t_id, amount, note) VALUES (1, 9.5, 'one'), (2, 20, 'two'), (3, 1, NULL);
INSERT INTO public.x VALUES (1, 'x1'), (2, 'x2'), (3, NULL);
INSERT INTO private.vault VALUES ('k', 's3cr3t');
INSERT INTO public.users (id, name) VALUES (1, 'ada'), (2, 'grace');
INSERT INTO public.items VALUES (1, 'n');
INSERT INTO public.a VALUES (1, 1), (2, 2);
INSERT INTO public.b VALUES (1, 1);
INSERT INTO public.secret VALUES (1, 's');

-- User functions: PL/pgSQL so that the planner never inlines them and
-- track_functions counts every call.
CREATE FUNCTION public.app_fmt(int) RETURNS text LANGUAGE plpgsql AS $$ BEGIN RETURN 'n' || $1; END $$;
CREATE FUNCTION public.app_purge(int, int) RETURNS int LANGUAGE plpgsql AS $$ BEGIN DELETE FROM public.x; RETURN 1; END $$;
CREATE OPERATOR public.#!# (LEFTARG = int, RIGHTARG = int, PROCEDURE = public.app_purge);
CREATE FUNCTION public.lower(int) RETURNS text LANGUAGE plpgsql AS $$ BEGIN RETURN 'shadow'; END $$;
CREATE FUNCTION public.app_cents(numeric) RETURNS int LANGUAGE plpgsql AS $$ BEGIN RETURN ($1 * 100)::int; END $$;
CREATE TYPE public.cents AS (v int);
CREATE FUNCTION public.to_cents(int) RETURNS public.cents LANGUAGE plpgsql AS $$ BEGIN RETURN ROW($1)::public.cents; END $$;
CREATE CAST (int AS public.cents) WITH FUNCTION public.to_cents(int);

-- A domain whose CHECK calls a user function: a cast to it runs the
-- function.
CREATE FUNCTION public.app_check(text) RETURNS bool LANGUAGE plpgsql AS $$ BEGIN RETURN $1 <> 'bad'; END $$;
CREATE DOMAIN public.checked_text AS text CHECK (public.app_check(VALUE));

-- User functions reached with no call in the text: a domain CHECK inside
-- a composite type, a view's query, a row-level security policy (which
-- holds for the restricted role the statements run as).
CREATE TYPE public.boxed AS (x public.checked_text);
CREATE VIEW public.v_fmt AS SELECT id, public.app_fmt(id) AS f FROM public.t;
CREATE TABLE public.guarded (id int, v text);
INSERT INTO public.guarded VALUES (1, 'g1'), (2, 'bad');
ALTER TABLE public.guarded ENABLE ROW LEVEL SECURITY;
CREATE POLICY guarded_ok ON public.guarded USING (public.app_check(v));

-- Functions that act as their owner, for TestOracleWitnesses: each does
-- what one witness must see although the caller's facts do not say it.
CREATE FUNCTION public.app_definer_purge() RETURNS int LANGUAGE plpgsql SECURITY DEFINER AS $$ BEGIN DELETE FROM public.x WHERE id = 1; RETURN 1; END $$;
CREATE FUNCTION public.app_definer_fmt() RETURNS text LANGUAGE plpgsql SECURITY DEFINER AS $$ BEGIN RETURN public.app_fmt(1); END $$;
CREATE FUNCTION public.app_definer_ddl() RETURNS int LANGUAGE plpgsql SECURITY DEFINER AS $$ BEGIN CREATE TABLE public.made_by_fn (i int); RETURN 1; END $$;

-- A function runs only where the facts say: EXECUTE is granted per
-- statement.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA public FROM PUBLIC;

DO $$
DECLARE r record;
BEGIN
	FOR r IN SELECT schemaname, tablename FROM pg_tables WHERE schemaname IN ('public', 'private') LOOP
		EXECUTE format('CREATE TRIGGER oracle_w AFTER INSERT OR UPDATE OR DELETE ON %I.%I FOR EACH ROW EXECUTE FUNCTION oracle.log_write()', r.schemaname, r.tablename);
		EXECUTE format('CREATE TRIGGER oracle_tr AFTER TRUNCATE ON %I.%I FOR EACH STATEMENT EXECUTE FUNCTION oracle.log_write()', r.schemaname, r.tablename);
	END LOOP;
END $$;

