//! {{name}}: a leasehold event reconciler. The host starts it on the replica that acquires its
//! lease (a fresh instance each term), calls `init` once with the manifest's `[config]`, then
//! `reconcile` on the schedule until the lease is lost, and, between reconciles, `handle_event`
//! for each PostgreSQL notification on the manifest's `[events] channels`. This one logs each
//! tick with its epoch, and each event.
//!
//! Notifications sent while no replica listens (during a handover) are lost: let `reconcile`
//! find all the work, and use events for latency.
//!
//! Config: `greeting` (default `"hello"`), the first word of each tick's log line.

use leasehold_guest::{Config, Context, Error, EventHandler, Outcome, Reconciler, info, lease};

/// What the plugin keeps for one term.
struct {{type}} {
    greeting: String,
}

impl Reconciler for {{type}} {
    fn init(config: Config) -> Result<Self, Error> {
        // A misspelt key is an error, not a silent default.
        config.deny_unknown(&["greeting"])?;
        let greeting = config.get_or("greeting", "hello").to_string();
        let (lease, holder) = (lease::name(), lease::holder());
        info!("starting on lease {lease:?} as {holder}");
        Ok({{type}} { greeting })
    }

    fn reconcile(&mut self, ctx: Context) -> Result<Outcome, Error> {
        // The epoch grows with every acquisition: pass it along with writes to other systems, so
        // that they can refuse a replica that lost the lease without knowing it yet.
        let (epoch, tick) = (ctx.epoch(), ctx.tick());
        info!("{} from epoch {epoch}, tick {tick}", self.greeting);
        // An Err here fails the call: the host logs it and retries with backoff.
        Ok(Outcome::default()) // again after the manifest's interval
    }
}

impl EventHandler for {{type}} {
    fn handle_event(&mut self, channel: &str, payload: &str) -> Result<(), Error> {
        let epoch = lease::epoch().unwrap_or_default();
        info!("event on {channel} at epoch {epoch}: {payload:?}");
        Ok(())
    }
}

leasehold_guest::export_event_reconciler!({{type}});

// Run natively with `cargo test` (./test.sh): a `Fake` stands in for the host on this thread.
#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_guest::log::Level;
    use leasehold_guest::testing::{self, Fake};

    #[test]
    fn logs_each_tick_with_its_epoch_and_each_event() {
        let fake = Fake::new().holding("leader", 7).holder("replica-a");
        let config = testing::config([("greeting", "hi")]);
        let mut plugin = {{type}}::init(config).unwrap();
        let outcome = plugin.reconcile(fake.context(0)).unwrap();
        assert_eq!(outcome, Outcome::default());
        plugin.handle_event("jobs", "job 42 queued").unwrap();
        plugin.reconcile(fake.context(1)).unwrap();
        assert_eq!(
            fake.logs_at(Level::Info),
            [
                r#"starting on lease "leader" as replica-a"#,
                "hi from epoch 7, tick 0",
                r#"event on jobs at epoch 7: "job 42 queued""#,
                "hi from epoch 7, tick 1",
            ]
        );
    }

    #[test]
    fn a_misspelt_config_key_fails_init() {
        let _fake = Fake::new();
        let config = testing::config([("greting", "hi")]);
        let e = {{type}}::init(config).err().unwrap();
        assert_eq!(
            e.to_string(),
            r#"unknown config key "greting" (known keys: "greeting")"#
        );
    }
}
