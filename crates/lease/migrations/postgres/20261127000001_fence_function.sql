-- A plugin's sql grant needs no privilege on any leasehold_* table (DESIGN §1.3).
--
-- Until now a fenced grant's role needed SELECT, UPDATE on leasehold_leases to take the fence's
-- share lock, and with them it could rewrite any lease (`SET expires_at = now()` on another
-- replica's lease) from inside its own transaction. The fence and the database's identity now go
-- through two functions owned by the schema's owner and run with its rights (SECURITY DEFINER),
-- so a grant's role can be granted nothing on these tables, and the host refuses a grant whose
-- role holds anything on them.
--
-- The fence function takes the share lock on a lease row, and a share lock held while a
-- transaction runs on delays that lease's renewal. So only the host may call it: it must pass the
-- random key below, which only the host's role may read and which the host sends as a parameter
-- of its own last statement, never shown to the plugin.
CREATE TABLE IF NOT EXISTS leasehold_fence_key (
    one_row BOOLEAN PRIMARY KEY DEFAULT true CHECK (one_row),
    key     TEXT    NOT NULL
);
-- gen_random_uuid() draws from the server's strong random source: 244 bits in all.
INSERT INTO leasehold_fence_key (key)
    VALUES (replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''))
    ON CONFLICT (one_row) DO NOTHING;

-- Both functions name every table by the schema the lease table lives in (what `migrate` sees
-- now), and run with `pg_catalog, pg_temp` as their path: a caller's path, or a table or
-- operator of the same name it created, never takes part.
DO $migration$
DECLARE
    schema TEXT := (SELECT n.nspname FROM pg_catalog.pg_class c
                      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                     WHERE c.oid = pg_catalog.to_regclass('leasehold_leases'));
BEGIN
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION %1$I.leasehold_database_id() RETURNS TEXT
        LANGUAGE sql STABLE SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp
        AS $body$ SELECT d.id FROM %1$I.leasehold_database d $body$
    $fn$, schema);

    -- Locks the lease row FOR SHARE (until the caller's transaction ends) and returns whether
    -- it is held by `fence_holder` at `fence_epoch` and not expired by the database's clock.
    -- Waits for the row at most `wait_ms` (the host's own statements' budget).
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION %1$I.leasehold_fence(
            fence_lease TEXT, fence_holder TEXT, fence_epoch BIGINT, fence_key TEXT, wait_ms INTEGER)
        RETURNS BOOLEAN
        LANGUAGE plpgsql VOLATILE SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp
        AS $body$
        BEGIN
            IF fence_key IS NULL
               OR fence_key IS DISTINCT FROM (SELECT k.key FROM %1$I.leasehold_fence_key k) THEN
                RAISE EXCEPTION 'leasehold_fence may only be called by the leasehold host'
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
            PERFORM set_config('lock_timeout', greatest(wait_ms, 1)::text || 'ms', true);
            PERFORM 1 FROM %1$I.leasehold_leases l
             WHERE l.name = fence_lease AND l.holder = fence_holder AND l.epoch = fence_epoch
               AND l.expires_at > clock_timestamp()
               FOR SHARE;
            RETURN FOUND;
        END
        $body$
    $fn$, schema);
END
$migration$;
