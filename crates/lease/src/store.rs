//! The [`LeaseStore`] trait: the few statements the lease protocol needs, each judged by the
//! database's own clock (docs/ARCHITECTURE.md §2, §3).

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::history::{RecordedTerm, TermEnd, TermRecord};
pub use crate::record::{
    Campaigned, CampaignedMany, DbMillis, GrantSeen, GroupMember, GroupView, LeaseRecord,
    MemberRecord, ReleaseNotice, Released, RenewRequest, Renewed, RenewedOne, WaiterRecord,
    is_reserved_for,
};
pub use leasehold_lease_core::epoch::Epoch;
pub use leasehold_lease_core::queue::Place;

/// One lease of a campaign ([`LeaseStore::campaign_in_line`]): its name, and where the
/// campaigning standby stands in its line, if it waits in line at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bid {
    /// The lease.
    pub name: String,
    /// The standby's place in the lease's line; `None` for a campaign that does not join it
    /// (an operator's tool, a test), which still never wins ahead of a live waiter.
    pub line: Option<InLine>,
}

/// A standby's place in a lease's line, as a campaign keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InLine {
    /// Its priority and preemption.
    pub place: Place,
    /// How long the place counts as alive after this campaign, and how long a grant to it lasts
    /// unless it takes it up (`Timing::in_line_for`).
    pub alive_for: Duration,
}

/// Milliseconds a store reported as a wait, as a duration; `None` for none or a negative one.
pub(crate) fn wait_ms(ms: Option<i64>) -> Option<Duration> {
    ms.and_then(|ms| u64::try_from(ms).ok())
        .map(Duration::from_millis)
}

/// One row of [`LeaseStore::members`]: group, member, age and time left in ms, shard count.
pub(crate) type MemberRow = (String, String, i64, i64, Option<i64>);

/// A [`MemberRecord`] from the row every backend's listing returns.
pub(crate) fn to_member(
    (group, member, member_for_ms, expires_in_ms, shards): MemberRow,
) -> MemberRecord {
    MemberRecord {
        group,
        member,
        member_for_ms,
        expires_in_ms,
        shards: shards.and_then(|n| u32::try_from(n).ok()),
    }
}

/// One row of [`LeaseStore::line`]: lease, holder, priority, ms waited, ms its place has left.
pub(crate) type WaiterRow = (String, String, i64, i64, i64);

/// A [`WaiterRecord`] from the row every backend's line listing returns.
pub(crate) fn to_waiter(
    (lease, holder, priority, waited_ms, alive_for_ms): WaiterRow,
) -> WaiterRecord {
    WaiterRecord {
        lease,
        holder,
        priority,
        waited_ms,
        alive_for_ms,
    }
}

/// One row of a heartbeat's answer: a member or lease name, the shard's holder (`None` for a
/// member), the member's age and time left in ms, the clock, and the member's shard count.
pub(crate) type GroupRow = (
    String,
    Option<String>,
    Option<i64>,
    Option<i64>,
    DbMillis,
    Option<i64>,
);

/// The shard count a heartbeat records for a group of the lease names `shards`.
pub(crate) fn shard_count(shards: &[String]) -> Result<i64, StoreError> {
    i64::try_from(shards.len()).map_err(|_| StoreError::Invalid {
        what: "shard count",
        reason: format!("{} shards", shards.len()),
    })
}

/// A [`GroupView`] from the rows every backend's heartbeat returns.
pub(crate) fn group_view(rows: Vec<GroupRow>) -> GroupView {
    let mut view = GroupView::default();
    for (name, holder, age_ms, left_ms, db_now, shards) in rows {
        view.db_now = Some(view.db_now.map_or(db_now, |t: DbMillis| t.max(db_now)));
        match holder {
            Some(holder) => view.holders.push((name, holder)),
            None => view.members.push(GroupMember {
                id: name,
                member_for: wait_ms(age_ms).unwrap_or_default(),
                expires_in: wait_ms(left_ms).unwrap_or_default(),
                shards: shards.and_then(|n| u32::try_from(n).ok()),
            }),
        }
    }
    view.members.sort_by(|a, b| a.id.cmp(&b.id));
    view.holders.sort();
    view
}

