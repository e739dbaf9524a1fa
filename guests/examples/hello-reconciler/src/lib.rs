//! The smallest useful reconciler: logs a greeting on every tick with the term's epoch and the
//! time left on the lease.
//!
//! Config: `greeting` (default `"hello"`).

use leasehold_guest::{Config, Context, Error, Outcome, Reconciler, info, lease};

struct Hello {
    greeting: String,
}

impl Reconciler for Hello {
    fn init(config: Config) -> Result<Self, Error> {
        config.deny_unknown(&["greeting"])?;
        let greeting = config.get_or("greeting", "hello").to_string();
        info!(
            "{greeting}: starting on lease {:?} as {}",
            lease::name(),
            lease::holder()
        );
        Ok(Hello { greeting })
    }

    fn reconcile(&mut self, ctx: Context) -> Result<Outcome, Error> {
        let time_left = match lease::time_left() {
            Some(left) => format!("{} ms", left.as_millis()),
            None => "no time".to_string(),
        };
        info!(
            "{} from epoch {}, tick {}: lease {:?} has {time_left} left",
            self.greeting,
            ctx.epoch(),
            ctx.tick(),
            ctx.lease(),
        );
        Ok(Outcome::default())
    }
}

leasehold_guest::export_reconciler!(Hello);

// The plugin's logic, run natively (`cargo test -p hello-reconciler`) against a fake host.
#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_guest::log::Level;
    use leasehold_guest::testing::{self, Fake};
    use std::time::Duration;

    #[test]
    fn greets_on_init_and_every_tick() {
        let fake = Fake::new()
            .holding("leader", 7)
            .holder("replica-a")
            .time_left(Duration::from_millis(4200));
        let mut hello = Hello::init(testing::config([("greeting", "hi")])).unwrap();
        hello.reconcile(fake.context(0)).unwrap();
        fake.update_lease(|l| l.time_left = None);
        let outcome = hello.reconcile(fake.context(1)).unwrap();
        assert_eq!(outcome, Outcome::default());
        assert_eq!(
            fake.logs_at(Level::Info),
            [
                r#"hi: starting on lease "leader" as replica-a"#,
                r#"hi from epoch 7, tick 0: lease "leader" has 4200 ms left"#,
                r#"hi from epoch 7, tick 1: lease "leader" has no time left"#,
            ]
        );
    }

    #[test]
    fn greeting_defaults_to_hello() {
        let fake = Fake::new().holding("leader", 1);
        let mut hello = Hello::init(Config::default()).unwrap();
        hello.reconcile(fake.context(0)).unwrap();
        assert!(
            fake.logs()[1]
                .message
                .starts_with("hello from epoch 1, tick 0")
        );
    }

    #[test]
    fn a_misspelt_key_fails_init() {
        let _fake = Fake::new();
        let e = Hello::init(testing::config([("greting", "hi")]))
            .err()
            .unwrap();
        assert_eq!(
            e.to_string(),
            r#"unknown config key "greting" (known keys: "greeting")"#
        );
    }
}
