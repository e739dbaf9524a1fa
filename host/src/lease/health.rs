//! Whether this replica can campaign: the lease loop's own store calls (campaign, renew,
//! release, group heartbeats) and how the last of them ended. `/readyz` is ready only while they
//! land, `/status` shows the failure (`lease_calls_failing`), and every failure is counted by
//! operation and [`Cause`] in `leasehold_store_errors_total`. The display reads the store on
//! connections of their own, so a role that may connect but not write the lease table looked
//! ready while every campaign failed.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::store::StoreError;
use crate::metrics::Metrics;

/// Why a store call failed, as far as an operator's fix is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// No answer in time (the call's or the database's statement timeout).
    Timeout,
    /// The role may not do it (PostgreSQL 42501; a read-only SQLite file).
    Permission,
    /// The schema is missing or older than this binary (a table or column unknown).
    Schema,
    /// No connection: refused, dropped, or the pool could not get one.
    Connection,
    /// Another transaction was in the way (a serialization failure, a deadlock, a busy file).
    Conflict,
    /// Anything else.
    Other,
}

impl Cause {
    /// Every cause, for documentation and tests.
    pub const ALL: [Cause; 6] = [
        Cause::Timeout,
        Cause::Permission,
        Cause::Schema,
        Cause::Connection,
        Cause::Conflict,
        Cause::Other,
    ];

    /// Its label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Timeout => "timeout",
            Cause::Permission => "permission",
            Cause::Schema => "schema",
            Cause::Connection => "connection",
            Cause::Conflict => "conflict",
            Cause::Other => "other",
        }
    }

    /// What `error`'s cause is.
    pub fn of(error: &StoreError) -> Cause {
        match error {
            StoreError::Timeout { .. } | StoreError::ConnectTimeout { .. } => Cause::Timeout,
            StoreError::Connect { .. } | StoreError::Unavailable(_) => Cause::Connection,
            StoreError::CreateFile { .. } | StoreError::Grants { .. } => Cause::Permission,
            StoreError::Migrate { .. } => Cause::Schema,
            StoreError::Query { source, .. } => Cause::of_driver(source),
            StoreError::Invalid { .. } => Cause::Other,
        }
    }

    /// The cause of a driver error: SQLite's result codes, PostgreSQL's SQLSTATEs.
    fn of_driver(error: &sqlx::Error) -> Cause {
        match error {
            sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::WorkerCrashed => Cause::Connection,
            sqlx::Error::Database(db)
                if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() =>
            {
                // SQLite's primary result code is the low byte of its extended code.
                let code = db.code().and_then(|c| c.parse::<i64>().ok()).unwrap_or(0);
                match code & 0xff {
                    // SQLITE_PERM, SQLITE_READONLY, SQLITE_AUTH
                    3 | 8 | 23 => Cause::Permission,
                    // SQLITE_BUSY, SQLITE_LOCKED
                    5 | 6 => Cause::Conflict,
                    // SQLITE_IOERR, SQLITE_CANTOPEN, SQLITE_NOTADB
                    10 | 14 | 26 => Cause::Connection,
                    1 if db.message().contains("no such") => Cause::Schema,
                    _ => Cause::Other,
                }
            }
            sqlx::Error::Database(db) => {
                let code = db.code();
                let code = code.as_deref().unwrap_or_default();
                match code {
                    // insufficient_privilege
                    "42501" => Cause::Permission,
                    // undefined_table, undefined_column, undefined_function
                    "42P01" | "42703" | "42883" => Cause::Schema,
                    // query_canceled (statement_timeout), lock_not_available (lock_timeout)
                    "57014" | "55P03" => Cause::Timeout,
                    // serialization_failure, deadlock_detected
                    "40001" | "40P01" => Cause::Conflict,
                    // connection_exception, operator_intervention (a shutdown, a terminated backend)
                    _ if code.starts_with("08") || code.starts_with("57P") => Cause::Connection,
                    _ => Cause::Other,
                }
            }
            _ => Cause::Other,
        }
    }
}

