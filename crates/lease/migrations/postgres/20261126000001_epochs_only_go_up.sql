-- Epochs only go up (DESIGN §1): close the two ways around the row guard of the first migration.
--
-- TRUNCATE removes rows without firing row-level DELETE triggers, so the owner (the host's role
-- when it migrates itself) could empty the table and restart every epoch at 1. A statement-level
-- BEFORE TRUNCATE trigger refuses it.
--
-- Renaming a row (`UPDATE … SET name`) makes the old name vanish, exactly like deleting it: its
-- next campaign inserts a new row at epoch 1. The guard now refuses a changed name too.
CREATE OR REPLACE FUNCTION leasehold_leases_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        RAISE EXCEPTION 'table % cannot be truncated: every lease would restart at epoch 1 and reuse fencing tokens; expire leases instead (leasehold leases release --force NAME)', TG_TABLE_NAME
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'lease % cannot be deleted: that would reset its epoch; expire it instead', OLD.name
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF NEW.name IS DISTINCT FROM OLD.name THEN
        RAISE EXCEPTION 'lease % cannot be renamed to %: lease % would vanish and restart at epoch 1, as if deleted; expire it instead', OLD.name, NEW.name, OLD.name
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF NEW.epoch < OLD.epoch THEN
        RAISE EXCEPTION 'lease % epoch cannot go back from % to %', OLD.name, OLD.epoch, NEW.epoch
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE TRIGGER leasehold_leases_no_truncate
    BEFORE TRUNCATE ON leasehold_leases
    FOR EACH STATEMENT EXECUTE FUNCTION leasehold_leases_guard();
