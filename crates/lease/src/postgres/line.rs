//! The statements of the line of standbys (docs/ARCHITECTURE.md §5.8, `leasehold_waiters`):
//! joining it, asking a holder of lower priority to step aside, the release that gives a lease to
//! the head of its line, and the one read a waiter takes a grant up with. The campaign that gives
//! a lease it finds free to the head is `statements::CAMPAIGN`. Every lock taken here on another
//! session's row is taken `SKIP LOCKED`, so that two campaigns, or a campaign and a release,
//! never wait for each other.

/// Whether the waiter in column `$col` is the replica a handoff request's `l.handoff_to` names:
/// its holder id, or its replica id (the holder id without its `-xxxxxxxx` suffix), as
/// [`crate::store::is_reserved_for`] says.
macro_rules! named_by_handoff {
    ($col:literal) => {
        concat!(
            "(",
            $col,
            " = c.handoff_to OR (length(",
            $col,
            ") > 9 AND substr(",
            $col,
            ", 1, length(",
            $col,
            ") - 9) = c.handoff_to))"
        )
    };
}

/// `campaign_in_line`'s first statement: $1 holder, $2 names, $3 priorities, $4 how long each
/// place lasts in ms, $5 the ttl in ms. Joins this holder to the line of each lease, or keeps its
/// place alive (a place that lapsed joins at the end again), with its priority as given now;
/// not for a lease it already holds (given to it, or won by a campaign whose answer it missed),
/// which its campaign takes up instead.
pub const JOIN: &str = "INSERT INTO leasehold_waiters AS w
       (name, holder, priority, joined_at, alive_until, alive_ms, ttl_ms)
SELECT b.name, $1, b.priority, clock_timestamp(),
       clock_timestamp() + b.alive_ms * interval '1 millisecond', b.alive_ms, $5
  FROM (SELECT DISTINCT ON (b.name) b.*
          FROM unnest($2::text[], $3::bigint[], $4::bigint[]) AS b(name, priority, alive_ms)
         ORDER BY b.name) AS b
 WHERE NOT EXISTS (
        SELECT 1 FROM leasehold_leases AS k
         WHERE k.name = b.name AND k.holder = $1 AND k.expires_at > clock_timestamp())
 ORDER BY b.name
ON CONFLICT (name, holder) DO UPDATE
   SET priority = EXCLUDED.priority, alive_ms = EXCLUDED.alive_ms, ttl_ms = EXCLUDED.ttl_ms,
       joined_at = CASE WHEN w.alive_until > clock_timestamp() THEN w.joined_at
                        ELSE EXCLUDED.joined_at END,
       alive_until = EXCLUDED.alive_until";

/// `campaign_in_line`'s last statement, for the leases whose place allows preemption: $1
/// holder, $2 names, $3 `preempt_after` in ms, $4 the handoff channel. A waiter of higher priority
/// than the holder that has waited `preempt_after` in line, and at least that long since the
/// lease last moved for a preemption, asks the holder to hand it over, as `leases handoff` does
/// (not over a request of this term already made, an operator's maybe naming a replica), and
/// announces it (`EPOCH NAME`). Rows: each lease where this holder may preempt, with how long until
/// it may (negative once it may), and whether it asked now.
pub const PREEMPT: &str = "WITH p AS (
    SELECT p.name, p.after_ms FROM unnest($2::text[], $3::bigint[]) AS p(name, after_ms)
     WHERE p.after_ms IS NOT NULL),
 cand AS (
    SELECT k.name, k.epoch,
           greatest(w.joined_at, coalesce(k.preempted_at, '-infinity'::timestamptz))
               + p.after_ms * interval '1 millisecond' AS at
      FROM p JOIN leasehold_leases AS k ON k.name = p.name
      JOIN leasehold_waiters AS w ON w.name = p.name AND w.holder = $1
     WHERE k.expires_at > clock_timestamp() AND k.holder <> $1 AND w.priority > k.priority
       AND w.alive_until > clock_timestamp()
       AND k.handoff_epoch IS DISTINCT FROM k.epoch),
 asked AS (
    UPDATE leasehold_leases AS l
       SET handoff_epoch = l.epoch, handoff_to = NULL, preempted_at = clock_timestamp()
      FROM cand AS c
     WHERE l.name = c.name AND l.epoch = c.epoch AND c.at <= clock_timestamp()
       AND l.expires_at > clock_timestamp() AND l.handoff_epoch IS DISTINCT FROM l.epoch
       AND l.ctid IN (SELECT k.ctid FROM leasehold_leases AS k WHERE k.name = c.name
                        FOR NO KEY UPDATE SKIP LOCKED)
    RETURNING l.name, l.epoch),
 told AS (
    SELECT count(pg_notify($4, a.epoch || ' ' || a.name)) AS n FROM asked AS a)
 SELECT c.name, ceil(extract(epoch FROM c.at - clock_timestamp()) * 1000)::bigint,
        a.name IS NOT NULL
   FROM cand AS c LEFT JOIN asked AS a ON a.name = c.name CROSS JOIN told";

