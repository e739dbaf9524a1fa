//! The lease core from outside: its stores, the fence in the lease database, handoffs,
//! failovers, groups and faults, on real PostgreSQL servers and SQLite files. One test binary,
//! a module per file:
//!
//! - `capabilities`: the fenced kv store and sql grants in-process, with a real lease held by a
//!   real driver, against the database-side fence.
//! - `chaos`: the fault suite, short: two trials of every fault, each history judged.
//! - `chaos_history`: the two records of a fault trial, the witness and the fenced commit log.
//! - `failover`: a new incarnation of the lease database, rewritten and then a real promoted
//!   standby.
//! - `groups`: lease groups between real processes: fair shares, handoffs, takeovers, never two
//!   leaders.
//! - `handoff`: releases that wake standbys at once, and `leases handoff` from the CLI and the
//!   admin API.
//! - `lease_attacks`: psql row locks, abandoned statements and a stepped database clock.
//! - `line`: the line of standbys between real processes: priorities, join order, preemption.
//! - `names`: plugin files, replica ids, lease names and config keys built as attacks.
//! - `pgbouncer`: PgBouncer in front of the lease database, session pooling and transaction
//!   pooling.
//! - `proxy`: the fault proxy itself, between a client and a real server.
//! - `sqlite_event_file`: the SQLite event file attacked by whoever may write its directory.
//! - `store_conformance`: one suite for every `LeaseStore` backend (memory, SQLite, PostgreSQL).
//! - `store_queue`: the line of standbys for a lease, grants and preemption, per backend.
//!
//! `capabilities` is here rather than in the plugins binary: one of its tests counts the
//! `INSERT INTO slow…` statements running on the whole server, and the plugins binary's
//! `capability_plugins` and `fencing` leave slow inserts of their own on the same server.
//!
//! Two lease tests stand apart, each a binary of its own, `tests/outage.rs` and
//! `tests/outage_proxy.rs`: each stops and restarts the PostgreSQL server of its test process
//! (`leasehold_tests::pg::server`), which every other test of a binary shares, and which another
//! test stopping it at the same time would start again under it.

/// Two tests of one specification `$spec(url)` (in `handoff` and `line`): on a SQLite file, and
/// on a fresh database of the harness's PostgreSQL.
macro_rules! on_both_stores {
    ($sqlite:ident, $postgres:ident, $spec:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $sqlite() {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("sqlite:{}", dir.path().join("leases.db").display());
            $spec(&url).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $postgres() {
            let url = leasehold_tests::pg::server()
                .fresh_database()
                .await
                .unwrap();
            $spec(&url).await;
        }
    };
}

mod capabilities;
mod chaos;
mod chaos_history;
mod failover;
mod groups;
mod handoff;
mod lease_attacks;
mod line;
mod names;
mod pgbouncer;
mod proxy;
mod sqlite_event_file;
mod store_conformance;
mod store_queue;
