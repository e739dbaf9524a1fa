//! The statements of the lease protocol that run on every campaign, renewal and release: each
//! prepared, and run once on no lease, on every connection as it opens ([`prepare_and_warm_up`]),
//! so that none is parsed or first planned on the handoff's path. The comments on their use in
//! `postgres.rs` say what each clause is for.

use sqlx::postgres::{PgConnection, PgTypeInfo};

use super::line;
use sqlx::{Connection, Executor, Type};

/// The database's clock as [`crate::DbMillis`]: `clock_timestamp()`, which moves during a
/// statement, like the expiry decisions it is compared with. A macro, so statements stay
/// `&'static str`.
macro_rules! db_now_ms {
    () => {
        "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
    };
}

/// Whether the campaigning holder ($1) is the replica that the reservation in column `$col` is
/// for: its holder id, or its replica id (the holder id without its `-xxxxxxxx` suffix), as
/// [`crate::store::is_reserved_for`] says.
macro_rules! reserved_for_holder {
    ($col:literal) => {
        concat!(
            "(",
            $col,
            " = $1 OR (length($1) > 9 AND substr($1, 1, length($1) - 9) = ",
            $col,
            "))"
        )
    };
}

/// `campaign_many`: $1 holder, $2 names, $3 ttl in ms, $4 the terms kept per lease, $5 every
/// how many epochs they are pruned, $6 the channel grants are announced on.
///
/// The line ([`super::line`], run before it in the same transaction, joined this holder to it):
/// a lease found free goes to the head of its line, the live waiter of highest priority that
/// joined first (`head`), other than the row's last holder (whose place may outlive its crash).
/// This holder wins it when it is the head, when nobody alive waits, or when a handoff reserved
/// it for this holder; otherwise the lease is given to the head (`gives`): the same upsert with
/// the head as holder, an expiry of its place's time (`alive_ms`) and `granted` set, announced
/// on $6 (`EPOCH NAME HOLDER`). A lease this holder holds unexpired and is campaigning for comes
/// back with its epoch and time left (`mine`): one given to it and not taken up, or one an
/// earlier campaign of its own won after the replica had given up waiting for the answer (a
/// commit the server made as the call timed out). The replica takes either up unless it ran a
/// term at that epoch already; otherwise the lease would sit a whole ttl with a holder that
/// believes it lost, and go at a later epoch. Waiters given or winning a lease leave the line
/// (`taken`), lapsed places are swept, both skipping rows another session keeps locked, so that
/// no two campaigns wait for each other. One reading of the clock (`t`) stamps a row's
/// acquisition, renewal and expiry, so that a term's expiry is exactly its ttl after its renewal
/// (how the terms tell an expiry from a release).
///
/// Besides the lease rows it keeps their history (`leasehold_terms`, [`crate::history`]):
/// each lease won opens a term and closes the one before it (a lease is won only once it has
/// expired), as released when its row expired before its ttl ran out (a release sets the expiry
/// to the moment it ran; nothing else shortens one) and as expired otherwise. Releases write no
/// term themselves, so the handoff's release is the statement it was. Every $5th epoch the
/// lease's oldest terms are pruned, keeping $4 with the new one; the data-modifying parts all see
/// the statement's snapshot, so `pruned` counts the terms there were before `opened`.
///
/// A lease a handoff reserved for another replica (`reserved_for`, until `reserved_until`) is
/// free only once the reservation ends (`free_at`), which is the wait reported; the upsert checks
/// the reservation again on the latest row version, and a win clears it and any handoff request.
///
/// Rows found free (`due`) are locked first, SKIP LOCKED (`claimed`), and only rows so locked or
/// absent go to the upsert, which then never waits for a row: one that another session keeps
/// locked (a fenced transaction's `FOR KEY SHARE`, held from an early check to its commit; an
/// operator's session) is left out, instead of making the whole batch wait and time out with it.
/// Such a lease comes back locked: the last column lists the server processes whose transaction
/// holds the row's lock, by the locking transaction's id in the row's `xmax`; where that is a
/// multixact (the lock of a fenced transaction on a row the holder has renewed since), the
/// sessions holding row locks on the lease table, all of them suspects. NULL for every other
/// lease.
pub const CAMPAIGN: &str = concat!(
    "WITH cur AS (
    SELECT s.system_identifier AS system_identifier,
           ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
               AS timeline
      FROM pg_control_system() AS s),
 inc AS (
    SELECT i.seen_at, i.epoch_floor,
           (i.system_identifier, i.timeline) = (cur.system_identifier, cur.timeline)
               AS current
      FROM leasehold_incarnation AS i, cur),
 seen AS (
    UPDATE leasehold_incarnation AS i
       SET system_identifier = cur.system_identifier, timeline = cur.timeline,
           seen_at = clock_timestamp(),
           epoch_floor = greatest(i.epoch_floor,
               (SELECT coalesce(max(k.epoch), 0) FROM leasehold_leases AS k))
               + 4294967296
      FROM cur
     WHERE (i.system_identifier, i.timeline) <> (cur.system_identifier, cur.timeline)
    RETURNING i.one_row),
 mine AS (
    SELECT k.name, k.epoch,
           floor(extract(epoch FROM k.expires_at - clock_timestamp()) * 1000)::bigint AS left_ms
      FROM leasehold_leases AS k
     WHERE k.name = ANY($2) AND k.holder = $1 AND k.expires_at > clock_timestamp()),
 snap AS (
    SELECT r.name, k.expires_at, k.name IS NOT NULL AS present, k.holder AS last_holder,
           greatest(k.expires_at, CASE WHEN k.reserved_for IS NOT NULL AND NOT ",
    reserved_for_holder!("k.reserved_for"),
    " THEN k.reserved_until END) AS free_at,
           greatest($3, k.ttl_ms) * interval '1 millisecond' AS hold,
           k.reserved_for IS NOT NULL AND k.reserved_until > clock_timestamp() AND ",
    reserved_for_holder!("k.reserved_for"),
    " AS reserved_here,
           k.expires_at < k.renewed_at + k.ttl_ms * interval '1 millisecond' AND NOT k.granted
               AS released
      FROM (SELECT DISTINCT unnest($2::text[]) AS name) AS r
      LEFT JOIN leasehold_leases AS k ON k.name = r.name
     WHERE r.name NOT IN (SELECT name FROM mine)),
 held_off AS (
    SELECT s.name,
           CASE WHEN NOT inc.current OR EXISTS (SELECT 1 FROM seen) THEN s.hold
                WHEN inc.seen_at + s.hold > clock_timestamp()
                    THEN inc.seen_at + s.hold - clock_timestamp()
           END AS wait
      FROM snap AS s, inc),
 due AS (
    SELECT s.name, s.present FROM snap AS s JOIN held_off AS h ON h.name = s.name
     WHERE (s.free_at IS NULL OR s.free_at <= clock_timestamp()) AND h.wait IS NULL),
 claimed AS MATERIALIZED (
    SELECT k.name FROM leasehold_leases AS k JOIN due AS d ON d.name = k.name
     ORDER BY k.name
       FOR UPDATE OF k SKIP LOCKED),
 head AS (
    SELECT DISTINCT ON (w.name) w.name, w.holder, w.priority, w.alive_ms, w.ttl_ms
      FROM leasehold_waiters AS w JOIN snap AS s ON s.name = w.name
     WHERE w.alive_until > clock_timestamp() AND w.holder IS DISTINCT FROM s.last_holder
     ORDER BY w.name, w.priority DESC, w.joined_at, w.holder),
 gives AS (
    SELECT h.* FROM head AS h JOIN snap AS s ON s.name = h.name
     WHERE h.holder <> $1 AND NOT coalesce(s.reserved_here, false)),
 won AS (
    INSERT INTO leasehold_leases AS l
           (name, holder, epoch, acquired_at, renewed_at, expires_at, ttl_ms, granted, priority)
    SELECT d.name, coalesce(g.holder, $1), greatest(1, inc.epoch_floor), t.now, t.now,
           t.now + coalesce(g.alive_ms, $3) * interval '1 millisecond',
           coalesce(g.ttl_ms, $3), g.holder IS NOT NULL,
           coalesce(g.priority, (SELECT x.priority FROM leasehold_waiters AS x
                                  WHERE x.name = d.name AND x.holder = $1), 0)
      FROM due AS d CROSS JOIN inc CROSS JOIN (SELECT clock_timestamp() AS now) AS t
      LEFT JOIN gives AS g ON g.name = d.name
     WHERE NOT d.present OR EXISTS (SELECT 1 FROM claimed AS c WHERE c.name = d.name)
     ORDER BY d.name
    ON CONFLICT (name) DO UPDATE
       SET holder = EXCLUDED.holder,
           epoch = greatest(l.epoch + 1, EXCLUDED.epoch), acquired_at = EXCLUDED.acquired_at,
           renewed_at = EXCLUDED.renewed_at, expires_at = EXCLUDED.expires_at,
           ttl_ms = EXCLUDED.ttl_ms, granted = EXCLUDED.granted, priority = EXCLUDED.priority,
           handoff_epoch = NULL, handoff_to = NULL, reserved_for = NULL, reserved_until = NULL
       WHERE l.expires_at <= clock_timestamp()
         AND (l.reserved_for IS NULL OR l.reserved_until <= clock_timestamp() OR ",
    reserved_for_holder!("l.reserved_for"),
    ")
    RETURNING l.name, l.epoch, l.holder, l.granted),
 opened AS (
    INSERT INTO leasehold_terms (name, epoch, holder, started_at)
    SELECT w.name, w.epoch, w.holder, clock_timestamp() FROM won AS w
    ON CONFLICT (name, epoch) DO NOTHING),
 taken AS (
    DELETE FROM leasehold_waiters AS x
     WHERE x.ctid IN (
        SELECT y.ctid FROM leasehold_waiters AS y
         WHERE (y.name, y.holder) IN (SELECT w.name, w.holder FROM won AS w
                                      UNION ALL SELECT m.name, $1 FROM mine AS m)
            OR (y.name = ANY($2) AND y.alive_until <= clock_timestamp())
           FOR UPDATE SKIP LOCKED)),
 told AS (
    SELECT count(pg_notify($6, w.epoch || ' ' || w.name || ' ' || w.holder)) AS n
      FROM won AS w WHERE w.granted),
 closed AS (
    UPDATE leasehold_terms AS t
       SET ended_at = least(s.expires_at, clock_timestamp()),
           ended_by = CASE WHEN s.released THEN 'released' ELSE 'expired' END
      FROM won AS w JOIN snap AS s ON s.name = w.name
     WHERE t.name = w.name AND t.epoch < w.epoch AND t.ended_at IS NULL),
 pruned AS (
    DELETE FROM leasehold_terms AS t USING won AS w
     WHERE w.epoch % $5 = 0 AND t.name = w.name AND t.epoch <= (
        SELECT k.epoch FROM leasehold_terms AS k WHERE k.name = w.name
         ORDER BY k.epoch DESC OFFSET $4 - 1 LIMIT 1))
 SELECT s.name, CASE WHEN w.holder = $1 THEN w.epoch END,
        CASE WHEN w.epoch IS NULL THEN ceil(extract(epoch FROM greatest(
            s.free_at - clock_timestamp(), h.wait)) * 1000)::bigint
             WHEN w.holder <> $1 THEN g.alive_ms END,
        ceil(extract(epoch FROM h.wait) * 1000)::bigint, ",
    db_now_ms!(),
    ",
        CASE WHEN d.present AND c.name IS NULL THEN coalesce((
            SELECT array_agg(p.pid ORDER BY p.pid) FROM pg_locks AS p
             WHERE p.locktype = 'transactionid' AND p.granted AND p.transactionid = (
                SELECT k.xmax FROM leasehold_leases AS k WHERE k.name = s.name)), (
            SELECT array_agg(DISTINCT p.pid ORDER BY p.pid) FROM pg_locks AS p
             WHERE p.locktype = 'relation' AND p.granted AND p.mode = 'RowShareLock'
               AND p.relation = 'leasehold_leases'::regclass AND p.pid <> pg_backend_pid()
               AND p.database = (SELECT o.oid FROM pg_database AS o
                                  WHERE o.datname = current_database())),
            '{}') END,
        NULL::bigint, NULL::bigint, coalesce(w.holder <> $1, false)
   FROM snap AS s JOIN held_off AS h ON h.name = s.name
   LEFT JOIN due AS d ON d.name = s.name
   LEFT JOIN claimed AS c ON c.name = s.name
   LEFT JOIN won AS w ON w.name = s.name
   LEFT JOIN gives AS g ON g.name = s.name
   CROSS JOIN told
 UNION ALL
 SELECT m.name, NULL::bigint, NULL::bigint, NULL::bigint, ",
    db_now_ms!(),
    ", NULL::int4[], m.epoch, m.left_ms, false FROM mine AS m"
);

/// `renew`: $1 holder, $2 names, $3 epochs, $4 ttls in ms. Each renewed lease says whether an
/// operator asked its holder to hand it over (`handoff`).
///
/// `locked` takes the row locks (SKIP LOCKED) and hands the update each row's `ctid`, so the
/// update reaches its row without a second index lookup; it still checks holder, epoch and expiry
/// itself, so a row that moved on between the two is left alone (and counted busy). `busy` scans
/// again only when some lease was not renewed.
pub const RENEW: &str = concat!(
    "WITH r AS (
        SELECT * FROM unnest($2::text[], $3::bigint[], $4::bigint[]) AS r(name, epoch, ttl_ms)),
     locked AS (
        SELECT k.ctid AS tid, k.name, k.epoch, q.ttl_ms
          FROM leasehold_leases AS k JOIN r AS q ON k.name = q.name
         WHERE k.holder = $1 AND k.epoch = q.epoch AND k.expires_at > clock_timestamp()
           FOR NO KEY UPDATE OF k SKIP LOCKED),
     renewed AS (
        UPDATE leasehold_leases AS l
           SET renewed_at = clock_timestamp(),
               expires_at = clock_timestamp() + k.ttl_ms * interval '1 millisecond',
               ttl_ms = k.ttl_ms, granted = false
          FROM locked AS k
         WHERE l.ctid = k.tid AND l.name = k.name AND l.holder = $1 AND l.epoch = k.epoch
           AND l.expires_at > clock_timestamp()
        RETURNING l.name, coalesce(l.handoff_epoch = l.epoch, false) AS handoff),
     busy AS (
        SELECT l.name FROM leasehold_leases AS l JOIN r ON l.name = r.name
         WHERE (SELECT count(*) FROM renewed) < (SELECT count(*) FROM r)
           AND l.holder = $1 AND l.epoch = r.epoch AND l.expires_at > clock_timestamp()
           AND l.name NOT IN (SELECT name FROM renewed))
     SELECT name, true, handoff, ",
    db_now_ms!(),
    " FROM renewed
     UNION ALL SELECT name, false, false, ",
    db_now_ms!(),
    " FROM busy
     UNION ALL SELECT NULL, false, false, ",
    db_now_ms!()
);

