//! The WebAssembly runtime (DESIGN §2.3–2.4): one wasmtime engine per process, components
//! compiled once (cached on disk) and pre-linked at load, a fresh `Store` per leadership term,
//! and calls bounded by a wall-clock deadline, memory limits and optional fuel.
//!
//! - [`bindings`]: the generated bindings of the WIT worlds;
//! - [`host`]: the store data and the host side of the `lease` and `log` imports;
//! - `capabilities`: the host side of the `kv` and `sql` imports;
//! - [`engine`]: the engine and its epoch ticker;
//! - [`cache`]: compiled components on disk.

pub mod bindings;
pub mod cache;
mod capabilities;
pub mod engine;
pub mod host;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::Linker;
use wasmtime::{Engine, Store, Trap, UpdateDeadline};
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

use self::bindings::event_reconciler::EventReconcilerPre;
use self::bindings::health::HealthCheckPre;
use self::bindings::reconciler::ReconcilerPre;
use self::cache::{CacheOutcome, ComponentCache};
use self::engine::{Allocator, EngineOptions};
use self::host::{CallLimits, HostState, LeaseView};
use crate::capability::PluginCapabilities;
use crate::metrics::Metrics;

/// The WIT package version this host implements.
pub const WIT_PACKAGE: &str = "leasehold:plugin@0.1.0";

/// Bytes of guest stdout/stderr kept per term; a guest that prints more gets write errors.
const OUTPUT_CAPACITY: usize = 1 << 20;

/// Why loading or running a plugin failed. Each variant names the file or plugin at fault.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The engine could not be built.
    #[error("cannot build the WebAssembly engine: {0}")]
    Engine(String),
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not WebAssembly at all.
    #[error("{path}: not a WebAssembly file ({reason})")]
    NotWasm {
        /// The file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A core module where a component was expected.
    #[error(
        "{path}: a core WebAssembly module, not a component: build it for wasm32-wasip2 (or wrap it with `wasm-tools component new`)"
    )]
    CoreModule {
        /// The file.
        path: String,
    },
    /// The component does not compile (truncated, invalid, or using unsupported features).
    #[error("{path}: invalid component: {reason}")]
    Compile {
        /// The file.
        path: String,
        /// wasmtime's reason.
        reason: String,
    },
    /// The component's imports or exports match no world of the WIT package.
    #[error("{path}: matches no {WIT_PACKAGE} world: {reason}")]
    NoWorld {
        /// The file.
        path: String,
        /// What is missing or mistyped.
        reason: String,
    },
    /// Instantiation failed.
    #[error("plugin {plugin}: cannot instantiate: {reason}")]
    Instantiate {
        /// The plugin.
        plugin: String,
        /// wasmtime's reason.
        reason: String,
    },
}

/// The world a component implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum World {
    /// `reconciler`.
    Reconciler,
    /// `event-reconciler`: a reconciler that also handles notifications.
    EventReconciler,
    /// `health-check`.
    HealthCheck,
}

impl World {
    /// The WIT name.
    pub fn name(self) -> &'static str {
        match self {
            World::Reconciler => "reconciler",
            World::EventReconciler => "event-reconciler",
            World::HealthCheck => "health-check",
        }
    }

    /// True for both reconciler worlds.
    pub fn is_reconciler(self) -> bool {
        matches!(self, World::Reconciler | World::EventReconciler)
    }
}

/// A component compiled and linked against its world, ready to instantiate in microseconds.
#[derive(Clone)]
pub enum Prepared {
    /// A reconciler.
    Reconciler(ReconcilerPre<HostState>),
    /// A reconciler that handles events.
    EventReconciler(EventReconcilerPre<HostState>),
    /// A health check.
    HealthCheck(HealthCheckPre<HostState>),
}

impl Prepared {
    /// The world.
    pub fn world(&self) -> World {
        match self {
            Prepared::Reconciler(_) => World::Reconciler,
            Prepared::EventReconciler(_) => World::EventReconciler,
            Prepared::HealthCheck(_) => World::HealthCheck,
        }
    }

