-- The lease table (DESIGN §1). Times are integer milliseconds of the database's clock.
CREATE TABLE IF NOT EXISTS leasehold_leases (
    name           TEXT    PRIMARY KEY NOT NULL,
    holder         TEXT    NOT NULL,
    epoch          INTEGER NOT NULL CHECK (epoch > 0),
    acquired_at_ms INTEGER NOT NULL,
    renewed_at_ms  INTEGER NOT NULL,
    expires_at_ms  INTEGER NOT NULL,
    ttl_ms         INTEGER NOT NULL CHECK (ttl_ms > 0)
) STRICT;

-- Rows are never deleted and epochs never go back: either would let a fencing token be reused.
CREATE TRIGGER IF NOT EXISTS leasehold_leases_no_delete BEFORE DELETE ON leasehold_leases
BEGIN
    SELECT RAISE(ABORT, 'lease rows cannot be deleted: that would reset the epoch; expire them instead');
END;

CREATE TRIGGER IF NOT EXISTS leasehold_leases_epoch_forward BEFORE UPDATE OF epoch ON leasehold_leases
WHEN NEW.epoch < OLD.epoch
BEGIN
    SELECT RAISE(ABORT, 'a lease epoch cannot go back');
END;
