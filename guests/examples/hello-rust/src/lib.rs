//! hello-rust: hello-reconciler plus a checkpoint in kv, the Rust twin of `hello-python` and
//! `hello-js` (the same plugin in three languages, run by the same tests and benchmark).
//!
//! Every tick adds one to the count under `checkpoint` (a fenced write: refused, changing
//! nothing, once this replica has lost the lease) and logs it.
//!
//! Config: `greeting` (default `"hello"`); `fail_at_tick`: fail that tick with an error, to see a
//! plugin's failure reach `/status` and the log; `busy_at_tick`: compute without end on that
//! tick, to see the host stop a call by force when the term ends.

use leasehold_guest::{
    Config, Context, Error, ErrorContext, Outcome, Reconciler, bail, info, kv, lease,
};

/// The kv key of the count.
const CHECKPOINT: &str = "checkpoint";

struct Hello {
    greeting: String,
    fail_at_tick: Option<u64>,
    busy_at_tick: Option<u64>,
}

impl Reconciler for Hello {
    fn init(config: Config) -> Result<Self, Error> {
        config.deny_unknown(&["greeting", "fail_at_tick", "busy_at_tick"])?;
        let greeting = config.get_or("greeting", "hello").to_string();
        info!(
            "{greeting}: starting on lease {} as {}",
            lease::name(),
            lease::holder()
        );
        Ok(Hello {
            greeting,
            fail_at_tick: config.parse("fail_at_tick")?,
            busy_at_tick: config.parse("busy_at_tick")?,
        })
    }

    fn reconcile(&mut self, ctx: Context) -> Result<Outcome, Error> {
        if Some(ctx.tick()) == self.fail_at_tick {
            bail!("asked to fail at tick {}", ctx.tick());
        }
        if Some(ctx.tick()) == self.busy_at_tick {
            // Stopped by the host: the call's deadline, or the end of the term.
            #[allow(clippy::empty_loop)]
            loop {}
        }
        let count = bump_checkpoint()?;
        info!(
            "{} from epoch {}, tick {}: checkpoint {count}",
            self.greeting,
            ctx.epoch(),
            ctx.tick()
        );
        Ok(Outcome::default())
    }
}

/// Adds one to the checkpoint; the put is fenced by the host.
fn bump_checkpoint() -> Result<u64, Error> {
    let stored = kv::get_string(CHECKPOINT).context("checkpoint not read")?;
    let count = match stored {
        Some(text) => text.parse::<u64>().context("checkpoint not read")? + 1,
        None => 1,
    };
    match kv::put(CHECKPOINT, count.to_string()) {
        Ok(()) => Ok(count),
        Err(e) if e.is_lease_lost() => bail!("checkpoint not saved: lease lost"),
        Err(e) => Err(Error::from(e).context("checkpoint not saved")),
    }
}

leasehold_guest::export_reconciler!(Hello);

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_guest::log::Level;
    use leasehold_guest::testing::{self, Fake};

    #[test]
    fn every_tick_counts_on_from_the_saved_checkpoint() {
        let fake = Fake::new().holding("leader", 3);
        fake.kv_set(CHECKPOINT, "41");
        let mut hello = Hello::init(testing::config([("greeting", "hi")])).unwrap();
        hello.reconcile(fake.context(0)).unwrap();
        assert_eq!(fake.kv_get_string(CHECKPOINT).as_deref(), Some("42"));
        assert_eq!(
            fake.logs_at(Level::Info).last().map(String::as_str),
            Some("hi from epoch 3, tick 0: checkpoint 42")
        );
    }

    #[test]
    fn a_refused_checkpoint_is_a_failed_call_that_says_so() {
        let fake = Fake::new().holding("leader", 3);
        let mut hello = Hello::init(Config::default()).unwrap();
        fake.lose_lease();
        let e = hello.reconcile(fake.context(0)).unwrap_err();
        assert_eq!(e.to_string(), "checkpoint not saved: lease lost");
        assert_eq!(fake.kv_get_string(CHECKPOINT), None);
    }

    #[test]
    fn fail_at_tick_fails_that_tick_only() {
        let fake = Fake::new().holding("leader", 1);
        let mut hello = Hello::init(testing::config([("fail_at_tick", "1")])).unwrap();
        hello.reconcile(fake.context(0)).unwrap();
        let e = hello.reconcile(fake.context(1)).unwrap_err();
        assert_eq!(e.to_string(), "asked to fail at tick 1");
        hello.reconcile(fake.context(2)).unwrap();
        assert_eq!(fake.kv_get_string(CHECKPOINT).as_deref(), Some("2"));
    }
}