/// `renew_one`: $1 name, $2 holder, $3 epoch, $4 ttl in ms.
pub const RENEW_ONE: &str = concat!(
    "WITH renewed AS (
    UPDATE leasehold_leases
       SET renewed_at = clock_timestamp(),
           expires_at = clock_timestamp() + $4 * interval '1 millisecond', ttl_ms = $4,
           granted = false
     WHERE name = $1 AND holder = $2 AND epoch = $3 AND expires_at > clock_timestamp()
    RETURNING name, coalesce(handoff_epoch = epoch, false) AS handoff)
 SELECT EXISTS (SELECT 1 FROM renewed), coalesce((SELECT handoff FROM renewed), false), ",
    db_now_ms!()
);

/// `heartbeat`: $1 group, $2 member, $3 ttl in ms, $4 the group's shard leases, $5 their count.
/// Rows: a member (`holder` NULL) with its age and time left in ms and its shard count, or a held
/// shard with its holder; each with the clock.
/// The live members are read beside the upsert (whose own row the statement's snapshot cannot
/// see), and lapsed rows of the group are swept.
pub const HEARTBEAT: &str = concat!(
    "WITH swept AS (
    DELETE FROM leasehold_members
     WHERE grp = $1 AND member <> $2 AND expires_at <= clock_timestamp()),
 beat AS (
    INSERT INTO leasehold_members AS m (grp, member, joined_at, expires_at, shards)
    VALUES ($1, $2, clock_timestamp(), clock_timestamp() + $3 * interval '1 millisecond', $5)
    ON CONFLICT (grp, member) DO UPDATE
       SET expires_at = EXCLUDED.expires_at, shards = EXCLUDED.shards,
           joined_at = CASE WHEN m.expires_at > clock_timestamp() THEN m.joined_at
                            ELSE EXCLUDED.joined_at END
    RETURNING m.member, m.joined_at, m.expires_at, m.shards)
 SELECT member, NULL::text,
        (extract(epoch FROM clock_timestamp() - joined_at) * 1000)::bigint,
        ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint, ",
    db_now_ms!(),
    ", shards::bigint FROM beat
 UNION ALL
 SELECT member, NULL::text,
        (extract(epoch FROM clock_timestamp() - joined_at) * 1000)::bigint,
        ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint, ",
    db_now_ms!(),
    ", shards::bigint FROM leasehold_members
  WHERE grp = $1 AND member <> $2 AND expires_at > clock_timestamp()
 UNION ALL
 SELECT name, holder, NULL::bigint, NULL::bigint, ",
    db_now_ms!(),
    ", NULL::bigint FROM leasehold_leases WHERE name = ANY($4) AND expires_at > clock_timestamp()"
);

