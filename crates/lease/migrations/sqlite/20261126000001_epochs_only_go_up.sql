-- Epochs only go up (DESIGN §1): close the ways around the delete trigger of the first migration.
--
-- REPLACE (INSERT OR REPLACE, REPLACE INTO, UPDATE OR REPLACE, ON CONFLICT REPLACE) deletes the
-- conflicting row without firing DELETE triggers (unless recursive_triggers is on), then inserts
-- the new one, so `INSERT OR REPLACE … epoch 1` reset a lease. Every insert fires BEFORE INSERT,
-- REPLACE or not, so an insert for a name whose row already has this or a later epoch is refused.
-- The store's own campaign (`INSERT … ON CONFLICT DO UPDATE`) fires it too: its insert part
-- carries the existing epoch + 1, passes, and then takes the DO UPDATE path.
CREATE TRIGGER IF NOT EXISTS leasehold_leases_insert_forward BEFORE INSERT ON leasehold_leases
WHEN EXISTS (
    SELECT 1 FROM leasehold_leases
     WHERE name = NEW.name AND (NEW.epoch IS NULL OR epoch >= NEW.epoch)
)
BEGIN
    SELECT RAISE(ABORT, 'this lease row exists at this or a later epoch: an insert or REPLACE of it would reset its epoch; expire the lease instead');
END;

-- Renaming a row makes the old name vanish, exactly like deleting it (and UPDATE OR REPLACE onto
-- an existing name deletes that row without a trigger): its next campaign would start at epoch 1.
CREATE TRIGGER IF NOT EXISTS leasehold_leases_no_rename BEFORE UPDATE OF name ON leasehold_leases
WHEN NEW.name IS NOT OLD.name
BEGIN
    SELECT RAISE(ABORT, 'lease rows cannot be renamed: the old name would vanish and restart at epoch 1, as if deleted; expire the lease instead');
END;
