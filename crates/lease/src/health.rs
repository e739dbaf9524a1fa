//! Whether this replica can campaign: the lease loop's own store calls (campaign, renew,
//! release, group heartbeats) and how the last of them ended. `/readyz` is ready only while they
//! land, `/status` shows the failure (`lease_calls_failing`), and every failure is counted by
//! operation and [`Cause`] in `leasehold_store_errors_total`. The display reads the store on
//! connections of their own, so a role that may connect but not write the lease table looked
//! ready while every campaign failed.
//!
//! The log tells a run of failures once, not per call: one warning when calls start failing,
//! naming what failed ([`Cause::says`]: refused, reset, closed before the server answered, …),
//! one summary per [`SUMMARY_EVERY`] while they go on, and one line when a call lands again, with
//! how long they failed. The counts are in `/metrics`, by the same cause; each failure is at debug
//! level.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use tracing::{info, warn};

use serde::{Deserialize, Serialize};

use super::store::StoreError;
use crate::metrics::LeaseMetrics;

/// Why a store call failed, as far as an operator's fix is concerned: the `cause` label of
/// `leasehold_store_errors_total`, and the words the log uses ([`Cause::says`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// Nothing listens at the address: the server is down, or not yet up.
    Refused,
    /// The connection closed before the server answered: a proxy that accepts and closes while
    /// no server is behind it (sqlx: "unexpected response from SSLRequest: 0x00").
    Closed,
    /// The connection was reset or broken mid-call.
    Reset,
    /// No answer in time (the call's or the database's statement timeout).
    Timeout,
    /// The server is read-only: a standby, or a failover under way (PostgreSQL 25006).
    ReadOnly,
    /// The server is starting, shutting down or restarting (PostgreSQL 57P01–57P03).
    Restarting,
    /// Any other failure to have a connection (TLS, the pool could not get one, no such
    /// database, too many clients).
    Connection,
    /// The role may not do it, or may not log in (PostgreSQL 42501, 28000, 28P01; a read-only
    /// SQLite file).
    Permission,
    /// The schema is missing or older than this binary (a table or column unknown).
    Schema,
    /// The schema needs a newer binary: its lease protocol is above this one's (PostgreSQL
    /// LH002, or this binary's own check).
    Protocol,
    /// Another transaction was in the way (a serialization failure, a deadlock, a busy file).
    Conflict,
    /// Anything else.
    Other,
}

impl Cause {
    /// Every cause, for documentation and tests.
    pub const ALL: [Cause; 12] = [
        Cause::Refused,
        Cause::Closed,
        Cause::Reset,
        Cause::Timeout,
        Cause::ReadOnly,
        Cause::Restarting,
        Cause::Connection,
        Cause::Permission,
        Cause::Schema,
        Cause::Protocol,
        Cause::Conflict,
        Cause::Other,
    ];

