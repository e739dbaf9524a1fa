//! The one place that calls `bindgen!`: Rust bindings for the worlds of `wit/plugin.wit`.
//! `lease` and `log` imports are synchronous (they only read host state); `kv` and `sql` are async
//! (they talk to a database); exports are async so that a call can yield at epoch ticks and be
//! cancelled when the lease is lost.

/// The `reconciler` world, and with it every shared interface.
#[allow(missing_docs)] // generated code: its documentation is the WIT file's
pub mod reconciler {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "reconciler",
        imports: {
            "leasehold:plugin/kv": async,
            "leasehold:plugin/sql": async,
        },
        exports: { default: async },
    });
}

/// The `event-reconciler` world, reusing the interfaces generated for the reconciler.
#[allow(missing_docs)] // generated code: its documentation is the WIT file's
pub(crate) mod event_reconciler {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "event-reconciler",
        exports: { default: async },
        with: {
            "leasehold:plugin/types": super::reconciler::leasehold::plugin::types,
            "leasehold:plugin/lease": super::reconciler::leasehold::plugin::lease,
            "leasehold:plugin/log": super::reconciler::leasehold::plugin::log,
            "leasehold:plugin/kv": super::reconciler::leasehold::plugin::kv,
            "leasehold:plugin/sql": super::reconciler::leasehold::plugin::sql,
        },
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

pub use reconciler::leasehold::plugin::{kv, lease, log, sql, types};
