//! A reconciler built against `wit/plugin.wit` as it was before `lease.shard` was added (a frozen
//! copy in `wit/`, with its own bindings rather than the SDK's), and a pre-built component that
//! uses every import the `lease` interface had then: hosts that have since added to the
//! interface must keep loading and running it unchanged.

wit_bindgen::generate!({
    path: "wit",
    world: "reconciler",
});

use leasehold::plugin::{lease, log};

struct FirstWit;

impl Guest for FirstWit {
    fn init(_config: Vec<(String, String)>) -> Result<(), String> {
        Ok(())
    }

    fn reconcile(ctx: ReconcileContext) -> Result<Outcome, String> {
        let left = lease::time_left_ms().unwrap_or(0);
        log::log(
            log::Level::Info,
            &format!(
                "first-wit reconciles {} (lease.name {}) at epoch {} as {}, {} acquired, {left} ms left",
                ctx.lease,
                lease::name(),
                lease::epoch().unwrap_or(0),
                lease::holder(),
                lease::acquired_at_ms().map_or("never", |_| "once"),
            ),
        );
        Ok(Outcome {
            requeue_after_ms: None,
        })
    }
}

export!(FirstWit);
