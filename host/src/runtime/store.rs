//! One plugin's `Store` for one term, and the only way into the guest: every entry (instantiation
//! with its start function, `init`, `reconcile`, `handle-event`, `check`) goes through
//! `PluginStore::run`.
//!
//! **The clock decides, tokens only hurry things along** (docs/ARCHITECTURE.md §3.4). A process can
//! be frozen and resumed with every timer due at once, its tasks then running in any order, so a
//! task may reach the guest before the lease driver has ended the term. Hence:
//! - no call starts at or after the term's `safe_until`, checked here on the monotonic clock,
//!   whatever any token or task says;
//! - a running call traps at the first epoch tick at or after the earlier of its own deadline and
//!   `safe_until`, read afresh at every tick so a renewal that extends the term is followed;
//! - a call blocked in a host import (no wasm runs to see a tick) is dropped at the same instant;
//! - the end of the term (its token) drops the call at once, and the store bumps the engine epoch
//!   itself so a spinning guest yields now rather than at the next tick;
//! - effectful host imports check the same clock before touching a database
//!   ([`crate::capability::Fence`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};
use wasmtime::{Store, Trap, UpdateDeadline};
use wasmtime_wasi::WasiCtxBuilder;

use super::bindings::{self, event_reconciler::EventReconciler, health::HealthCheck};
use super::call::{CallFailure, CallReport, Called, Cancel, CheckRole, Outcome};
use super::host::{self, HostState, LeaseView};
use super::limits;
use super::metrics::PluginMetrics;
use super::output::GuestOutput;
use super::{Prepared, Runtime};
use crate::capability::PluginCapabilities;
use crate::lease::Term;
use crate::manifest::CallLimits;

/// Fuel per call when the manifest sets none. A tight loop burns ~1.5·10¹⁰ units a second on a
/// two-core CI machine, so this is 6–7 s of pure computation: more than the 5 s default call
/// deadline (a plugin within its deadline never meets it) and far above what a reconcile burns
/// (hello-reconciler ~2·10⁴ per call). It bounds the computation of a plugin that raised its
/// deadline, whatever the wall clock does.
pub(crate) const DEFAULT_FUEL_PER_CALL: u64 = 100_000_000_000;

/// An instance of a plugin, whatever its world.
pub struct Instance(Kind);

enum Kind {
    Reconciler(bindings::reconciler::Reconciler),
    Events(EventReconciler),
    Health(HealthCheck),
}

impl Runtime {
    /// A fresh store for `plugin` under `lease` (one term of a leader, or a standby's check):
    /// WASI granting nothing, the plugin's limits and the host's ([`limits`]), and the epoch callback that enforces the
    /// call's deadline and the term's.
    pub fn new_store(
        &self,
        plugin: Arc<str>,
        lease: LeaseView,
        limits: &CallLimits,
        capabilities: Option<PluginCapabilities>,
    ) -> PluginStore {
        let calls = self.metrics.calls_of(&plugin);
        let mut wasi = WasiCtxBuilder::new();
        let log_rate = self.log_rates.of(&plugin);
        let output = GuestOutput::capture(&mut wasi, &log_rate);
        let wasi = wasi
            .max_random_size(limits::MAX_RANDOM_BYTES)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }))
            .build();
        let term = lease.term.clone();
        let mut store = Store::new(
            &self.engine,
            HostState::new(plugin, lease, limits, capabilities, wasi, log_rate),
        );
        store.limiter(|state| &mut state.limits);
        store.set_hostcall_fuel(limits::HOSTCALL_FUEL);
        store.set_max_component_handles(limits::MAX_HANDLES);
        store.epoch_deadline_callback(|mut ctx| {
            let data = ctx.data_mut();
            let now = Instant::now();
            // The term first: past both deadlines, the call was cancelled, not the plugin's fault.
            if let Some(term) = &data.lease.term
                && !term.is_live_at(now)
            {
                data.interrupted = Some(if term.is_cancelled() {
                    Cancel::TermEnded
                } else {
                    Cancel::Deadline
                });
                return Err(Trap::Interrupt.into());
            }
            if data.call_deadline.is_some_and(|d| now >= d) {
                return Err(Trap::Interrupt.into());
            }
            Ok(UpdateDeadline::Yield(1))
        });
        // The deadline must be set before the first call: the default traps at once.
        store.set_epoch_deadline(1);
        // Whoever ends the term, bump the epoch at once so a guest spinning on another thread
        // yields now (and its call is dropped) rather than at the next tick.
        let store_gone = CancellationToken::new();
        if let Some(term) = &term {
            let (ended, gone, engine) = (term.cancelled(), store_gone.clone(), self.engine.weak());
            tokio::spawn(async move {
                tokio::select! {
                    _ = ended => if let Some(engine) = engine.upgrade() { engine.increment_epoch() },
                    _ = gone.cancelled() => {}
                }
            });
        }
        PluginStore {
            store,
            metrics: self.metrics.clone(),
            calls,
            limits: *limits,
            meters_fuel: self.options.fuel,
            ticking: self.ticking.clone(),
            output,
            _watch: store_gone.drop_guard(),
        }
    }
}

