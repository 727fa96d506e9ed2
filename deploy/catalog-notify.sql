-- egressd's catalog change trigger (optional). Install it as a superuser
-- (event triggers need one) in every database the Postgres gate serves:
--
--     psql -v ON_ERROR_STOP=1 -d app -f catalog-notify.sql
--
-- Every DDL statement then notifies the channel egressd_catalog when it
-- commits; the gate keeps one LISTEN session per database (one upstream
-- connection more, with the gate's credentials) and reads the database's
-- catalog again on each notification, so a function, operator, cast, view
-- or policy created behind its back is seen at once. Without the trigger
-- the gate reads the catalog again before any decision whose snapshot is
-- older than 2 seconds. Re-running this file is harmless; to remove it:
--
--     DROP SCHEMA egressd CASCADE;
CREATE SCHEMA IF NOT EXISTS egressd;
REVOKE ALL ON SCHEMA egressd FROM PUBLIC;

CREATE OR REPLACE FUNCTION egressd.catalog_notify() RETURNS event_trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_catalog.pg_notify('egressd_catalog', pg_catalog.current_database());
END
$$;

DROP EVENT TRIGGER IF EXISTS egressd_catalog_notify;
CREATE EVENT TRIGGER egressd_catalog_notify ON ddl_command_end
  EXECUTE FUNCTION egressd.catalog_notify();
DROP EVENT TRIGGER IF EXISTS egressd_catalog_notify_drop;
CREATE EVENT TRIGGER egressd_catalog_notify_drop ON sql_drop
  EXECUTE FUNCTION egressd.catalog_notify();
