//! The WebAssembly runtime (docs/ARCHITECTURE.md §7): one wasmtime engine per process, components
//! compiled once (cached on disk) and pre-linked at load, a fresh `Store` per leadership term,
//! and calls bounded by a wall-clock deadline, memory limits and optional fuel.
//!
//! - [`store`]: one plugin's store for one term, the only door into guest code, where the term's
//!   deadline is enforced on the monotonic clock (who owns the stop: this module);
//! - [`load`]: reading a component file, compiling it (through [`cache`]) and finding its world;
//! - `explain`: `leasehold check`'s longer word on a component that matches no world;
//! - [`call`]: what a call returns: its result in host types, its failure, its report;
//! - [`bindings`]: the generated bindings of the WIT worlds (used by this module only);
//! - [`host`]: the store data and the host side of the `lease` and `log` imports;
//! - [`limits`]: what one store may take of the host's memory (its memories together, what a
//!   host call copies, `wasi:random`, handles);
//! - `imports`: the host side of the `kv` and `sql` imports (the capability layer behind them);
//! - `output`: the guest's stdout and stderr, streamed to the log line by line within a
//!   per-call budget;
//! - [`rate`]: what a plugin may write to the log over time, across its calls and stores, and
//!   the report of what it dropped;
//! - [`engine`]: the engine and its epoch ticker;
//! - [`cache`]: compiled components on disk.

pub mod bindings;
pub mod cache;
pub mod call;
pub mod engine;
mod explain;
pub mod host;
mod imports;
pub mod limits;
pub mod load;
mod output;
pub mod rate;
pub mod store;

use std::path::Path;
use std::sync::Arc;

use wasmtime::Engine;
use wasmtime::component::Linker;

use self::cache::ComponentCache;
use self::engine::{Allocator, EngineOptions};
use self::host::HostState;
use crate::metrics::Metrics;

pub use self::call::{CallFailure, CallReport, Called, Cancel, CheckRole, Outcome};
pub use self::load::{ComponentError, Loaded, Prepared, World};
pub use self::store::{DEFAULT_FUEL_PER_CALL, Instance, PluginStore};

/// The WIT package version this host implements.
pub const WIT_PACKAGE: &str = "leasehold:plugin@0.1.0";

/// The engine could not be built or linked.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the WebAssembly engine")]
pub struct EngineError(#[source] pub Box<dyn std::error::Error + Send + Sync>);

impl From<wasmtime::Error> for EngineError {
    fn from(e: wasmtime::Error) -> Self {
        EngineError(e.into())
    }
}

/// The engine, the linker with every host import, and the compile cache.
pub struct Runtime {
    /// Where calls, traps, fuel and memory are recorded.
    metrics: Arc<Metrics>,
    engine: Engine,
    allocator: Allocator,
    /// Guest calls in progress: the epoch ticker runs only while there is one.
    ticking: engine::Ticking,
    options: EngineOptions,
    linker: Linker<HostState>,
    cache: ComponentCache,
    /// Each plugin's log rate, kept by name across its stores, terms and files.
    log_rates: rate::LogRates,
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
    /// Builds the engine (starting its epoch ticker) and links WASI p2 and the leasehold imports;
    /// compiled components are cached in `cache_dir`, or compiled at every load without one.
    pub fn new(
        options: EngineOptions,
        cache_dir: Option<&Path>,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<Self>, EngineError> {
        let (engine, allocator) = engine::build(&options)?;
        let ticking =
            engine::start_ticker(&engine, options.tick).map_err(|e| EngineError(e.into()))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        type Data = wasmtime::component::HasSelf<HostState>;
        bindings::lease::add_to_linker::<HostState, Data>(&mut linker, |s| s)?;
        bindings::log::add_to_linker::<HostState, Data>(&mut linker, |s| s)?;
        bindings::kv::add_to_linker::<HostState, Data>(&mut linker, |s| s)?;
        bindings::sql::add_to_linker::<HostState, Data>(&mut linker, |s| s)?;
        bindings::types::add_to_linker::<HostState, Data>(&mut linker, |s| s)?;
        if cache_dir.is_none() {
            tracing::warn!(
                "no compile cache: neither XDG_CACHE_HOME nor HOME is set and no cache_dir is configured; every plugin is compiled at each load"
            );
        }
        let cache = ComponentCache::new(cache_dir.map(Path::to_path_buf), &engine);
        Ok(Arc::new(Runtime {
            log_rates: rate::LogRates::new(metrics.clone()),
            metrics,
            engine,
            allocator,
            ticking,
            options,
            linker,
            cache,
        }))
    }

    /// Which allocator the engine uses.
    pub fn allocator(&self) -> Allocator {
        self.allocator
    }

    /// Whether the engine meters fuel.
    pub fn meters_fuel(&self) -> bool {
        self.options.fuel
    }

    /// Where calls, traps, fuel and memory are recorded.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }
}