/// Why a store call failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The first connection could not be made.
    #[error("cannot connect to {url}: {source}{}", startup_hint(source))]
    Connect {
        /// The redacted URL.
        url: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// The SQLite lease file does not exist and cannot be created where it is meant to be, e.g.
    /// the default `./leasehold.db` on a read-only root filesystem.
    #[error(
        "cannot create the SQLite lease file {}: {source}; give a database URL (--database-url or LEASEHOLD_DATABASE_URL) or run where that directory is writable",
        path.display()
    )]
    CreateFile {
        /// The file that could not be created.
        path: std::path::PathBuf,
        /// Why the filesystem refused it.
        #[source]
        source: std::io::Error,
    },
    /// The first connection did not complete in time.
    #[error("cannot connect to {url}: no answer within {after:?}")]
    ConnectTimeout {
        /// The redacted URL.
        url: String,
        /// The connect timeout.
        after: Duration,
    },
    /// The schema is current but this role may not read it: the grants were not given.
    #[error("cannot read the lease schema in {url}: {}: {GRANTS_HINT}", crate::text::driver_text(&source.to_string()))]
    Grants {
        /// The redacted URL.
        url: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// The schema migrations failed.
    #[error(
        "cannot prepare the lease schema in {url}: {source}{}",
        ddl_hint(source)
    )]
    Migrate {
        /// The redacted URL.
        url: String,
        /// The migrator's error.
        #[source]
        source: sqlx::migrate::MigrateError,
    },
    /// The URL leads through a pooler that shares server sessions between client connections
    /// (transaction or statement pooling), which the store cannot work through.
    #[error(
        "{url} goes through a connection pooler in transaction (or statement) pooling mode ({evidence}): leasehold needs session pooling or a direct connection to PostgreSQL, because it keeps LISTEN/NOTIFY (the instant handoff), session-level locks and prepared statements in its sessions; set pool_mode = session for this database in the pooler (PgBouncer), or connect to PostgreSQL directly"
    )]
    TransactionPooling {
        /// The redacted URL.
        url: String,
        /// What gave the pooler away.
        evidence: String,
    },
    /// Start-up waited for something another session holds, or for the database (or a pooler in
    /// front of it) to serve a connection, and gave up at its bound.
    #[error("cannot open the lease store in {url}: gave up after {after:?} waiting for {what}")]
    Waited {
        /// The redacted URL.
        url: String,
        /// What it waited for, and what to do about it.
        what: String,
        /// The bound that ran out.
        after: Duration,
    },
    /// Which schema holds the lease tables cannot be told safely (`postgres::schema`).
    #[error(
        "cannot open the lease store in {url}: {why}; name the lease schema in the URL (?options[search_path]=SCHEMA), or drop the table that should not be there"
    )]
    LeaseSchema {
        /// The redacted URL.
        url: String,
        /// What was found.
        why: String,
    },
    /// A statement failed.
    #[error("{op} failed: {}{}", crate::text::driver_text(&source.to_string()), denied_hint(source))]
    Query {
        /// The operation, e.g. `campaign`.
        op: &'static str,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// A call did not answer in time; the caller treats this like any other failure (fail closed).
    #[error("{op} timed out after {after:?}")]
    Timeout {
        /// The operation.
        op: &'static str,
        /// The timeout that ran out.
        after: Duration,
    },
    /// The schema needs a newer binary: its required protocol is above this one's.
    #[error(transparent)]
    Protocol(#[from] super::protocol::NeedsNewer),
    /// The store is unreachable (the in-memory store's injected outage).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A value cannot be stored as given.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// What was invalid.
        what: &'static str,
        /// Why.
        reason: String,
    },
}

/// What to do about a statement the database refused for want of a privilege (SQLSTATE 42501):
/// the schema is there (the host checked it at start-up), so the grants are missing, and
/// `leasehold migrate` would change nothing.
pub const GRANTS_HINT: &str = "the hosts' role lacks privileges on the leasehold tables: run examples/postgres/grants.sql as the schema owner (README, Operations, PostgreSQL), after each `leasehold migrate` that adds a table";

/// [`GRANTS_HINT`] after a driver error that is a refused privilege, else nothing.
fn denied_hint(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::Database(db) if db.code().as_deref() == Some("42501") => {
            format!(" ({GRANTS_HINT})")
        }
        _ => String::new(),
    }
}

