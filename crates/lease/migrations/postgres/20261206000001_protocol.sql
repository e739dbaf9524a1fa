-- The lease protocol (host/src/lease/protocol.rs): the lowest protocol that may take a lease in
-- this database, the first release that speaks it, and the rule that made it necessary. A
-- release that adds a rule an older binary would skip raises `required` in its migration; every
-- binary reads it when it opens the store (through leasehold_protocol(), which needs no grant)
-- and refuses to run under a higher one.
CREATE TABLE IF NOT EXISTS leasehold_protocol (
    only_row BOOLEAN PRIMARY KEY DEFAULT true CHECK (only_row),
    required BIGINT NOT NULL CHECK (required >= 1),
    since TEXT NOT NULL,
    why TEXT NOT NULL
);
INSERT INTO leasehold_protocol (required, since, why)
VALUES (1, '0.2.0', 'epochs only go up, expiry by the database''s clock, the failover hold-off and epoch floor')
ON CONFLICT (only_row) DO NOTHING;

-- The database holds every binary to it, those from before this check included: each host
-- connection announces its protocol in the `leasehold.protocol` setting (a binary that announces
-- none speaks protocol 1), and a statement that may take a lease (an insert, or an update of a
-- lease's epoch or holder) is refused when the announced protocol is below `required`. Once per
-- statement, and never for renewals or releases: a replica that holds a lease when the protocol
-- is raised keeps it until its term ends, and cannot take one again.
--
-- Both functions name the table by the schema the lease table lives in and run with
-- `pg_catalog, pg_temp` as their path, as the fence does: a caller's path, or a table or
-- operator of the same name it created, never takes part.
DO $migration$
DECLARE
    schema TEXT := (SELECT n.nspname FROM pg_catalog.pg_class c
                      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                     WHERE c.oid = pg_catalog.to_regclass('leasehold_leases'));
BEGIN
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION %1$I.leasehold_protocol()
        RETURNS TABLE (required BIGINT, since TEXT, why TEXT)
        LANGUAGE sql STABLE SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp
        AS $body$ SELECT p.required, p.since, p.why FROM %1$I.leasehold_protocol p $body$
    $fn$, schema);

    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION %1$I.leasehold_protocol_guard() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp
        AS $body$
        DECLARE
            announced BIGINT := coalesce(
                nullif(current_setting('leasehold.protocol', true), '')::bigint, 1);
            req RECORD;
        BEGIN
            SELECT p.required, p.since, p.why INTO req FROM %1$I.leasehold_protocol p;
            IF FOUND AND req.required > announced THEN
                RAISE EXCEPTION USING
                    ERRCODE = 'LH002',
                    MESSAGE = format(
                        'this database needs leasehold ≥ %%s (protocol %%s: %%s); this replica speaks protocol %%s',
                        req.since, req.required, req.why, announced),
                    HINT = 'upgrade this replica (README, Operations, Upgrades and rollbacks)';
            END IF;
            RETURN NULL;
        END
        $body$
    $fn$, schema);
END
$migration$;

CREATE OR REPLACE TRIGGER leasehold_protocol_guard
    BEFORE INSERT OR UPDATE OF epoch, holder ON leasehold_leases
    FOR EACH STATEMENT EXECUTE FUNCTION leasehold_protocol_guard();
