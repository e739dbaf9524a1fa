-- The line of standbys for each lease (docs/ARCHITECTURE.md §5.8): a standby that campaigns
-- keeps a row here, with its priority, when it joined and until when it counts as alive; a
-- release, or a campaign that finds the lease free, gives the lease to the first live waiter
-- (higher priority first, then who joined first), with a new epoch and an expiry of the waiter's
-- own alive_ms, so that a grant to a waiter that died meanwhile is free again that soon.
--
-- leasehold_leases.granted: the row was given to its holder, which has not renewed it yet.
-- leasehold_leases.priority: the holder's priority in the line it came from.
-- leasehold_leases.preempted_at: when a waiter of higher priority last asked the holder to step
-- aside (a handoff request), so that the next such request waits its preempt_after.
--
-- A release of a binary before this one ignores the line: its campaigns win a free lease ahead
-- of the waiters and its releases give nothing away, which breaks no safety rule (a grant is an
-- ordinary epoch + 1 on a row that the waiter then renews), so the lease protocol's required
-- number stays where it was. The hosts' role needs the new table (examples/postgres/grants.sql).
ALTER TABLE leasehold_leases
    ADD COLUMN IF NOT EXISTS granted      BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS priority     BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS preempted_at TIMESTAMPTZ;

CREATE TABLE IF NOT EXISTS leasehold_waiters (
    name        TEXT NOT NULL,
    holder      TEXT NOT NULL,
    priority    BIGINT NOT NULL,
    joined_at   TIMESTAMPTZ NOT NULL,
    alive_until TIMESTAMPTZ NOT NULL,
    -- How long the waiter's place lasts after each campaign, and a grant to it.
    alive_ms    BIGINT NOT NULL CHECK (alive_ms > 0),
    -- The ttl it campaigns with, which a grant records as the lease's.
    ttl_ms      BIGINT NOT NULL CHECK (ttl_ms > 0),
    PRIMARY KEY (name, holder)
);
