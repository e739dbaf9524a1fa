//! What the stores hand the lease layer: a lease row as admins see it, what a campaign, a renewal
//! and a heartbeat found, and the notices a release listener sends. Plain values, the same from
//! every backend; the trait that returns them is the lease crate's `LeaseStore`.

use std::time::Duration;

pub use crate::epoch::Epoch;

/// One lease row as an admin or `/status` sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LeaseRecord {
    /// The lease name (primary key).
    pub name: String,
    /// The holder id written by the last acquisition (kept after expiry and release).
    pub holder: String,
    /// The epoch of the last acquisition.
    pub epoch: Epoch,
    /// The TTL the holder asked for, in milliseconds.
    pub ttl_ms: i64,
    /// Milliseconds until the lease expires by the database clock; zero or negative once expired.
    pub expires_in_ms: i64,
}

impl LeaseRecord {
    /// True while the database still counts the lease as held.
    pub fn is_held(&self) -> bool {
        self.expires_in_ms > 0
    }
}

/// One lease in a batched renewal: renewed only if this holder still holds it at this epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewRequest {
    /// The lease name.
    pub name: String,
    /// The epoch this holder acquired it with.
    pub epoch: Epoch,
    /// The TTL to extend by, measured from the database's now.
    pub ttl: Duration,
}

/// A reading of the clock a store judges expiry by, in milliseconds: PostgreSQL's
/// `clock_timestamp()` since the Unix epoch, the machine's boot clock for SQLite, the in-memory
/// store's own clock. Only differences between two readings of one store mean anything: the
/// coordinator compares them with its monotonic clock to see the database clock step
/// (docs/ARCHITECTURE.md §3.5).
pub type DbMillis = i64;

/// What a campaign for one lease found (`LeaseStore::campaign`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Campaigned {
    /// The new epoch, or `None` when someone else holds the lease.
    pub epoch: Option<Epoch>,
    /// The database's clock while the statement ran; `None` when the backend cannot tell.
    pub db_now: Option<DbMillis>,
    /// How much longer the database holds every campaign off, after it changed incarnation (a
    /// promoted standby, docs/ARCHITECTURE.md §9.2); `None` when it does not.
    pub held_off_for: Option<Duration>,
    /// When the lease was not won: how long until a campaign can win it, by the database's clock
    /// (its holder's expiry, or the end of the hold-off); `None` when the statement cannot tell.
    pub wait: Option<Duration>,
}

/// What a campaign for several leases found (`LeaseStore::campaign_many`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CampaignedMany {
    /// The leases won, each with its new epoch.
    pub won: Vec<(String, Epoch)>,
    /// The leases not won, each with how long until a campaign can win it by the database's
    /// clock: its holder's expiry, or the end of a hold-off. `None` when the statement cannot tell
    /// (another replica's campaign took the lease while this one ran): campaign again after a poll.
    pub lost: Vec<(String, Option<Duration>)>,
    /// The leases of `lost` that were free but whose rows another session kept locked (a fenced
    /// transaction checked early, an operator's session): left out of this campaign rather than
    /// waited for, so that one locked row delays only its own lease. Each with the server
    /// processes holding the lock, as far as the store can tell (PostgreSQL's `pg_locks`).
    pub locked: Vec<(String, Vec<i32>)>,
    /// The leases given to this holder (by a release, or by another standby's campaign that found
    /// the lease free with this holder at the head of its line, [`crate::queue`]) and not taken
    /// up yet, or won by an earlier campaign of this holder whose answer it never got (the call
    /// timed out as the server committed): each with its epoch and how long the row lasts by the
    /// database's clock, as the statement read it. The campaign takes them up as a read would: a term may run until
    /// `sent + left − margin`, and the first renewal makes it a ttl.
    pub granted: Vec<(String, Epoch, Duration)>,
    /// The leases of `lost` this campaign found free and gave to another waiter, the head of
    /// their lines.
    pub gave: Vec<String>,
    /// The leases whose holder, of lower priority, this waiter asked to hand over (a
    /// preemption, [`crate::queue::may_preempt`]).
    pub asked: Vec<String>,
    /// The database's clock while the statement ran; `None` when the backend cannot tell.
    pub db_now: Option<DbMillis>,
    /// How much longer the database holds campaigns off, after it changed incarnation (a promoted
    /// standby, docs/ARCHITECTURE.md §9.2); the longest over the batch, `None` when it does not.
    pub held_off_for: Option<Duration>,
}

impl CampaignedMany {
    /// The outcome for `name` alone.
    pub fn one(&self, name: &str) -> Campaigned {
        Campaigned {
            epoch: self.won.iter().find(|(n, _)| n == name).map(|(_, e)| *e),
            db_now: self.db_now,
            held_off_for: self.held_off_for,
            wait: self
                .lost
                .iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, w)| *w),
        }
    }
}

/// A lease a release let go of (`LeaseStore::release_giving`): to whom it went, if the
/// release gave it to the head of its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    /// The lease.
    pub name: String,
    /// The waiter it was given to; `None` when it was expired for any campaign.
    pub given_to: Option<String>,
}

