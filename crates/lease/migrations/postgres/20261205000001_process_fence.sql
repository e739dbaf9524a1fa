-- A fence for a process's own SQL (`leasehold exec`, README "Any process under a lease").
--
-- A worker started under a lease gets LEASEHOLD_LEASE and LEASEHOLD_EPOCH. Its own transaction
-- calls `SELECT leasehold_fence(lease, epoch)` before COMMIT, and then commits only if that epoch
-- still holds the lease by the database's clock; otherwise COMMIT fails (SQLSTATE LH001) and
-- nothing of the transaction lands.
--
-- What a role granted EXECUTE on it can and cannot do:
-- - The call only checks (without a lock) and records the request; the check that decides runs
--   at COMMIT, as a deferred constraint trigger, so no statement of the caller's runs while it
--   holds the lease row.
-- - That check takes the row FOR KEY SHARE until the commit is done. Renewals and releases
--   (FOR NO KEY UPDATE: they never change `name`, `epoch` or `holder`) do not wait for it, ever.
--   A takeover sets a new epoch and holder and does wait for it: the index below makes them key
--   columns, so a takeover's update needs FOR UPDATE. That is the fence: a write of epoch N
--   commits before the term of N+1 begins, or not at all.
-- - A caller that forces the check early (`SET CONSTRAINTS ALL IMMEDIATE`) and keeps its
--   transaction open can delay a takeover of that one lease while it stays open; it cannot delay a
--   renewal or change a lease row.
-- - It needs no privilege on any leasehold_* table; EXECUTE is revoked from PUBLIC, so an operator
--   grants it to the workers' roles by name.

-- Unique because name is; the index exists for its lock strength only. `holder` is in it so that
-- two replicas inserting the same new lease at once differ in it: only the primary key then
-- decides between them (the campaign's ON CONFLICT), where (name, epoch) alone would make the
-- loser fail on this index instead.
CREATE UNIQUE INDEX IF NOT EXISTS leasehold_leases_name_epoch_holder
    ON leasehold_leases (name, epoch, holder);

-- One row per fence call, alive only inside the caller's transaction: the check at COMMIT removes
-- the transaction's rows, and a rollback never leaves any. Unlogged: nothing here outlives a
-- transaction, so nothing needs to survive a crash.
CREATE UNLOGGED TABLE IF NOT EXISTS leasehold_fence_checks (
    lease    TEXT   NOT NULL,
    epoch    BIGINT NOT NULL,
    -- The calling transaction, so its check can remove its own rows.
    xact     xid8   NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX IF NOT EXISTS leasehold_fence_checks_xact ON leasehold_fence_checks (xact);

-- Every name is qualified by the schema the lease table lives in, and the functions run with
-- `pg_catalog, pg_temp` as their path, as the host's own fence does.
DO $migration$
DECLARE
    schema TEXT := (SELECT n.nspname FROM pg_catalog.pg_class c
                      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                     WHERE c.oid = pg_catalog.to_regclass('leasehold_leases'));
BEGIN
    -- The check itself: raises LH001 unless `lease` is held at `epoch` and not expired. With
    -- `take_lock` it takes the row FOR KEY SHARE (waiting at most lock_timeout for a takeover in
    -- flight).
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION %1$I.leasehold_fence_check(lease TEXT, epoch BIGINT, take_lock BOOLEAN)
        RETURNS VOID
        LANGUAGE plpgsql VOLATILE SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp
        AS $body$
        #variable_conflict use_variable
        DECLARE
            found_epoch BIGINT;
            live BOOLEAN;
        BEGIN
            IF take_lock THEN
                SELECT l.epoch, l.expires_at > clock_timestamp() INTO found_epoch, live
                  FROM %1$I.leasehold_leases l WHERE l.name = lease FOR KEY SHARE;
            ELSE
                SELECT l.epoch, l.expires_at > clock_timestamp() INTO found_epoch, live
                  FROM %1$I.leasehold_leases l WHERE l.name = lease;
            END IF;
            IF found_epoch IS NULL THEN
                RAISE EXCEPTION 'leasehold fence: lease "%%" has never been held, so epoch %% cannot hold it', lease, epoch
                    USING ERRCODE = 'LH001';
            ELSIF found_epoch <> epoch THEN
                RAISE EXCEPTION 'leasehold fence: lease "%%" is no longer held at epoch %%: it is at epoch %% now', lease, epoch, found_epoch
                    USING ERRCODE = 'LH001';
            ELSIF NOT live THEN
                RAISE EXCEPTION 'leasehold fence: lease "%%" at epoch %% has expired or been released', lease, epoch
                    USING ERRCODE = 'LH001';
            END IF;
        END
        $body$
    $fn$, schema);

    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION %1$I.leasehold_fence(lease TEXT, epoch BIGINT) RETURNS VOID
        LANGUAGE plpgsql VOLATILE SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp
        AS $body$
        #variable_conflict use_variable
        BEGIN
            -- Early: a stale worker learns at once, before it does more work in vain.
            PERFORM %1$I.leasehold_fence_check(lease, epoch, false);
            INSERT INTO %1$I.leasehold_fence_checks (lease, epoch) VALUES (lease, epoch);
        END
        $body$
    $fn$, schema);

    -- The trigger's wait for the row is bounded: only a takeover in flight holds it that strongly,
    -- for one statement. A fenced commit never waits longer than this.
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION %1$I.leasehold_fence_at_commit() RETURNS trigger
        LANGUAGE plpgsql VOLATILE SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp
        SET lock_timeout = '2s'
        AS $body$
        BEGIN
            PERFORM %1$I.leasehold_fence_check(NEW.lease, NEW.epoch, true);
            DELETE FROM %1$I.leasehold_fence_checks c WHERE c.xact = pg_current_xact_id();
            RETURN NULL;
        END
        $body$
    $fn$, schema);

    EXECUTE format($fn$
        CREATE CONSTRAINT TRIGGER leasehold_fence_at_commit
            AFTER INSERT ON %1$I.leasehold_fence_checks
            DEFERRABLE INITIALLY DEFERRED
            FOR EACH ROW EXECUTE FUNCTION %1$I.leasehold_fence_at_commit()
    $fn$, schema);

    EXECUTE format('REVOKE ALL ON FUNCTION %1$I.leasehold_fence(TEXT, BIGINT) FROM PUBLIC', schema);
    EXECUTE format('REVOKE ALL ON FUNCTION %1$I.leasehold_fence_check(TEXT, BIGINT, BOOLEAN) FROM PUBLIC', schema);
    EXECUTE format('REVOKE ALL ON FUNCTION %1$I.leasehold_fence_at_commit() FROM PUBLIC', schema);
END
$migration$;