    /// Instantiates a reconciler of either world in `store`; `None` for a health check.
    pub async fn instantiate_reconciler(
        &self,
        store: &mut Store<HostState>,
    ) -> Option<wasmtime::Result<ReconcilerInstance>> {
        match self {
            Prepared::Reconciler(pre) => Some(
                pre.instantiate_async(store)
                    .await
                    .map(ReconcilerInstance::Plain),
            ),
            Prepared::EventReconciler(pre) => Some(
                pre.instantiate_async(store)
                    .await
                    .map(ReconcilerInstance::Events),
            ),
            Prepared::HealthCheck(_) => None,
        }
    }
}

/// An instance of either reconciler world.
pub enum ReconcilerInstance {
    /// `reconciler`.
    Plain(bindings::reconciler::Reconciler),
    /// `event-reconciler`.
    Events(bindings::event_reconciler::EventReconciler),
}

impl ReconcilerInstance {
    /// Calls `init`.
    pub async fn init(
        &self,
        store: &mut Store<HostState>,
        config: &[(String, String)],
    ) -> wasmtime::Result<Result<(), String>> {
        match self {
            ReconcilerInstance::Plain(i) => i.call_init(store, config).await,
            ReconcilerInstance::Events(i) => i.call_init(store, config).await,
        }
    }

    /// Calls `reconcile`.
    pub async fn reconcile(
        &self,
        store: &mut Store<HostState>,
        ctx: &bindings::types::ReconcileContext,
    ) -> wasmtime::Result<Result<bindings::types::Outcome, String>> {
        match self {
            ReconcilerInstance::Plain(i) => i.call_reconcile(store, ctx).await,
            ReconcilerInstance::Events(i) => i.call_reconcile(store, ctx).await,
        }
    }

    /// Calls `handle-event`; a plain reconciler has none and ignores the event.
    pub async fn handle_event(
        &self,
        store: &mut Store<HostState>,
        channel: &str,
        payload: &str,
    ) -> wasmtime::Result<Result<(), String>> {
        match self {
            ReconcilerInstance::Plain(_) => Ok(Ok(())),
            ReconcilerInstance::Events(i) => i.call_handle_event(store, channel, payload).await,
        }
    }
}

/// A loaded plugin file.
#[derive(Clone)]
pub struct Loaded {
    /// The pre-linked component.
    pub prepared: Prepared,
    /// The component's imports, by name, for reports.
    pub imports: Vec<String>,
    /// The component's exports, by name, for reports.
    pub exports: Vec<String>,
    /// Whether the compile was served from the cache.
    pub cache: CacheOutcome,
    /// How long compiling (or loading the cached artifact) took.
    pub load_time: Duration,
}

/// How a call ended when it did not return normally.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallFailure {
    /// The guest returned an error value.
    #[error("returned an error: {0}")]
    Returned(String),
    /// The call outlived its deadline and was interrupted.
    #[error("interrupted after its {0:?} deadline")]
    Timeout(Duration),
    /// The call ran out of fuel.
    #[error("ran out of fuel")]
    OutOfFuel,
    /// Memory or table growth beyond the plugin's limits.
    #[error("exceeded its memory limit: {0}")]
    Memory(String),
    /// The guest's stack overflowed.
    #[error("overflowed its stack")]
    StackOverflow,
    /// Any other trap (unreachable, a panic, out-of-bounds access, ...).
    #[error("trapped: {0}")]
    Trap(String),
}

impl CallFailure {
    /// A short label for metrics and `/status`.
    pub fn kind(&self) -> &'static str {
        match self {
            CallFailure::Returned(_) => "error",
            CallFailure::Timeout(_) => "timeout",
            CallFailure::OutOfFuel => "fuel",
            CallFailure::Memory(_) => "memory",
            CallFailure::StackOverflow => "stack",
            CallFailure::Trap(_) => "trap",
        }
    }

    /// True when the store must be discarded (any trap poisons it).
    pub fn poisons_store(&self) -> bool {
        !matches!(self, CallFailure::Returned(_))
    }

    fn classify(error: wasmtime::Error, timeout: Duration) -> CallFailure {
        match error.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => CallFailure::Timeout(timeout),
            Some(Trap::OutOfFuel) => CallFailure::OutOfFuel,
            Some(Trap::StackOverflow) => CallFailure::StackOverflow,
            Some(Trap::AllocationTooLarge) => CallFailure::Memory(error.root_cause().to_string()),
            _ => {
                // The root cause alone: the outer layers only say "error while executing".
                let text = error.root_cause().to_string();
                // The resource limiter's refusal surfaces as an error, not a trap code.
                if text.contains("forcing trap when growing") {
                    CallFailure::Memory(text)
                } else {
                    CallFailure::Trap(text)
                }
            }
        }
    }
}

