//! What the plugins' tasks read of this replica: its leases and the current plugin set, and the
//! lease as a guest sees it.

use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::watch;

use crate::lease::{Leases, Term};
use crate::manifest::Binding;
use crate::plugin::{PluginEntry, PluginSet};
use crate::runtime::host::{LeaseView, ShardView};

/// This replica's leases and plugin set, shared by the supervisor and every plugin task.
#[derive(Debug, Clone)]
pub(super) struct Replica {
    /// The leases of this replica, for leadership, gates and the holder id.
    pub(super) leases: Arc<Leases>,
    /// The current plugin set, replaced whole when the directory changes.
    pub(super) plugins: watch::Receiver<Arc<PluginSet>>,
}

impl Replica {
    /// The lease `lease` as `entry`'s guest sees it: held in `term` since the given time, or by
    /// another replica (or nobody) without one.
    pub(super) fn view(
        &self,
        entry: &PluginEntry,
        lease: &str,
        term: Option<(Term, SystemTime)>,
    ) -> LeaseView {
        let (term, acquired_at) = term.unzip();
        LeaseView {
            name: lease.to_string(),
            holder: self.leases.holder().to_string(),
            term,
            acquired_at,
            shard: self.shard_of(entry, lease),
        }
    }

    /// The shard `lease` is, for a plugin bound to its group: what the guest's `lease.shard`
    /// answers.
    fn shard_of(&self, entry: &PluginEntry, lease: &str) -> Option<ShardView> {
        let index = entry.manifest.binding.shard_of(lease)?;
        let Binding::Group(group) = &entry.manifest.binding else {
            return None;
        };
        let count = self
            .leases
            .groups()
            .iter()
            .find(|g| g.name == *group)
            .map(|g| g.shards)?;
        Some(ShardView {
            group: group.clone(),
            index,
            count,
        })
    }
}
