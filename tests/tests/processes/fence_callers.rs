//! The lease database's callers as attackers, on a real PostgreSQL: a role granted only
//! `EXECUTE` on the process fence holding one lease row to stall takeovers, learning other
//! leases' epochs, dropping the fence with a savepoint, keeping its lock past its session with
//! `PREPARE TRANSACTION`; a role that may create in a schema hijacking the documented call with an
//! overload; and a schema named after the hosts' role hiding the lease table behind a look-alike.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::{Duration, Instant};

use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::host::{HostBuilder, run_to_exit};
use leasehold_tests::log::Logged;
use sqlx::{Connection, PgConnection};

const TTL: Duration = Duration::from_secs(2);

/// A migrated lease database (as its superuser's URL), and a role granted only `EXECUTE` on the
/// process fence there, as the README's lines make one (its URL).
async fn database_and_fence_grantee() -> (String, String) {
    let server = leasehold_tests::pg::server();
    let url = server.fresh_lease_database().await.unwrap();
    let grantee = server.plugin_role(&url, "fence").await.unwrap();
    let role = leasehold_tests::pg::user_of(&grantee).to_string();
    let mut owner = PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "GRANT EXECUTE ON FUNCTION leasehold_fence(text, bigint) TO {role}"
    )))
    .execute(&mut owner)
    .await
    .unwrap();
    (url, grantee)
}

/// Holder and epoch of each of `names`, read as the owner.
async fn holders(url: &str, names: &[&str]) -> Vec<(String, String, i64, bool)> {
    let mut conn = PgConnection::connect(url).await.unwrap();
    sqlx::query_as(
        "SELECT name, holder, epoch, expires_at > clock_timestamp() FROM leasehold_leases
          WHERE name = ANY($1) ORDER BY name",
    )
    .bind(names)
    .fetch_all(&mut conn)
    .await
    .unwrap()
}

