//! An in-process lease holder on a real store, for tests of what plugins do with a term (the
//! capabilities) without starting a `leasehold` process.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use leasehold::lease::{DatabaseUrl, Driver, Leases, Term, Timing, open_store};
use tokio_util::sync::CancellationToken;

/// A replica holding one lease.
pub struct Holding {
    /// The leases of the holding replica (holder id, store).
    pub leases: Arc<Leases>,
    /// The running term.
    pub term: Term,
    /// Cancelling it releases the lease.
    pub root: CancellationToken,
}

impl Holding {
    /// Opens `url`, campaigns for `lease` with `ttl`, and waits until it holds it.
    pub async fn acquire(url: &DatabaseUrl, lease: &str, ttl: Duration) -> anyhow::Result<Self> {
        let store = open_store(url, Duration::from_secs(10), Duration::from_secs(10)).await?;
        let root = CancellationToken::new();
        let (driver, leases) = Driver::new(
            store,
            leasehold::lease::seams::Seams::system().holder_id("cap-test"),
            Timing::from_ttl(ttl),
            [lease.to_string()],
            root.clone(),
        );
        tokio::spawn(driver.run());
        let mut leadership = leases.subscribe(lease).context("lease not configured")?;
        let term = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Some(term) = leadership.borrow_and_update().term.clone() {
                    return Ok(term);
                }
                leadership.changed().await?;
            }
        })
        .await
        .context("no leadership within 10 s")?
        .map_err(|e: tokio::sync::watch::error::RecvError| anyhow::anyhow!(e))?;
        Ok(Holding { leases, term, root })
    }

    /// This replica's holder id.
    pub fn holder(&self) -> String {
        self.leases.holder().to_string()
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        self.root.cancel();
    }
}
