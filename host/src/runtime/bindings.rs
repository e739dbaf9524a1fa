//! The one place that calls `bindgen!`: Rust bindings for the worlds of `wit/plugin.wit`.
//! Imports are synchronous (they only read host state); exports are async so that a call can
//! yield at epoch ticks and be cancelled when the lease is lost.

/// The `reconciler` world, and with it the shared `types`, `lease` and `log` interfaces.
#[allow(missing_docs)] // generated code: its documentation is the WIT file's
pub mod reconciler {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "reconciler",
        exports: { default: async },
    });
}

/// The `health-check` world, reusing the interfaces generated for the reconciler.
#[allow(missing_docs)] // generated code: its documentation is the WIT file's
pub mod health {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "health-check",
        exports: { default: async },
        with: {
            "leasehold:plugin/types": super::reconciler::leasehold::plugin::types,
            "leasehold:plugin/lease": super::reconciler::leasehold::plugin::lease,
            "leasehold:plugin/log": super::reconciler::leasehold::plugin::log,
        },
    });
}

pub use reconciler::leasehold::plugin::{lease, log, types};