/// The SQLSTATE and message of a refused statement.
fn refusal(error: sqlx::Error) -> (String, String) {
    match error {
        sqlx::Error::Database(db) => (
            db.code().unwrap_or_default().to_string(),
            db.message().to_string(),
        ),
        other => panic!("not a refusal of the database's: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_grantee_holding_one_lease_row_delays_the_takeover_of_that_lease_only() {
    let (url, grantee) = database_and_fence_grantee().await;
    let leases = ["orders", "reports", "x1", "x3"];
    let replica = |name: &str| {
        leases.iter().fold(
            HostBuilder::new(name).database_url(&url).ttl(TTL),
            |b, lease| b.lease(lease),
        )
    };
    let mut a = replica("a").spawn_leading("orders").await.unwrap();
    eventually("a holding all four", Duration::from_secs(20), async || {
        when(holders(&url, &leases).await, |h| {
            h.len() == 4 && h.iter().all(|(_, _, _, live)| *live)
        })
    })
    .await
    .unwrap();

    // Checked early, and kept open: the row stays FOR KEY SHARE for the whole transaction.
    let mut attacker = PgConnection::connect(&grantee).await.unwrap();
    let attacker_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut attacker)
        .await
        .unwrap();
    let mut tx = attacker.begin().await.unwrap();
    sqlx::raw_sql("SET CONSTRAINTS ALL IMMEDIATE; SELECT leasehold_fence('orders', 1)")
        .execute(&mut *tx)
        .await
        .unwrap();

    let b = replica("b").spawn().await.unwrap();
    a.kill().await.unwrap();
    let killed = Instant::now();
    // For 4 ttl with `orders` locked: when b takes each of the others, and what its /readyz says.
    let others = ["reports", "x1", "x3"];
    let (mut others_taken, mut answers, mut unready) = (None, 0, 0);
    while killed.elapsed() < 4 * TTL {
        let (status, _) = b.as_ref().get("/readyz").await.unwrap();
        answers += 1;
        unready += usize::from(status != 200);
        let now = holders(&url, &others).await;
        if others_taken.is_none()
            && now
                .iter()
                .all(|(_, holder, epoch, _)| *epoch == 2 && holder.starts_with("b-"))
        {
            others_taken = Some(killed.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "with orders' row locked: the other leases taken over {others_taken:?} after their holder was killed (ttl {TTL:?}); /readyz unready {unready} of {answers} times"
    );
    let others_after = others_taken.unwrap_or_else(|| {
        panic!(
            "the unlocked leases waited for the locked one\n{}",
            b.log_text()
        )
    });
    assert!(
        others_after < 2 * TTL,
        "the unlocked leases waited for the locked one: {others_after:?}"
    );
    assert_eq!(unready, 0, "the replica was reported unready");
    let blocked = b
        .wait_for_log("campaign blocked: lease orders", Duration::from_secs(1))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", b.log_text()));
    // Named with the session holding the lock where the server tells it.
    eprintln!("{blocked}");
    let _ = attacker_pid;
    let orders = &holders(&url, &["orders"]).await[0];
    assert_eq!(orders.2, 1, "orders was taken over under the fence's lock");

    tx.commit().await.unwrap();
    let committed = Instant::now();
    eventually("b holding orders", Duration::from_secs(20), async || {
        when(holders(&url, &["orders"]).await, |h| {
            h[0].2 == 2 && h[0].1.starts_with("b-")
        })
    })
    .await
    .unwrap();
    eprintln!(
        "orders was taken over {:?} after the fenced transaction committed",
        committed.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_refuses_without_telling_another_lease_s_epoch_or_whether_it_was_ever_held() {
    let (url, grantee) = database_and_fence_grantee().await;
    let _a = HostBuilder::new("a")
        .database_url(&url)
        .lease("orders")
        .ttl(TTL)
        .spawn_leading("orders")
        .await
        .unwrap();
    let mut conn = PgConnection::connect(&grantee).await.unwrap();
    for (lease, epoch) in [("orders", 0), ("orders", 2), ("never-held", 1)] {
        let refused = sqlx::query("SELECT leasehold_fence($1::text, $2::bigint)")
            .bind(lease)
            .bind(epoch as i64)
            .execute(&mut conn)
            .await
            .unwrap_err();
        let (code, message) = refusal(refused);
        assert_eq!(code, "LH001");
        assert_eq!(
            message,
            format!("leasehold fence: epoch {epoch} does not hold lease \"{lease}\"")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_is_refused_inside_a_savepoint_and_a_rolled_back_savepoint_cannot_drop_it() {
    let (url, grantee) = database_and_fence_grantee().await;
    let mut a = HostBuilder::new("a")
        .database_url(&url)
        .lease("orders")
        .ttl(TTL)
        .spawn_leading("orders")
        .await
        .unwrap();
    let mut conn = PgConnection::connect(&grantee).await.unwrap();
    sqlx::raw_sql("CREATE TABLE ledger (n int)")
        .execute(&mut conn)
        .await
        .unwrap();
    // Django's nested atomic(), SQLAlchemy's begin_nested(): the call inside a savepoint.
    let mut tx = conn.begin().await.unwrap();
    sqlx::raw_sql("INSERT INTO ledger VALUES (1); SAVEPOINT inner_work")
        .execute(&mut *tx)
        .await
        .unwrap();
    let refused = sqlx::raw_sql("SELECT leasehold_fence('orders', 1)")
        .execute(&mut *tx)
        .await
        .unwrap_err();
    let (code, message) = refusal(refused);
    assert_eq!(code, "LH003", "{message}");
    assert!(message.contains("savepoint"), "{message}");
    tx.rollback().await.unwrap();

    // Called in the outermost transaction, the check survives a savepoint rolled back after it:
    // the lease expires meanwhile, and the commit is refused.
    let mut tx = conn.begin().await.unwrap();
    sqlx::raw_sql(
        "SELECT leasehold_fence('orders', 1); SAVEPOINT later; INSERT INTO ledger VALUES (2);
         ROLLBACK TO SAVEPOINT later; INSERT INTO ledger VALUES (3)",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    a.kill().await.unwrap();
    tokio::time::sleep(TTL + Duration::from_millis(500)).await;
    let (code, message) = refusal(tx.commit().await.unwrap_err());
    assert_eq!(code, "LH001", "{message}");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(rows, 0, "a write landed after its epoch expired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_transaction_cannot_be_prepared_to_keep_the_lock_past_its_session() {
    // A server of its own: prepared transactions are off by default, which would refuse any
    // PREPARE for that reason alone.
    let server = leasehold_tests::pg::Postgres::start_private(&[]).unwrap();
    {
        let mut admin = PgConnection::connect(server.admin_url()).await.unwrap();
        sqlx::raw_sql("ALTER SYSTEM SET max_prepared_transactions = 4")
            .execute(&mut admin)
            .await
            .unwrap();
    }
    server.stop().unwrap();
    server.restart().unwrap();
    let url = server.fresh_lease_database().await.unwrap();
    let _a = HostBuilder::new("a")
        .database_url(&url)
        .lease("orders")
        .ttl(TTL)
        .spawn_leading("orders")
        .await
        .unwrap();
    let mut conn = PgConnection::connect(&url).await.unwrap();
    let refused = sqlx::raw_sql(
        "BEGIN; SET CONSTRAINTS ALL IMMEDIATE; SELECT leasehold_fence('orders', 1);
         PREPARE TRANSACTION 'keep-the-lock'",
    )
    .execute(&mut conn)
    .await
    .unwrap_err();
    let (_, message) = refusal(refused);
    assert!(message.contains("cannot PREPARE"), "{message}");
    sqlx::raw_sql("ROLLBACK").execute(&mut conn).await.ok();
    let prepared: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_prepared_xacts")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(prepared, 0);
    // Without the fence, the same server prepares: the refusal is the fence's.
    sqlx::raw_sql("BEGIN; SELECT 1; PREPARE TRANSACTION 'plain'")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::raw_sql("ROLLBACK PREPARED 'plain'")
        .execute(&mut conn)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overload_added_by_a_role_that_may_create_cannot_stand_in_for_the_documented_call() {
    let (url, grantee) = database_and_fence_grantee().await;
    let server = leasehold_tests::pg::server();
    // PostgreSQL up to 14 gives every role CREATE on public (and pg_upgrade keeps it).
    let creator = server.plugin_role(&url, "creator").await.unwrap();
    let mut owner = PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql("GRANT CREATE ON SCHEMA public TO PUBLIC")
        .execute(&mut owner)
        .await
        .unwrap();
    let mut evil = PgConnection::connect(&creator).await.unwrap();
    let stand_in = |args: &str| {
        format!(
            "CREATE FUNCTION public.leasehold_fence({args}) RETURNS void LANGUAGE sql AS 'SELECT NULL'"
        )
    };
    // The exact match of a literal's types is the schema's own.
    let taken = sqlx::raw_sql(sqlx::AssertSqlSafe(stand_in("lease text, epoch integer")))
        .execute(&mut evil)
        .await
        .unwrap_err();
    assert!(taken.to_string().contains("already exists"), "{taken}");
    for args in [
        "lease varchar, epoch integer",
        "lease text, epoch numeric",
        "lease name, epoch bigint",
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(stand_in(args)))
            .execute(&mut evil)
            .await
            .unwrap();
    }

    let _a = HostBuilder::new("a")
        .database_url(&url)
        .lease("orders")
        .ttl(TTL)
        .spawn_leading("orders")
        .await
        .unwrap();
    // A stale epoch is refused by the documented call, by a plain literal and by a small int
    // as psycopg sends one.
    let mut worker = PgConnection::connect(&grantee).await.unwrap();
    for call in [
        "SELECT public.leasehold_fence('orders'::text, 0::bigint)",
        "SELECT leasehold_fence('orders', 0)",
        "SELECT leasehold_fence('orders', 0::smallint)",
    ] {
        let refused = sqlx::raw_sql(call).execute(&mut worker).await.unwrap_err();
        assert_eq!(refusal(refused).0, "LH001", "{call}");
    }
    let refused = sqlx::query("SELECT public.leasehold_fence($1::text, $2::bigint)")
        .bind("orders")
        .bind(0_i64)
        .execute(&mut worker)
        .await
        .unwrap_err();
    assert_eq!(refusal(refused).0, "LH001");

    // A host starting now says what it found.
    let b = HostBuilder::new("b")
        .database_url(&url)
        .lease("orders")
        .ttl(TTL)
        .spawn()
        .await
        .unwrap();
    let warned = b
        .wait_for_log("functions named leasehold_fence*", Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", b.log_text()));
    assert!(
        warned.contains("leasehold_fence(character varying,integer)"),
        "{warned}"
    );
    b.wait_for_log(
        "every role may create objects in the lease schema",
        Duration::from_secs(10),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", b.log_text()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    given_server,
    ignore = "DATABASE_URL is set, and this test runs a host as the server's superuser and squats its name: it needs the server the harness starts itself"
)]
async fn a_look_alike_lease_table_in_a_schema_named_after_the_hosts_role_is_never_used() {
    leasehold_tests::pg::needs_own_server("squats a schema named after the superuser");
    let server = leasehold_tests::pg::server();
    let url = server.fresh_lease_database().await.unwrap();
    // The hosts run as `postgres` here: the squatter makes the schema its default path reaches
    // first, with a look-alike every role may write.
    let squatter = server.plugin_role(&url, "squatter").await.unwrap();
    let role = leasehold_tests::pg::user_of(&squatter).to_string();
    let mut owner = PgConnection::connect(&url).await.unwrap();
    let db: String = sqlx::query_scalar("SELECT current_database()::text")
        .fetch_one(&mut owner)
        .await
        .unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "GRANT CREATE ON DATABASE {db} TO {role}"
    )))
    .execute(&mut owner)
    .await
    .unwrap();
    let mut evil = PgConnection::connect(&squatter).await.unwrap();
    sqlx::raw_sql(
        "CREATE SCHEMA postgres;
         CREATE TABLE postgres.leasehold_leases (
             name text PRIMARY KEY, holder text, epoch bigint, acquired_at timestamptz,
             renewed_at timestamptz, expires_at timestamptz, ttl_ms bigint);
         GRANT USAGE ON SCHEMA postgres TO PUBLIC;
         GRANT ALL ON postgres.leasehold_leases TO PUBLIC;",
    )
    .execute(&mut evil)
    .await
    .unwrap();
    let found: String = sqlx::query_scalar(
        "SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE c.oid = to_regclass('leasehold_leases')",
    )
    .fetch_one(&mut owner)
    .await
    .unwrap();
    assert_eq!(
        found, "postgres",
        "the default path does not reach the look-alike first: the test proves nothing"
    );

    // A host on the default path refuses to guess, naming both.
    let (status, stderr) = run_to_exit(
        &[
            "run",
            "--database-url",
            &url,
            "--lease",
            "shadowed",
            "--http",
            "127.0.0.1:0",
        ],
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert!(!status.success());
    assert!(
        stderr.contains("\"postgres\", \"public\"") && stderr.contains("search_path"),
        "{stderr}"
    );

    // Told the schema, it campaigns on the real table, and the look-alike stays empty.
    let sep = if url.contains('?') { '&' } else { '?' };
    let pinned = format!("{url}{sep}options[search_path]=public");
    let _a = HostBuilder::new("a")
        .database_url(&pinned)
        .lease("shadowed")
        .ttl(TTL)
        .spawn_leading("shadowed")
        .await
        .unwrap();
    let (real, fake): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM public.leasehold_leases WHERE name = 'shadowed'),
                (SELECT count(*) FROM postgres.leasehold_leases)",
    )
    .fetch_one(&mut owner)
    .await
    .unwrap();
    assert_eq!((real, fake), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_protocol_function_is_the_hosts_alone_and_the_database_id_stays_every_grant_s() {
    let (url, grantee) = database_and_fence_grantee().await;
    let mut conn = PgConnection::connect(&grantee).await.unwrap();
    let refused = sqlx::raw_sql("SELECT * FROM leasehold_protocol()")
        .execute(&mut conn)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("permission denied"),
        "{refused}"
    );
    // A plugin's sql grant asks it to tell that it reaches the lease database.
    let id: String = sqlx::query_scalar("SELECT public.leasehold_database_id()")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert!(!id.is_empty());
    // The hosts' own role reads it (least_privilege.rs runs a host as one made by grants.sql).
    let mut owner = PgConnection::connect(&url).await.unwrap();
    let required: i64 = sqlx::query_scalar("SELECT required FROM leasehold_protocol()")
        .fetch_one(&mut owner)
        .await
        .unwrap();
    assert!(required >= 1);
}
