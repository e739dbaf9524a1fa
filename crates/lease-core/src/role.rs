//! The words for a replica's part in a lease, shared by the coordinator that decides it and
//! everything that shows it: its [`Role`], and why a term ended ([`EndReason`]).

/// This replica's role for one lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Not holding the lease; campaigning when it is free.
    Standby,
    /// Holding the lease with a running term.
    Leader,
    /// Holding the lease by the last landed renewal, but renewals are failing (or the lease is
    /// being released): no term runs past `safe_until`.
    Uncertain,
}

/// Why a term ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// `safe_until` passed without a landed renewal.
    SafeUntil,
    /// A renewal was rejected: someone else holds the lease now, or it expired.
    Lost,
    /// This replica is giving the lease up (shutdown or step-down).
    Releasing,
    /// The database's clock stepped forward: the lease may expire before `safe_until`.
    ClockStep,
}

impl EndReason {
    /// The reason as the lease API spells it (`/v1/leases/NAME/watch`): a contract.
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::SafeUntil => "deadline",
            EndReason::Lost => "lost",
            EndReason::Releasing => "released",
            EndReason::ClockStep => "clock-step",
        }
    }
}