/// The engine, the linker with every host import, and the compile cache.
pub struct Runtime {
    /// Where calls, traps, fuel and memory are recorded.
    metrics: Arc<Metrics>,
    engine: Engine,
    allocator: Allocator,
    options: EngineOptions,
    linker: Linker<HostState>,
    cache: ComponentCache,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("allocator", &self.allocator)
            .field("options", &self.options)
            .field("cache", &self.cache.dir())
            .finish()
    }
}

impl Runtime {
    /// Builds the engine (starting its epoch ticker) and links WASI p2 and the leasehold imports.
    pub fn new(
        options: EngineOptions,
        cache_dir: &Path,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<Self>, RuntimeError> {
        let err = |e: wasmtime::Error| RuntimeError::Engine(format!("{e:#}"));
        let (engine, allocator) = engine::build(&options).map_err(err)?;
        engine::start_ticker(&engine, options.tick)
            .map_err(|e| RuntimeError::Engine(e.to_string()))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(err)?;
        type Data = wasmtime::component::HasSelf<HostState>;
        bindings::lease::add_to_linker::<HostState, Data>(&mut linker, |s| s).map_err(err)?;
        bindings::log::add_to_linker::<HostState, Data>(&mut linker, |s| s).map_err(err)?;
        bindings::kv::add_to_linker::<HostState, Data>(&mut linker, |s| s).map_err(err)?;
        bindings::sql::add_to_linker::<HostState, Data>(&mut linker, |s| s).map_err(err)?;
        bindings::types::add_to_linker::<HostState, Data>(&mut linker, |s| s).map_err(err)?;
        let cache = ComponentCache::new(cache_dir.to_path_buf(), &engine);
        Ok(Arc::new(Runtime {
            metrics,
            engine,
            allocator,
            options,
            linker,
            cache,
        }))
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Which allocator the engine uses.
    pub fn allocator(&self) -> Allocator {
        self.allocator
    }

    /// Whether the engine meters fuel.
    pub fn meters_fuel(&self) -> bool {
        self.options.fuel
    }

    /// Reads, compiles (or loads from cache) and links the component at `path`.
    pub fn load_file(&self, path: &Path) -> Result<Loaded, RuntimeError> {
        let shown = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| RuntimeError::Read {
            path: shown.clone(),
            source,
        })?;
        self.load_bytes(&shown, &bytes)
    }

    /// Compiles (or loads from cache) and links a component; `path` only names it in errors.
    pub fn load_bytes(&self, path: &str, bytes: &[u8]) -> Result<Loaded, RuntimeError> {
        match bytes.get(..8) {
            Some([0, b'a', b's', b'm', 0x0d, 0x00, 0x01, 0x00]) => {}
            Some([0, b'a', b's', b'm', 0x01, 0x00, 0x00, 0x00]) => {
                return Err(RuntimeError::CoreModule {
                    path: path.to_string(),
                });
            }
            Some([0, b'a', b's', b'm', ..]) => {
                return Err(RuntimeError::NotWasm {
                    path: path.to_string(),
                    reason: "unknown WebAssembly version or layer".into(),
                });
            }
            _ => {
                let reason = if bytes.len() < 8 {
                    format!("only {} bytes", bytes.len())
                } else {
                    "no \\0asm header".to_string()
                };
                return Err(RuntimeError::NotWasm {
                    path: path.to_string(),
                    reason,
                });
            }
        }
        let started = Instant::now();
        let (component, cache) =
            self.cache
                .load(&self.engine, bytes)
                .map_err(|e| RuntimeError::Compile {
                    path: path.to_string(),
                    reason: format!("{e:#}"),
                })?;
        let load_time = started.elapsed();
        let ty = component.component_type();
        let imports: Vec<String> = ty
            .imports(&self.engine)
            .map(|(name, _)| name.to_string())
            .collect();
        let exports: Vec<String> = ty
            .exports(&self.engine)
            .map(|(name, _)| name.to_string())
            .collect();
        // A plugin built against another version of the package: say so plainly, rather than
        // let the linker report a missing function.
        let expected = WIT_PACKAGE
            .rsplit_once('@')
            .map_or("", |(_, version)| version);
        let foreign: Vec<&str> = imports
            .iter()
            .map(String::as_str)
            .filter(|import| {
                import
                    .strip_prefix("leasehold:plugin/")
                    .and_then(|rest| rest.rsplit_once('@'))
                    .is_some_and(|(_, version)| version != expected)
            })
            .collect();
        if !foreign.is_empty() {
            return Err(RuntimeError::NoWorld {
                path: path.to_string(),
                reason: format!(
                    "built against another version of the package (imports {}); this host implements {WIT_PACKAGE}",
                    foreign.join(", ")
                ),
            });
        }
        let pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| RuntimeError::NoWorld {
                path: path.to_string(),
                reason: format!("{e:#} (this host provides {WIT_PACKAGE} and wasi@0.2)"),
            })?;
        // The event world first: it is the reconciler world plus one export.
        let prepared = match EventReconcilerPre::new(pre.clone())
            .map(Prepared::EventReconciler)
            .or_else(|_| ReconcilerPre::new(pre.clone()).map(Prepared::Reconciler))
        {
            Ok(p) => p,
            Err(as_reconciler) => match HealthCheckPre::new(pre) {
                Ok(p) => Prepared::HealthCheck(p),
                Err(as_health) => {
                    return Err(RuntimeError::NoWorld {
                        path: path.to_string(),
                        reason: format!(
                            "as a reconciler: {}; as a health-check: {} (exports found: {})",
                            world_mismatch(&exports, &["init", "reconcile"], &as_reconciler),
                            world_mismatch(&exports, &["init", "check"], &as_health),
                            if exports.is_empty() {
                                "none".to_string()
                            } else {
                                exports.join(", ")
                            }
                        ),
                    });
                }
            },
        };
        Ok(Loaded {
            prepared,
            imports,
            exports,
            cache,
            load_time,
        })
    }

