-- Expiry follows the machine's boot clock (CLOCK_BOOTTIME, passed in by the host), which every
-- process on the machine shares and which cannot be stepped; the wall clock could be, and a forward
-- step shortened every lease (DESIGN §1.2). A boot clock restarts at zero with the machine, so each
-- row names the boot its times belong to: a time of another boot has expired.
--
-- Rows written before this migration carry wall-clock times and no boot: they count as expired.
-- Stop every replica of the machine before upgrading, as an old replica would still judge by the
-- wall clock.
ALTER TABLE leasehold_leases ADD COLUMN boot TEXT NOT NULL DEFAULT '';
