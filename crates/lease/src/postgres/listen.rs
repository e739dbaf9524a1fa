//! One PostgreSQL `LISTEN` loop for every listener of the host: the lease store's release
//! notifications and the plugins' event channels. A [`Subscription`] connects, listens on its
//! channels, backs off after a failure, subscribes afresh after a lost connection and ends with
//! its token; what becomes of each [`Received`] item (a resubscription included) is its caller's.

use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::{PgConnection, PgListener, PgNotification, PgPool};
use tokio_util::sync::CancellationToken;
use tracing::{debug, field, info, warn};

use crate::backoff::{Backoff, JITTER};

/// The waits between failed subscriptions: 0.1 s at first, as a connection that dropped is usually
/// back at once; at most 5 s, as notifications sent meanwhile are lost and a database that is
/// back must be heard again within seconds (standbys and plugins poll as a fallback). Spread as
/// campaigns are: replicas that lost the server together do not all come back to it in the same
/// millisecond.
const BACKOFF: Backoff =
    Backoff::new(Duration::from_millis(100), Duration::from_secs(5)).with_jitter(JITTER);

/// How often a run of failed attempts is summed up in the log: the first is warned, then one
/// line per this long, then one when it listens again; each attempt is at debug level.
const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// What a subscription logs, in its caller's words (tests and operators grep them).
#[derive(Debug, Clone)]
pub struct Logs {
    /// How the database is named in every message (`database = …`); no such field when `None`.
    pub database: Option<String>,
    /// Warned when subscribing fails, with the error and the wait before the next attempt.
    pub cannot_subscribe: &'static str,
    /// Warned when an established subscription fails, with the error, before subscribing again.
    pub lost_connection: &'static str,
    /// Logged at debug level, with the channels, each time the subscription is established.
    pub listening: Option<&'static str>,
}

/// What [`Subscription::next`] yields.
#[derive(Debug)]
pub enum Received {
    /// A notification on one of the channels.
    Notification(PgNotification),
    /// Listening again after a lost connection, so notifications sent in between are lost. Never
    /// yielded for the first subscription.
    Resubscribed,
}

/// The channels of one database, listened to until a token is cancelled.
#[derive(Debug)]
pub struct Subscription {
    /// Where connections come from.
    pool: PgPool,
    /// The `LISTEN` channels.
    channels: Vec<String>,
    /// Ends the subscription.
    stop: CancellationToken,
    /// What it logs.
    logs: Logs,
    /// The established listener, while there is one.
    listener: Option<PgListener>,
    /// Whether a subscription was established before (so the next one is a resubscription).
    subscribed_before: bool,
    /// The run of failed attempts under way: when it began, how many, when it was last summed up.
    failing: Option<(tokio::time::Instant, u32, tokio::time::Instant)>,
}

impl Subscription {
    /// Listens on `channels` with connections of `pool` until `stop`. Nothing connects before the
    /// first [`Subscription::next`].
    pub fn new(
        pool: PgPool,
        channels: Vec<String>,
        stop: CancellationToken,
        logs: Logs,
    ) -> Subscription {
        Subscription {
            pool,
            channels,
            stop,
            logs,
            listener: None,
            subscribed_before: false,
            failing: None,
        }
    }

    /// The next notification, or [`Received::Resubscribed`] once each time it listens again;
    /// `None` once the token is cancelled. Failures are logged and retried with backoff.
    pub async fn next(&mut self) -> Option<Received> {
        let database = self.logs.database.as_deref().map(field::display);
        loop {
            let Some(listener) = &mut self.listener else {
                if self.stop.is_cancelled() {
                    return None;
                }
                let (pool, channels) = (&self.pool, &self.channels);
                // After a lost connection or a failed attempt, one connection attempt of its own
                // first: the pool, asked for a connection the server refuses, tries again and
                // again until its acquire timeout, where this loop's backoff should decide.
                let probe_first = self.subscribed_before || self.failing.is_some();
                let subscribed = async {
                    if probe_first {
                        let options = pool.connect_options();
                        drop(PgConnection::connect_with(&options).await?);
                    }
                    let mut listener = PgListener::connect_with(pool).await?;
                    // A lost connection ends `try_recv` at once (`Ok(None)`) and this loop
                    // subscribes again, with its probe and backoff: the listener's own reconnect
                    // would wait in the pool, retrying, until its acquire timeout.
                    listener.eager_reconnect(false);
                    listener
                        .listen_all(channels.iter().map(String::as_str))
                        .await?;
                    Ok::<_, sqlx::Error>(listener)
                };
                let error = tokio::select! {
                    biased;
                    _ = self.stop.cancelled() => return None,
                    r = subscribed => match r {
                        Ok(listener) => {
                            self.listener = Some(listener);
                            if let Some((since, attempts, _)) = self.failing.take() {
                                info!(
                                    database,
                                    attempts,
                                    after = %self.logs.cannot_subscribe,
                                    "listening again after {} ({attempts} failed attempts)",
                                    crate::text::duration(since.elapsed())
                                );
                            }
                            if let Some(listening) = self.logs.listening {
                                debug!(database, channels = ?self.channels, "{listening}");
                            }
                            if std::mem::replace(&mut self.subscribed_before, true) {
                                return Some(Received::Resubscribed);
                            }
                            continue;
                        }
                        Err(error) => error,
                    },
                };
                // PostgreSQL is never simulated, so the system's entropy will do.
                let mut rng = crate::seams::Seams::system().rng("listen");
                let failures = self.failing.map_or(1, |(_, attempts, _)| attempts + 1);
                let retry_in = BACKOFF.jittered(failures, &mut rng);
                let now = crate::seams::now();
                match &mut self.failing {
                    None => {
                        self.failing = Some((now, 1, now));
                        warn!(database, error = %error, retry_in = ?retry_in, "{}; retrying with backoff, summed up every {}s", self.logs.cannot_subscribe, SUMMARY_EVERY.as_secs());
                    }
                    Some((since, attempts, said)) => {
                        *attempts += 1;
                        if now.duration_since(*said) >= SUMMARY_EVERY {
                            *said = now;
                            warn!(database, error = %error, attempts = *attempts, "{} for {} ({} attempts)", self.logs.cannot_subscribe, crate::text::duration(now.duration_since(*since)), *attempts);
                        } else {
                            debug!(database, error = %error, retry_in = ?retry_in, "{}", self.logs.cannot_subscribe);
                        }
                    }
                }
                tokio::select! {
                    biased;
                    _ = self.stop.cancelled() => return None,
                    _ = tokio::time::sleep(retry_in) => {}
                }
                continue;
            };
            let received = tokio::select! {
                biased;
                _ = self.stop.cancelled() => return None,
                r = listener.try_recv() => r,
            };
            match received {
                Ok(Some(notification)) => return Some(Received::Notification(notification)),
                // The connection dropped (None) or failed: subscribe afresh on a new one.
                Ok(None) => self.listener = None,
                Err(error) => {
                    warn!(database, error = %error, "{}", self.logs.lost_connection);
                    self.listener = None;
                }
            }
        }
    }
}