    /// Its label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Refused => "refused",
            Cause::Closed => "closed",
            Cause::Reset => "reset",
            Cause::Timeout => "timeout",
            Cause::ReadOnly => "read_only",
            Cause::Restarting => "restarting",
            Cause::Connection => "connection",
            Cause::Permission => "permission",
            Cause::Schema => "schema",
            Cause::Protocol => "protocol",
            Cause::Conflict => "conflict",
            Cause::Other => "other",
        }
    }

    /// What failed, in a few words an operator can act on.
    pub fn says(self) -> &'static str {
        match self {
            Cause::Refused => "connection refused: nothing listens at the address",
            Cause::Closed => {
                "the connection was closed before the server answered (a proxy with no server behind it?)"
            }
            Cause::Reset => "the connection was reset",
            Cause::Timeout => "no answer in time",
            Cause::ReadOnly => "the server is read-only (a standby, or a failover under way)",
            Cause::Restarting => "the server is starting, shutting down or restarting",
            Cause::Connection => "no connection to the server",
            Cause::Permission => "permission denied",
            Cause::Schema => "the schema is missing or older than this binary",
            Cause::Protocol => "this database needs a newer leasehold (see the error)",
            Cause::Conflict => "another transaction was in the way",
            Cause::Other => "an error of the store's",
        }
    }

    /// What `error`'s cause is: from the error's kind, SQLSTATE or SQLite code, and from the
    /// driver's words where it gives only words (an I/O or protocol error).
    pub fn of(error: &StoreError) -> Cause {
        match error {
            StoreError::Timeout { .. }
            | StoreError::ConnectTimeout { .. }
            | StoreError::Waited { .. } => Cause::Timeout,
            StoreError::Connect { source, .. } | StoreError::Query { source, .. } => {
                Cause::of_driver(source)
            }
            StoreError::Unavailable(text) => Cause::of_text(text).unwrap_or(Cause::Connection),
            StoreError::CreateFile { .. } | StoreError::Grants { .. } => Cause::Permission,
            StoreError::Migrate { .. } => Cause::Schema,
            StoreError::Protocol(_) => Cause::Protocol,
            StoreError::Invalid { .. }
            | StoreError::TransactionPooling { .. }
            | StoreError::LeaseSchema { .. } => Cause::Other,
        }
    }

    /// The cause of a driver error: its I/O error's kind, SQLite's result codes, PostgreSQL's
    /// SQLSTATEs, and where those say no more than "a connection" or "something", its words.
    /// Only the driver's words: the store's own (a URL, an operation) could name a cause by
    /// chance, a host called `standby-read-only` say.
    fn of_driver(error: &sqlx::Error) -> Cause {
        Cause::of_driver_kind(error)
            .unwrap_or_else(|vague| Cause::of_text(&error.to_string()).unwrap_or(vague))
    }

    /// The cause a driver error's kind or code names, without reading its words; `Err` with the
    /// cause to fall back on where they name none more precise than "a connection" or "other".
    fn of_driver_kind(error: &sqlx::Error) -> Result<Cause, Cause> {
        use std::io::ErrorKind;
        match error {
            sqlx::Error::Io(e) => match e.kind() {
                ErrorKind::ConnectionRefused => Ok(Cause::Refused),
                ErrorKind::UnexpectedEof => Ok(Cause::Closed),
                ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
                | ErrorKind::BrokenPipe => Ok(Cause::Reset),
                ErrorKind::TimedOut => Ok(Cause::Timeout),
                _ => Err(Cause::Connection),
            },
            // sqlx tells a proxy that accepts and closes only in words ("unexpected response
            // from SSLRequest: 0x00"), which `of_text` reads.
            sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::WorkerCrashed => Err(Cause::Connection),
            sqlx::Error::Database(db)
                if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() =>
            {
                // SQLite's primary result code is the low byte of its extended code.
                let code = db.code().and_then(|c| c.parse::<i64>().ok()).unwrap_or(0);
                match code & 0xff {
                    // SQLITE_PERM, SQLITE_READONLY, SQLITE_AUTH
                    3 | 8 | 23 => Ok(Cause::Permission),
                    // SQLITE_BUSY, SQLITE_LOCKED
                    5 | 6 => Ok(Cause::Conflict),
                    // SQLITE_IOERR, SQLITE_CANTOPEN, SQLITE_NOTADB
                    10 | 14 | 26 => Ok(Cause::Connection),
                    1 if db.message().contains("no such") => Ok(Cause::Schema),
                    _ => Err(Cause::Other),
                }
            }
            sqlx::Error::Database(db) => {
                let code = db.code();
                let code = code.as_deref().unwrap_or_default();
                Ok(match code {
                    // insufficient_privilege; invalid_authorization_specification and
                    // invalid_password (a login refused: the role, not the server, is the fix)
                    "42501" | "28000" | "28P01" => Cause::Permission,
                    // undefined_table, undefined_column, undefined_function, invalid_schema_name
                    "42P01" | "42703" | "42883" | "3F000" => Cause::Schema,
                    // query_canceled (statement_timeout), lock_not_available (lock_timeout)
                    "57014" | "55P03" => Cause::Timeout,
                    // serialization_failure, deadlock_detected
                    "40001" | "40P01" => Cause::Conflict,
                    // read_only_sql_transaction
                    "25006" => Cause::ReadOnly,
                    // admin_shutdown, crash_shutdown, cannot_connect_now (starting up)
                    "57P01" | "57P02" | "57P03" => Cause::Restarting,
                    // the schema's protocol guard (migration 20261206000001)
                    "LH002" => Cause::Protocol,
                    // invalid_catalog_name (no such database), too_many_connections: no
                    // connection to be had, whatever the words ("does not exist" is no table's)
                    "3D000" | "53300" => Cause::Connection,
                    // connection_exception, operator_intervention: its words may say more
                    _ if code.starts_with("08") || code.starts_with("57P") => {
                        return Err(Cause::Connection);
                    }
                    _ => return Err(Cause::Other),
                })
            }
            _ => Err(Cause::Other),
        }
    }

    /// The cause an error's words name, if they name one.
    fn of_text(error: &str) -> Option<Cause> {
        let e = error.to_ascii_lowercase();
        let has = |words: &[&str]| words.iter().any(|w| e.contains(w));
        Some(if has(&["this database needs leasehold", "lh002"]) {
            Cause::Protocol
        } else if has(&["connection refused"]) {
            Cause::Refused
        } else if has(&[
            "sslrequest",
            "unexpected eof",
            "early eof",
            "connection closed",
            "unexpected end of file",
        ]) {
            Cause::Closed
        } else if has(&["connection reset", "broken pipe"]) {
            Cause::Reset
        } else if has(&["read-only", "read only", "25006"]) {
            Cause::ReadOnly
        } else if has(&["timed out", "timeout"]) {
            Cause::Timeout
        } else if has(&[
            "starting up",
            "shutting down",
            "57p0",
            "terminating connection",
            "administrator command",
        ]) {
            Cause::Restarting
        } else if has(&["permission denied", "42501", "readonly database"]) {
            Cause::Permission
        } else if has(&["does not exist", "no such table", "no such column"]) {
            Cause::Schema
        } else {
            return None;
        })
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

/// How often the log sums up a run of failing calls: an operator sees that it goes on, and how
/// many calls failed, in a handful of lines a minute whatever the retry rate.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// Failing calls as [`LoopHealth`] keeps them: (op, cause, text, failures, since, last said).
type Failing = (&'static str, Cause, String, u64, Instant, Instant);

/// What the log says of a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Say {
    /// The first of a run: warn, naming it.
    Began,
    /// A summary is due: this many have failed in a row, for this long.
    Summary(u64, Duration),
    /// Nothing above debug.
    Quiet,
}

/// The last outcome of the lease loop's store calls. Shared by the driver, which records, and
/// the endpoint, which reads.
#[derive(Debug, Default)]
pub struct LoopHealth {
    /// Set from the first failure until a call lands.
    failing: Mutex<Option<Failing>>,
}

impl LoopHealth {
    /// A call of the lease loop landed: the replica can campaign. After failures, how many
    /// there were in a row and for how long.
    pub fn landed(&self) -> Option<(u64, Duration)> {
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        failing
            .take()
            .map(|(_, _, _, failures, since, _)| (failures, since.elapsed()))
    }

    /// Call `op` failed with `error` at `now`; returns its cause (for the metric) and what the
    /// log should say of it.
    pub fn failed(&self, op: &'static str, error: &StoreError, now: Instant) -> (Cause, Say) {
        let cause = Cause::of(error);
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        let (failures, since, said, say) = match failing.take() {
            Some((_, _, _, n, since, said)) if now.duration_since(said) >= SUMMARY_EVERY => (
                n + 1,
                since,
                now,
                Say::Summary(n + 1, now.duration_since(since)),
            ),
            Some((_, _, _, n, since, said)) => (n + 1, since, said, Say::Quiet),
            None => (1, now, now, Say::Began),
        };
        *failing = Some((op, cause, error.to_string(), failures, since, said));
        (cause, say)
    }

    /// The failure in force, if the last call failed.
    pub fn failing(&self) -> Option<CallsFailing> {
        let failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        failing
            .as_ref()
            .map(|(op, cause, error, failures, since, _)| CallsFailing {
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
    metrics: Arc<LeaseMetrics>,
}

impl Recorder {
    /// Records into `health` and `metrics`.
    pub fn new(health: Arc<LoopHealth>, metrics: Arc<LeaseMetrics>) -> Recorder {
        Recorder { health, metrics }
    }

    /// Records how call `op` ended, and gives its result on with the error as text (what the
    /// coordinator's events carry).
    ///
    /// The call's span (the driver's, entered around it) gets the outcome too, `ok` or the cause,
    /// for whoever follows spans (the host's trace export); a renewal's is left alone, as its
    /// path must cost nothing more.
    pub fn outcome<T>(&self, op: &'static str, result: Result<T, StoreError>) -> Result<T, String> {
        let span = (op != "renew").then(tracing::Span::current);
        match result {
            Ok(value) => {
                if let Some((failures, lasted)) = self.health.landed() {
                    info!(op, failures, lasted = ?lasted, "lease store calls land again after {} ({failures} failed in a row)", crate::text::duration(lasted));
                }
                // After the log line, which reads as it always did.
                if let Some(span) = &span {
                    span.record("outcome", "ok");
                }
                Ok(value)
            }
            Err(e) => {
                let (cause, say) = self.health.failed(op, &e, crate::seams::now());
                self.metrics.count_store_error(op, cause.as_str());
                let text = e.to_string();
                let why = cause.says();
                match say {
                    Say::Began => {
                        warn!(op, cause = cause.as_str(), error = %text, "lease store calls failing: {op} failed: {why}; retrying with backoff, summed up every {}s until one lands", SUMMARY_EVERY.as_secs())
                    }
                    Say::Summary(failures, lasted) => {
                        warn!(op, cause = cause.as_str(), failures, error = %text, "lease store calls still failing after {}: {failures} in a row, the last ({op}): {why}", crate::text::duration(lasted))
                    }
                    Say::Quiet => {
                        tracing::debug!(op, cause = cause.as_str(), error = %text, "{op} failed")
                    }
                }
                if let Some(span) = &span {
                    span.record("outcome", cause.as_str());
                }
                Err(text)
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
        let t0 = crate::seams::now();
        assert_eq!(
            health.failed("campaign", &timeout, t0),
            (Cause::Timeout, Say::Began)
        );
        let down = StoreError::Unavailable("down".into());
        assert_eq!(
            health.failed("renew", &down, t0 + Duration::from_secs(1)),
            (Cause::Connection, Say::Quiet)
        );
        let failing = health.failing().unwrap();
        assert_eq!((failing.op.as_str(), failing.failures), ("renew", 2));
        assert_eq!(failing.cause, Cause::Connection);
        // One summary per SUMMARY_EVERY, counting every failure.
        let later = t0 + SUMMARY_EVERY;
        assert_eq!(
            health.failed("campaign", &down, later).1,
            Say::Summary(3, SUMMARY_EVERY)
        );
        assert_eq!(health.failed("campaign", &down, later).1, Say::Quiet);
        assert_eq!(
            health.failed("campaign", &down, later + SUMMARY_EVERY).1,
            Say::Summary(5, SUMMARY_EVERY * 2)
        );
        assert_eq!(health.landed().map(|(n, _)| n), Some(5));
        assert_eq!(health.failing(), None);
        assert_eq!(health.landed(), None, "said once");
    }

    /// A PostgreSQL error with a SQLSTATE, as the server sends one (sqlx's own cannot be built).
    #[derive(Debug)]
    struct Sqlstate(&'static str, &'static str);

    impl std::fmt::Display for Sqlstate {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.1)
        }
    }

    impl std::error::Error for Sqlstate {}

    impl sqlx::error::DatabaseError for Sqlstate {
        fn message(&self) -> &str {
            self.1
        }
        fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
            Some(self.0.into())
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    #[test]
    fn a_failure_is_counted_by_its_cause_and_described_in_words_an_operator_can_act_on() {
        let io = |kind| StoreError::Query {
            op: "campaign",
            source: sqlx::Error::Io(std::io::Error::from(kind)),
        };
        // Words only, as sqlx gives an I/O or protocol failure.
        let words = |text: &str| StoreError::Query {
            op: "campaign",
            source: sqlx::Error::Protocol(text.into()),
        };
        let sqlstate = |code, message| StoreError::Query {
            op: "campaign",
            source: sqlx::Error::Database(Box::new(Sqlstate(code, message))),
        };
        let needs_newer =
            StoreError::Protocol(crate::protocol::NeedsNewer(crate::protocol::Requirement {
                required: 9,
                since: "9.0.0".into(),
                why: "a rule".into(),
            }));
        let timeout = StoreError::Timeout {
            op: "campaign",
            after: Duration::from_secs(1),
        };
        for (error, cause, said) in [
            (
                io(std::io::ErrorKind::ConnectionRefused),
                Cause::Refused,
                "connection refused",
            ),
            (
                words("error communicating with database: Connection refused (os error 111)"),
                Cause::Refused,
                "connection refused",
            ),
            // A proxy that accepts and closes with no server behind it.
            (
                words("unexpected response from SSLRequest: 0x00"),
                Cause::Closed,
                "closed before the server answered",
            ),
            (
                io(std::io::ErrorKind::UnexpectedEof),
                Cause::Closed,
                "closed before",
            ),
            (
                io(std::io::ErrorKind::ConnectionReset),
                Cause::Reset,
                "reset",
            ),
            (io(std::io::ErrorKind::BrokenPipe), Cause::Reset, "reset"),
            (
                sqlstate("25006", "cannot execute UPDATE in a read-only transaction"),
                Cause::ReadOnly,
                "read-only",
            ),
            (
                words("cannot execute UPDATE in a read-only transaction"),
                Cause::ReadOnly,
                "read-only",
            ),
            (
                sqlstate(
                    "57P01",
                    "terminating connection due to administrator command",
                ),
                Cause::Restarting,
                "restarting",
            ),
            (
                sqlstate("57P03", "the database system is starting up"),
                Cause::Restarting,
                "starting",
            ),
            (
                words("the database system is shutting down"),
                Cause::Restarting,
                "shutting down",
            ),
            (
                sqlstate("LH002", "leasehold protocol 9 is required"),
                Cause::Protocol,
                "newer leasehold",
            ),
            (
                words("this database needs leasehold ≥ 9.0.0 (protocol 9: a rule)"),
                Cause::Protocol,
                "newer leasehold",
            ),
            (needs_newer, Cause::Protocol, "newer leasehold"),
            (timeout, Cause::Timeout, "no answer in time"),
            (
                sqlstate("57014", "canceling statement due to statement timeout"),
                Cause::Timeout,
                "no answer in time",
            ),
            (
                sqlstate("42501", "permission denied for table leasehold_leases"),
                Cause::Permission,
                "permission denied",
            ),
            (
                sqlstate("28P01", "password authentication failed for user \"lh\""),
                Cause::Permission,
                "permission denied",
            ),
            (
                sqlstate("42P01", "relation \"leasehold_leases\" does not exist"),
                Cause::Schema,
                "schema",
            ),
            (
                words("relation \"leasehold_leases\" does not exist"),
                Cause::Schema,
                "schema",
            ),
            // No database to connect to is not a table missing, whatever the words.
            (
                sqlstate("3D000", "database \"leases\" does not exist"),
                Cause::Connection,
                "no connection",
            ),
            (
                sqlstate("40001", "could not serialize access"),
                Cause::Conflict,
                "another transaction",
            ),
            (
                io(std::io::ErrorKind::NotFound),
                Cause::Connection,
                "no connection",
            ),
            (
                sqlstate("23505", "duplicate key value violates unique constraint"),
                Cause::Other,
                "an error of the store's",
            ),
        ] {
            assert_eq!(Cause::of(&error), cause, "{error}");
            assert!(cause.says().contains(said), "{error}: {}", cause.says());
        }
    }

    #[test]
    fn only_the_drivers_words_name_a_cause_not_the_url() {
        // A host whose name reads like a cause: the refusal is what counts.
        let error = StoreError::Connect {
            url: "postgres://lh@standby-read-only-timeout.internal/leases".into(),
            source: sqlx::Error::Io(std::io::Error::other("no route to host")),
        };
        assert_eq!(Cause::of(&error), Cause::Connection);
    }

    #[test]
    fn causes_have_distinct_label_values_and_status_names_them_as_the_metric_does() {
        let mut seen: Vec<&str> = Cause::ALL.iter().map(|c| c.as_str()).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), Cause::ALL.len());
        let mut says: Vec<&str> = Cause::ALL.iter().map(|c| c.says()).collect();
        says.sort_unstable();
        says.dedup();
        assert_eq!(
            says.len(),
            Cause::ALL.len(),
            "each cause in words of its own"
        );
        for cause in Cause::ALL {
            let status = serde_json::to_value(cause).unwrap();
            assert_eq!(status, serde_json::json!(cause.as_str()));
            assert_eq!(serde_json::from_value::<Cause>(status).unwrap(), cause);
        }
    }
}
