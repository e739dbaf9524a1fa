-- The lease table (DESIGN §1). Times are written with the database's clock only.
CREATE TABLE IF NOT EXISTS leasehold_leases (
    name        TEXT        PRIMARY KEY,
    holder      TEXT        NOT NULL,
    epoch       BIGINT      NOT NULL CHECK (epoch > 0),
    acquired_at TIMESTAMPTZ NOT NULL,
    renewed_at  TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL,
    ttl_ms      BIGINT      NOT NULL CHECK (ttl_ms > 0)
);

-- Rows are never deleted and epochs never go back: either would let a fencing token be reused.
CREATE OR REPLACE FUNCTION leasehold_leases_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'lease % cannot be deleted: that would reset its epoch; expire it instead', OLD.name;
    END IF;
    IF NEW.epoch < OLD.epoch THEN
        RAISE EXCEPTION 'lease % epoch cannot go back from % to %', OLD.name, OLD.epoch, NEW.epoch;
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE TRIGGER leasehold_leases_guard
    BEFORE UPDATE OR DELETE ON leasehold_leases
    FOR EACH ROW EXECUTE FUNCTION leasehold_leases_guard();
