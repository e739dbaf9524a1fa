//! One reconciler for one term, as a [`Work`]: started through the one [`Plugin::start`], then
//! `reconcile` on its schedule (and `handle-event` for each notification of its channels), one
//! call at a time. What follows a failed or cancelled call is the [`drive`] loop's, by the
//! [`policy`](crate::supervisor::policy).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::{debug, info, warn};

use super::instance::{Live, Plugin};
use crate::capability::events::Event;
use crate::capability::{Capabilities, PluginCapabilities};
use crate::lease::Term;
use crate::runtime::host::LeaseView;
use crate::supervisor::PluginState;
use crate::supervisor::failure::{Cancel, Failure};
use crate::supervisor::policy::{Failures, Policy, Step};
use crate::supervisor::work::{Work, drive};

/// The soonest a reconcile may ask to run again: the manifest's shortest `schedule.interval`.
const MIN_REQUEUE: Duration = Duration::from_millis(10);

/// Runs `plugin` under `term` until the term ends, the plugin is retired, or it is quarantined;
/// then shows the plugin idle if its term ended. A quarantine stays shown until the next term; a
/// file retired while the term goes on leaves the card to its successor (which starts only once
/// this task has finished); a plugin bound to a group has one card for all of its shards' tasks,
/// which this one task cannot speak for.
pub(super) async fn run(
    plugin: Plugin,
    capabilities: Arc<Capabilities>,
    term: Term,
    view: LeaseView,
) {
    let (board, name) = (plugin.board.clone(), plugin.name.clone());
    let shard = view.shard.is_some();
    let mut reconciler = Reconciler::new(plugin, capabilities, term.clone(), view);
    let mut failures = Failures::new(Policy::RECONCILER);
    drive(&mut reconciler, &mut failures, &board, &name).await;
    if term.is_cancelled() && !shard {
        board.update(&name, |s| {
            if matches!(s.state, PluginState::Running | PluginState::Backoff) {
                s.state = PluginState::Idle;
            }
        });
    }
}

/// A reconciler in one term.
struct Reconciler {
    /// The plugin file.
    plugin: Plugin,
    /// What its grants draw on.
    capabilities: PluginCapabilities,
    /// The term it runs under.
    term: Term,
    /// The lease as the plugin sees it.
    view: LeaseView,
    /// Notifications of its channels, when it has any; the listener lives as long as the task
    /// (only the holder listens).
    events: Option<mpsc::Receiver<Event>>,
    /// Notifications the listener dropped while the plugin was busy, and how many of them were
    /// already reported.
    dropped: Option<(Arc<AtomicU64>, u64)>,
    /// Ends the listener with the task.
    _listening: DropGuard,
    /// Reconciles so far in this term: the next one's `tick`.
    tick: u64,
    /// When the next reconcile is due; `None` at once (a fresh instance reconciles first).
    due: Option<Instant>,
}

impl Reconciler {
    fn new(plugin: Plugin, capabilities: Arc<Capabilities>, term: Term, view: LeaseView) -> Self {
        let capabilities = PluginCapabilities {
            plugin: plugin.name.clone(),
            host: capabilities,
            grants: plugin.entry.grants.clone(),
        };
        let listening = plugin.retire.child_token();
        let (events, dropped) = match &plugin.entry.grants.events {
            Some(source) => {
                let (rx, dropped) = source.listen(listening.clone());
                (Some(rx), Some((dropped, 0)))
            }
            None => (None, None),
        };
        Reconciler {
            plugin,
            capabilities,
            term,
            view,
            events,
            dropped,
            _listening: listening.drop_guard(),
            tick: 0,
            due: None,
        }
    }

    /// The term's end or the file's retirement, whichever comes first.
    async fn ended(term: &Term, retire: &CancellationToken) {
        tokio::select! {
            _ = term.cancelled() => {}
            _ = retire.cancelled() => {}
        }
    }

    /// Warns of notifications the listener dropped since the last warning.
    fn report_dropped(&mut self) {
        if let Some((dropped, seen)) = &mut self.dropped {
            let now = dropped.load(Ordering::Relaxed);
            if now > *seen {
                warn!(
                    dropped = now - *seen,
                    "notifications dropped while the plugin was busy; the next reconcile catches up"
                );
                *seen = now;
            }
        }
    }
}

/// The next notification, or never when the plugin has no channels.
async fn next_event(events: &mut Option<mpsc::Receiver<Event>>) -> Option<Event> {
    match events {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

impl Work for Reconciler {
    type Running = Live;

    async fn start(&mut self) -> Result<Live, Failure> {
        let live = self
            .plugin
            .start(self.view.clone(), Some(self.capabilities.clone()))
            .await
            .map_err(Failure::from)?;
        info!("plugin initialised");
        self.due = None;
        Ok(live)
    }

    async fn next(&mut self, live: &mut Live) -> Option<Result<(), Failure>> {
        // Until the next reconcile, notifications are handled as they come, one at a time.
        if let Some(due) = self.due {
            let event = tokio::select! {
                _ = Self::ended(&self.term, &self.plugin.retire) => return None,
                _ = tokio::time::sleep_until(due) => None,
                Some(event) = next_event(&mut self.events) => Some(event),
            };
            if let Some(event) = event {
                self.report_dropped();
                debug!(channel = %event.channel, "delivering a notification");
                let called = live
                    .store
                    .handle_event(&live.instance, &event.channel, &event.payload)
                    .await;
                self.plugin.board.record(&self.plugin.name, &called);
                return Some(called.result.map_err(Failure::from));
            }
        }
        let called = live.store.reconcile(&live.instance, self.tick).await;
        self.tick += 1;
        self.plugin.board.record(&self.plugin.name, &called);
        // A plugin may ask to run sooner, not to busy-loop the host; after a failure the
        // policy's backoff is the wait.
        let delay = match &called.result {
            Ok(outcome) => outcome
                .requeue_after
                .map_or(self.plugin.entry.manifest.interval, |d| d.max(MIN_REQUEUE)),
            Err(_) => Duration::ZERO,
        };
        self.due = Some(Instant::now() + delay);
        Some(called.result.map(drop).map_err(Failure::from))
    }

    fn judged(&mut self, _: Step, outcome: Result<(), &Failure>, failures: &mut Failures) {
        match outcome {
            Ok(()) | Err(Failure::Cancelled { entered: false, .. }) => {}
            Err(Failure::Cancelled {
                reason: Cancel::Retired,
                entered: true,
            }) => info!("call interrupted: the plugin file was replaced or removed"),
            Err(Failure::Cancelled { reason, .. }) => info!(
                ?reason,
                "call interrupted: the term ended; dropping the instance"
            ),
            Err(failure) => warn!(
                kind = failure.kind(),
                failures = failures.count(),
                "plugin call failed: {failure}"
            ),
        }
    }

    async fn over(&mut self) {
        Self::ended(&self.term, &self.plugin.retire).await;
    }

    async fn resumed(&mut self) -> bool {
        tokio::select! {
            resumed = self.term.resumed() => resumed,
            _ = self.plugin.retire.cancelled() => false,
        }
    }
}
