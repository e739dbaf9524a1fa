//! One reconciler for one term: instantiate, `init`, then `reconcile` on its schedule (and
//! `handle-event` for each notification of its channels), one call at a time. What follows a
//! failed or cancelled call is the [`policy`](super::policy)'s decision.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::policy::{Failures, Next, Policy, Step};
use super::status::{PluginState, StatusBoard};
use crate::capability::events::Event;
use crate::capability::{Capabilities, PluginCapabilities};
use crate::lease::Term;
use crate::plugin::PluginEntry;
use crate::runtime::host::LeaseView;
use crate::runtime::{CallFailure, Called, Cancel, Instance, PluginStore, Runtime};

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

/// The soonest a reconcile may ask to run again: the manifest's shortest `schedule.interval`.
const MIN_REQUEUE: Duration = Duration::from_millis(10);

/// The next notification, or never when the plugin has no channels.
async fn next_event(events: &mut Option<mpsc::Receiver<Event>>) -> Option<Event> {
    match events {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// What the loop does after a call, once the policy's wait is over.
enum Then {
    /// Go on with the same instance.
    Go,
    /// Start a fresh instance.
    Fresh,
    /// The task ends.
    End,
}

impl ReconcileTask {
    /// Runs until the term ends, the plugin is retired, or it is quarantined; then shows the
    /// plugin idle if its term ended. A quarantine stays shown until the next term; a file
    /// retired while the term goes on leaves the card to its successor (which starts only once
    /// this task has finished); a plugin bound to a group has one card for all of its shards'
    /// tasks, which this one task cannot speak for.
    pub(super) async fn run(self) {
        let (board, term) = (self.board.clone(), self.term.clone());
        let name = self.entry.name.clone();
        let shard = self.view.shard.is_some();
        self.serve().await;
        if term.is_cancelled() && !shard {
            board.update(&name, |s| {
                if matches!(s.state, PluginState::Running | PluginState::Backoff) {
                    s.state = PluginState::Idle;
                }
            });
        }
    }

    /// The task's work: see [`ReconcileTask::run`].
    async fn serve(self) {
        let Ok(loaded) = &self.entry.loaded else {
            return;
        };
        let name: Arc<str> = Arc::from(self.entry.name.as_str());
        let config: Vec<(String, String)> =
            self.entry.manifest.config.clone().into_iter().collect();
        let caps = PluginCapabilities {
            plugin: name.clone(),
            host: self.capabilities.clone(),
            grants: self.entry.grants.clone(),
        };
        // Only the holder listens: the listener lives as long as this task.
        let listening = self.retire.child_token();
        let _stop_listening = listening.clone().drop_guard();
        let (mut events, dropped) = match &self.entry.grants.events {
            Some(source) => {
                let (rx, dropped) = source.listen(listening);
                (Some(rx), Some(dropped))
            }
            None => (None, None),
        };
        let mut dropped_seen = 0;
        let mut failures = Failures::new(Policy::RECONCILER);
        let mut tick = 0u64;
        'instance: loop {
            // A fresh store per instance: after any trap or dropped call the old one is poisoned.
            // Counted from here until the store is dropped (declared first, dropped last).
            let _alive = self.runtime.metrics().store_alive(&name);
            let mut store = self.runtime.new_store(
                name.clone(),
                self.view.clone(),
                &self.entry.manifest.limits,
                Some(caps.clone()),
            );
            let called = store.instantiate(&loaded.prepared, &self.retire).await;
            self.board.record(&name, &called);
            let (instance, result) = split(called.result);
            match self.follow(&mut failures, Step::Start, result).await {
                Then::Go => {}
                Then::Fresh => continue 'instance,
                Then::End => return,
            }
            let Some(instance) = instance else {
                continue 'instance;
            };
            let called = store.init(&instance, &config).await;
            self.board.record(&name, &called);
            let initialised = called.result.is_ok();
            if initialised {
                info!("plugin initialised");
                self.board.update(&name, |s| s.state = PluginState::Running);
            }
            match self
                .follow(&mut failures, Step::Start, called.result.map(drop))
                .await
            {
                // An instance whose init did not succeed (or never ran) is of no use: start again.
                Then::Go if initialised => {}
                Then::Go | Then::Fresh => continue 'instance,
                Then::End => return,
            }
            loop {
                let called = store.reconcile(&instance, tick).await;
                tick += 1;
                self.board.record(&name, &called);
                let delay = match &called.result {
                    // A plugin may ask to run sooner, not to busy-loop the host.
                    Ok(outcome) => outcome
                        .requeue_after
                        .map_or(self.entry.manifest.interval, |d| d.max(MIN_REQUEUE)),
                    Err(_) => Duration::ZERO,
                };
                let was_failing = failures.count() > 0;
                match self
                    .follow(&mut failures, Step::Call, called.result.map(drop))
                    .await
                {
                    Then::Go => {}
                    Then::Fresh => continue 'instance,
                    Then::End => return,
                }
                if was_failing && failures.count() == 0 {
                    self.board.update(&name, |s| s.state = PluginState::Running);
                }
                // Until the next reconcile, notifications are handled as they come, one at a time.
                let next = tokio::time::Instant::now() + delay;
                loop {
                    let event = tokio::select! {
                        _ = self.term.cancelled() => return,
                        _ = self.retire.cancelled() => return,
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
                    let called = handle(&mut store, &instance, &event).await;
                    self.board.record(&name, &called);
                    match self.follow(&mut failures, Step::Call, called.result).await {
                        Then::Go => {}
                        Then::Fresh => continue 'instance,
                        Then::End => return,
                    }
                }
            }
        }
    }

    /// Carries out the policy's decision on one outcome: logs it, shows it, waits out the backoff
    /// or the term, and says how to go on.
    async fn follow(
        &self,
        failures: &mut Failures,
        step: Step,
        outcome: Result<(), CallFailure>,
    ) -> Then {
        let name = self.entry.name.as_str();
        let next = failures.after(step, outcome.as_ref().map(|_| ()));
        if let Err(failure) = &outcome {
            match failure {
                CallFailure::Cancelled {
                    reason: Cancel::Retired,
                    entered: true,
                } => info!("call interrupted: the plugin file was replaced or removed"),
                CallFailure::Cancelled {
                    reason,
                    entered: true,
                } => info!(
                    ?reason,
                    "call interrupted: the term ended; dropping the instance"
                ),
                CallFailure::Cancelled { .. } => {}
                _ => warn!(
                    kind = failure.kind(),
                    failures = failures.count(),
                    "plugin call failed: {failure}"
                ),
            }
        }
        match next {
            Next::Proceed => Then::Go,
            Next::Retry { after, fresh } => {
                self.board.update(name, |s| s.state = PluginState::Backoff);
                tokio::select! {
                    _ = self.term.cancelled() => return Then::End,
                    _ = self.retire.cancelled() => return Then::End,
                    _ = tokio::time::sleep(after) => {}
                }
                if fresh { Then::Fresh } else { Then::Go }
            }
            Next::Quarantine => {
                // The task ends here, dropping the instance, its store and their memory (and the
                // plugin's event listener): a quarantined plugin holds nothing until the next
                // term or a new file starts it again.
                warn!(
                    failures = failures.count(),
                    "plugin quarantined until the next term or a new file; its instance and store are dropped"
                );
                self.board
                    .update(name, |s| s.state = PluginState::Quarantined);
                Then::End
            }
            Next::AwaitTerm { fresh } => {
                let resumed = tokio::select! {
                    resumed = self.term.resumed() => resumed,
                    _ = self.retire.cancelled() => false,
                };
                match (resumed, fresh) {
                    (false, _) => Then::End,
                    (true, true) => Then::Fresh,
                    (true, false) => Then::Go,
                }
            }
            Next::Stop => Then::End,
        }
    }
}

/// Delivers one notification.
async fn handle(store: &mut PluginStore, instance: &Instance, event: &Event) -> Called<()> {
    store
        .handle_event(instance, &event.channel, &event.payload)
        .await
}

/// The instance, if there is one, and the outcome without it.
fn split(result: Result<Instance, CallFailure>) -> (Option<Instance>, Result<(), CallFailure>) {
    match result {
        Ok(instance) => (Some(instance), Ok(())),
        Err(failure) => (None, Err(failure)),
    }
}
