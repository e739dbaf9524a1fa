//! A health check that fails on demand, to watch a holder step down or a standby hold back.
//!
//! Config:
//! - `fail`: `"never"` (default), `"always"`, `"active"` (only on the holder) or `"standby"`
//!   (only on the other replicas);
//! - `fail_every`: fail only every N-th check of the chosen role(s) (default 1: every one).

use leasehold_guest::{Config, Error, HealthCheck, Role, bail, debug, ensure, lease, warn};

struct Flaky {
    fail: Fail,
    every: u64,
    /// Checks so far of the roles that may fail.
    counted: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Fail {
    Never,
    Always,
    Active,
    Standby,
}

impl HealthCheck for Flaky {
    fn init(config: Config) -> Result<Self, Error> {
        config.deny_unknown(&["fail", "fail_every"])?;
        let fail =
            match config.choice("fail", &["never", "always", "active", "standby"], "never")? {
                "always" => Fail::Always,
                "active" => Fail::Active,
                "standby" => Fail::Standby,
                _ => Fail::Never,
            };
        let every: u64 = config.parse_or("fail_every", 1)?;
        ensure!(every > 0, "config key \"fail_every\": must be 1 or more");
        if fail == Fail::Never && config.contains_key("fail_every") {
            warn!("fail_every is ignored while fail = \"never\"");
        }
        Ok(Flaky {
            fail,
            every,
            counted: 0,
        })
    }

    fn check(&mut self, role: Role) -> Result<(), Error> {
        let applies = match self.fail {
            Fail::Never => false,
            Fail::Always => true,
            Fail::Active => role == Role::Active,
            Fail::Standby => role == Role::Standby,
        };
        if !applies {
            debug!("{role} check: healthy");
            return Ok(());
        }
        self.counted += 1;
        if self.counted % self.every == 0 {
            debug!("{role} check #{}: failing on purpose", self.counted);
            bail!(
                "deliberate {role} failure on lease {:?} (check #{} of the failing roles, fail_every = {})",
                lease::name(),
                self.counted,
                self.every
            );
        }
        debug!("{role} check #{}: healthy", self.counted);
        Ok(())
    }
}

leasehold_guest::export_health_check!(Flaky);