    /// A fresh store for one term of `plugin`: WASI granting nothing, its limits, and an epoch
    /// callback that yields at every tick (so the call can be cancelled) and traps past the deadline.
    pub fn new_store(
        &self,
        plugin: Arc<str>,
        lease: LeaseView,
        limits: &CallLimits,
        capabilities: Option<PluginCapabilities>,
    ) -> PluginStore {
        let stdout = MemoryOutputPipe::new(OUTPUT_CAPACITY);
        let stderr = MemoryOutputPipe::new(OUTPUT_CAPACITY);
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }))
            .build();
        let mut store = Store::new(
            &self.engine,
            HostState::new(plugin, lease, limits, capabilities, wasi),
        );
        store.limiter(|state| &mut state.limits);
        store.epoch_deadline_callback(|ctx| match ctx.data().call_deadline {
            Some(deadline) if std::time::Instant::now() >= deadline => Err(Trap::Interrupt.into()),
            _ => Ok(UpdateDeadline::Yield(1)),
        });
        // The deadline must be set before the first call: the default traps at once.
        store.set_epoch_deadline(1);
        if self.options.fuel {
            // Instantiation runs start functions, which burn fuel too; each call then gets its
            // own budget.
            let _ = store.set_fuel(u64::MAX);
        }
        PluginStore {
            store,
            metrics: self.metrics.clone(),
            limits: *limits,
            meters_fuel: self.options.fuel,
            stdout,
            stderr,
            seen: (0, 0),
        }
    }
}

/// Why a component is not of a world: every missing export by name, else the type error.
fn world_mismatch(exports: &[String], expected: &[&str], error: &wasmtime::Error) -> String {
    let missing: Vec<&str> = expected
        .iter()
        .copied()
        .filter(|e| !exports.iter().any(|x| x == e))
        .collect();
    if missing.is_empty() {
        format!("{error:#}")
    } else {
        format!(
            "missing export{} {}",
            if missing.len() > 1 { "s" } else { "" },
            missing.join(", ")
        )
    }
}