/// What goes through the door: the metrics count calls, not instantiations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// Instantiating the component, its start function included.
    Instantiation,
    /// A call of an export (`init`, `reconcile`, `handle-event`, `check`).
    Call,
}

/// One plugin's store: the only door into its guest code.
pub struct PluginStore {
    /// The wasmtime store; private, so that every entry goes through [`PluginStore::run`].
    store: Store<HostState>,
    /// Where each call is recorded.
    metrics: Arc<PluginMetrics>,
    /// This plugin's `plugin_calls` counter, looked up once per store: it is counted on every
    /// call's way in, where a label lookup would cost as much as a host import.
    calls: prometheus_client::metrics::counter::Counter,
    /// The plugin's deadline, memory and fuel budget.
    limits: CallLimits,
    /// Whether the engine meters fuel.
    meters_fuel: bool,
    /// Counts this store's call in progress, so the epoch ticker runs while it does.
    ticking: super::engine::Ticking,
    /// What the guest prints, logged as it prints.
    output: GuestOutput,
    /// Ends the epoch-bump watcher with the store.
    _watch: DropGuard,
}

impl PluginStore {
    /// Instantiates `prepared`, running its start function under the call deadline, the fuel
    /// budget, the term's deadline and `retire`.
    pub async fn instantiate(
        &mut self,
        prepared: &Prepared,
        retire: &CancellationToken,
    ) -> Called<Instance> {
        let mut called = self
            .run(Entry::Instantiation, Some(retire), async |store| {
                let kind = match prepared {
                    Prepared::Reconciler(pre) => {
                        Kind::Reconciler(pre.instantiate_async(store).await?)
                    }
                    Prepared::EventReconciler(pre) => {
                        Kind::Events(pre.instantiate_async(store).await?)
                    }
                    Prepared::HealthCheck(pre) => Kind::Health(pre.instantiate_async(store).await?),
                };
                Ok(Ok(Instance(kind)))
            })
            .await;
        if let Err(CallFailure::Trap(text)) = &mut called.result {
            *text = format!("instantiation failed: {text}");
        }
        called
    }

    /// Calls `init(config)`.
    pub async fn init(&mut self, instance: &Instance, config: &[(String, String)]) -> Called<()> {
        self.run(Entry::Call, None, async |store| match &instance.0 {
            Kind::Reconciler(i) => i.call_init(store, config).await,
            Kind::Events(i) => i.call_init(store, config).await,
            Kind::Health(i) => i.call_init(store, config).await,
        })
        .await
    }

