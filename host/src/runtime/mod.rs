//! The WebAssembly runtime (docs/ARCHITECTURE.md §7): one wasmtime engine per process, components
//! compiled once (cached on disk) and pre-linked at load, a fresh `Store` per leadership term,
//! and calls bounded by a wall-clock deadline, memory limits and optional fuel. Who owns the stop
//! of guest code: [`store`], the only door into it, where the term's deadline is enforced on the
//! monotonic clock.
//!
//! Order (each module may use only those listed before it; `host/tests/layers.rs` checks):
//!
//! 1. [`metrics`]: the plugins' figures: calls, traps, fuel, memory, dropped output, stores;
//! 2. [`limits`]: what one store may take of the host's memory (its memories together, what a
//!    host call copies, `wasi:random`, handles);
//! 3. [`engine`]: the engine and its epoch ticker;
//! 4. [`cache`]: compiled components on disk;
//! 5. [`call`]: what a call returns: its result in host types, its failure, its report;
//! 6. [`bindings`]: the generated bindings of the WIT worlds (used by this module only);
//! 7. [`host`]: the store data and the host side of the `lease` and `log` imports;
//! 8. [`imports`]: the host side of the `kv` and `sql` imports (the capability layer behind them);
//! 9. [`output`]: the guest's stdout and stderr, streamed to the log line by line within a
//!    per-call budget (across calls, [`crate::output_rate`] bounds it);
//! 10. [`wasm`]: the [`Runtime`]: the engine linked with every import, the cache, the rates;
//! 11. [`explain`]: `leasehold check`'s longer word on a component that matches no world;
//! 12. [`load`]: reading a component file, compiling it (through [`cache`]) and finding its world;
//! 13. [`store`]: one plugin's store for one term, and its guarded calls.

pub mod bindings;
pub mod cache;
pub mod call;
pub mod engine;
mod explain;
pub mod host;
mod imports;
pub mod limits;
pub mod load;
pub mod metrics;
mod output;
pub mod store;
mod wasm;

pub use self::call::{CallFailure, CallReport, Called, Cancel, CheckRole, Outcome};
pub use self::load::{ComponentError, Loaded, Prepared, World};
pub use self::metrics::PluginMetrics;
pub use self::store::{Instance, PluginStore};
pub use self::wasm::{EngineError, Runtime, WIT_PACKAGE};
