//! The state each `Store` carries and the host side of the `lease` and `log` imports (`kv` and
//! `sql` are in the runtime's `imports` module, in front of [`crate::capability`]). WASI p2 is
//! linked in full but grants nothing.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::time::Instant;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::{lease, log};
use super::call::Cancel;
use super::limits::{Limiter, MAX_HANDLES};
use crate::capability::PluginCapabilities;
use crate::lease::Term;
use crate::manifest::CallLimits;
use crate::output_rate::{Dropped, OutputRate};

/// What a plugin may learn of its lease through the `lease` import.
#[derive(Debug, Clone)]
pub struct LeaseView {
    /// The lease name.
    pub name: String,
    /// This replica's holder id.
    pub holder: String,
    /// The running term, or `None` on a standby; its deadline moves forward with each renewal.
    pub term: Option<Term>,
    /// When this replica acquired the lease (host wall clock), or `None` on a standby.
    pub acquired_at: Option<SystemTime>,
    /// The shard of a lease group the lease is, for a plugin bound to the group.
    pub shard: Option<ShardView>,
}

/// A shard of a lease group, as a plugin bound to the group learns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardView {
    /// The group's name.
    pub group: String,
    /// The shard's index.
    pub index: u32,
    /// How many shards the group has.
    pub count: u32,
}

/// The data of one plugin's `Store`: WASI state, limits and what the imports answer.
pub struct HostState {
    /// The plugin's name, for metrics and the host's own lines about its calls.
    pub plugin: Arc<str>,
    /// The lease as the plugin sees it.
    pub lease: LeaseView,
    /// When the running call must end (checked at each epoch tick, on the monotonic clock the
    /// term's deadline is kept on).
    pub call_deadline: Option<Instant>,
    /// Set by the epoch callback when it interrupted a call because the term is over, so the
    /// trap is reported as a cancel and not as the plugin's timeout.
    pub interrupted: Option<Cancel>,
    /// Memory and table limits of the whole store; growth beyond them traps.
    pub(crate) limits: Limiter,
    /// Log lines the guest may still write in this call; reset by the caller before each call.
    pub log_budget: u32,
    /// Log lines dropped in this call for want of budget.
    pub logs_dropped: Dropped,
    /// What the plugin may log over time, shared with its output and its other stores.
    pub(super) log_rate: Arc<OutputRate>,
    /// What the `kv` and `sql` imports may use; `None` grants nothing (health checks, tools).
    pub capabilities: Option<PluginCapabilities>,
    /// Writes the fence refused in this store's life.
    pub fenced_refusals: u64,
    wasi: WasiCtx,
    table: ResourceTable,
}