    /// Calls `reconcile` for the `tick`-th time in this term.
    pub async fn reconcile(&mut self, instance: &Instance, tick: u64) -> Called<Outcome> {
        let data = self.store.data();
        let ctx = bindings::types::ReconcileContext {
            lease: data.lease.name.clone(),
            epoch: data
                .lease
                .term
                .as_ref()
                .and_then(|t| t.epoch.for_guest())
                .unwrap_or_default(),
            tick,
        };
        let called = self
            .run(Entry::Call, None, async |store| match &instance.0 {
                Kind::Reconciler(i) => i.call_reconcile(store, &ctx).await,
                Kind::Events(i) => i.call_reconcile(store, &ctx).await,
                Kind::Health(_) => Ok(Err("a health check has no reconcile".into())),
            })
            .await;
        Called {
            result: called.result.map(|o| Outcome {
                requeue_after: o.requeue_after_ms.map(Duration::from_millis),
            }),
            report: called.report,
        }
    }

    /// Calls `handle-event`; a plain reconciler has none, and the event is ignored.
    pub async fn handle_event(
        &mut self,
        instance: &Instance,
        channel: &str,
        payload: &str,
    ) -> Called<()> {
        let Kind::Events(i) = &instance.0 else {
            return Called {
                result: Ok(()),
                report: CallReport::default(),
            };
        };
        self.run(Entry::Call, None, async |store| {
            i.call_handle_event(store, channel, payload).await
        })
        .await
    }

    /// Calls `check(role)`.
    pub async fn check(&mut self, instance: &Instance, role: CheckRole) -> Called<()> {
        let role = match role {
            CheckRole::Active => bindings::types::Role::Active,
            CheckRole::Standby => bindings::types::Role::Standby,
        };
        self.run(Entry::Call, None, async |store| match &instance.0 {
            Kind::Health(i) => i.call_check(store, role).await,
            _ => Ok(Err("a reconciler has no check".into())),
        })
        .await
    }

    /// Why a call may not start now, if it may not.
    fn refusal(&self, now: Instant, stop: Option<&CancellationToken>) -> Option<Cancel> {
        match &self.store.data().lease.term {
            Some(term) if term.is_cancelled() => Some(Cancel::TermEnded),
            Some(term) if !term.is_live_at(now) => Some(Cancel::Deadline),
            _ if stop.is_some_and(CancellationToken::is_cancelled) => Some(Cancel::Retired),
            _ => None,
        }
    }