/// Fires the lease table's row guard once, and writes a term, inside a block that is then rolled
/// back, so that this session loads PL/pgSQL and compiles the guard now, and has opened the terms
/// table and its index. Otherwise the session's first winning
/// campaign pays for both, about 1.7 ms in all, on the handoff's path: a standby's connection
/// has only ever lost campaigns, and losing ones never fire the guard. The row's name has a
/// space, so it cannot be a lease's (`LeaseName`), and nothing of it outlives the block.
pub const WARM_UP: &str = "DO $$
BEGIN
    INSERT INTO leasehold_leases (name, holder, epoch, acquired_at, renewed_at, expires_at, ttl_ms)
    VALUES ('leasehold warm-up', '', 1, now(), now(), now(), 1);
    UPDATE leasehold_leases SET epoch = 2 WHERE name = 'leasehold warm-up';
    INSERT INTO leasehold_terms (name, epoch, holder, started_at)
    VALUES ('leasehold warm-up', 1, '', now());
    UPDATE leasehold_terms SET ended_at = now(), ended_by = 'released'
     WHERE name = 'leasehold warm-up';
    RAISE EXCEPTION USING ERRCODE = 'LHW00';
EXCEPTION WHEN SQLSTATE 'LHW00' THEN
    NULL;
END $$";

