//! The lease protocol: which safety rules a binary follows when it takes a lease, as one number.
//!
//! A release that adds a rule an older binary would skip (the failover hold-off was one) raises
//! [`PROTOCOL`] and, in its migration, the schema's required protocol (the one row of
//! `leasehold_protocol`: the number, the first release that speaks it, and the rule in a
//! sentence). Every binary compares the two when it opens the store and before each campaign,
//! and refuses with [`NeedsNewer`] rather than take a lease without the rule. On PostgreSQL the
//! database itself holds the campaign to it, so that a binary from before this check is refused
//! too: each connection announces its protocol (the `leasehold.protocol` setting), and a trigger
//! refuses lease takeovers from a session that announces less (SQLSTATE `LH002`).
//!
//! What may change between releases without raising it (README, Operations, Upgrades): tables,
//! columns and functions added with defaults that keep the previous release's statements
//! working. Binaries accept a schema with migrations newer than theirs, so that a release can be
//! rolled back to the previous one.

/// The protocol this binary speaks. 1: epochs only go up, expiry by the database's clock, the
/// failover hold-off and epoch floor, handoff reservations. 2: the line of standbys
/// ([`crate::queue`]): a release or a campaign that finds a lease free gives it to the head of
/// its line. No schema requires 2: a binary of protocol 1 ignores the line, and what it does
/// beside one (win a free lease ahead of the waiters, release without giving the lease away)
/// breaks no rule of protocol 1, which a grant keeps as a won campaign does.
pub const PROTOCOL: i64 = 2;

/// This binary's release, as `leasehold --version` names it.
pub const RELEASE: &str = env!("CARGO_PKG_VERSION");

/// What the README calls the section an operator needs when a replica is refused.
pub const UPGRADES: &str = "README, Operations, Upgrades and rollbacks";

/// The schema's required protocol, as `leasehold_protocol` records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The lowest protocol that may take a lease in this database.
    pub required: i64,
    /// The first release that speaks it.
    pub since: String,
    /// The rule that made it necessary, in a sentence.
    pub why: String,
}

/// The database needs a newer binary than this one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "this database needs leasehold ≥ {} (protocol {}: {}); this is leasehold {RELEASE}, which speaks protocol {PROTOCOL}: upgrade this replica ({UPGRADES})",
    .0.since, .0.required, .0.why
)]
pub struct NeedsNewer(pub Requirement);

impl Requirement {
    /// Whether this binary may take leases under it. A schema without the row (a database
    /// created before it existed, or the row deleted by hand) asks for protocol 1, what every
    /// release speaks.
    pub fn check(found: Option<Requirement>) -> Result<(), NeedsNewer> {
        match found {
            Some(req) if req.required > PROTOCOL => Err(NeedsNewer(req)),
            _ => Ok(()),
        }
    }
}

/// The statement that reads the requirement from a SQLite file.
pub const READ_SQLITE: &str = "SELECT required, since, why FROM leasehold_protocol";

/// The statement that reads the requirement from PostgreSQL: through the schema owner's function,
/// so that a host role needs no grant for it.
pub const READ_POSTGRES: &str = "SELECT required, since, why FROM leasehold_protocol()";

/// [`READ_SQLITE`]'s or [`READ_POSTGRES`]'s row as a [`Requirement`].
pub fn from_row((required, since, why): (i64, String, String)) -> Requirement {
    Requirement {
        required,
        since,
        why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_refuses_a_schema_that_needs_a_higher_protocol_and_names_the_release_and_the_rule() {
        assert_eq!(Requirement::check(None), Ok(()));
        let at = |required| Requirement {
            required,
            since: "9.0.0".into(),
            why: "a rule".into(),
        };
        assert_eq!(Requirement::check(Some(at(PROTOCOL))), Ok(()));
        let refused = Requirement::check(Some(at(PROTOCOL + 1))).unwrap_err();
        let text = refused.to_string();
        assert!(
            text.starts_with(&format!(
                "this database needs leasehold ≥ 9.0.0 (protocol {}: a rule); this is leasehold {RELEASE}",
                PROTOCOL + 1
            )),
            "{text}"
        );
    }
}
