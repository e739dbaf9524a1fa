-- The terms of each lease as the cluster recorded them, for people: `/status`, the page's
-- timeline and "when and why did the lease last change hands". A campaign that wins a lease opens
-- a term; the holder's release, an operator's forced release, or the campaign that takes the lease
-- over after it expired closes it, saying which. The protocol never reads this table: fencing
-- rests on the epochs of leasehold_leases alone.
--
-- Times are the machine's wall clock in milliseconds since the Unix epoch, unlike the lease rows'
-- boot clock: they are only shown, never judged, and a history should read the same after a reboot.
CREATE TABLE IF NOT EXISTS leasehold_terms (
    name          TEXT    NOT NULL,
    epoch         INTEGER NOT NULL,
    holder        TEXT    NOT NULL,
    started_at_ms INTEGER NOT NULL,
    -- Both NULL while the term is open.
    ended_at_ms   INTEGER,
    ended_by      TEXT CHECK (ended_by IN ('released', 'expired', 'forced')),
    PRIMARY KEY (name, epoch),
    CHECK ((ended_at_ms IS NULL) = (ended_by IS NULL))
) STRICT;