/// Prepares every statement above on `conn`, into its statement cache; runs each once on no
/// lease at all, changing nothing (a session's first run of a statement reads the catalogs it
/// plans with, and builds the plan a session that plans once keeps), which a holder would
/// otherwise pay in its one release and a standby in its one winning campaign; and runs
/// [`WARM_UP`].
pub async fn prepare_and_warm_up(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    let text = <&str as Type<sqlx::Postgres>>::type_info();
    let texts = <Vec<&str> as Type<sqlx::Postgres>>::type_info();
    let bigint = <i64 as Type<sqlx::Postgres>>::type_info();
    let bigints = <Vec<i64> as Type<sqlx::Postgres>>::type_info();
    let statements: [(&'static str, Vec<PgTypeInfo>); 7] = [
        (
            CAMPAIGN,
            vec![
                text.clone(),
                texts.clone(),
                bigint.clone(),
                bigint.clone(),
                bigint.clone(),
                text.clone(),
            ],
        ),
        (
            RENEW,
            vec![
                text.clone(),
                texts.clone(),
                bigints.clone(),
                bigints.clone(),
            ],
        ),
        (
            RENEW_ONE,
            vec![text.clone(), text.clone(), bigint.clone(), bigint.clone()],
        ),
        (
            line::RELEASE,
            vec![
                text.clone(),
                texts.clone(),
                bigints.clone(),
                text.clone(),
                text.clone(),
            ],
        ),
        (
            line::READ_GRANT,
            vec![text.clone(), text.clone(), bigint.clone()],
        ),
        (
            line::JOIN,
            vec![
                text.clone(),
                texts.clone(),
                bigints.clone(),
                bigints.clone(),
                bigint.clone(),
            ],
        ),
        (line::PREEMPT, vec![text.clone(), texts, bigints, text]),
    ];
    for (sql, types) in statements {
        conn.prepare_with(sqlx::SqlStr::from_static(sql), &types)
            .await?;
    }
    // A campaign for no lease may still record a new incarnation, so it runs in a transaction
    // that is rolled back; the session keeps what it learned (catalogs, and under a generic
    // plan mode the plan).
    let mut tx = conn.begin().await?;
    sqlx::query(CAMPAIGN)
        .bind("")
        .bind(Vec::<String>::new())
        .bind(1_i64)
        .bind(i64::from(crate::history::TERMS_KEPT))
        .bind(i64::from(crate::history::PRUNE_EVERY))
        .bind(super::GRANT_CHANNEL)
        .execute(&mut *tx)
        .await?;
    tx.rollback().await?;
    // The empty name is no lease's (`LeaseName`), so these match no row and notify no one.
    let none: Vec<String> = Vec::new();
    let no_numbers: Vec<i64> = Vec::new();
    sqlx::query(line::RELEASE)
        .bind("")
        .bind(&none)
        .bind(&no_numbers)
        .bind(super::RELEASE_CHANNEL)
        .bind(super::GRANT_CHANNEL)
        .execute(&mut *conn)
        .await?;
    sqlx::query(line::READ_GRANT)
        .bind("")
        .bind("")
        .bind(1_i64)
        .execute(&mut *conn)
        .await?;
    sqlx::query(line::JOIN)
        .bind("")
        .bind(&none)
        .bind(&no_numbers)
        .bind(&no_numbers)
        .bind(1_i64)
        .execute(&mut *conn)
        .await?;
    let no_waits: Vec<Option<i64>> = Vec::new();
    sqlx::query(line::PREEMPT)
        .bind("")
        .bind(&none)
        .bind(&no_waits)
        .bind(super::HANDOFF_CHANNEL)
        .execute(&mut *conn)
        .await?;
    sqlx::query(RENEW_ONE)
        .bind("")
        .bind("")
        .bind(1_i64)
        .bind(1_i64)
        .execute(&mut *conn)
        .await?;
    sqlx::query(RENEW)
        .bind("")
        .bind(none)
        .bind(&no_numbers)
        .bind(&no_numbers)
        .execute(&mut *conn)
        .await?;
    conn.execute(WARM_UP).await?;
    Ok(())
}
