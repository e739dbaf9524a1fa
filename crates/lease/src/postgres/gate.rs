//! One connection attempt per call while the server cannot be reached.
//!
//! A pool asked for a connection it does not have opens one, and when the server refuses it (or
//! says it is starting up) the pool tries again, from 10 ms doubling, until its acquire timeout:
//! one campaign against a stopped server became about eight connection attempts, ~12 a second
//! from one replica at ttl 2 s. The gate knows only whether the last call ended that way (its
//! error is one the pool retries, or its caller gave up on it while it waited). While it did, a
//! call first makes one connection attempt of its own and fails with that attempt's error without
//! entering the pool; the first that connects opens the gate for everyone. A server that accepts
//! and closes (a proxy with nothing behind it) fails each attempt at once, without the pool's
//! retries, so those calls go to the pool directly and a recovery costs no extra connection.

use std::sync::atomic::{AtomicBool, Ordering};

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool};

use crate::store::StoreError;

/// Whether the server was last found unreachable, and how to try it.
#[derive(Debug)]
pub(super) struct Gate {
    /// Set when a call failed for want of a connection, cleared by one that connected.
    down: AtomicBool,
    /// What a probe connects with: the store's own settings.
    options: PgConnectOptions,
    /// The pools whose idle connections are dropped when the gate opens again: they were open
    /// through the outage, and each dead one handed to a call (the pools do not test a
    /// connection before handing it out) would cost a failed call and a retry interval.
    pools: Vec<PgPool>,
}

impl Gate {
    /// An open gate for connections made with `options`, in front of `pools`.
    pub(super) fn new(options: PgConnectOptions, pools: Vec<PgPool>) -> Gate {
        Gate {
            down: AtomicBool::new(false),
            options,
            pools,
        }
    }

    /// Runs `call` (op `op`), first making one connection attempt of its own if the last call
    /// found the server refusing; notes whether this one did.
    pub(super) async fn call<T>(
        &self,
        op: &'static str,
        call: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, StoreError> {
        if self.down.load(Ordering::Relaxed) {
            let probe = PgConnection::connect_with(&self.options)
                .await
                .map_err(StoreError::query(op))?;
            // Dropped, not kept: the pool opens its own.
            drop(probe);
            if self.down.swap(false, Ordering::Relaxed) {
                for pool in &self.pools {
                    while let Some(idle) = pool.try_acquire() {
                        drop(idle.detach());
                    }
                }
            }
        }
        // A call its caller gives up on (the store call's timeout) may have been waiting in the
        // pool's retries: closed unless it ends here.
        let mut given_up = GivenUp(&self.down, true);
        let result = call.await;
        given_up.1 = false;
        if let Err(error) = &result
            && pool_retries(error)
        {
            self.down.store(true, Ordering::Relaxed);
        }
        result.map_err(StoreError::query(op))
    }
}

/// Closes the gate when dropped armed: the call it watched did not end.
struct GivenUp<'a>(&'a AtomicBool, bool);

impl Drop for GivenUp<'_> {
    fn drop(&mut self) {
        if self.1 {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

/// Whether `error` is one the pool retries on its own while connecting: the server refused
/// the connection, is starting up or has no connection slot left (sqlx's transient errors), or
/// the pool gave up waiting for one.
fn pool_retries(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(io) => io.kind() == std::io::ErrorKind::ConnectionRefused,
        sqlx::Error::PoolTimedOut => true,
        sqlx::Error::Database(db) => matches!(db.code().as_deref(), Some("57P03" | "53300")),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_connection_closes_the_gate_and_one_closed_at_once_does_not() {
        let io = |kind| sqlx::Error::Io(std::io::Error::from(kind));
        assert!(pool_retries(&io(std::io::ErrorKind::ConnectionRefused)));
        assert!(pool_retries(&sqlx::Error::PoolTimedOut));
        // The pool gives up on these at once: a call makes one attempt anyway.
        assert!(!pool_retries(&io(std::io::ErrorKind::ConnectionReset)));
        assert!(!pool_retries(&sqlx::Error::Protocol(
            "unexpected response from SSLRequest: 0x00".into()
        )));
        assert!(!pool_retries(&sqlx::Error::RowNotFound));
    }

    #[tokio::test]
    async fn a_call_its_caller_gave_up_on_closes_the_gate() {
        let gate = Gate::new(PgConnectOptions::new(), Vec::new());
        let waiting = gate.call(
            "campaign",
            std::future::pending::<Result<(), sqlx::Error>>(),
        );
        let given_up = tokio::time::timeout(std::time::Duration::from_millis(10), waiting).await;
        assert!(given_up.is_err());
        assert!(gate.down.load(Ordering::Relaxed));
    }

    #[tokio::test]
    async fn while_closed_a_call_makes_one_attempt_and_fails_without_running() {
        // Nothing listens on port 1 of the loopback: the probe is refused at once.
        let options = PgConnectOptions::new().host("127.0.0.1").port(1);
        let gate = Gate::new(options, Vec::new());
        gate.down.store(true, Ordering::Relaxed);
        let mut ran = false;
        let result = gate
            .call("campaign", async {
                ran = true;
                Ok(())
            })
            .await;
        assert!(!ran, "the call ran behind a closed gate");
        let error = result.unwrap_err().to_string();
        assert!(error.starts_with("campaign failed"), "{error}");
        assert!(gate.down.load(Ordering::Relaxed));
    }
}
