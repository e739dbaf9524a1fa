//! The one bridge from the HTTP thread to the lease loop. The endpoint runs on a thread and
//! runtime of its own, so that no number of watchers can hold up the lease loop; but the store's
//! pools hold connections tied to the lease loop's runtime: a connection opened, or woken, from
//! the HTTP thread's runtime would be tied to that runtime's reactor, which stops before the store
//! is dropped. So whatever the endpoint asks of the store runs on the lease loop: a snapshot's
//! refresh ([`LeaseLoop::spawn`]) and each of the admin API's store calls ([`OnLoop`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::lease::history::TermRecord;
use crate::lease::store::{
    CampaignedMany, GroupView, LeaseRecord, LeaseStore, ReleaseNotice, RenewRequest, Renewed,
    RenewedOne,
};
use crate::lease::{Epoch, Leases, StoreError};

/// The lease loop of a replica, as the HTTP thread reaches it: its leases, and the runtime they
/// are driven on.
#[derive(Debug, Clone)]
pub(crate) struct LeaseLoop {
    /// The leases of this replica.
    leases: Arc<Leases>,
    /// The lease loop's runtime.
    runtime: Handle,
}

impl LeaseLoop {
    /// The lease loop of `leases`: call it on the runtime that drives them.
    pub(crate) fn here(leases: Arc<Leases>) -> LeaseLoop {
        LeaseLoop {
            leases,
            runtime: Handle::current(),
        }
    }

    /// The leases of this replica.
    pub(crate) fn leases(&self) -> &Arc<Leases> {
        &self.leases
    }

    /// Starts `work` on the lease loop.
    pub(crate) fn spawn<F>(&self, work: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.runtime.spawn(work)
    }

    /// The lease store, its every call run on the lease loop.
    pub(crate) fn store(&self) -> OnLoop {
        OnLoop {
            store: self.leases.store().clone(),
            runtime: self.runtime.clone(),
        }
    }
}

/// The lease store with every call run on the lease loop (see the module's docs).
#[derive(Debug)]
pub(crate) struct OnLoop {
    /// The store.
    store: Arc<dyn LeaseStore>,
    /// The runtime its calls run on.
    runtime: Handle,
}

impl OnLoop {
    /// Runs `call` on the store's runtime and waits for it; a call that panicked or was
    /// cancelled there is an unavailable store.
    async fn run<T, F>(&self, call: impl FnOnce(Arc<dyn LeaseStore>) -> F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        self.runtime
            .spawn(call(self.store.clone()))
            .await
            .map_err(|e| StoreError::Unavailable(format!("the store call ended early: {e}")))?
    }
}

#[async_trait]
impl LeaseStore for OnLoop {
    fn backend(&self) -> &'static str {
        self.store.backend()
    }

    async fn campaign_in_line(
        &self,
        holder: &str,
        bids: &[crate::lease::store::Bid],
        ttl: Duration,
    ) -> Result<CampaignedMany, StoreError> {
        let (holder, bids) = (holder.to_string(), bids.to_vec());
        self.run(|s| async move { s.campaign_in_line(&holder, &bids, ttl).await })
            .await
    }

    async fn read_grant(
        &self,
        name: &str,
        holder: &str,
        epoch: crate::lease::Epoch,
    ) -> Result<crate::lease::store::GrantSeen, StoreError> {
        let (name, holder) = (name.to_string(), holder.to_string());
        self.run(|s| async move { s.read_grant(&name, &holder, epoch).await })
            .await
    }

    async fn renew(&self, holder: &str, leases: &[RenewRequest]) -> Result<Renewed, StoreError> {
        let (holder, leases) = (holder.to_string(), leases.to_vec());
        self.run(|s| async move { s.renew(&holder, &leases).await })
            .await
    }

    async fn renew_one(
        &self,
        holder: &str,
        lease: &RenewRequest,
        timeout: Duration,
    ) -> Result<RenewedOne, StoreError> {
        let (holder, lease) = (holder.to_string(), lease.clone());
        self.run(|s| async move { s.renew_one(&holder, &lease, timeout).await })
            .await
    }

    async fn force_release(&self, name: &str) -> Result<Option<(String, Epoch)>, StoreError> {
        let name = name.to_string();
        self.run(|s| async move { s.force_release(&name).await })
            .await
    }

    async fn request_handoff(
        &self,
        name: &str,
        to: Option<&str>,
    ) -> Result<Option<LeaseRecord>, StoreError> {
        let (name, to) = (name.to_string(), to.map(str::to_string));
        self.run(|s| async move { s.request_handoff(&name, to.as_deref()).await })
            .await
    }

    async fn get(&self, names: &[String]) -> Result<Vec<LeaseRecord>, StoreError> {
        let names = names.to_vec();
        self.run(|s| async move { s.get(&names).await }).await
    }

    async fn list(&self, after: Option<&str>, limit: u32) -> Result<Vec<LeaseRecord>, StoreError> {
        let after = after.map(str::to_string);
        self.run(|s| async move { s.list(after.as_deref(), limit).await })
            .await
    }

    async fn terms(&self, names: &[String], per_lease: u32) -> Result<Vec<TermRecord>, StoreError> {
        let names = names.to_vec();
        self.run(|s| async move { s.terms(&names, per_lease).await })
            .await
    }

    async fn heartbeat(
        &self,
        group: &str,
        member: &str,
        shards: &[String],
        ttl: Duration,
    ) -> Result<GroupView, StoreError> {
        let (group, member, shards) = (group.to_string(), member.to_string(), shards.to_vec());
        self.run(|s| async move { s.heartbeat(&group, &member, &shards, ttl).await })
            .await
    }

    async fn members(&self) -> Result<Vec<crate::lease::MemberRecord>, StoreError> {
        self.run(|s| async move { s.members().await }).await
    }

    async fn leave(&self, groups: &[String], member: &str) -> Result<(), StoreError> {
        let (groups, member) = (groups.to_vec(), member.to_string());
        self.run(|s| async move { s.leave(&groups, &member).await })
            .await
    }

    async fn release_giving(
        &self,
        holder: &str,
        leases: &[(String, crate::lease::Epoch)],
    ) -> Result<Vec<crate::lease::store::Released>, StoreError> {
        let (holder, leases) = (holder.to_string(), leases.to_vec());
        self.run(|s| async move { s.release_giving(&holder, &leases).await })
            .await
    }

    async fn line(
        &self,
        names: &[String],
    ) -> Result<Vec<crate::lease::store::WaiterRecord>, StoreError> {
        let names = names.to_vec();
        self.run(|s| async move { s.line(&names).await }).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.run(|s| async move { s.ping().await }).await
    }

    fn listen_releases(
        &self,
        shutdown: CancellationToken,
    ) -> Option<mpsc::Receiver<ReleaseNotice>> {
        let _on = self.runtime.enter();
        self.store.listen_releases(shutdown)
    }
}