    /// Enters the guest through `f`, unless the term is over, under the plugin's deadline and
    /// fuel budget; then logs what the guest printed, hands what its budgets dropped to the
    /// plugin's rate (which reports it) and records the call.
    async fn run<T, F>(&mut self, entry: Entry, stop: Option<&CancellationToken>, f: F) -> Called<T>
    where
        F: AsyncFnOnce(&mut Store<HostState>) -> wasmtime::Result<Result<T, String>>,
    {
        let now = Instant::now();
        if let Some(reason) = self.refusal(now, stop) {
            let data = self.store.data();
            tracing::info!(plugin = &*data.plugin, lease = %data.lease.name, "call not started: {}",
                CallFailure::Cancelled { reason, entered: false });
            return Called {
                result: Err(CallFailure::Cancelled {
                    reason,
                    entered: false,
                }),
                report: CallReport::default(),
            };
        }
        if entry == Entry::Call {
            // Counted as it enters, so that a call that does not return shows in `/status`.
            self.calls.inc();
        }
        let timeout = self.limits.call_timeout;
        let deadline = now + timeout;
        {
            let data = self.store.data_mut();
            data.call_deadline = Some(deadline);
            data.interrupted = None;
            data.log_budget = host::LOG_LINES_PER_CALL;
            data.logs_dropped = Default::default();
        }
        let fuel_given = self.limits.fuel.unwrap_or(DEFAULT_FUEL_PER_CALL);
        if self.meters_fuel {
            let _ = self.store.set_fuel(fuel_given);
        }
        let refused_before = self.store.data().fenced_refusals;
        let term = self.store.data().lease.term.clone();
        // Ticks from here until the call is over, whichever way it ends.
        let _ticking = self.ticking.enter();
        let outcome = {
            let call = f(&mut self.store);
            tokio::pin!(call);
            // The epoch callback stops a guest that computes past either deadline; a guest
            // blocked in a host call runs no wasm to see a tick, so the future is also bounded
            // here. Dropping it poisons the store, as a trap does.
            loop {
                let wake = term
                    .as_ref()
                    .map_or(deadline, |t| deadline.min(t.safe_until()));
                let cancelled = |reason| CallFailure::Cancelled {
                    reason,
                    entered: true,
                };
                tokio::select! {
                    biased;
                    result = &mut call => break Ok(result),
                    _ = ended(term.as_ref()) => break Err(cancelled(Cancel::TermEnded)),
                    _ = stopped(stop) => break Err(cancelled(Cancel::Retired)),
                    _ = tokio::time::sleep_until(wake) => {
                        let now = Instant::now();
                        if term.as_ref().is_some_and(|t| !t.is_live_at(now)) {
                            break Err(cancelled(Cancel::Deadline));
                        }
                        if now >= deadline {
                            break Err(CallFailure::Timeout(timeout));
                        }
                        // A renewal moved the term's deadline forward: keep going.
                    }
                }
            }
        };
        let took = now.elapsed();
        let interrupted = {
            let data = self.store.data_mut();
            data.call_deadline = None;
            data.interrupted.take()
        };
        let (stderr_tail, mut dropped) = self.output.flush();
        {
            let data = self.store.data_mut();
            dropped.add(std::mem::take(&mut data.logs_dropped));
            data.log_rate.call_ended(dropped);
        }
        let result = match outcome {
            Ok(Ok(Ok(value))) => Ok(value),
            Ok(Ok(Err(message))) => Err(CallFailure::Returned(crate::report::guest_text(message))),
            Ok(Err(error)) => Err(CallFailure::classify(error, timeout, interrupted)),
            Err(failure) => Err(failure),
        };
        // A trap says only where the guest stopped; what it printed last says why.
        let result = match (result, stderr_tail) {
            (Err(CallFailure::Trap(trap)), Some(tail)) => Err(CallFailure::Trap(format!(
                "{trap}; its stderr ended: {tail}"
            ))),
            (result, _) => result,
        };
        let report = self.record(took, &result, fuel_given, refused_before);
        Called { result, report }
    }

    /// Records the call in the metrics and returns its report.
    fn record<T>(
        &self,
        took: Duration,
        result: &Result<T, CallFailure>,
        fuel_given: u64,
        refused_before: u64,
    ) -> CallReport {
        let data = self.store.data();
        let plugin = &*data.plugin;
        let trap = match result {
            Err(failure) if failure.is_trap() => Some(failure.kind()),
            _ => None,
        };
        let error = matches!(result, Err(CallFailure::Returned(_)));
        let fuel = self
            .meters_fuel
            .then(|| self.store.get_fuel().ok())
            .flatten()
            .map(|left| fuel_given.saturating_sub(left));
        let refused_writes = data.fenced_refusals.saturating_sub(refused_before);
        let high_water = data.limits.memory_high_water;
        self.metrics
            .record_call(plugin, took, trap, error, fuel, high_water, refused_writes);
        if let Err(CallFailure::Cancelled { entered: true, .. }) = result {
            self.metrics.forced_stop(plugin);
        }
        CallReport {
            entered: true,
            took,
            fuel,
            refused_writes,
        }
    }
}

/// Resolves when `term` ends; never without a term.
async fn ended(term: Option<&Term>) {
    match term {
        Some(term) => term.cancelled().await,
        None => std::future::pending().await,
    }
}

/// Resolves when `stop` is cancelled; never without one.
async fn stopped(stop: Option<&CancellationToken>) {
    match stop {
        Some(stop) => stop.cancelled().await,
        None => std::future::pending().await,
    }
}
