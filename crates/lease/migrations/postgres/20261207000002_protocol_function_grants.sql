-- Who may call the schema's functions of the owner that need no grant to read.
--
-- leasehold_protocol() is read by hosts as they start, and by nobody else: EXECUTE goes to the
-- roles that may campaign now (those granted INSERT on leasehold_leases, as
-- examples/postgres/grants.sql grants the hosts' role), and is revoked from PUBLIC. A hosts' role
-- created later gets it from grants.sql; the owner and superusers need no grant.
--
-- leasehold_database_id() stays callable by every role: each plugin's sql grant on the lease
-- database calls it to tell that it reaches this database, and those roles are the operator's,
-- hold nothing of leasehold's by design, and are created after any migration. It returns a random
-- id and nothing of any lease.
DO $migration$
DECLARE
    schema TEXT := (SELECT n.nspname FROM pg_catalog.pg_class c
                      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                     WHERE c.oid = pg_catalog.to_regclass('leasehold_leases'));
    campaigner TEXT;
BEGIN
    FOR campaigner IN
        SELECT DISTINCT r.rolname::text
          FROM pg_catalog.pg_class c,
               LATERAL pg_catalog.aclexplode(c.relacl) AS a
          JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
         WHERE c.oid = pg_catalog.to_regclass('leasehold_leases')
           AND a.privilege_type = 'INSERT'
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %I.leasehold_protocol() TO %I', schema, campaigner);
    END LOOP;
    EXECUTE format('REVOKE ALL ON FUNCTION %I.leasehold_protocol() FROM PUBLIC', schema);
END
$migration$;
