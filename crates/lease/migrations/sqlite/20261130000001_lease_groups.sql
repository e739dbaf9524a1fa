-- Lease groups (DESIGN §1, issue 14): the replicas taking part in a group, each a row that its
-- holder keeps alive like a lease (heartbeated every renewal interval, expiring by the machine's
-- boot clock, like the leases). `joined_at_ms` is kept while the row stays live and reset when it
-- lapses, so that a member's age says how long it has been a member without a break.
CREATE TABLE IF NOT EXISTS leasehold_members (
    grp           TEXT    NOT NULL,
    member        TEXT    NOT NULL,
    joined_at_ms  INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    boot          TEXT    NOT NULL,
    PRIMARY KEY (grp, member)
) STRICT;
