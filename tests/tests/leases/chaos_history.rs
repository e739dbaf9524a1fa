//! The two records of a fault trial's history: the witness server, where a plugin role inserts
//! rows timestamped by the witness's clock, and the commit log of fenced kv writes in the lease
//! database, in the order the transactions committed.

#![allow(clippy::unwrap_used, missing_docs)]

use leasehold_tests::chaos::witness::{self, Witness};
use sqlx::{Connection, PgConnection};

#[tokio::test]
async fn the_witness_records_a_plugin_roles_inserts_on_its_own_clock() {
    let witness = Witness::create().await.unwrap();
    let before = witness.now().await.unwrap();
    let mut plugin = PgConnection::connect(witness.role_url()).await.unwrap();
    let insert = format!(
        "INSERT INTO {} (lease, epoch, tick, holder) VALUES ($1, $2, $3, $4)",
        witness::TABLE
    );
    for tick in [1_i64, 2] {
        sqlx::query(sqlx::AssertSqlSafe(insert.as_str()))
            .bind("leader")
            .bind(7_i64)
            .bind(tick)
            .bind("a-1")
            .execute(&mut plugin)
            .await
            .unwrap();
    }
    let after = witness.now().await.unwrap();
    let rows = witness.rows().await.unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(
        (
            rows[0].lease.as_str(),
            rows[0].holder.as_str(),
            rows[0].epoch,
            rows[0].tick
        ),
        ("leader", "a-1", 7, 1)
    );
    assert!(
        before <= rows[0].at && rows[0].at <= rows[1].at && rows[1].at <= after,
        "{before} {rows:?} {after}"
    );
    // The role may write the witness table only.
    let denied = sqlx::query(sqlx::AssertSqlSafe(format!(
        "DELETE FROM {}",
        witness::TABLE
    )))
    .execute(&mut plugin)
    .await;
    assert!(denied.is_err());
}

#[tokio::test]
async fn the_commit_log_lists_kv_writes_in_the_order_their_transactions_committed() {
    let url = leasehold_tests::pg::server()
        .fresh_lease_database()
        .await
        .unwrap();
    witness::install_commit_log(&url).await.unwrap();
    let put = "INSERT INTO leasehold_kv (plugin, key, value, lease, epoch, updated_at)
               VALUES ($1, 'last', '\\x00', 'leader', $2, now())";
    // The first write's transaction commits last. (Different plugins: each plugin's writes
    // serialise on its usage row.)
    let mut first = PgConnection::connect(&url).await.unwrap();
    let mut second = PgConnection::connect(&url).await.unwrap();
    let mut early = first.begin().await.unwrap();
    sqlx::query(put)
        .bind("p")
        .bind(1_i64)
        .execute(&mut *early)
        .await
        .unwrap();
    let mut late = second.begin().await.unwrap();
    sqlx::query(put)
        .bind("q")
        .bind(2_i64)
        .execute(&mut *late)
        .await
        .unwrap();
    late.commit().await.unwrap();
    early.commit().await.unwrap();
    let commits = witness::fenced_commits(&url).await.unwrap();
    let order: Vec<_> = commits
        .iter()
        .map(|c| (c.plugin.as_str(), c.lease.as_str(), c.key.as_str(), c.epoch))
        .collect();
    assert_eq!(
        order,
        [("q", "leader", "last", 2), ("p", "leader", "last", 1)]
    );
    assert!(commits[0].seq < commits[1].seq);
}
