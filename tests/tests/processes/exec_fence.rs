//! The fence for a process's own SQL, `leasehold_fence(lease, epoch)`, from outside: real hosts
//! running the example workers of `examples/exec/` under `leasehold exec` on a real PostgreSQL, as
//! a role made by the README's own lines; a worker frozen with its host past the ttl and then
//! resumed; a role granted only EXECUTE trying to stall the holder's renewals; a takeover arriving
//! while a fenced commit is under way; and a transaction checked early committing after its epoch
//! expired, with the takeover waiting for it.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::PathBuf;
use std::time::Duration;

use leasehold_tests::eventually::{eventually, eventually_every, when};
use leasehold_tests::exec::{command_name, descendants, is_running, signal};
use leasehold_tests::host::HostBuilder;
use leasehold_tests::log::Logged;
use rustix::process::Signal;
use sqlx::{Connection, PgConnection};

const TTL: Duration = Duration::from_secs(2);

fn example(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/exec")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

async fn database() -> String {
    leasehold_tests::pg::server()
        .fresh_database()
        .await
        .unwrap()
}

/// `(epoch, n)` of every committed write of the example workers for lease `orders`, in order,
/// read as `url`'s role (whose `fenced_writes` it is).
async fn writes(url: &str) -> Vec<(i64, i64)> {
    let mut conn = PgConnection::connect(url).await.unwrap();
    sqlx::query_as("SELECT epoch, n FROM fenced_writes WHERE lease = 'orders' ORDER BY epoch, n")
        .fetch_all(&mut conn)
        .await
        .unwrap_or_default()
}

/// A replica that runs `worker` under lease `orders` on the lease database `url`, the worker
/// writing as `worker_url`'s role.
fn replica(name: &str, url: &str, worker_url: &str, worker: &[&str]) -> HostBuilder {
    HostBuilder::new(name)
        .database_url(url)
        .lease("orders")
        .ttl(TTL)
        .env("DATABASE_URL", worker_url)
        .env("WORKER_INTERVAL", "0.05")
        .exec(worker)
}

/// The README's block that makes the worker's role ("A fence for your own SQL": the `sql` block
/// with `CREATE ROLE`), run as written on the migrated lease database `url` by its owner, but for
/// the role's name: roles are the whole server's, so each test's is its own. Returns the role's
/// URL on that database.
async fn readme_worker_role(url: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let readme =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let section = readme
        .split("\n### A fence for your own SQL\n")
        .nth(1)
        .expect("README.md has no \"### A fence for your own SQL\"");
    let section = section.split("\n## ").next().unwrap_or(section);
    let block = section
        .split("```sql\n")
        .skip(1)
        .filter_map(|rest| rest.split("\n```").next())
        .find(|block| block.contains("CREATE ROLE worker"))
        .expect("no ```sql block of the fence's section makes the role `worker`");
    let role = format!(
        "worker_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    );
    let mut owner = PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(block.replace("worker", &role)))
        .execute(&mut owner)
        .await
        .unwrap_or_else(|e| panic!("the README's lines failed: {e}\n{block}"));
    leasehold_tests::pg::with_user(url, &role)
}

/// The example `worker` writes at epoch 1, as a role made by the README's lines, beside another
/// lease's rows in the same table.
async fn writes_at_epoch_1(worker: &[&str]) {
    let url = leasehold_tests::pg::server()
        .fresh_lease_database()
        .await
        .unwrap();
    let worker_url = readme_worker_role(&url).await;
    let host = replica("a", &url, &worker_url, worker)
        .spawn_leading("orders")
        .await
        .unwrap();
    host.wait_for_log("wrote 3 at epoch 1", Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", host.log_text()));
    let mut conn = PgConnection::connect(&worker_url).await.unwrap();
    sqlx::raw_sql("INSERT INTO fenced_writes (lease, epoch, n) VALUES ('billing', 9, 1)")
        .execute(&mut conn)
        .await
        .unwrap();
    let rows = writes(&worker_url).await;
    assert!(rows.len() >= 3, "{rows:?}");
    assert!(rows.iter().all(|(epoch, _)| *epoch == 1), "{rows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shell_example_worker_writes_through_the_fence_while_its_epoch_holds_the_lease() {
    writes_at_epoch_1(&[&example("fenced-worker.sh")]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_example_worker_writes_through_the_fence_while_its_epoch_holds_the_lease() {
    // The system interpreter: the one Debian's python3-psycopg is installed for.
    writes_at_epoch_1(&["/usr/bin/python3", &example("fenced_worker.py")]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_frozen_with_its_host_past_the_ttl_has_its_commit_refused_when_it_resumes() {
    let url = database().await;
    let worker = [example("fenced-worker.sh")];
    let worker = [worker[0].as_str()];
    // Each transaction stays open for a second after its fence call.
    let a = replica("a", &url, &url, &worker)
        .env("WORKER_HOLD", "1")
        .spawn_leading("orders")
        .await
        .unwrap();
    let b = replica("b", &url, &url, &worker).spawn().await.unwrap();
    a.wait_for_log("wrote 1 at epoch 1", Duration::from_secs(30))
        .await
        .unwrap();
    // Freeze as soon as the next transaction has called the fence and sleeps in it (for a
    // second): a fixed wait for that missed it on a busy machine, with the worker still between
    // its fence call and its sleep.
    let mut owner = PgConnection::connect(&url).await.unwrap();
    eventually_every(
        "the worker's next transaction to sleep after its fence call",
        Duration::from_secs(20),
        Duration::from_millis(10),
        async || {
            let sleeping: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE datname = current_database() AND pid <> pg_backend_pid()
                    AND query LIKE '%pg_sleep%' AND state = 'active'",
            )
            .fetch_one(&mut owner)
            .await
            .unwrap();
            if sleeping == 1 { Ok(()) } else { Err(sleeping) }
        },
    )
    .await
    .unwrap();
    let frozen: Vec<u32> = std::iter::once(a.pid())
        .chain(descendants(a.pid()))
        .collect();
    for pid in &frozen {
        signal(*pid, Signal::STOP);
    }
    let psql: Vec<u32> = frozen
        .iter()
        .copied()
        .filter(|p| command_name(*p) == "psql")
        .collect();
    assert!(
        !psql.is_empty(),
        "no psql of the worker's to freeze: {frozen:?}"
    );
    let open: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid()
            AND query LIKE '%pg_sleep%'
            AND state IN ('active', 'idle in transaction')",
    )
    .fetch_one(&mut owner)
    .await
    .unwrap();
    let sessions: Vec<(Option<String>, Option<String>)> = sqlx::query_as(
        "SELECT state, query FROM pg_stat_activity WHERE datname = current_database()",
    )
    .fetch_all(&mut owner)
    .await
    .unwrap();
    assert_eq!(
        open,
        1,
        "the frozen worker is not inside a fenced transaction: {sessions:?}\n{}",
        a.log_text()
    );

    // b takes over once the ttl has run out, and its worker writes at epoch 2.
    eventually(
        "epoch 2's worker writing",
        Duration::from_secs(30),
        async || when(writes(&url).await, |w| w.iter().any(|(e, _)| *e == 2)),
    )
    .await
    .unwrap();
    let before: Vec<(i64, i64)> = writes(&url)
        .await
        .into_iter()
        .filter(|w| w.0 == 1)
        .collect();

    // The frozen psql alone goes on first: it has its answer to pg_sleep and sends COMMIT.
    for pid in &psql {
        signal(*pid, Signal::CONT);
    }
    eventually(
        "the resumed psql finishing",
        Duration::from_secs(20),
        async || when((), |_| !psql.iter().any(|p| is_running(*p))),
    )
    .await
    .unwrap();
    for pid in &frozen {
        signal(*pid, Signal::CONT);
    }
    // As after a whole container's freeze: the keeper finds its deadline long past and kills
    // the tree at once.
    let resumed = std::time::Instant::now();
    eventually(
        "the frozen worker's tree gone once resumed",
        Duration::from_secs(5),
        async || when((), |_| !frozen[1..].iter().any(|p| is_running(*p))),
    )
    .await
    .unwrap();
    eprintln!("tree gone {:?} after the resume", resumed.elapsed());
    let after: Vec<(i64, i64)> = writes(&url)
        .await
        .into_iter()
        .filter(|w| w.0 == 1)
        .collect();
    assert_eq!(
        before, after,
        "a write of epoch 1 landed after epoch 2 began"
    );
    a.wait_for_log(
        "leasehold fence: epoch 1 does not hold lease \"orders\"",
        Duration::from_secs(20),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", a.log_text()));
    // Refused by the check at COMMIT: the fence call itself had passed before the freeze.
    assert!(
        a.log_text().contains("leasehold_fence_at_commit()"),
        "{}",
        a.log_text()
    );
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_granted_execute_on_the_fence_cannot_stall_a_renewal_or_change_a_lease() {
    let url = database().await;
    let a = HostBuilder::new("a")
        .database_url(&url)
        .lease("orders")
        .ttl(TTL)
        .exec(&["sleep", "600"])
        .spawn_leading("orders")
        .await
        .unwrap();
    let role_url = leasehold_tests::pg::server()
        .plugin_role(&url, "worker")
        .await
        .unwrap();
    let role = leasehold_tests::pg::user_of(&role_url).to_string();
    let mut owner = PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "GRANT EXECUTE ON FUNCTION leasehold_fence(text, bigint) TO {role}"
    )))
    .execute(&mut owner)
    .await
    .unwrap();
    let mut app = PgConnection::connect(&role_url).await.unwrap();
    for sql in [
        "UPDATE leasehold_leases SET expires_at = now()",
        "SELECT name FROM leasehold_leases FOR KEY SHARE",
        "INSERT INTO leasehold_fence_checks (lease, epoch) VALUES ('orders', 1)",
        "DELETE FROM leasehold_fence_checks",
        "SELECT leasehold_fence_check('orders', 1, true)",
        "SELECT key FROM leasehold_fence_key",
    ] {
        let refused = sqlx::raw_sql(sql).execute(&mut app).await.unwrap_err();
        assert!(
            refused.to_string().contains("permission denied"),
            "{sql}: {refused}"
        );
    }

    // Forcing the check early holds the row FOR KEY SHARE until this transaction ends: 3 ttl.
    let mut tx = app.begin().await.unwrap();
    sqlx::raw_sql("SET CONSTRAINTS ALL IMMEDIATE; SELECT leasehold_fence('orders', 1)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let renewed = async |owner: &mut PgConnection| -> (String, i64, f64) {
        sqlx::query_as(
            "SELECT holder, epoch, extract(epoch FROM renewed_at)::float8
               FROM leasehold_leases WHERE name = 'orders'",
        )
        .fetch_one(owner)
        .await
        .unwrap()
    };
    let mut seen = vec![renewed(&mut owner).await];
    let from = a.log_len();
    let until = std::time::Instant::now() + 3 * TTL;
    while std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(200)).await;
        seen.push(renewed(&mut owner).await);
    }
    tx.commit().await.unwrap();
    assert!(seen.iter().all(|(_, epoch, _)| *epoch == 1), "{seen:?}");
    let mut times: Vec<f64> = seen.iter().map(|s| s.2).collect();
    times.dedup();
    assert!(times.len() >= 4, "renewals stalled: {seen:?}");
    let gaps = times.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
    assert!(
        gaps < TTL.as_secs_f64() / 2.0,
        "a renewal waited {gaps:.2} s behind the fence's lock"
    );
    let log = a.log_lines_from(from).join("\n");
    assert!(!log.contains("renewal failing"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_waits_for_a_fenced_commit_under_way_so_the_write_lands_before_the_next_term() {
    let url = database().await;
    let sleeper = ["sleep", "600"];
    let mut a = replica("a", &url, &url, &sleeper)
        .spawn_leading("orders")
        .await
        .unwrap();
    let b = replica("b", &url, &url, &sleeper).spawn().await.unwrap();
    let mut owner = PgConnection::connect(&url).await.unwrap();
    // A commit that takes 3 s after the fence's check has passed: the caller's own deferred
    // trigger, queued after the fence's, sleeps and then notes when it finished.
    sqlx::raw_sql(
        "CREATE TABLE slow_work (at timestamptz);
         CREATE TABLE slow_done (at timestamptz);
         CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_sleep(3); INSERT INTO slow_done VALUES (clock_timestamp()); RETURN NULL; END $$;
         CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON slow_work
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();",
    )
    .execute(&mut owner)
    .await
    .unwrap();
    a.kill().await.unwrap();
    let mut tx = owner.begin().await.unwrap();
    sqlx::raw_sql(
        "SELECT leasehold_fence('orders', 1); INSERT INTO slow_work VALUES (clock_timestamp())",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();

    leasehold_tests::host::wait_for_single_leader(&[&b], "orders", Duration::from_secs(30))
        .await
        .unwrap();
    let (expired, done, next): (f64, f64, f64) = sqlx::query_as(
        "SELECT (SELECT extract(epoch FROM ended_at)::float8 FROM leasehold_terms
                  WHERE name = 'orders' AND epoch = 1),
                (SELECT extract(epoch FROM at)::float8 FROM slow_done),
                (SELECT extract(epoch FROM started_at)::float8 FROM leasehold_terms
                  WHERE name = 'orders' AND epoch = 2)",
    )
    .fetch_one(&mut owner)
    .await
    .unwrap();
    eprintln!(
        "epoch 1 expired {:.0} ms before the fenced commit finished; epoch 2 began {:.0} ms after it",
        (done - expired) * 1e3,
        (next - done) * 1e3
    );
    assert!(
        expired < done,
        "the lease did not expire during the commit: the test proved nothing"
    );
    assert!(
        next > done,
        "epoch 2 began before epoch 1's fenced commit was done"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_checked_early_commits_after_its_epoch_expired_and_the_takeover_waits_for_it()
{
    let url = database().await;
    let sleeper = ["sleep", "600"];
    let mut a = replica("a", &url, &url, &sleeper)
        .spawn_leading("orders")
        .await
        .unwrap();
    let b = replica("b", &url, &url, &sleeper).spawn().await.unwrap();
    let mut owner = PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql("CREATE TABLE early (at timestamptz)")
        .execute(&mut owner)
        .await
        .unwrap();
    let mut worker = PgConnection::connect(&url).await.unwrap();
    let mut tx = worker.begin().await.unwrap();
    sqlx::raw_sql("SET CONSTRAINTS ALL IMMEDIATE; SELECT leasehold_fence('orders', 1)")
        .execute(&mut *tx)
        .await
        .unwrap();
    a.kill().await.unwrap();
    // Well past epoch 1's expiry by any clock: the check that passed at the call is the only one.
    tokio::time::sleep(3 * TTL).await;
    sqlx::raw_sql("INSERT INTO early VALUES (clock_timestamp())")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    leasehold_tests::host::wait_for_single_leader(&[&b], "orders", Duration::from_secs(30))
        .await
        .unwrap();
    let (expired, committed, next): (f64, f64, f64) = sqlx::query_as(
        "SELECT (SELECT extract(epoch FROM ended_at)::float8 FROM leasehold_terms
                  WHERE name = 'orders' AND epoch = 1),
                (SELECT extract(epoch FROM at)::float8 FROM early),
                (SELECT extract(epoch FROM started_at)::float8 FROM leasehold_terms
                  WHERE name = 'orders' AND epoch = 2)",
    )
    .fetch_one(&mut owner)
    .await
    .unwrap();
    eprintln!(
        "the early-checked commit landed {:.0} ms after epoch 1 expired; epoch 2 began {:.0} ms after it",
        (committed - expired) * 1e3,
        (next - committed) * 1e3
    );
    assert!(
        committed > expired + TTL.as_secs_f64(),
        "the commit did not land long after epoch 1 expired: the test proved nothing"
    );
    assert!(
        next > committed,
        "epoch 2 began before epoch 1's early-checked commit"
    );
}
