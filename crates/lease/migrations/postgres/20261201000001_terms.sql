-- The terms of each lease as the cluster recorded them, for people: `/status`, the page's
-- timeline and "when and why did the lease last change hands". A campaign that wins a lease opens
-- a term; the holder's release, an operator's forced release, or the campaign that takes the lease
-- over after it expired closes it, saying which. The protocol never reads this table: a term lost
-- (a failover, a pruned row) only shortens the history, and fencing still rests on the epochs of
-- leasehold_leases alone.
CREATE TABLE IF NOT EXISTS leasehold_terms (
    name       TEXT        NOT NULL,
    epoch      BIGINT      NOT NULL,
    holder     TEXT        NOT NULL,
    -- By the database's clock, like every time the host writes.
    started_at TIMESTAMPTZ NOT NULL,
    -- Both NULL while the term is open.
    ended_at   TIMESTAMPTZ,
    ended_by   TEXT CHECK (ended_by IN ('released', 'expired', 'forced')),
    PRIMARY KEY (name, epoch),
    CHECK ((ended_at IS NULL) = (ended_by IS NULL))
);
