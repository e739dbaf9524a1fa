-- Graceful handoff (`leasehold leases handoff NAME [--to REPLICA]`): an operator asks the holder
-- of a lease to release it in order now, instead of expiring it under a holder that still runs.
--
-- handoff_epoch, handoff_to: the request. It concerns the term at handoff_epoch only (a later
-- holder is not asked); the holder learns of it from its next renewal, or at once from the
-- notification on leasehold_handoff. handoff_to names the replica to hand over to, if any.
-- reserved_for, reserved_until: set by the holder's release when the request named a replica:
-- until reserved_until (the release's time plus the lease's ttl) only that replica's campaigns
-- win the lease, then anyone's. A campaign that wins clears all four.
--
-- Table-level privileges cover new columns: the hosts' role needs no new grant.
ALTER TABLE leasehold_leases
    ADD COLUMN IF NOT EXISTS handoff_epoch  BIGINT,
    ADD COLUMN IF NOT EXISTS handoff_to     TEXT,
    ADD COLUMN IF NOT EXISTS reserved_for   TEXT,
    ADD COLUMN IF NOT EXISTS reserved_until TIMESTAMPTZ;
