-- The line of standbys for each lease (docs/ARCHITECTURE.md §5.8): a standby that campaigns
-- keeps a row here, with its priority, when it joined and until when it counts as alive, by the
-- machine's boot clock of `boot` (a row of another boot has lapsed); a release, or a campaign
-- that finds the lease free, gives the lease to the first live waiter (higher priority first,
-- then who joined first), with the next epoch and an expiry of the waiter's own alive_ms, so that
-- a grant to a waiter that died meanwhile is free again that soon.
--
-- leasehold_leases.granted: the row was given to its holder, which has not renewed it yet.
-- leasehold_leases.priority: the holder's priority in the line it came from.
-- leasehold_leases.preempted_at_ms: when (boot clock of the row's boot) a waiter of higher
-- priority last asked the holder to step aside, so that the next such request waits.
--
-- A release of a binary before this one ignores the line, which breaks no safety rule: the
-- lease protocol's required number stays where it was.
ALTER TABLE leasehold_leases ADD COLUMN granted INTEGER NOT NULL DEFAULT 0;
ALTER TABLE leasehold_leases ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE leasehold_leases ADD COLUMN preempted_at_ms INTEGER;

CREATE TABLE IF NOT EXISTS leasehold_waiters (
    name           TEXT    NOT NULL,
    holder         TEXT    NOT NULL,
    priority       INTEGER NOT NULL,
    joined_at_ms   INTEGER NOT NULL,
    alive_until_ms INTEGER NOT NULL,
    alive_ms       INTEGER NOT NULL CHECK (alive_ms > 0),
    ttl_ms         INTEGER NOT NULL CHECK (ttl_ms > 0),
    boot           TEXT    NOT NULL,
    PRIMARY KEY (name, holder)
) STRICT;
