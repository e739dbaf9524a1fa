//! Reading a plugin component: check its header, compile it (or load the compiled artifact from
//! [`super::cache`]), link it against the host's imports and find which world it implements.
//! Every failure is a [`ComponentError`] naming the file, with wasmtime's own error kept as its
//! source.

use std::path::Path;
use std::time::{Duration, Instant};

use super::bindings::event_reconciler::EventReconcilerPre;
use super::bindings::health::HealthCheckPre;
use super::bindings::reconciler::ReconcilerPre;
use super::cache::CacheOutcome;
use super::host::HostState;
use super::{Runtime, WIT_PACKAGE};

/// A boxed error kept as a source, for errors (wasmtime's) that are not `std::error::Error`
/// themselves.
type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Why a component file did not load. Each variant names the file; the underlying error, when
/// there is one, is the [`source`](std::error::Error::source).
#[derive(Debug, thiserror::Error)]
pub enum ComponentError {
    /// The file could not be read.
    #[error("{path}: cannot read")]
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
    #[error("{path}: invalid component")]
    Compile {
        /// The file.
        path: String,
        /// wasmtime's error.
        #[source]
        source: Cause,
    },
    /// The component imports another version of the WIT package.
    #[error(
        "{path}: matches no {WIT_PACKAGE} world: built against another version of the package (imports {}); this host implements {WIT_PACKAGE}",
        .imports.join(", ")
    )]
    OtherVersion {
        /// The file.
        path: String,
        /// The imports of another version.
        imports: Vec<String>,
    },
    /// The component imports something this host does not provide.
    #[error(
        "{path}: matches no {WIT_PACKAGE} world (this host provides {WIT_PACKAGE} and wasi@0.2)"
    )]
    Link {
        /// The file.
        path: String,
        /// The linker's error.
        #[source]
        source: Cause,
    },
    /// The component's exports match no world of the package.
    #[error(
        "{path}: matches no {WIT_PACKAGE} world: as a reconciler: {as_reconciler}; as a health-check: {as_health_check} (exports found: {})",
        if .exports.is_empty() { "none".to_string() } else { .exports.join(", ") }
    )]
    NoWorld {
        /// The file.
        path: String,
        /// Why it is not a reconciler: the missing exports, else the type error.
        as_reconciler: String,
        /// Why it is not a health check.
        as_health_check: String,
        /// What it does export.
        exports: Vec<String>,
    },
}

impl ComponentError {
    /// A longer explanation for `leasehold check`, where there is more to say than the line.
    pub fn explain(&self) -> Option<String> {
        match self {
            ComponentError::NoWorld {
                as_reconciler,
                as_health_check,
                exports,
                ..
            } => {
                let type_errors: Vec<(&str, &str)> = [
                    ("reconciler", as_reconciler),
                    ("health-check", as_health_check),
                ]
                .into_iter()
                .filter(|(_, why)| !why.starts_with(MISSING))
                .map(|(world, why)| (world, why.as_str()))
                .collect();
                Some(super::explain::no_world(exports, &type_errors))
            }
            _ => None,
        }
    }
}

/// How [`world_mismatch`] starts when exports are missing (rather than of another type).
const MISSING: &str = "missing export";

/// The world a component implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

impl Runtime {
    /// Reads, compiles (or loads from cache) and links the component at `path`.
    pub fn load_file(&self, path: &Path) -> Result<Loaded, ComponentError> {
        let shown = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| ComponentError::Read {
            path: shown.clone(),
            source,
        })?;
        self.load_bytes(&shown, &bytes)
    }

    /// Compiles (or loads from cache) and links a component; `path` only names it in errors.
    pub fn load_bytes(&self, path: &str, bytes: &[u8]) -> Result<Loaded, ComponentError> {
        match bytes.get(..8) {
            Some([0, b'a', b's', b'm', 0x0d, 0x00, 0x01, 0x00]) => {}
            Some([0, b'a', b's', b'm', 0x01, 0x00, 0x00, 0x00]) => {
                return Err(ComponentError::CoreModule {
                    path: path.to_string(),
                });
            }
            Some([0, b'a', b's', b'm', ..]) => {
                return Err(ComponentError::NotWasm {
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
                return Err(ComponentError::NotWasm {
                    path: path.to_string(),
                    reason,
                });
            }
        }
        let started = Instant::now();
        let (component, cache) =
            self.cache
                .load(&self.engine, bytes)
                .map_err(|e| ComponentError::Compile {
                    path: path.to_string(),
                    source: e.into(),
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
            return Err(ComponentError::OtherVersion {
                path: path.to_string(),
                imports: foreign.into_iter().map(str::to_string).collect(),
            });
        }
        let pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| ComponentError::Link {
                path: path.to_string(),
                source: e.into(),
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
                    return Err(ComponentError::NoWorld {
                        path: path.to_string(),
                        as_reconciler: world_mismatch(
                            &exports,
                            &["init", "reconcile"],
                            &as_reconciler,
                        ),
                        as_health_check: world_mismatch(&exports, &["init", "check"], &as_health),
                        exports,
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
            "{MISSING}{} {}",
            if missing.len() > 1 { "s" } else { "" },
            missing.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::engine::EngineOptions;
    use crate::runtime::metrics::PluginMetrics;

    #[test]
    fn a_component_that_does_not_compile_keeps_wasmtimes_reason_as_its_cause() {
        let cache = tempfile::tempdir().unwrap();
        let runtime = Runtime::new(
            EngineOptions::default(),
            Some(cache.path()),
            PluginMetrics::new(),
        )
        .unwrap();
        let wasm = std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../guests/dist/hello-reconciler.wasm"),
        )
        .expect("guest components are built (make guests)");
        let Err(error) = runtime.load_bytes("half.wasm", &wasm[..wasm.len() / 2]) else {
            panic!("half a component loaded");
        };
        assert!(matches!(error, ComponentError::Compile { .. }), "{error:?}");
        assert_eq!(error.to_string(), "half.wasm: invalid component");
        let line = crate::report::chain(&error);
        assert!(
            line.starts_with("half.wasm: invalid component: ") && line.len() > 40,
            "{line}"
        );
    }
}
