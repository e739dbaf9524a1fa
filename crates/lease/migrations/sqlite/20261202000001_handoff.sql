-- Graceful handoff (`leasehold leases handoff NAME [--to REPLICA]`): an operator asks the holder
-- of a lease to release it in order now, instead of expiring it under a holder that still runs.
--
-- handoff_epoch, handoff_to: the request. It concerns the term at handoff_epoch only (a later
-- holder is not asked); the holder learns of it from its next renewal, or at once from the event
-- file beside this one. handoff_to names the replica to hand over to, if any.
-- reserved_for, reserved_until_ms: set by the holder's release when the request named a replica:
-- until reserved_until_ms (the release's time plus the lease's ttl, by the boot clock of the
-- row's boot) only that replica's campaigns win the lease, then anyone's. A campaign that wins
-- clears all four.
ALTER TABLE leasehold_leases ADD COLUMN handoff_epoch INTEGER;
ALTER TABLE leasehold_leases ADD COLUMN handoff_to TEXT;
ALTER TABLE leasehold_leases ADD COLUMN reserved_for TEXT;
ALTER TABLE leasehold_leases ADD COLUMN reserved_until_ms INTEGER;
