//! The holder identity (docs/ARCHITECTURE.md §2.4): the configured replica id plus a random suffix
//! per process start, so two processes never share an identity and a restarted process never
//! inherits a lease.

use std::fmt;

use rand::Rng;

/// The identity written into the `holder` column of every lease this process acquires.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct HolderId(String);

impl HolderId {
    /// `REPLICA-xxxxxxxx`, with eight hex digits drawn from `rng`: fresh for each process when
    /// the composition root seeds it from the system's entropy, the same for a replayed seed.
    pub fn generate(replica_id: &str, rng: &mut impl Rng) -> Self {
        let suffix: u32 = rng.random();
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

/// The longest replica id: a host or pod name fits many times over, and with its suffix it still
/// fits the `holder` column of a table row.
pub const MAX_REPLICA_ID: usize = 200;

/// Checks a replica id: 1 to [`MAX_REPLICA_ID`] printable ASCII characters, no spaces. It is
/// written into every lease row it holds and shown in every log line, `/status` and table that
/// names a holder, so it is kept to what a terminal prints as it is, on one line, in one column;
/// host and pod names are of this kind.
pub fn check_replica_id(id: &str) -> Result<(), &'static str> {
    if id.is_empty() {
        Err("it is empty")
    } else if !id.bytes().all(|b| b.is_ascii_graphic()) {
        Err("use printable ASCII without spaces (letters, digits, punctuation)")
    } else if id.len() > MAX_REPLICA_ID {
        Err("longer than 200 characters")
    } else {
        Ok(())
    }
}

/// The replica id when none is configured, and where it came from: `HOSTNAME`, else the
/// kernel's host name, else `leasehold`.
pub fn default_replica_id() -> (String, &'static str) {
    if let Some(host) =
        std::env::var_os("HOSTNAME").filter(|h| !h.to_string_lossy().trim().is_empty())
    {
        return (host.to_string_lossy().into_owned(), "from $HOSTNAME");
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .map_or(("leasehold".to_string(), "the built-in default"), |h| {
            (h, "from the kernel's host name")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_differ_per_draw_and_start_with_the_replica_id() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let a = HolderId::generate("r1", &mut rng);
        let b = HolderId::generate("r1", &mut rng);
        assert!(a.as_str().starts_with("r1-"));
        assert_ne!(a, b);
    }

    #[test]
    fn replica_ids_are_printable_ascii_without_spaces() {
        for ok in [
            "a",
            "web-7f9c-x2",
            "host.example.com",
            "pod_1:9464",
            &"r".repeat(200),
        ] {
            check_replica_id(ok).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
        }
        for bad in [
            "",
            "a b",
            "a\tb",
            "a\nINFO forged",
            "x\u{1b}[2J",
            "caf\u{e9}",
            "\u{9b}",
            &"r".repeat(201),
        ] {
            assert!(check_replica_id(bad).is_err(), "{bad:?}");
        }
    }
}
