//! One reconciler for one term: instantiate, `init`, then `reconcile` on its schedule (and
//! `handle-event` for each notification of its channels), one call at a time, with backoff after
//! failures and quarantine after [`QUARANTINE_AFTER`] in a row.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::status::{PluginState, StatusBoard};
use super::{QUARANTINE_AFTER, backoff};
use crate::capability::events::Event;
use crate::capability::{Capabilities, PluginCapabilities};
use crate::lease::Term;
use crate::plugin::PluginEntry;
use crate::runtime::bindings::types::ReconcileContext;
use crate::runtime::host::LeaseView;
use crate::runtime::{CallFailure, Runtime};

/// What a reconciler task is given.
pub(super) struct ReconcileTask {
    /// The runtime.
    pub runtime: Arc<Runtime>,
    /// The process's capabilities.
    pub capabilities: Arc<Capabilities>,
    /// The plugin file.
    pub entry: Arc<PluginEntry>,
    /// The term it runs under.
    pub term: Term,
    /// Cancelled when the plugin is replaced or removed.
    pub retire: CancellationToken,
    /// The lease as the plugin sees it.
    pub view: LeaseView,
    /// Where its state is shown.
    pub board: StatusBoard,
}

/// Runs `call` unless the term ends first; `None` means the term ended (the call was dropped).
async fn guarded<T>(term: &Term, call: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        biased;
        _ = term.cancelled() => {
            info!("call interrupted: the term ended; dropping the instance");
            None
        }
        result = call => Some(result),
    }
}