/// `release` and `release_many`: $1 holder, $2 names, $3 their epochs, $4 the release channel,
/// $5 the grant channel. Each lease this holder holds at its epoch goes, in this one statement,
/// to the head of its line: the live waiter of highest priority that joined first (the replica
/// a handoff request of this term named, if it waits in line), other than this holder. It gets
/// the next epoch (at least the incarnation's floor), an expiry of its place's time, `granted`;
/// its term is opened and this holder's closed as released; its place leaves the line; and it is
/// told on $5 (`EPOCH NAME HOLDER`). No grant when the database changed incarnation since the
/// campaigns recorded it, or its hold-off still runs (docs/ARCHITECTURE.md §9.2): as with nobody
/// in line, the lease is then expired now for any campaign, announced on $4 (`NAME`), and a
/// handoff request that named a replica reserves it for that replica for one ttl. Rows: each
/// lease released, with the waiter it went to, if any. (`here` is the server's incarnation; the
/// name also tells this statement apart in the server's statement log.)
pub const RELEASE: &str = concat!(
    "WITH here AS (
    SELECT s.system_identifier,
           ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
               AS timeline
      FROM pg_control_system() AS s),
 inc AS (
    SELECT i.epoch_floor, i.seen_at,
           (i.system_identifier, i.timeline) = (here.system_identifier, here.timeline) AS current
      FROM leasehold_incarnation AS i, here),
 c AS (
    SELECT l.name, l.epoch, l.ttl_ms,
           CASE WHEN l.handoff_epoch = l.epoch THEN l.handoff_to END AS handoff_to
      FROM unnest($2::text[], $3::bigint[]) AS r(name, epoch)
      JOIN leasehold_leases AS l ON l.name = r.name AND l.epoch = r.epoch
     WHERE l.holder = $1 AND l.expires_at > clock_timestamp()),
 heads AS (
    SELECT c.name, h.holder, h.priority, h.alive_ms, h.ttl_ms
      FROM c CROSS JOIN inc
     CROSS JOIN LATERAL (
        SELECT w.holder, w.priority, w.alive_ms, w.ttl_ms FROM leasehold_waiters AS w
         WHERE w.name = c.name AND w.holder <> $1 AND w.alive_until > clock_timestamp()
           AND (c.handoff_to IS NULL OR ",
    named_by_handoff!("w.holder"),
    ")
         ORDER BY w.priority DESC, w.joined_at, w.holder LIMIT 1) AS h
     WHERE inc.current AND inc.seen_at + c.ttl_ms * interval '1 millisecond' <= clock_timestamp()),
 released AS (
    UPDATE leasehold_leases AS l
       SET holder = coalesce(h.holder, l.holder),
           epoch = CASE WHEN h.holder IS NULL THEN l.epoch
                        ELSE greatest(l.epoch + 1, inc.epoch_floor) END,
           acquired_at = CASE WHEN h.holder IS NULL THEN l.acquired_at ELSE clock_timestamp() END,
           renewed_at = CASE WHEN h.holder IS NULL THEN l.renewed_at ELSE clock_timestamp() END,
           expires_at = clock_timestamp()
               + coalesce(h.alive_ms, 0) * interval '1 millisecond',
           ttl_ms = coalesce(h.ttl_ms, l.ttl_ms),
           granted = h.holder IS NOT NULL,
           priority = coalesce(h.priority, l.priority),
           reserved_for = CASE WHEN h.holder IS NULL THEN c.handoff_to END,
           reserved_until = CASE WHEN h.holder IS NULL AND c.handoff_to IS NOT NULL
               THEN clock_timestamp() + l.ttl_ms * interval '1 millisecond' END,
           handoff_epoch = NULL, handoff_to = NULL
      FROM c CROSS JOIN inc LEFT JOIN heads AS h ON h.name = c.name
     WHERE l.name = c.name AND l.holder = $1 AND l.epoch = c.epoch
       AND l.expires_at > clock_timestamp()
    RETURNING l.name, c.epoch AS was, l.epoch, h.holder AS given_to),
 closed AS (
    UPDATE leasehold_terms AS t SET ended_at = clock_timestamp(), ended_by = 'released'
      FROM released AS r
     WHERE r.given_to IS NOT NULL AND t.name = r.name AND t.epoch = r.was
       AND t.ended_at IS NULL),
 opened AS (
    INSERT INTO leasehold_terms (name, epoch, holder, started_at)
    SELECT r.name, r.epoch, r.given_to, clock_timestamp() FROM released AS r
     WHERE r.given_to IS NOT NULL
    ON CONFLICT (name, epoch) DO NOTHING),
 taken AS (
    DELETE FROM leasehold_waiters AS x
     WHERE x.ctid IN (
        SELECT y.ctid FROM leasehold_waiters AS y JOIN released AS r
            ON y.name = r.name AND y.holder = r.given_to
           FOR UPDATE OF y SKIP LOCKED))
 SELECT r.name, r.given_to FROM released AS r,
        pg_notify(CASE WHEN r.given_to IS NULL THEN $4 ELSE $5 END,
                  CASE WHEN r.given_to IS NULL THEN r.name
                       ELSE r.epoch || ' ' || r.name || ' ' || r.given_to END) AS n"
);

/// `read_grant`: $1 name, $2 holder, $3 epoch. The time left on the row, in whole ms rounded
/// down (never later than its expiry), if it is this holder's at this epoch and unexpired; and
/// the clock.
pub const READ_GRANT: &str =
    "SELECT (SELECT floor(extract(epoch FROM k.expires_at - clock_timestamp()) * 1000)::bigint
           FROM leasehold_leases AS k
          WHERE k.name = $1 AND k.holder = $2 AND k.epoch = $3
            AND k.expires_at > clock_timestamp()),
        (extract(epoch FROM clock_timestamp()) * 1000)::bigint";
