-- Least-privilege roles for leasehold on PostgreSQL. Run as a superuser (or the database's owner)
-- in the lease database, before the first start:
--
--   leasehold_owner  owns the schema and applies migrations: `leasehold migrate` as this role;
--   leasehold        the role every host runs as: reads and writes the leasehold tables, no DDL.
--
-- Then `leasehold migrate --database-url postgres://leasehold_owner@HOST/DB`, then grants.sql.
-- Set passwords afterwards (ALTER ROLE … PASSWORD, or your platform's authentication); keep the
-- host's URL in LEASEHOLD_DATABASE_URL, with `?sslmode=verify-full` across a network.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'leasehold_owner') THEN
        CREATE ROLE leasehold_owner LOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'leasehold') THEN
        CREATE ROLE leasehold LOGIN;
    END IF;
END $$;

-- Since PostgreSQL 15 only the schema's owner may create in `public` unless granted.
GRANT USAGE, CREATE ON SCHEMA public TO leasehold_owner;
GRANT USAGE ON SCHEMA public TO leasehold;
