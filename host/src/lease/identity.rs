//! The holder identity (DESIGN §1.5): the configured replica id plus a random suffix per process
//! start, so two processes never share an identity and a restarted process never inherits a lease.

use std::fmt;

use rand::Rng;

/// The identity written into the `holder` column of every lease this process acquires.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct HolderId(String);

impl HolderId {
    /// `REPLICA-xxxxxxxx`, with eight random hex digits fresh for this process.
    pub fn generate(replica_id: &str) -> Self {
        let suffix: u32 = rand::rng().random();
        HolderId(format!("{replica_id}-{suffix:08x}"))
    }

    /// The identity as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for HolderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for HolderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HolderId({})", self.0)
    }
}

/// The replica id when none is configured: `HOSTNAME`, else the kernel's host name, else `leasehold`.
pub fn default_replica_id() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.trim().is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "leasehold".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_differ_per_start() {
        let a = HolderId::generate("r1");
        let b = HolderId::generate("r1");
        assert!(a.as_str().starts_with("r1-"));
        assert_ne!(a, b);
    }
}
