//! One connection attempt per call while the server cannot be reached.
//!
//! A pool asked for a connection it does not have opens one, and when the server refuses it the
//! pool tries again, from 10 ms doubling, until its acquire timeout: one campaign during an outage
//! became eight connection attempts, and a replica at ttl 2 s made ~12 a second (ten times its
//! campaigns) against a server coming back up. The gate keeps count of nothing; it only knows
//! whether the last call failed for want of a connection. While it did, a call first makes one
//! connection attempt of its own, and fails with that attempt's error instead of entering the
//! pool; the first that connects opens the gate for everyone. So the connection attempts during
//! an outage are the calls themselves, which back off (campaigns) or are bounded by the term
//! (renewals), and a pool never queues a call behind a server that is not there.

use std::sync::atomic::{AtomicBool, Ordering};

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool};

use crate::lease::store::StoreError;

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

    /// Runs `call` (op `op`), first making one connection attempt of its own if the server was
    /// last found unreachable; notes whether the call found it unreachable.
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
        let result = call.await;
        if let Err(error) = &result
            && unreachable(error)
        {
            self.down.store(true, Ordering::Relaxed);
        }
        result.map_err(StoreError::query(op))
    }
}

/// Whether `error` says no connection could be had: the server refused, reset or closed it, the
/// pool could not open one in time, or the server is shutting down or starting.
fn unreachable(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut => true,
        sqlx::Error::Database(db) => {
            let code = db.code();
            let code = code.as_deref().unwrap_or_default();
            code.starts_with("08") || code.starts_with("57P")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_reset_or_closed_connection_closes_the_gate_and_a_statement_error_does_not() {
        let io = |kind| sqlx::Error::Io(std::io::Error::from(kind));
        assert!(unreachable(&io(std::io::ErrorKind::ConnectionRefused)));
        assert!(unreachable(&io(std::io::ErrorKind::ConnectionReset)));
        assert!(unreachable(&sqlx::Error::Protocol(
            "unexpected response from SSLRequest: 0x00".into()
        )));
        assert!(unreachable(&sqlx::Error::PoolTimedOut));
        assert!(!unreachable(&sqlx::Error::RowNotFound));
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
