-- A promoted standby must not hand out a lease or an epoch twice (DESIGN §1.6b).
--
-- With asynchronous replication a promoted standby can miss the last committed renewals and
-- campaigns of the old primary: a holder may believe in an expiry the new primary never saw, and
-- the new primary may issue again an epoch that was already issued. This table records which
-- incarnation of the database the lease rows were last written in: the cluster's system
-- identifier and the WAL timeline (a promotion, or a point-in-time recovery, starts a new one). A
-- campaign that finds another incarnation records the new one, with the database's time it was
-- first seen and an epoch floor above every epoch in the table; campaigns then succeed only once
-- a full ttl has passed since that time (every holder that trusted a lost renewal has stopped by
-- then), and every epoch they issue is at least the floor (greater than any the lost history can
-- have issued, unless it issued 2^32 epochs of one lease).
--
-- A restart of the same server keeps its incarnation: with the durable commits the host asks for
-- (synchronous_commit on its sessions) a restart loses no committed renewal.
CREATE TABLE IF NOT EXISTS leasehold_incarnation (
    one_row           BOOLEAN     PRIMARY KEY DEFAULT true CHECK (one_row),
    system_identifier BIGINT      NOT NULL,
    timeline          BIGINT      NOT NULL,
    -- When a host first saw this incarnation, by the database's clock.
    seen_at           TIMESTAMPTZ NOT NULL,
    -- Every epoch issued in this incarnation is at least this.
    epoch_floor       BIGINT      NOT NULL CHECK (epoch_floor >= 0)
);

-- The incarnation the schema is created in needs no hold-off: nothing was lost before it.
INSERT INTO leasehold_incarnation (system_identifier, timeline, seen_at, epoch_floor)
    SELECT s.system_identifier,
           ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint,
           '-infinity', 0
      FROM pg_control_system() s
    ON CONFLICT (one_row) DO NOTHING;

-- Without its row no campaign could ever succeed, and a lowered floor would let epochs repeat.
CREATE OR REPLACE FUNCTION leasehold_incarnation_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'TRUNCATE') THEN
        RAISE EXCEPTION 'the row of % cannot be removed: campaigns need it to survive a failover', TG_TABLE_NAME
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF NEW.epoch_floor < OLD.epoch_floor THEN
        RAISE EXCEPTION 'the epoch floor cannot go back from % to %', OLD.epoch_floor, NEW.epoch_floor
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE TRIGGER leasehold_incarnation_guard
    BEFORE UPDATE OR DELETE ON leasehold_incarnation
    FOR EACH ROW EXECUTE FUNCTION leasehold_incarnation_guard();
CREATE OR REPLACE TRIGGER leasehold_incarnation_no_truncate
    BEFORE TRUNCATE ON leasehold_incarnation
    FOR EACH STATEMENT EXECUTE FUNCTION leasehold_incarnation_guard();
