//! `events`: PostgreSQL notifications on the channels a plugin's manifest lists, delivered to the
//! plugin only while its replica holds the lease. A listener runs per term; notifications sent
//! while nobody listens (between terms, during a reconnect) are lost, which is why the schedule
//! stays the plugin's correctness fallback.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// Notifications buffered for a plugin that is busy; beyond it they are dropped (and counted),
/// since the next reconcile catches up anyway.
pub const BUFFER: usize = 256;

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

    /// Listens until `stop`, reconnecting with backoff. Returns the receiving end and a counter of
    /// notifications dropped because the plugin fell behind.
    pub fn listen(
        &self,
        stop: CancellationToken,
    ) -> (
        mpsc::Receiver<Event>,
        std::sync::Arc<std::sync::atomic::AtomicU64>,
    ) {
        let (tx, rx) = mpsc::channel(BUFFER);
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = dropped.clone();
        let channels = self.channels.clone();
        let options = self.options.clone();
        let database = self.database.clone();
        tokio::spawn(async move {
            let pool = PgPoolOptions::new()
                .max_connections(1)
                .connect_lazy_with(options.application_name("leasehold-events"));
            let mut backoff = Duration::from_millis(100);
            while !stop.is_cancelled() {
                let subscribed = async {
                    let mut listener = PgListener::connect_with(&pool).await?;
                    listener
                        .listen_all(channels.iter().map(String::as_str))
                        .await?;
                    Ok::<_, sqlx::Error>(listener)
                };
                let mut listener = tokio::select! {
                    _ = stop.cancelled() => return,
                    r = subscribed => match r {
                        Ok(l) => l,
                        Err(e) => {
                            warn!(%database, error = %e, retry_in = ?backoff, "cannot listen for plugin events");
                            tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(backoff) => {} }
                            backoff = (backoff * 2).min(Duration::from_secs(5));
                            continue;
                        }
                    },
                };
                debug!(%database, ?channels, "listening for plugin events");
                backoff = Duration::from_millis(100);
                loop {
                    let received = tokio::select! {
                        _ = stop.cancelled() => return,
                        r = listener.try_recv() => r,
                    };
                    match received {
                        Ok(Some(n)) => {
                            let event = Event {
                                channel: n.channel().to_string(),
                                payload: n.payload().to_string(),
                            };
                            match tx.try_send(event) {
                                Ok(()) => {}
                                Err(mpsc::error::TrySendError::Full(_)) => {
                                    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                }
                                Err(mpsc::error::TrySendError::Closed(_)) => return,
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            warn!(%database, error = %e, "plugin event listener lost its connection; listening again");
                            break;
                        }
                    }
                }
            }
        });
        (rx, dropped)
    }
}