/// One term's store with its captured output.
pub struct PluginStore {
    /// The wasmtime store.
    pub store: Store<HostState>,
    /// Where each call is recorded.
    metrics: Arc<Metrics>,
    limits: CallLimits,
    meters_fuel: bool,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
    /// How many bytes of stdout and stderr have been logged already.
    seen: (usize, usize),
}

impl PluginStore {
    /// Runs one guest call under the plugin's deadline and fuel budget, then logs what the guest
    /// printed. A failure says what went wrong; after a trap the store must be dropped.
    pub async fn call<T, F>(&mut self, f: F) -> Result<T, CallFailure>
    where
        F: AsyncFnOnce(&mut Store<HostState>) -> wasmtime::Result<Result<T, String>>,
    {
        let timeout = self.limits.call_timeout;
        {
            let data = self.store.data_mut();
            data.call_deadline = Some(std::time::Instant::now() + timeout);
            data.log_budget = host::LOG_LINES_PER_CALL;
            data.logs_dropped = 0;
        }
        let fuel_given = self.limits.fuel.unwrap_or(u64::MAX);
        if self.meters_fuel {
            // Without a configured budget a metering engine still needs fuel to run at all.
            let _ = self.store.set_fuel(fuel_given);
        }
        let refused_before = self.store.data().fenced_refusals;
        let started = Instant::now();
        // The epoch callback stops a guest that computes past its deadline; a guest blocked in a
        // host call (a WASI sleep or poll) runs no wasm to check it, so the future is also
        // bounded here. Dropping it poisons the store, as a trap does.
        let outcome = match tokio::time::timeout(timeout, f(&mut self.store)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Trap::Interrupt.into()),
        };
        self.store.data_mut().call_deadline = None;
        self.flush_output();
        let dropped = self.store.data().logs_dropped;
        if dropped > 0 {
            let state = self.store.data();
            tracing::warn!(plugin = &*state.plugin, lease = %state.lease.name, dropped, "guest log lines dropped: over the per-call budget");
        }
        let result = match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(message)) => Err(CallFailure::Returned(message)),
            Err(error) => Err(CallFailure::classify(error, timeout)),
        };
        self.record(started.elapsed(), &result, fuel_given, refused_before);
        result
    }

    fn record<T>(
        &self,
        took: Duration,
        result: &Result<T, CallFailure>,
        fuel_given: u64,
        refused_before: u64,
    ) {
        let data = self.store.data();
        let plugin = &*data.plugin;
        let trap = match result {
            Err(failure) if failure.poisons_store() => Some(failure.kind()),
            _ => None,
        };
        let error = matches!(result, Err(CallFailure::Returned(_)));
        self.metrics.record_call(plugin, took, trap, error);
        let label = Metrics::plugin(plugin);
        if let (true, Ok(left)) = (self.meters_fuel, self.store.get_fuel()) {
            self.metrics
                .plugin_fuel
                .get_or_create(&label)
                .inc_by(fuel_given.saturating_sub(left));
        }
        let high_water = i64::try_from(data.limits.memory_high_water).unwrap_or(i64::MAX);
        let gauge = self.metrics.plugin_memory_bytes.get_or_create(&label);
        if high_water > gauge.get() {
            gauge.set(high_water);
        }
        let refused = data.fenced_refusals.saturating_sub(refused_before);
        if refused > 0 {
            self.metrics
                .plugin_refused_writes
                .get_or_create(&label)
                .inc_by(refused);
        }
    }

    fn flush_output(&mut self) {
        let state = self.store.data();
        for (name, pipe, seen) in [
            ("stdout", &self.stdout, &mut self.seen.0),
            ("stderr", &self.stderr, &mut self.seen.1),
        ] {
            let contents = pipe.contents();
            if contents.len() <= *seen {
                continue;
            }
            let fresh = String::from_utf8_lossy(&contents[*seen..]);
            *seen = contents.len();
            for line in fresh.lines().filter(|l| !l.trim().is_empty()).take(200) {
                tracing::info!(plugin = &*state.plugin, lease = %state.lease.name, stream = name, "{line}");
            }
        }
    }
}
