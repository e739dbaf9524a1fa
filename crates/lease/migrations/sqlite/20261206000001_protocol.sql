-- The lease protocol (host/src/lease/protocol.rs): the lowest protocol that may take a lease in
-- this file, the first release that speaks it, and the rule that made it necessary. A release
-- that adds a rule an older binary would skip raises `required` in its migration; every binary
-- reads the row when it opens the file and in each campaign's transaction, and refuses to take a
-- lease under a higher one.
CREATE TABLE IF NOT EXISTS leasehold_protocol (
    only_row INTEGER PRIMARY KEY CHECK (only_row = 1),
    required INTEGER NOT NULL CHECK (required >= 1),
    since TEXT NOT NULL,
    why TEXT NOT NULL
);
INSERT OR IGNORE INTO leasehold_protocol (only_row, required, since, why)
VALUES (1, 1, '0.2.0', 'epochs only go up, expiry by the machine''s boot clock, handoff reservations');