/// What to do when a pooler refused a parameter of the startup packet: PgBouncer takes only the
/// few it tracks, and leasehold sends its session settings in `options` (and the driver
/// `extra_float_digits`).
fn startup_hint(error: &sqlx::Error) -> &'static str {
    if error.to_string().contains("unsupported startup parameter") {
        " (a pooler in front of PostgreSQL refuses a parameter leasehold sends at connect: in PgBouncer, set ignore_startup_parameters = extra_float_digits, options; leasehold then sets its session settings itself)"
    } else {
        ""
    }
}

/// What to do about a failed migration that the database refused for want of a privilege
/// (SQLSTATE 42501), else nothing: other failures (a lost connection, a lock, a pooler) are not
/// solved by running the migration as another role.
fn ddl_hint(error: &sqlx::migrate::MigrateError) -> &'static str {
    if is_permission_denied(error) {
        " (a role without DDL rights needs the schema owner to run `leasehold migrate` first)"
    } else {
        ""
    }
}

/// SQLSTATE 42501: no retry will grant the privilege.
pub(crate) fn is_permission_denied(error: &sqlx::migrate::MigrateError) -> bool {
    let db = match error {
        sqlx::migrate::MigrateError::Execute(sqlx::Error::Database(db))
        | sqlx::migrate::MigrateError::ExecuteMigration(sqlx::Error::Database(db), _) => db,
        _ => return false,
    };
    db.code().as_deref() == Some("42501")
}

impl StoreError {
    /// Wraps a driver error for operation `op`.
    pub fn query(op: &'static str) -> impl Fn(sqlx::Error) -> StoreError + Copy {
        move |source| StoreError::Query { op, source }
    }
}

/// Bounds store call `op` by `timeout`; the caller treats a timeout like any other failure.
pub(crate) async fn within<T>(
    timeout: Duration,
    op: &'static str,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(result) => result,
        Err(_) => Err(StoreError::Timeout { op, after: timeout }),
    }
}

/// One row of a store's term listing: lease, epoch, holder, started and ended ms ago, how it ended.
pub(crate) type TermRow = (String, i64, String, i64, Option<i64>, Option<String>);

/// A [`TermRecord`] from the row every backend's term listing returns; a term whose end is not
/// one of [`TermEnd`]'s words was not written by leasehold, and is reported rather than guessed.
pub(crate) fn to_term(
    (lease, epoch, holder, started_ms_ago, ended_ms_ago, end): TermRow,
) -> Result<TermRecord, StoreError> {
    let end = match end {
        None => None,
        Some(word) => Some(TermEnd::parse(&word).ok_or_else(|| StoreError::Invalid {
            what: "term",
            reason: format!(
                "term {epoch} of lease {lease} ended by {word:?}, which is no way a term ends"
            ),
        })?),
    };
    Ok(TermRecord {
        lease,
        term: RecordedTerm {
            epoch: Epoch::new(epoch),
            holder,
            started_ms_ago,
            ended_ms_ago: ended_ms_ago.filter(|_| end.is_some()),
            end,
        },
    })
}

/// Milliseconds of a TTL as stored; refuses values a BIGINT interval cannot express.
pub(crate) fn ttl_ms(ttl: Duration) -> Result<i64, StoreError> {
    match i64::try_from(ttl.as_millis()) {
        Ok(ms) if ms > 0 => Ok(ms),
        _ => Err(StoreError::Invalid {
            what: "ttl",
            reason: format!("{ttl:?} must be at least 1 ms and fit in 64 bits of milliseconds"),
        }),
    }
}

