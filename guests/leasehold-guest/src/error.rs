//! Why a call to a host capability ([`kv`](crate::kv), [`sql`](crate::sql)) failed.

use std::fmt;

/// Why a call to a host capability ([`kv`](crate::kv), [`sql`](crate::sql)) failed: the WIT
/// `capability-error`.
///
/// The texts come from the host and say what was refused and why. An `Error` converts into the
/// `String` error of [`Reconciler::reconcile`](crate::Reconciler::reconcile), so `?` hands it to
/// the host as a failed call; match on it (or on [`Error::kind`]) to handle some cases yourself,
/// above all [`Error::LeaseLost`]:
///
/// ```no_run
/// use leasehold_guest::{kv, log, Error};
///
/// # fn step(epoch: u64) -> Result<(), String> {
/// match kv::put("checkpoint", epoch.to_string()) {
///     Ok(()) => {}
///     // Another replica may hold the lease now; nothing was written. Stop quietly: this
///     // instance is about to be stopped anyway.
///     Err(Error::LeaseLost) => log::warn("checkpoint refused: the lease was lost"),
///     Err(other) => return Err(other.into()),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
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

impl Error {
    /// The WIT name of the case: `not-granted`, `lease-lost`, `invalid`, `too-large`,
    /// `database` or `unavailable`.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::NotGranted(_) => "not-granted",
            Error::LeaseLost => "lease-lost",
            Error::Invalid(_) => "invalid",
            Error::TooLarge(_) => "too-large",
            Error::Database(_) => "database",
            Error::Unavailable(_) => "unavailable",
        }
    }

    /// Whether this is [`Error::LeaseLost`]: a write refused because the lease is no longer
    /// held at this epoch.
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, Error::LeaseLost)
    }

    /// The host's text, without the kind (`None` for [`Error::LeaseLost`], which has none).
    pub fn message(&self) -> Option<&str> {
        match self {
            Error::NotGranted(m)
            | Error::Invalid(m)
            | Error::TooLarge(m)
            | Error::Database(m)
            | Error::Unavailable(m) => Some(m),
            Error::LeaseLost => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotGranted(m) => write!(f, "not granted: {m}"),
            Error::LeaseLost => f.write_str(
                "lease lost: the write was refused because this replica no longer holds the lease \
                 at this epoch (another replica may hold it now); nothing was written",
            ),
            Error::Invalid(m) => write!(f, "invalid: {m}"),
            Error::TooLarge(m) => write!(f, "too large: {m}"),
            Error::Database(m) => write!(f, "database error: {m}"),
            Error::Unavailable(m) => write!(f, "unavailable: {m}"),
        }
    }
}

impl std::error::Error for Error {}

/// The error text the host receives when `?` passes an `Error` out of a plugin's call.
impl From<Error> for String {
    fn from(error: Error) -> String {
        error.to_string()
    }
}

impl From<crate::__private::wit_types::CapabilityError> for Error {
    fn from(error: crate::__private::wit_types::CapabilityError) -> Self {
        use crate::__private::wit_types::CapabilityError as E;
        match error {
            E::NotGranted(m) => Error::NotGranted(m),
            E::LeaseLost => Error::LeaseLost,
            E::Invalid(m) => Error::Invalid(m),
            E::TooLarge(m) => Error::TooLarge(m),
            E::Database(m) => Error::Database(m),
            E::Unavailable(m) => Error::Unavailable(m),
        }
    }
}

/// The error of a capability called outside a host (e.g. in a crate's native unit tests).
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn outside(capability: &str) -> Error {
    Error::Unavailable(format!(
        "leasehold_guest::{capability} is only available to a plugin running in a host"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_texts() {
        let all = [
            Error::NotGranted("kv is not granted".into()),
            Error::LeaseLost,
            Error::Invalid("kv key is empty".into()),
            Error::TooLarge("20 rows".into()),
            Error::Database("boom (SQLSTATE 22012)".into()),
            Error::Unavailable("timeout".into()),
        ];
        let kinds: Vec<&str> = all.iter().map(Error::kind).collect();
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
        let lost: String = Error::LeaseLost.into();
        assert!(
            lost.contains("no longer holds the lease at this epoch"),
            "{lost}"
        );
        assert!(lost.contains("nothing was written"), "{lost}");
    }

    #[test]
    fn question_mark_into_string() {
        fn call() -> Result<(), String> {
            Err(Error::Database("x".into()))?;
            Ok(())
        }
        assert_eq!(call().unwrap_err(), "database error: x");
    }
}