/// The next notification, or never when the plugin has no channels.
async fn next_event(events: &mut Option<mpsc::Receiver<Event>>) -> Option<Event> {
    match events {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

impl ReconcileTask {
    /// Runs until the term ends, the plugin is retired, or it is quarantined.
    pub(super) async fn run(self) {
        let ReconcileTask {
            runtime,
            capabilities,
            entry,
            term,
            retire,
            view,
            board,
        } = self;
        let Ok(loaded) = &entry.loaded else { return };
        let name: Arc<str> = Arc::from(entry.name.as_str());
        let config: Vec<(String, String)> = entry.manifest.config.clone().into_iter().collect();
        let caps = PluginCapabilities {
            plugin: name.clone(),
            host: capabilities,
            grants: entry.grants.clone(),
        };
        // Only the holder listens: the listener lives as long as this task.
        let listening = retire.child_token();
        let _stop_listening = listening.clone().drop_guard();
        let (mut events, dropped) = match &entry.grants.events {
            Some(source) => {
                let (rx, dropped) = source.listen(listening);
                (Some(rx), Some(dropped))
            }
            None => (None, None),
        };
        let mut dropped_seen = 0;
        let mut failures = 0u32;
        let mut tick = 0u64;
        let fail = |failures: &mut u32, failure: &CallFailure| {
            *failures += 1;
            let trapped = failure.poisons_store();
            warn!(
                kind = failure.kind(),
                failures = *failures,
                "plugin call failed: {failure}"
            );
            board.update(&name, |s| {
                s.last_error = Some(failure.to_string());
                s.traps += u64::from(trapped);
                s.state = if *failures >= QUARANTINE_AFTER {
                    PluginState::Quarantined
                } else {
                    PluginState::Backoff
                };
            });
        };
        'instance: loop {
            // A fresh store per instance: after any trap the old one is poisoned and dropped.
            let mut store = runtime.new_store(
                name.clone(),
                view.clone(),
                &entry.manifest.limits,
                Some(caps.clone()),
            );
            let instance = match guarded(
                &term,
                loaded.prepared.instantiate_reconciler(&mut store.store),
            )
            .await
            {
                None | Some(None) => return,
                Some(Some(Ok(instance))) => instance,
                Some(Some(Err(e))) => {
                    fail(
                        &mut failures,
                        &CallFailure::Trap(format!("instantiation failed: {e:#}")),
                    );
                    if !pause(&term, &retire, &board, &name, failures).await {
                        return;
                    }
                    continue 'instance;
                }
            };
            board.update(&name, |s| s.calls += 1);
            let init = guarded(&term, store.call(async |s| instance.init(s, &config).await)).await;
            count_refusals(&mut store, &board, &name);
            match init {
                None => return,
                Some(Ok(())) => {
                    info!("plugin initialised");
                    board.update(&name, |s| s.state = PluginState::Running);
                }
                Some(Err(failure)) => {
                    fail(&mut failures, &failure);
                    if !pause(&term, &retire, &board, &name, failures).await {
                        return;
                    }
                    continue 'instance;
                }
            }
            loop {
                let ctx = ReconcileContext {
                    lease: view.name.clone(),
                    epoch: u64::try_from(term.epoch).unwrap_or_default(),
                    tick,
                };
                tick += 1;
                board.update(&name, |s| s.calls += 1);
                let delay = match guarded(
                    &term,
                    store.call(async |s| instance.reconcile(s, &ctx).await),
                )
                .await
                .inspect(|_| count_refusals(&mut store, &board, &name))
                {
                    None => return,
                    Some(Ok(outcome)) => {
                        if failures > 0 {
                            board.update(&name, |s| s.state = PluginState::Running);
                        }
                        failures = 0;
                        outcome
                            .requeue_after_ms
                            .map_or(entry.manifest.interval, Duration::from_millis)
                    }
                    Some(Err(failure)) => {
                        fail(&mut failures, &failure);
                        match after_failure(&failure, failures, &term, &retire, &board, &name).await
                        {
                            Next::Stop => return,
                            Next::NewInstance => continue 'instance,
                            Next::Continue => backoff(failures),
                        }
                    }
                };
                // Until the next reconcile, notifications are handled as they come, one at a time.
                let next = tokio::time::Instant::now() + delay;
                loop {
                    let event = tokio::select! {
                        _ = term.cancelled() => return,
                        _ = retire.cancelled() => return,
                        _ = tokio::time::sleep_until(next) => break,
                        Some(event) = next_event(&mut events) => event,
                    };
                    if let Some(dropped) = &dropped {
                        let now = dropped.load(Ordering::Relaxed);
                        if now > dropped_seen {
                            warn!(
                                dropped = now - dropped_seen,
                                "notifications dropped while the plugin was busy; the next reconcile catches up"
                            );
                            dropped_seen = now;
                        }
                    }
                    debug!(channel = %event.channel, "delivering a notification");
                    board.update(&name, |s| s.calls += 1);
                    let handled = guarded(
                        &term,
                        store.call(async |s| {
                            instance
                                .handle_event(s, &event.channel, &event.payload)
                                .await
                        }),
                    )
                    .await;
                    count_refusals(&mut store, &board, &name);
                    match handled {
                        None => return,
                        Some(Ok(())) => {}
                        Some(Err(failure)) => {
                            fail(&mut failures, &failure);
                            match after_failure(&failure, failures, &term, &retire, &board, &name)
                                .await
                            {
                                Next::Stop => return,
                                Next::NewInstance => continue 'instance,
                                Next::Continue => {}
                            }
                        }
                    }
                }
            }
        }
    }
}

/// What a reconciler does after a failed call.
enum Next {
    /// Keep the instance: the guest returned an error.
    Continue,
    /// The store is poisoned: back off, then start a fresh instance.
    NewInstance,
    /// The term ended, the plugin was retired, or it is quarantined.
    Stop,
}

/// Decides (and waits out) what follows the `failures`-th failure in a row.
async fn after_failure(
    failure: &CallFailure,
    failures: u32,
    term: &Term,
    retire: &CancellationToken,
    board: &StatusBoard,
    name: &str,
) -> Next {
    if failure.poisons_store() {
        return if pause(term, retire, board, name, failures).await {
            Next::NewInstance
        } else {
            Next::Stop
        };
    }
    if failures >= QUARANTINE_AFTER {
        warn!(
            failures,
            "plugin quarantined until the next term or a new file"
        );
        quarantine(term, retire).await;
        return Next::Stop;
    }
    Next::Continue
}

/// Moves the store's count of fenced writes refused during the last call to the board.
fn count_refusals(store: &mut crate::runtime::PluginStore, board: &StatusBoard, name: &str) {
    let refused = std::mem::take(&mut store.store.data_mut().fenced_refusals);
    if refused > 0 {
        board.update(name, |s| s.refused_writes += refused);
    }
}

/// Waits out the backoff; false when the plugin should stop (term over, retired, quarantined).
async fn pause(
    term: &Term,
    retire: &CancellationToken,
    board: &StatusBoard,
    name: &str,
    failures: u32,
) -> bool {
    if failures >= QUARANTINE_AFTER {
        warn!(
            failures,
            "plugin quarantined until the next term or a new file"
        );
        board.update(name, |s| s.state = PluginState::Quarantined);
        quarantine(term, retire).await;
        return false;
    }
    tokio::select! {
        _ = term.cancelled() => false,
        _ = retire.cancelled() => false,
        _ = tokio::time::sleep(backoff(failures)) => true,
    }
}

async fn quarantine(term: &Term, retire: &CancellationToken) {
    tokio::select! {
        _ = term.cancelled() => {}
        _ = retire.cancelled() => {}
    }
}
