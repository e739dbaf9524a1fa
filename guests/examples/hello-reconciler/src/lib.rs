//! The smallest useful reconciler: logs a greeting on every tick with the term's epoch and the
//! time left on the lease.
//!
//! Config: `greeting` (default `"hello"`).

use leasehold_guest::{Config, Context, Outcome, Reconciler, lease, log};

struct Hello {
    greeting: String,
}

impl Reconciler for Hello {
    fn init(config: Config) -> Result<Self, String> {
        config.deny_unknown(&["greeting"])?;
        let greeting = config.get_or("greeting", "hello").to_string();
        log::info(&format!(
            "{greeting}: starting on lease {:?} as {}",
            lease::name(),
            lease::holder()
        ));
        Ok(Hello { greeting })
    }

    fn reconcile(&mut self, ctx: Context) -> Result<Outcome, String> {
        let time_left = match lease::time_left() {
            Some(left) => format!("{} ms", left.as_millis()),
            None => "no time".to_string(),
        };
        log::info(&format!(
            "{} from epoch {}, tick {}: lease {:?} has {time_left} left",
            self.greeting,
            ctx.epoch(),
            ctx.tick(),
            ctx.lease(),
        ));
        Ok(Outcome::default())
    }
}

leasehold_guest::export_reconciler!(Hello);
