//! `events`: PostgreSQL notifications on the channels a plugin's manifest lists, delivered to the
//! plugin only while its replica holds the lease. A listener runs per term; notifications sent
//! while nobody listens (between terms, during a reconnect) are lost, which is why the schedule
//! stays the plugin's correctness fallback.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::lease::postgres::listen::{Logs, Received, Subscription};

/// Notifications buffered for a plugin that is busy; beyond it they are dropped (and counted),
/// since the next reconcile catches up anyway.
pub(crate) const BUFFER: usize = 256;

/// One notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The channel.
    pub channel: String,
    /// The payload (PostgreSQL caps it below 8000 bytes).
    pub payload: String,
}

/// Where a plugin's events come from: channels on one database.
pub struct EventSource {
    /// The LISTEN channels.
    pub channels: Vec<String>,
    /// The database: the sql grant's when the plugin has one, else the lease database.
    options: PgConnectOptions,
    /// How the database is named in logs (an environment variable or "the lease database").
    pub database: String,
}

impl std::fmt::Debug for EventSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSource")
            .field("channels", &self.channels)
            .field("database", &self.database)
            .finish_non_exhaustive()
    }
}

impl EventSource {
    /// Channels on the database reached with `options`.
    pub fn new(channels: Vec<String>, options: PgConnectOptions, database: String) -> Self {
        EventSource {
            channels,
            options,
            database,
        }
    }

    /// Listens until `stop`, reconnecting with backoff (a [`Subscription`]). Returns the receiving
    /// end and a counter of notifications dropped because the plugin fell behind.
    pub fn listen(&self, stop: CancellationToken) -> (mpsc::Receiver<Event>, Arc<AtomicU64>) {
        let (tx, rx) = mpsc::channel(BUFFER);
        let dropped = Arc::new(AtomicU64::new(0));
        let counter = dropped.clone();
        let channels = self.channels.clone();
        let options = self.options.clone();
        let logs = Logs {
            database: Some(self.database.clone()),
            cannot_subscribe: "cannot listen for plugin events",
            lost_connection: "plugin event listener lost its connection; listening again",
            listening: Some("listening for plugin events"),
        };
        tokio::spawn(async move {
            let pool = PgPoolOptions::new()
                .max_connections(1)
                .connect_lazy_with(options.application_name("leasehold-events"));
            let mut subscription = Subscription::new(pool, channels, stop, logs);
            while let Some(received) = subscription.next().await {
                // A resubscription needs no word: the plugin's schedule catches up on what was lost.
                let Received::Notification(n) = received else {
                    continue;
                };
                let event = Event {
                    channel: n.channel().to_string(),
                    payload: n.payload().to_string(),
                };
                match tx.try_send(event) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                    // The plugin's task is over.
                    Err(mpsc::error::TrySendError::Closed(_)) => return,
                }
            }
        });
        (rx, dropped)
    }
}
