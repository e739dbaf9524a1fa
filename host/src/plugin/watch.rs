//! Hot reload: the plugin directory is watched, and adding, replacing or removing a file takes
//! effect without a restart. Events are debounced until the directory has been quiet for a moment,
//! so a file that is still being written is not loaded half-way.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::directory::{PluginSet, scan};
use crate::capability::Capabilities;
use crate::runtime::Runtime;

/// How long the directory must be quiet before it is rescanned: long enough for a copy to finish,
/// short enough that a deploy feels instant.
pub const QUIET: Duration = Duration::from_millis(300);

/// Watches `dir` until `shutdown`, publishing a new plugin set through `tx` after each change.
/// Returns once the watch is established, so that no change after start-up is missed.
pub fn spawn(
    dir: PathBuf,
    runtime: Arc<Runtime>,
    capabilities: Arc<Capabilities>,
    tx: watch::Sender<Arc<PluginSet>>,
    shutdown: CancellationToken,
) -> notify::Result<tokio::task::JoinHandle<()>> {
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Which file changed does not matter: the whole (small) directory is rescanned.
        let _ = events_tx.send(event.map(|_| ()));
    })?;
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    Ok(tokio::spawn(async move {
        // The watcher stops when dropped: keep it for the life of the task.
        let _watcher = watcher;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                event = events.recv() => match event {
                    None => return,
                    Some(Err(e)) => { warn!(dir = %dir.display(), error = %e, "plugin directory watch error"); continue }
                    Some(Ok(())) => {}
                },
            }
            // Debounce: wait until nothing has happened for QUIET.
            while let Ok(Some(_)) = tokio::time::timeout(QUIET, events.recv()).await {}
            let previous = tx.borrow().clone();
            let (scan_dir, scan_runtime, scan_caps, scan_previous) = (
                dir.clone(),
                runtime.clone(),
                capabilities.clone(),
                previous.clone(),
            );
            let scanned = tokio::task::spawn_blocking(move || {
                scan(&scan_dir, &scan_runtime, &scan_caps, &scan_previous)
            })
            .await;
            let set = match scanned {
                Ok(Ok(set)) => set,
                Ok(Err(e)) => {
                    warn!(dir = %dir.display(), error = %e, "cannot rescan the plugin directory");
                    continue;
                }
                Err(e) => {
                    warn!(error = %e, "plugin rescan panicked");
                    continue;
                }
            };
            let same = set.len() == previous.len()
                && set
                    .iter()
                    .all(|(name, e)| previous.get(name).is_some_and(|p| Arc::ptr_eq(p, e)));
            if same {
                continue;
            }
            for name in previous.keys().filter(|name| !set.contains_key(*name)) {
                info!(plugin = %name, "plugin removed");
            }
            tx.send_replace(Arc::new(set));
        }
    }))
}