/// A backend that keeps lease rows. Every method is one statement (or one short transaction) whose
/// notion of "now" is the database's, never the caller's.
#[async_trait]
pub trait LeaseStore: Send + Sync + std::fmt::Debug + 'static {
    /// The backend's short name (`postgres`, `sqlite`, `memory`).
    fn backend(&self) -> &'static str;

    /// Acquires, for `holder`, every lease of `bids` whose row is absent or expired by the
    /// database clock, in one statement (or one short transaction) that takes no lock on a row
    /// someone holds: their renewals and fenced writes never wait for a standby. Each lease won
    /// gets the previous epoch + 1 (1 for a new row); of concurrent campaigns for a lease exactly
    /// one wins it. For every lease not won it reports how long until a campaign could win it, so
    /// that a standby sleeps until its holder's expiry instead of polling
    /// (docs/ARCHITECTURE.md §5.1).
    ///
    /// The line ([`leasehold_lease_core::queue`]): each bid with a place joins the lease's line
    /// (or keeps its place alive, updating its priority), and a lease found free goes to the head
    /// of its line: won by this holder when it is the head (or nobody alive waits), else given to
    /// the head with a new epoch, which is notified ([`ReleaseNotice::Granted`]) and reported in
    /// [`CampaignedMany::gave`]; a lease this holder holds already (given to it and not taken
    /// up yet, or won by an earlier campaign of its own whose answer it never got) is reported
    /// in [`CampaignedMany::granted`]. A waiter whose place allows it asks a holder of
    /// lower priority to hand the lease over ([`CampaignedMany::asked`]).
    async fn campaign_in_line(
        &self,
        holder: &str,
        bids: &[Bid],
        ttl: Duration,
    ) -> Result<CampaignedMany, StoreError>;

    /// [`LeaseStore::campaign_in_line`] from outside the line (an operator's tool, a test): it
    /// joins no line, and still never wins ahead of a live waiter.
    async fn campaign_many(
        &self,
        holder: &str,
        names: &[String],
        ttl: Duration,
    ) -> Result<CampaignedMany, StoreError> {
        let bids: Vec<Bid> = names
            .iter()
            .map(|name| Bid {
                name: name.clone(),
                line: None,
            })
            .collect();
        self.campaign_in_line(holder, &bids, ttl).await
    }

    /// Whether `name` is given to `holder` at `epoch` and not expired, for how long by the
    /// database's clock (rounded down), and that clock: the one read a waiter makes to take up a
    /// grant. The default reads the row with [`LeaseStore::get`], without the clock.
    async fn read_grant(
        &self,
        name: &str,
        holder: &str,
        epoch: Epoch,
    ) -> Result<GrantSeen, StoreError> {
        let rows = self.get(&[name.to_string()]).await?;
        let left = rows
            .into_iter()
            .find(|r| r.name == name && r.holder == holder && r.epoch == epoch)
            .and_then(|r| u64::try_from(r.expires_in_ms).ok())
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis);
        Ok(GrantSeen { left, db_now: None })
    }

    /// [`LeaseStore::campaign_many`] for one lease.
    async fn campaign(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Campaigned, StoreError> {
        let names = [name.to_string()];
        Ok(self.campaign_many(holder, &names, ttl).await?.one(name))
    }

    /// Extends every lease in `leases` that `holder` still holds at the given epoch and that has
    /// not expired, in one statement that never waits for a row lock: a locked row is reported
    /// [`Renewed::busy`], so that one lease cannot hold back the others
    /// (docs/ARCHITECTURE.md §5.3).
    async fn renew(&self, holder: &str, leases: &[RenewRequest]) -> Result<Renewed, StoreError>;

    /// Renews one lease, waiting for its row lock for at most `timeout` (on the server too: the
    /// statement never outlives its caller). For a lease the batch found busy.
    async fn renew_one(
        &self,
        holder: &str,
        lease: &RenewRequest,
        timeout: Duration,
    ) -> Result<RenewedOne, StoreError> {
        // Backends without row locks have nothing to wait for: the batch of one decides.
        let _ = timeout;
        let renewed = self.renew(holder, std::slice::from_ref(lease)).await?;
        Ok(RenewedOne {
            landed: renewed.landed.contains(&lease.name),
            db_now: renewed.db_now,
            handoff: renewed.handoffs.contains(&lease.name),
        })
    }

    /// Lets go of each lease of `leases` that `holder` holds at its epoch, in one round trip (a
    /// replica that gives up many shards in one go, a lease group rebalancing or a shutdown, does
    /// it in one statement or transaction): each goes to the head of its line at the next epoch
    /// ([`leasehold_lease_core::queue`]), or, with nobody alive in line, is expired now, keeping
    /// the row and its epoch; listening standbys are told either way. Returns the leases that were
    /// ours to release, each with the waiter it went to, if any.
    async fn release_giving(
        &self,
        holder: &str,
        leases: &[(String, Epoch)],
    ) -> Result<Vec<Released>, StoreError>;

    /// [`LeaseStore::release_giving`], returning the names alone.
    async fn release_many(
        &self,
        holder: &str,
        leases: &[(String, Epoch)],
    ) -> Result<Vec<String>, StoreError> {
        let released = self.release_giving(holder, leases).await?;
        Ok(released.into_iter().map(|r| r.name).collect())
    }

    /// [`LeaseStore::release_giving`] for one lease: whether it was ours to release.
    async fn release(&self, name: &str, holder: &str, epoch: Epoch) -> Result<bool, StoreError> {
        let leases = [(name.to_string(), epoch)];
        Ok(!self.release_giving(holder, &leases).await?.is_empty())
    }

    /// Break-glass: expires `name` now whoever holds it, keeping its holder and epoch (so the next
    /// acquisition still gets epoch + 1), and tells listening standbys. Returns the holder and
    /// epoch it had, or `None` when nobody held it.
    async fn force_release(&self, name: &str) -> Result<Option<(String, Epoch)>, StoreError>;

    /// An operator's graceful step-down: asks the holder of `name` (at its current epoch) to
    /// release it in order now, and tells it through the release listener; it also learns of it
    /// from its next renewal ([`Renewed::handoffs`]). With `to`, the holder's release reserves
    /// the lease for that replica (its replica id, or a holder id) for one ttl of the lease:
    /// campaigns of other replicas win it only after that. Returns the row as it was asked, or
    /// `None` when nobody holds the lease.
    async fn request_handoff(
        &self,
        name: &str,
        to: Option<&str>,
    ) -> Result<Option<LeaseRecord>, StoreError>;

    /// The rows for `names` that exist.
    async fn get(&self, names: &[String]) -> Result<Vec<LeaseRecord>, StoreError>;

    /// Up to `limit` rows with names after `after`, in name order (keyset pagination).
    async fn list(&self, after: Option<&str>, limit: u32) -> Result<Vec<LeaseRecord>, StoreError>;

    /// The recorded terms of `names`, at most `per_lease` of each, newest first, leases in name
    /// order ([`super::history`]). A term is opened by the campaign that wins it and ends by its
    /// holder's release (`released`), a forced release (`forced`) or its holder's silence
    /// (`expired`, the ttl ran out). A term is open while its lease row is held: once the row
    /// has expired, its term is reported ended, whether or not a campaign has come since. Each
    /// store keeps at least the newest [`super::history::TERMS_KEPT`] of a lease.
    async fn terms(&self, names: &[String], per_lease: u32) -> Result<Vec<TermRecord>, StoreError>;

    /// Keeps `member` in `group` for `ttl` more by the database's clock (joining it if absent or
    /// lapsed), recording `shards.len()` as its shard count, in one statement that also reports
    /// the group's live members (with their counts) and which of `shards` (lease names) are held,
    /// and by whom. Member rows expire like leases; lapsed ones
    /// of the group are swept here.
    async fn heartbeat(
        &self,
        group: &str,
        member: &str,
        shards: &[String],
        ttl: Duration,
    ) -> Result<GroupView, StoreError>;

    /// Takes `member` out of `groups` at once (a graceful stop, before its shards are released, so
    /// that the members that take them over already count without it).
    async fn leave(&self, groups: &[String], member: &str) -> Result<(), StoreError>;

    /// Every live member row of every lease group, in group then member order, read on the
    /// display's connections.
    async fn members(&self) -> Result<Vec<MemberRecord>, StoreError>;

    /// The live waiters in the lines of `names`, each line in its order (the next holder
    /// first), leases in name order; a waiter that holds the lease is left out. Read on the
    /// display's connections.
    async fn line(&self, names: &[String]) -> Result<Vec<WaiterRecord>, StoreError>;

    /// A cheap round trip, for readiness.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Starts a listener for releases by other replicas (and handoff requests), if the backend
    /// can notify: PostgreSQL's `LISTEN`, the event file beside a SQLite lease file. It runs
    /// until `shutdown` and reconnects by itself; `None` when it cannot listen, and standbys then
    /// rely on polling, as they do for any wake-up missed.
    fn listen_releases(&self, shutdown: CancellationToken)
    -> Option<mpsc::Receiver<ReleaseNotice>>;
}
