-- Lease groups (DESIGN §1, issue 14): the replicas taking part in a group, each a row that its
-- holder keeps alive like a lease (heartbeated every renewal interval, expiring by the database's
-- clock). `joined_at` is kept while the row stays live and reset when it lapses, so that a
-- member's age says how long it has been a member without a break.
CREATE TABLE IF NOT EXISTS leasehold_members (
    grp        TEXT        NOT NULL,
    member     TEXT        NOT NULL,
    joined_at  TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (grp, member)
);
