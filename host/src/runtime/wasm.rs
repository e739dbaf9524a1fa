//! The one [`Runtime`] of a host: the engine, linked with WASI p2 and every leasehold import, the
//! compile cache, and each plugin's output rate.

use std::path::Path;
use std::sync::Arc;

use wasmtime::Engine;
use wasmtime::component::Linker;

use super::bindings;
use super::cache::ComponentCache;
use super::engine::{self, Allocator, EngineOptions};
use super::host::HostState;
use super::metrics::PluginMetrics;
use crate::output_rate::OutputRates;

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
    pub(super) metrics: Arc<PluginMetrics>,
    pub(super) engine: Engine,
    pub(super) allocator: Allocator,
    /// Guest calls in progress: the epoch ticker runs only while there is one.
    pub(super) ticking: engine::Ticking,
    pub(super) options: EngineOptions,
    pub(super) linker: Linker<HostState>,
    pub(super) cache: ComponentCache,
    /// Each plugin's log rate, kept by name across its stores, terms and files.
    pub(super) log_rates: OutputRates,
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
        metrics: Arc<PluginMetrics>,
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
            log_rates: OutputRates::new(metrics.log_dropped.clone()),
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
    pub fn metrics(&self) -> &Arc<PluginMetrics> {
        &self.metrics
    }
}
