//! The WebAssembly runtime (DESIGN §2.3–2.4): one wasmtime engine per process, components
//! compiled once (cached on disk) and pre-linked at load, a fresh `Store` per leadership term,
//! and calls bounded by a wall-clock deadline, memory limits and optional fuel.
//!
//! - [`store`]: one plugin's store for one term, the only door into guest code, where the term's
//!   deadline is enforced on the monotonic clock (who owns the stop: this module);
//! - [`call`]: what a call returns: its result in host types, its failure, its report;
//! - [`bindings`]: the generated bindings of the WIT worlds (used by this module only);
//! - [`host`]: the store data and the host side of the `lease` and `log` imports;
//! - `capabilities`: the host side of the `kv` and `sql` imports;
//! - [`engine`]: the engine and its epoch ticker;
//! - [`cache`]: compiled components on disk.

pub mod bindings;
pub mod cache;
pub mod call;
mod capabilities;
pub mod engine;
pub mod host;
pub mod store;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::Engine;
use wasmtime::component::Linker;

use self::bindings::event_reconciler::EventReconcilerPre;
use self::bindings::health::HealthCheckPre;
use self::bindings::reconciler::ReconcilerPre;
use self::cache::{CacheOutcome, ComponentCache};
use self::engine::{Allocator, EngineOptions};
use self::host::HostState;
use crate::metrics::Metrics;

pub use self::call::{CallFailure, CallReport, Called, Cancel, CheckRole, Outcome};
pub use self::store::{DEFAULT_FUEL_PER_CALL, Instance, PluginStore};

/// The WIT package version this host implements.
pub const WIT_PACKAGE: &str = "leasehold:plugin@0.1.0";

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
