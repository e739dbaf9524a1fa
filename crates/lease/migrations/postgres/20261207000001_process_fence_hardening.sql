-- The process fence (20261205000001), hardened against its callers. Only functions are replaced
-- and added: their signatures, the table and the trigger stay, so the release before this one
-- runs unchanged beside it.
--
-- - The refusal says only that this epoch does not hold the lease: a role granted EXECUTE learnt
--   from the old words every lease's current epoch, and whether a name had ever been held.
-- - A call inside a subtransaction (a savepoint: Django's nested atomic(), SQLAlchemy's
--   begin_nested()) is refused: ROLLBACK TO SAVEPOINT would remove the check row, and the
--   transaction would then commit with no check at all. A subtransaction that writes has an xid
--   of its own, so the check row's xmin is the top-level transaction's only outside of one.
-- - The call touches a temporary table, which PostgreSQL refuses to PREPARE: a prepared
--   transaction would keep the row's FOR KEY SHARE lock, and with it every takeover of that
--   lease, after its session has gone. Measured on a fenced commit (PostgreSQL 15, loopback):
--   a notification, the other thing PREPARE refuses, cost nothing alone but a third of the
--   throughput of four sessions committing at once (every notifying commit of the server takes
--   one lock, the hosts' releases' included); the temporary table costs about 0.8 ms once per
--   session and a tenth of that throughput.
-- - `(text, integer)` and `(text, smallint)` overloads, so that the documented call with a plain
--   literal (`leasehold_fence('orders', 7)`), or psycopg's small ints, match a function of ours
--   exactly: otherwise an overload of those types that a role with CREATE on a schema of the
--   caller's path adds is the better match, and runs instead of the fence.
DO $migration$
DECLARE
    schema TEXT := (SELECT n.nspname FROM pg_catalog.pg_class c
                      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                     WHERE c.oid = pg_catalog.to_regclass('leasehold_leases'));
BEGIN
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION %1$I.leasehold_fence_check(lease TEXT, epoch BIGINT, take_lock BOOLEAN)
        RETURNS VOID
        LANGUAGE plpgsql VOLATILE SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp
        AS $body$
        #variable_conflict use_variable
        DECLARE
            holds BOOLEAN;
        BEGIN
            IF take_lock THEN
                SELECT l.epoch = epoch AND l.expires_at > clock_timestamp() INTO holds
                  FROM %1$I.leasehold_leases l WHERE l.name = lease FOR KEY SHARE;
            ELSE
                SELECT l.epoch = epoch AND l.expires_at > clock_timestamp() INTO holds
                  FROM %1$I.leasehold_leases l WHERE l.name = lease;
            END IF;
            -- One refusal for a lease never held, another epoch and an expired one alike.
            IF holds IS NOT TRUE THEN
                RAISE EXCEPTION 'leasehold fence: epoch %% does not hold lease "%%"', epoch, lease
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
        DECLARE
            row_xmin TEXT;
        BEGIN
            -- Early: a stale worker learns at once, before it does more work in vain.
            PERFORM %1$I.leasehold_fence_check(lease, epoch, false);
            INSERT INTO %1$I.leasehold_fence_checks AS c (lease, epoch) VALUES (lease, epoch)
                RETURNING c.xmin::text INTO row_xmin;
            -- xmin is the 32-bit xid of the (sub)transaction that wrote the row.
            IF row_xmin <> (pg_current_xact_id()::text::numeric %% 4294967296)::text THEN
                RAISE EXCEPTION 'leasehold fence: called inside a subtransaction (a savepoint), whose rollback would drop the check'
                    USING ERRCODE = 'LH003',
                          HINT = 'call leasehold_fence() in the outermost transaction, outside any savepoint (Django: outside nested atomic(); SQLAlchemy: outside begin_nested())';
            END IF;
            -- Makes PREPARE TRANSACTION fail (see the top of this file): a table of the owner's
            -- in the session's temporary schema, made by its first fenced transaction and then
            -- only read. Only one of the owner's counts: the caller may make a relation of that
            -- name first, which then fails this call and nothing else. Without the right to
            -- make temporary tables, a notification does it, at a lock all notifying commits
            -- of the server share.
            IF has_database_privilege(current_database(), 'TEMPORARY') THEN
                IF NOT EXISTS (
                    SELECT FROM pg_class t
                     WHERE t.relnamespace = pg_my_temp_schema()
                       AND t.relname = 'leasehold_fence_no_prepare'
                       AND t.relkind = 'r'
                       AND pg_get_userbyid(t.relowner) = current_user) THEN
                    CREATE TEMPORARY TABLE pg_temp.leasehold_fence_no_prepare ();
                END IF;
                PERFORM FROM pg_temp.leasehold_fence_no_prepare LIMIT 0;
            ELSE
                PERFORM pg_notify('leasehold_fence', '');
            END IF;
        END
        $body$
    $fn$, schema);

    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION %1$I.leasehold_fence(lease TEXT, epoch INTEGER) RETURNS VOID
        LANGUAGE sql VOLATILE SECURITY INVOKER
        SET search_path = pg_catalog, pg_temp
        AS $body$ SELECT %1$I.leasehold_fence(lease, epoch::bigint) $body$
    $fn$, schema);

    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION %1$I.leasehold_fence(lease TEXT, epoch SMALLINT) RETURNS VOID
        LANGUAGE sql VOLATILE SECURITY INVOKER
        SET search_path = pg_catalog, pg_temp
        AS $body$ SELECT %1$I.leasehold_fence(lease, epoch::bigint) $body$
    $fn$, schema);

    -- The narrower overloads run with the caller's rights (the default EXECUTE for PUBLIC is
    -- kept): each calls the fence itself, so it works for exactly those granted EXECUTE on
    -- leasehold_fence(text, bigint), and gives no one else anything.
END
$migration$;
