//! Glue between the traits of this crate and the component's exports. Not part of the API: the
//! export macros are the only users.

use std::any::Any;
use std::cell::RefCell;
use std::marker::PhantomData;

use crate::{Config, Context, Error, EventHandler, HealthCheck, Outcome, Reconciler, Role};

/// Bindings of the `reconciler` world; the shared interfaces (`types`, `lease`, `log`, `kv`,
/// `sql`) are generated here once.
pub mod reconciler {
    wit_bindgen::generate!({
        world: "reconciler",
        path: "../../wit",
        pub_export_macro: true,
        export_macro_name: "__leasehold_export_reconciler_world",
        default_bindings_module: "leasehold_guest::__private::reconciler",
    });
}

/// Bindings of the `health-check` world, reusing the interfaces generated for the reconciler.
pub mod health_check {
    wit_bindgen::generate!({
        world: "health-check",
        path: "../../wit",
        pub_export_macro: true,
        export_macro_name: "__leasehold_export_health_check_world",
        default_bindings_module: "leasehold_guest::__private::health_check",
        with: {
            "leasehold:plugin/types@0.1.0": crate::__private::reconciler::leasehold::plugin::types,
            "leasehold:plugin/lease@0.1.0": crate::__private::reconciler::leasehold::plugin::lease,
            "leasehold:plugin/log@0.1.0": crate::__private::reconciler::leasehold::plugin::log,
        },
    });
}

/// Bindings of the `event-reconciler` world (the reconciler's plus `handle-event`), reusing the
/// interfaces generated for the reconciler.
pub mod event_reconciler {
    wit_bindgen::generate!({
        world: "event-reconciler",
        path: "../../wit",
        pub_export_macro: true,
        export_macro_name: "__leasehold_export_event_reconciler_world",
        default_bindings_module: "leasehold_guest::__private::event_reconciler",
        with: {
            "leasehold:plugin/types@0.1.0": crate::__private::reconciler::leasehold::plugin::types,
            "leasehold:plugin/lease@0.1.0": crate::__private::reconciler::leasehold::plugin::lease,
            "leasehold:plugin/log@0.1.0": crate::__private::reconciler::leasehold::plugin::log,
            "leasehold:plugin/kv@0.1.0": crate::__private::reconciler::leasehold::plugin::kv,
            "leasehold:plugin/sql@0.1.0": crate::__private::reconciler::leasehold::plugin::sql,
        },
    });
}

pub use reconciler::leasehold::plugin::{
    kv as wit_kv, lease as wit_lease, log as wit_log, sql as wit_sql, types as wit_types,
};
pub use wit_bindgen;

thread_local! {
    /// The plugin value built by `init`. A component exports one plugin, so one slot suffices;
    /// it is type-erased because statics cannot be generic.
    static PLUGIN: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

/// Runs `f` on the plugin value, building it with `init` first when `lazy_init` is given and
/// nothing was built yet.
fn with_plugin<T: 'static, R>(
    lazy_init: Option<fn(Config) -> Result<T, Error>>,
    f: impl FnOnce(&mut T) -> Result<R, Error>,
) -> Result<R, Error> {
    PLUGIN.with(|slot| {
        let mut slot = slot.borrow_mut();
        if slot.is_none() {
            match lazy_init {
                Some(init) => *slot = Some(Box::new(init(Config::default())?)),
                None => return Err("called before init: the host must call init first".into()),
            }
        }
        match slot.as_mut().and_then(|b| b.downcast_mut::<T>()) {
            Some(plugin) => f(plugin),
            None => Err("internal error: the plugin value has an unexpected type".into()),
        }
    })
}

fn set_plugin<T: 'static>(plugin: T) {
    PLUGIN.with(|slot| *slot.borrow_mut() = Some(Box::new(plugin)));
}

/// Sends panic messages to the host's log as well as to stderr (the default hook), so that they
/// are seen even where the host does not keep the plugin's output.
fn install_panic_hook() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let default_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("(no message)");
            let place = info
                .location()
                .map(|l| format!(" at {}:{}:{}", l.file(), l.line(), l.column()))
                .unwrap_or_default();
            crate::log::error(&format!("panic{place}: {message}"));
            default_hook(info);
        }));
    });
}

/// The text the host receives for a failed call: the error's whole chain of causes.
fn to_host<T>(result: Result<T, Error>) -> Result<T, String> {
    result.map_err(|e| e.to_string())
}

/// Adapts a [`Reconciler`] to the generated `reconciler` world.
pub struct ReconcilerExport<T>(PhantomData<T>);

impl<T: Reconciler> reconciler::Guest for ReconcilerExport<T> {
    fn init(config: Vec<(String, String)>) -> Result<(), String> {
        install_panic_hook();
        set_plugin(to_host(T::init(Config::from(config)))?);
        Ok(())
    }

    fn reconcile(ctx: wit_types::ReconcileContext) -> Result<wit_types::Outcome, String> {
        install_panic_hook();
        let ctx = Context::new(ctx.lease, ctx.epoch, ctx.tick);
        let outcome: Outcome = to_host(with_plugin::<T, _>(None, |plugin| plugin.reconcile(ctx)))?;
        Ok(wit_types::Outcome {
            requeue_after_ms: outcome.requeue_after_ms(),
        })
    }
}

/// Adapts a [`Reconciler`] that is also an [`EventHandler`] to the generated `event-reconciler`
/// world.
pub struct EventReconcilerExport<T>(PhantomData<T>);

impl<T: Reconciler + EventHandler> event_reconciler::Guest for EventReconcilerExport<T> {
    fn init(config: Vec<(String, String)>) -> Result<(), String> {
        <ReconcilerExport<T> as reconciler::Guest>::init(config)
    }

    fn reconcile(ctx: wit_types::ReconcileContext) -> Result<wit_types::Outcome, String> {
        <ReconcilerExport<T> as reconciler::Guest>::reconcile(ctx)
    }

    fn handle_event(channel: String, payload: String) -> Result<(), String> {
        install_panic_hook();
        to_host(with_plugin::<T, _>(None, |plugin| {
            plugin.handle_event(&channel, &payload)
        }))
    }
}

/// Adapts a [`HealthCheck`] to the generated `health-check` world.
pub struct HealthCheckExport<T>(PhantomData<T>);

impl<T: HealthCheck> health_check::Guest for HealthCheckExport<T> {
    fn init(config: Vec<(String, String)>) -> Result<(), String> {
        install_panic_hook();
        set_plugin(to_host(T::init(Config::from(config)))?);
        Ok(())
    }

    fn check(role: wit_types::Role) -> Result<(), String> {
        install_panic_hook();
        let role = match role {
            wit_types::Role::Active => Role::Active,
            wit_types::Role::Standby => Role::Standby,
        };
        to_host(with_plugin::<T, _>(Some(T::init), |plugin| {
            plugin.check(role)
        }))
    }
}