impl HostState {
    /// State for `plugin` under `lease` with a WASI context that grants nothing.
    pub fn new(
        plugin: Arc<str>,
        lease: LeaseView,
        limits: &CallLimits,
        capabilities: Option<PluginCapabilities>,
        wasi: WasiCtx,
        log_rate: Arc<OutputRate>,
    ) -> Self {
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_HANDLES);
        HostState {
            plugin,
            lease,
            call_deadline: None,
            interrupted: None,
            limits: Limiter::new(limits.memory_bytes),
            log_budget: LOG_LINES_PER_CALL,
            logs_dropped: Dropped::default(),
            log_rate,
            capabilities,
            fenced_refusals: 0,
            wasi,
            table,
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl lease::Host for HostState {
    fn name(&mut self) -> String {
        self.lease.name.clone()
    }

    fn holder(&mut self) -> String {
        self.lease.holder.clone()
    }

    fn epoch(&mut self) -> Option<u64> {
        self.lease.term.as_ref().and_then(|t| t.epoch.for_guest())
    }

    fn acquired_at_ms(&mut self) -> Option<u64> {
        let at = self.lease.acquired_at?;
        at.duration_since(UNIX_EPOCH)
            .ok()
            .and_then(|d| u64::try_from(d.as_millis()).ok())
    }

    fn time_left_ms(&mut self) -> Option<u64> {
        let term = self.lease.term.as_ref()?;
        let left = term.safe_until().saturating_duration_since(Instant::now());
        u64::try_from(left.as_millis()).ok()
    }

    fn shard(&mut self) -> Option<super::bindings::types::ShardInfo> {
        let shard = self.lease.shard.as_ref()?;
        Some(super::bindings::types::ShardInfo {
            group: shard.group.clone(),
            index: shard.index,
            count: shard.count,
        })
    }
}

/// Log lines a guest may write per call: plenty for diagnostics, too few to drown the host's log.
pub(crate) const LOG_LINES_PER_CALL: u32 = 1_000;

impl log::Host for HostState {
    fn log(&mut self, level: log::Level, message: String) {
        if self.log_budget == 0 {
            self.logs_dropped.add(Dropped {
                lines: 1,
                bytes: message.len() as u64,
            });
            return;
        }
        self.log_budget -= 1;
        // A level the host does not log costs the plugin nothing of its rate.
        let enabled = match level {
            log::Level::Trace => tracing::enabled!(tracing::Level::TRACE),
            log::Level::Debug => tracing::enabled!(tracing::Level::DEBUG),
            log::Level::Info => tracing::enabled!(tracing::Level::INFO),
            log::Level::Warn => tracing::enabled!(tracing::Level::WARN),
            log::Level::Error => tracing::enabled!(tracing::Level::ERROR),
        };
        if !enabled {
            return;
        }
        let written = message.len();
        let message = crate::report::guest_text(message);
        if !self.log_rate.admit(message.len(), written) {
            return;
        }
        // Every call runs in its task's span, `plugin{plugin, lease, epoch}` for a reconciler,
        // `health{plugin, lease, epoch}` (or `group`) for a health check, which already names
        // them: the line adds only the message. JSON puts them under `span` and `spans`.
        match level {
            log::Level::Trace => tracing::trace!("{message}"),
            log::Level::Debug => tracing::debug!("{message}"),
            log::Level::Info => tracing::info!("{message}"),
            log::Level::Warn => tracing::warn!("{message}"),
            log::Level::Error => tracing::error!("{message}"),
        }
    }
}

impl super::bindings::types::Host for HostState {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::Epoch;
    use crate::output_rate::{BURST_BYTES, LINE_COST, OutputRates};

    fn state(rate: Arc<OutputRate>) -> HostState {
        state_in(rate, None)
    }

    fn state_in(rate: Arc<OutputRate>, term: Option<Term>) -> HostState {
        let lease = LeaseView {
            name: "leader".into(),
            holder: "h".into(),
            term,
            acquired_at: None,
            shard: None,
        };
        let limits = CallLimits {
            call_timeout: std::time::Duration::from_secs(1),
            memory_bytes: 1 << 20,
            fuel: None,
        };
        let wasi = wasmtime_wasi::WasiCtxBuilder::new().build();
        HostState::new("p".into(), lease, &limits, None, wasi, rate)
    }

    #[test]
    fn a_plugins_log_lines_drain_one_bucket_across_its_stores_within_each_calls_budget() {
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_writer(std::io::sink)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let rates = OutputRates::new(Default::default());
            let mut first = state(rates.of(&"p".into()));
            let line = "x".repeat(100);
            // Lines the host does not log cost nothing of the rate.
            for _ in 0..100 {
                log::Host::log(&mut first, log::Level::Debug, line.clone());
            }
            assert_eq!(first.log_rate.dropped(), 0);
            // The call's budget (which the debug lines took their part of), then a count of
            // what is over it.
            for _ in 0..LOG_LINES_PER_CALL + 10 {
                log::Host::log(&mut first, log::Level::Info, line.clone());
            }
            assert_eq!(
                first.logs_dropped,
                Dropped {
                    lines: 110,
                    bytes: 11_000
                }
            );
            // Of the budget's lines, the burst got through and the rest were over the rate.
            let burst = BURST_BYTES / (100 + LINE_COST);
            let over_rate = u64::from(LOG_LINES_PER_CALL) - 100 - burst;
            let dropped = first.log_rate.dropped();
            assert!(
                (over_rate.saturating_sub(8)..=over_rate).contains(&dropped),
                "{dropped} of {over_rate}"
            );
            // Another store of the plugin (a shard, the next term, a new file) finds it empty.
            let mut second = state(rates.of(&"p".into()));
            log::Host::log(&mut second, log::Level::Error, line.clone());
            assert_eq!(second.log_rate.dropped(), dropped + 1);
        });
    }

    #[test]
    fn a_guest_line_names_plugin_lease_and_epoch_once_from_its_span_in_text_and_json() {
        let (term, _control) = Term::standalone(
            "leader",
            Epoch::new(7),
            Instant::now() + std::time::Duration::from_secs(60),
        );
        let rates = OutputRates::new(Default::default());
        let mut guest = state_in(rates.of(&"hello".into()), Some(term));
        let mut emit = |json: bool| {
            let sink = crate::report::CapturedLog::default();
            let builder = tracing_subscriber::fmt()
                .with_writer(sink.clone())
                .with_ansi(false)
                .without_time();
            let dispatch = if json {
                tracing::Dispatch::new(builder.json().finish())
            } else {
                tracing::Dispatch::new(builder.finish())
            };
            tracing::dispatcher::with_default(&dispatch, || {
                // The span the supervisor runs every reconciler's calls in.
                let span =
                    tracing::info_span!("plugin", plugin = %"hello", lease = %"leader", epoch = 7);
                let _in = span.enter();
                log::Host::log(&mut guest, log::Level::Info, "hello from epoch 7".into());
            });
            let text = sink.text();
            text.trim().to_string()
        };
        let text = emit(false);
        assert_eq!(
            text,
            "INFO plugin{plugin=hello lease=leader epoch=7}: leasehold::runtime::host: hello from epoch 7"
        );
        let json: serde_json::Value = serde_json::from_str(&emit(true)).unwrap();
        assert_eq!(
            json["fields"],
            serde_json::json!({"message": "hello from epoch 7"}),
            "{json}"
        );
        // A JSON reader finds them in the line's span.
        assert_eq!(
            json["span"],
            serde_json::json!({"name": "plugin", "plugin": "hello", "lease": "leader", "epoch": 7}),
            "{json}"
        );
    }
}
