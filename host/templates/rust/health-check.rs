//! {{name}}: a leasehold health check. The host calls `init` once per instance with the
//! manifest's `[config]`, then `check(active)` on the replica holding the lease (after
//! `failure_threshold` consecutive failures it gives the lease up) and `check(standby)` on the
//! others (a failing check keeps them from campaigning). This one passes unless config says
//! otherwise.
//!
//! Config: `fail` = `"never"` (default), `"always"`, `"active"` (only the holder's checks) or
//! `"standby"` (only the other replicas' checks).

use leasehold_guest::{Config, Error, HealthCheck, Role, bail, debug, info, lease};

/// What the check keeps between calls.
struct {{type}} {
    /// Which checks fail: one of the `fail` values.
    fail: String,
}

impl HealthCheck for {{type}} {
    fn init(config: Config) -> Result<Self, Error> {
        // A misspelt key is an error, not a silent default.
        config.deny_unknown(&["fail"])?;
        let fail = config.choice("fail", &["never", "always", "active", "standby"], "never")?;
        let (lease, holder) = (lease::name(), lease::holder());
        info!("checking lease {lease:?} as {holder} (fail = {fail})");
        Ok({{type}} {
            fail: fail.to_string(),
        })
    }

    fn check(&mut self, role: Role) -> Result<(), Error> {
        // ... measure what this replica needs to do its work (a dependency, the disk, ...) ...
        let failing = match self.fail.as_str() {
            "always" => true,
            "active" => role == Role::Active,
            "standby" => role == Role::Standby,
            _ => false,
        };
        if failing {
            // The text is shown in the host's /status and log.
            bail!("{role} check failed: config fail = {:?}", self.fail);
        }
        debug!("{role} check passed");
        Ok(())
    }
}

leasehold_guest::export_health_check!({{type}});

// Run natively with `cargo test` (./test.sh): a `Fake` stands in for the host on this thread.
#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_guest::log::Level;
    use leasehold_guest::testing::{self, Fake};

    #[test]
    fn passes_by_default() {
        let fake = Fake::new().holding("leader", 7).holder("replica-a");
        let mut check = {{type}}::init(Config::default()).unwrap();
        check.check(Role::Active).unwrap();
        check.check(Role::Standby).unwrap();
        assert_eq!(
            fake.logs_at(Level::Info),
            [r#"checking lease "leader" as replica-a (fail = never)"#]
        );
    }

    #[test]
    fn fails_the_role_config_names() {
        let _fake = Fake::new();
        let config = testing::config([("fail", "active")]);
        let mut check = {{type}}::init(config).unwrap();
        let e = check.check(Role::Active).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"active check failed: config fail = "active""#
        );
        check.check(Role::Standby).unwrap();
    }

    #[test]
    fn a_value_out_of_the_list_fails_init() {
        let _fake = Fake::new();
        let config = testing::config([("fail", "sometimes")]);
        let e = {{type}}::init(config).err().unwrap();
        assert!(e.to_string().contains("sometimes"), "{e}");
    }
}
