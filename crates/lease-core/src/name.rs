//! Lease names: checked once where they enter (the config, a manifest), then carried as
//! [`LeaseName`] so nothing downstream has to check them again.

use std::fmt;
use std::ops::Deref;

/// The lease a replica campaigns for when none is configured, and the one a plugin without a
/// manifest is bound to: one name that needs no explaining in a single-job deployment.
pub const DEFAULT_LEASE: &str = "leader";

/// Why a lease name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid lease name {name:?}: {reason}")]
pub struct LeaseNameError {
    /// The name as given.
    pub name: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// A valid lease name: 1 to 200 bytes of ASCII letters, digits and `- _ . : /`. Names go into
/// logs, URLs, metric labels and SQL parameters, so they are kept short and printable.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct LeaseName(String);

impl LeaseName {
    /// Checks `name`.
    pub fn parse(name: &str) -> Result<Self, LeaseNameError> {
        Self::try_from(name.to_string())
    }

    /// [`DEFAULT_LEASE`].
    pub fn default_lease() -> Self {
        LeaseName(DEFAULT_LEASE.to_string())
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for LeaseName {
    type Error = LeaseNameError;

    fn try_from(name: String) -> Result<Self, LeaseNameError> {
        let reason = if name.is_empty() {
            Some("empty")
        } else if name.len() > 200 {
            Some("longer than 200 bytes")
        } else if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:/".contains(c))
        {
            Some("use ASCII letters, digits and - _ . : / only")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(LeaseNameError { name, reason }),
            None => Ok(LeaseName(name)),
        }
    }
}

impl std::str::FromStr for LeaseName {
    type Err = LeaseNameError;

    fn from_str(name: &str) -> Result<Self, LeaseNameError> {
        Self::parse(name)
    }
}

impl From<LeaseName> for String {
    fn from(name: LeaseName) -> String {
        name.0
    }
}

impl Deref for LeaseName {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for LeaseName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// Shown as the plain string (`"leader"`), as logs showed lease names before they had a type.
impl fmt::Debug for LeaseName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for LeaseName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for LeaseName {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for LeaseName {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_name_is_short_printable_ascii() {
        for ok in ["leader", "orders/11", "a.b:c-d_e", &"x".repeat(200)] {
            assert_eq!(LeaseName::parse(ok).unwrap(), *ok);
        }
        for (bad, reason) in [
            ("", "empty"),
            ("a b", "ASCII"),
            ("é", "ASCII"),
            (&"x".repeat(201), "200"),
        ] {
            let e = LeaseName::parse(bad).unwrap_err();
            assert!(e.to_string().contains(reason), "{bad:?}: {e}");
        }
    }

    #[test]
    fn a_lease_name_reads_and_writes_as_a_plain_string() {
        let name: LeaseName = serde_json::from_str("\"jobs\"").unwrap();
        assert_eq!(serde_json::to_string(&name).unwrap(), "\"jobs\"");
        assert!(serde_json::from_str::<LeaseName>("\"a b\"").is_err());
    }
}