/// The lease loop's store calls failing, as `/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallsFailing {
    /// The operation that failed last (`campaign`, `renew`, `release`, `heartbeat`).
    pub op: String,
    /// Why, as counted in `leasehold_store_errors_total`.
    pub cause: Cause,
    /// The last failure's text.
    pub error: String,
    /// Failures in a row.
    pub failures: u64,
    /// Milliseconds since the first of them.
    pub failing_for_ms: u64,
}

/// A run of failures as the lease loop records it: (op, cause, text, failures, since).
type Failing = (&'static str, Cause, String, u64, Instant);

/// The last outcome of the lease loop's store calls. Shared by the driver, which records, and
/// the endpoint, which reads.
#[derive(Debug, Default)]
pub struct LoopHealth {
    /// Set from the first failure until a call lands.
    failing: Mutex<Option<Failing>>,
}

impl LoopHealth {
    /// A call of the lease loop landed: the replica can campaign.
    pub fn landed(&self) {
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        *failing = None;
    }

    /// Call `op` failed with `error`; returns its cause (for the metric).
    pub fn failed(&self, op: &'static str, error: &StoreError) -> Cause {
        let cause = Cause::of(error);
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        let (failures, since) = match failing.take() {
            Some((_, _, _, n, since)) => (n + 1, since),
            None => (1, Instant::now()),
        };
        *failing = Some((op, cause, error.to_string(), failures, since));
        cause
    }

    /// The failure in force, if the last call failed.
    pub fn failing(&self) -> Option<CallsFailing> {
        let failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        failing
            .as_ref()
            .map(|(op, cause, error, failures, since)| CallsFailing {
                op: (*op).to_string(),
                cause: *cause,
                error: error.clone(),
                failures: *failures,
                failing_for_ms: u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX),
            })
    }
}

/// Where the outcome of each of the lease loop's store calls goes: [`LoopHealth`] and the
/// metric. Cloned into every call the driver spawns.
#[derive(Debug, Clone)]
pub struct Recorder {
    /// The replica's health, read by `/readyz` and `/status`.
    health: Arc<LoopHealth>,
    /// Where failures are counted.
    metrics: Arc<Metrics>,
}

impl Recorder {
    /// Records into `health` and `metrics`.
    pub fn new(health: Arc<LoopHealth>, metrics: Arc<Metrics>) -> Recorder {
        Recorder { health, metrics }
    }

    /// Records how call `op` ended, and gives its result on with the error as text (what the
    /// coordinator's events carry).
    pub fn outcome<T>(&self, op: &'static str, result: Result<T, StoreError>) -> Result<T, String> {
        match result {
            Ok(value) => {
                self.health.landed();
                Ok(value)
            }
            Err(e) => {
                let cause = self.health.failed(op, &e);
                self.metrics.count_store_error(op, cause);
                Err(e.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_failure_lasts_until_a_call_lands_and_counts_the_failures_in_a_row() {
        let health = LoopHealth::default();
        assert_eq!(health.failing(), None);
        let timeout = StoreError::Timeout {
            op: "campaign",
            after: Duration::from_secs(1),
        };
        assert_eq!(health.failed("campaign", &timeout), Cause::Timeout);
        assert_eq!(
            health.failed("renew", &StoreError::Unavailable("down".into())),
            Cause::Connection
        );
        let failing = health.failing().unwrap();
        assert_eq!((failing.op.as_str(), failing.failures), ("renew", 2));
        assert_eq!(failing.cause, Cause::Connection);
        health.landed();
        assert_eq!(health.failing(), None);
    }

    #[test]
    fn causes_have_distinct_label_values() {
        let mut seen: Vec<&str> = Cause::ALL.iter().map(|c| c.as_str()).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), Cause::ALL.len());
    }
}