/// What the read of a grant found (`LeaseStore::read_grant`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GrantSeen {
    /// How long the row is still the reader's at the epoch asked, by the database's clock,
    /// rounded down; `None` when it is not (another holder or epoch, or expired).
    pub left: Option<Duration>,
    /// The database's clock while the statement ran; `None` when the backend cannot tell.
    pub db_now: Option<DbMillis>,
}

/// What a batched renewal found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Renewed {
    /// The leases whose renewal landed.
    pub landed: Vec<String>,
    /// The leases this holder still held at their epochs when the statement began, but whose
    /// rows were locked by someone else (a fenced write committing, an operator's session): the
    /// batch skips them rather than wait, and the caller renews each alone
    /// (`LeaseStore::renew_one`). Every other lease of the batch was not renewed because it is
    /// no longer this holder's.
    pub busy: Vec<String>,
    /// The database's clock while the statement ran; `None` when the backend cannot tell.
    pub db_now: Option<DbMillis>,
    /// The leases of `landed` whose holder an operator asked to hand them over
    /// (`LeaseStore::request_handoff`): release them in order now.
    pub handoffs: Vec<String>,
}

/// What the renewal of one lease found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenewedOne {
    /// Whether the renewal landed (`false`: the lease is no longer this holder's).
    pub landed: bool,
    /// The database's clock while the statement ran; `None` when the backend cannot tell.
    pub db_now: Option<DbMillis>,
    /// Whether an operator asked this holder to hand the lease over (with `landed` only).
    pub handoff: bool,
}

/// One live waiter in the line of a lease, as `LeaseStore::line` lists them (in the line's order:
/// the next holder first), for `/status`, the lease API, the page and `leasehold leases list`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WaiterRecord {
    /// The lease.
    pub lease: String,
    /// The waiter's holder id.
    pub holder: String,
    /// Its priority.
    pub priority: i64,
    /// How long it has stood in line, in ms by the database's clock.
    pub waited_ms: i64,
    /// How long until its place lapses unless it campaigns again, in ms.
    pub alive_for_ms: i64,
}

/// A live member row of any lease group, as `LeaseStore::members` lists them: the cluster's
/// view of its groups from the database, for `leasehold leases groups`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MemberRecord {
    /// The group.
    pub group: String,
    /// The member's holder id.
    pub member: String,
    /// How long it has been a member without a lapse, in ms by the database's clock.
    pub member_for_ms: i64,
    /// How long until its row expires unless it heartbeats, in ms.
    pub expires_in_ms: i64,
    /// The shard count it is configured with; `None` for a row of a version that did not
    /// record it.
    pub shards: Option<u32>,
}

/// A live member of a lease group, as `LeaseStore::heartbeat` found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    /// The member's holder id.
    pub id: String,
    /// How long it has been a member without a lapse, by the database's clock: a newcomer counts
    /// for the fair shares only once it has stayed a while (`lease::groups`), so members that come
    /// and go quickly move no shard.
    pub member_for: Duration,
    /// How long until its row expires unless it heartbeats again: a member that has died is
    /// counted gone the moment it does.
    pub expires_in: Duration,
    /// The group's shard count as this member is configured; `None` for a row written by a
    /// version that did not record it.
    pub shards: Option<u32>,
}

/// What a heartbeat found of its group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupView {
    /// The live members (the heartbeating one among them), in id order.
    pub members: Vec<GroupMember>,
    /// The shards of the heartbeat's list that are held now: lease name and holder, in name order.
    pub holders: Vec<(String, String)>,
    /// The database's clock while the statement ran; `None` when the backend cannot tell.
    pub db_now: Option<DbMillis>,
}

/// What a store's release listener reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseNotice {
    /// Another replica released this lease: campaign now instead of waiting for the next poll.
    Released(String),
    /// The listener (re)connected; notifications may have been missed, so campaign for everything.
    Resubscribed,
    /// Word that `lease` was given to `holder` at `epoch` ([`crate::queue`]): if that is this
    /// replica, read the row and start the term. Not proof by itself (anyone who may notify can
    /// send one): the read decides.
    Granted {
        /// The lease.
        lease: String,
        /// The holder id it was given to.
        holder: String,
        /// The epoch it was given at.
        epoch: Epoch,
    },
    /// Word that an operator asked the holder of `lease` at `epoch` to hand it over
    /// (`LeaseStore::request_handoff`): if that is this replica, renew now, and release in order
    /// if the renewal reads the request from the row. Not proof of a request by itself: on
    /// PostgreSQL any role that can connect may send it.
    HandoffRequested {
        /// The lease.
        lease: String,
        /// The epoch whose holder is asked; a later term of the lease is not concerned.
        epoch: Epoch,
    },
}

/// Whether the campaigning `holder` is the replica a lease is `reserved` for: its holder id, or
/// its replica id (the holder id without the `-xxxxxxxx` suffix of [`crate::identity::HolderId`]). The
/// SQL stores say the same in their campaign statements.
pub fn is_reserved_for(reserved: &str, holder: &str) -> bool {
    holder == reserved
        || holder
            .len()
            .checked_sub(9)
            .and_then(|cut| holder.get(..cut).zip(holder.get(cut..)))
            .is_some_and(|(replica, suffix)| replica == reserved && suffix.starts_with('-'))
}
