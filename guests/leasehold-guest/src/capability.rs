//! Why a call to a host capability ([`kv`](crate::kv), [`sql`](crate::sql)) failed.

use std::fmt;

/// Why a call to a host capability ([`kv`](crate::kv), [`sql`](crate::sql)) failed: the WIT
/// `capability-error`.
///
/// The texts come from the host and say what was refused and why. `?` turns a
/// `CapabilityError` into the [`Error`](crate::Error) of a plugin's call, which hands it to the
/// host as a failed call; match on it (or on [`CapabilityError::kind`]) to handle some cases
/// yourself, above all [`CapabilityError::LeaseLost`]:
///
/// ```no_run
/// use leasehold_guest::{kv, warn, CapabilityError, Error};
///
/// # fn step(epoch: u64) -> Result<(), Error> {
/// match kv::put("checkpoint", epoch.to_string()) {
///     Ok(()) => {}
///     // Another replica may hold the lease now; nothing was written. Stop quietly: this
///     // instance is about to be stopped anyway.
///     Err(CapabilityError::LeaseLost) => warn!("checkpoint refused: the lease was lost"),
///     Err(other) => return Err(other.into()),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CapabilityError {
    /// The plugin's manifest does not grant the capability; the text names it and the manifest
    /// key that would grant it (`[grants] kv = true`, `[grants.sql]`).
    NotGranted(String),
    /// A write was refused because this replica no longer holds the lease at the epoch the
    /// plugin runs under: another replica may hold it now. Nothing of the write was kept (a
    /// whole [`sql::transaction`](crate::sql::transaction) included), so it is safe to give up;
    /// the instance will be stopped soon.
    LeaseLost,
    /// The arguments were refused (an empty or too long key, a statement the host does not
    /// run, a column of another type than asked for); the text says which and why.
    Invalid(String),
    /// A cap was reached (rows or bytes of a result, size of a value, the kv quota); the text
    /// names it.
    TooLarge(String),
    /// The database refused the statement (syntax, constraint, permission, division by zero);
    /// the text is the database's message with its SQLSTATE.
    Database(String),
    /// The database could not be reached or did not answer in time (including a statement
    /// cancelled by the grant's `statement_timeout`); retrying later may succeed.
    Unavailable(String),
}

impl CapabilityError {
    /// The WIT name of the case: `not-granted`, `lease-lost`, `invalid`, `too-large`,
    /// `database` or `unavailable`.
    pub fn kind(&self) -> &'static str {
        match self {
            CapabilityError::NotGranted(_) => "not-granted",
            CapabilityError::LeaseLost => "lease-lost",
            CapabilityError::Invalid(_) => "invalid",
            CapabilityError::TooLarge(_) => "too-large",
            CapabilityError::Database(_) => "database",
            CapabilityError::Unavailable(_) => "unavailable",
        }
    }

    /// Whether this is [`CapabilityError::LeaseLost`]: a write refused because the lease is no
    /// longer held at this epoch.
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, CapabilityError::LeaseLost)
    }

    /// The host's text, without the kind (`None` for [`CapabilityError::LeaseLost`], which has
    /// none).
    pub fn message(&self) -> Option<&str> {
        match self {
            CapabilityError::NotGranted(m)
            | CapabilityError::Invalid(m)
            | CapabilityError::TooLarge(m)
            | CapabilityError::Database(m)
            | CapabilityError::Unavailable(m) => Some(m),
            CapabilityError::LeaseLost => None,
        }
    }
}

impl fmt::Display for CapabilityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CapabilityError::NotGranted(m) => write!(f, "not granted: {m}"),
            CapabilityError::LeaseLost => f.write_str(
                "lease lost: the write was refused because this replica no longer holds the lease \
                 at this epoch (another replica may hold it now); nothing was written",
            ),
            CapabilityError::Invalid(m) => write!(f, "invalid: {m}"),
            CapabilityError::TooLarge(m) => write!(f, "too large: {m}"),
            CapabilityError::Database(m) => write!(f, "database error: {m}"),
            CapabilityError::Unavailable(m) => write!(f, "unavailable: {m}"),
        }
    }
}

impl std::error::Error for CapabilityError {}

/// The text of [`Display`](fmt::Display), for code whose errors are `String`s.
impl From<CapabilityError> for String {
    fn from(error: CapabilityError) -> String {
        error.to_string()
    }
}

impl From<crate::__private::wit_types::CapabilityError> for CapabilityError {
    fn from(error: crate::__private::wit_types::CapabilityError) -> Self {
        use crate::__private::wit_types::CapabilityError as E;
        match error {
            E::NotGranted(m) => CapabilityError::NotGranted(m),
            E::LeaseLost => CapabilityError::LeaseLost,
            E::Invalid(m) => CapabilityError::Invalid(m),
            E::TooLarge(m) => CapabilityError::TooLarge(m),
            E::Database(m) => CapabilityError::Database(m),
            E::Unavailable(m) => CapabilityError::Unavailable(m),
        }
    }
}

/// The error of a capability called outside a host with no [`testing::Fake`](crate::testing::Fake)
/// installed (e.g. in a crate's native unit tests).
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn outside(capability: &str) -> CapabilityError {
    CapabilityError::Unavailable(format!(
        "leasehold_guest::{capability} is only available to a plugin running in a host \
         (or in a test with a leasehold_guest::testing::Fake installed)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_texts() {
        let all = [
            CapabilityError::NotGranted("kv is not granted".into()),
            CapabilityError::LeaseLost,
            CapabilityError::Invalid("kv key is empty".into()),
            CapabilityError::TooLarge("20 rows".into()),
            CapabilityError::Database("boom (SQLSTATE 22012)".into()),
            CapabilityError::Unavailable("timeout".into()),
        ];
        let kinds: Vec<&str> = all.iter().map(CapabilityError::kind).collect();
        assert_eq!(
            kinds,
            [
                "not-granted",
                "lease-lost",
                "invalid",
                "too-large",
                "database",
                "unavailable"
            ]
        );
        assert!(all[1].is_lease_lost() && !all[0].is_lease_lost());
        assert_eq!(all[2].to_string(), "invalid: kv key is empty");
        assert_eq!(all[2].message(), Some("kv key is empty"));
        assert_eq!(all[1].message(), None);
        let lost: String = CapabilityError::LeaseLost.into();
        assert!(
            lost.contains("no longer holds the lease at this epoch"),
            "{lost}"
        );
        assert!(lost.contains("nothing was written"), "{lost}");
    }

    #[test]
    fn question_mark_into_string_and_error() {
        fn call() -> Result<(), String> {
            Err(CapabilityError::Database("x".into()))?;
            Ok(())
        }
        assert_eq!(call().unwrap_err(), "database error: x");
        fn plugin_call() -> Result<(), crate::Error> {
            Err(CapabilityError::Database("x".into()))?;
            Ok(())
        }
        assert_eq!(plugin_call().unwrap_err().to_string(), "database error: x");
    }
}
