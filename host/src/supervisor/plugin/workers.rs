//! One task per plugin file, kept in step with the plugin set: the tasks of removed or replaced
//! files are retired after their current call, and a replacement starts only once its
//! predecessor has finished, so two versions of a plugin never run side by side.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::plugin::{PluginEntry, PluginSet};

/// A running task of one plugin file.
struct Running {
    /// The digest of the file it runs.
    digest: String,
    /// Cancelled to retire the task after its current call.
    retire: CancellationToken,
    /// Awaited by a replacement before it starts.
    handle: JoinHandle<()>,
}

/// The tasks of one kind of plugin (reconcilers of a term, health checks of a lease).
#[derive(Default)]
pub(super) struct Workers {
    running: BTreeMap<String, Running>,
}

impl Workers {
    /// Brings the tasks in line with `set`: every `wanted` entry gets a task made by `start` (with
    /// a retire token that is a child of `parent`) and spawned by `spawn`.
    pub(super) fn sync(
        &mut self,
        set: &PluginSet,
        wanted: impl Fn(&PluginEntry) -> bool,
        parent: &CancellationToken,
        mut start: impl FnMut(Arc<PluginEntry>, CancellationToken) -> BoxFuture<'static, ()>,
        mut spawn: impl FnMut(BoxFuture<'static, ()>) -> JoinHandle<()>,
    ) {
        let mut retired: BTreeMap<String, JoinHandle<()>> = self
            .running
            .extract_if(.., |name, task| {
                set.get(name)
                    .is_none_or(|e| e.digest != task.digest || !wanted(e))
            })
            .map(|(name, task)| {
                task.retire.cancel();
                (name, task.handle)
            })
            .collect();
        for entry in set.values() {
            if !wanted(entry) || self.running.contains_key(&entry.name) {
                continue;
            }
            let retire = parent.child_token();
            let predecessor = retired.remove(&entry.name);
            let task = start(entry.clone(), retire.clone());
            let handle = spawn(Box::pin(async move {
                if let Some(old) = predecessor {
                    let _ = old.await;
                }
                task.await;
            }));
            let running = Running {
                digest: entry.digest.clone(),
                retire,
                handle,
            };
            self.running.insert(entry.name.clone(), running);
        }
    }
}
