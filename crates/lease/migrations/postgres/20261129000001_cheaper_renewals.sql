-- Renewals at ten thousand leases (issue 13): a renewal rewrites only renewed_at, expires_at and
-- ttl_ms, so two things it used to pay for are dropped.
--
-- The row guard ran its plpgsql function once per renewed row (~0.6 µs × 10,000) to check
-- columns a renewal never sets. It now fires only for statements that set `name` or `epoch`
-- (campaigns do, renewals and releases do not) and for deletes. A statement that sets neither
-- cannot change either, since no other BEFORE trigger on the table rewrites rows.
DROP TRIGGER IF EXISTS leasehold_leases_guard ON leasehold_leases;
CREATE TRIGGER leasehold_leases_guard
    BEFORE UPDATE OF name, epoch OR DELETE ON leasehold_leases
    FOR EACH ROW EXECUTE FUNCTION leasehold_leases_guard();

-- Half-empty pages let a renewal's new row version stay on its page (a HOT update: no index
-- entry to add, nothing for VACUUM to chase). Renewed rows changing every few seconds is this
-- table's whole workload; at 10,000 leases it costs ~1 MB more and halves the statement's time.
-- Pages written before this change keep their layout until rows move or the table is rewritten.
ALTER TABLE leasehold_leases SET (fillfactor = 50);
