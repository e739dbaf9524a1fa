//! The faults of the suite, each with how long it lasts and the bound on the time the lease may
//! go without work because of it.

use std::time::Duration;

/// Which replica a partition cuts off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The replica holding the lease when the trial starts.
    Holder,
    /// The other one.
    Standby,
    /// Both: nobody reaches the database.
    Both,
}

/// A fault injected into a running cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Packets between replica(s) and the lease database vanish: nothing closes, nothing
    /// fails, statements hang (the proxy stops moving bytes in the blocked directions).
    BlackHole {
        /// Who is cut off.
        side: Side,
        /// Requests are held.
        to_server: bool,
        /// Replies are held.
        to_client: bool,
    },
    /// PostgreSQL restarts: `pg_ctl stop -m fast` (sessions ended, checkpoint) or `-m immediate`
    /// (processes quit at once, crash recovery at the start).
    Restart {
        /// Immediate rather than fast shutdown.
        immediate: bool,
    },
    /// The primary is killed and its asynchronous standby promoted; the replicas' route moves to
    /// it. The standby stops receiving WAL a little before, so it misses the last renewals; with
    /// `missed_takeover`, also a takeover (the holder was cut off and the other replica acquired
    /// the next epoch on the old primary).
    Failover {
        /// The standby also misses a takeover, so the epoch it issued is issued again unless
        /// epochs jump after a failover.
        missed_takeover: bool,
    },
    /// The database server's wall clock steps forward a minute, then back.
    DatabaseClockJump,
    /// The holder's wall clock steps forward an hour, then back an hour behind.
    ReplicaClockJump,
    /// A test session holds the lease row `FOR UPDATE`: every campaign and renewal waits for it.
    SlowLock,
    /// A trigger on the lease table sleeps longer than the store's statement timeout.
    SlowTrigger,
}

impl Fault {
    /// Every fault of the suite, in the order they run.
    pub fn all() -> Vec<Fault> {
        let hole = |side, to_server, to_client| Fault::BlackHole {
            side,
            to_server,
            to_client,
        };
        vec![
            hole(Side::Holder, true, true),
            hole(Side::Holder, true, false),
            hole(Side::Holder, false, true),
            hole(Side::Standby, true, true),
            hole(Side::Standby, false, true),
            hole(Side::Both, true, true),
            Fault::Restart { immediate: false },
            Fault::Restart { immediate: true },
            Fault::Failover {
                missed_takeover: false,
            },
            Fault::Failover {
                missed_takeover: true,
            },
            Fault::DatabaseClockJump,
            Fault::ReplicaClockJump,
            Fault::SlowLock,
            Fault::SlowTrigger,
        ]
    }

    /// The name printed in the summary and accepted by `chaos --fault`.
    pub fn name(&self) -> String {
        match self {
            Fault::BlackHole {
                side,
                to_server,
                to_client,
            } => {
                let side = match side {
                    Side::Holder => "holder",
                    Side::Standby => "standby",
                    Side::Both => "both",
                };
                let way = match (to_server, to_client) {
                    (true, false) => ", requests",
                    (false, true) => ", replies",
                    _ => "",
                };
                format!("black-hole {side}{way}")
            }
            Fault::Restart { immediate: false } => "restart fast".into(),
            Fault::Restart { immediate: true } => "restart immediate".into(),
            Fault::Failover {
                missed_takeover: false,
            } => "failover".into(),
            Fault::Failover {
                missed_takeover: true,
            } => "failover, missed takeover".into(),
            Fault::DatabaseClockJump => "clock jump, database".into(),
            Fault::ReplicaClockJump => "clock jump, replica".into(),
            Fault::SlowLock => "slow, row lock".into(),
            Fault::SlowTrigger => "slow, sleeping trigger".into(),
        }
    }

    /// How long the fault lasts (for a failover: how long before it the standby stops
    /// receiving).
    pub fn duration(&self, ttl: Duration) -> Duration {
        match self {
            Fault::Restart { .. } | Fault::DatabaseClockJump | Fault::ReplicaClockJump => ttl / 2,
            // Long enough for the standby to miss renewals the holder relies on.
            Fault::Failover { .. } => ttl,
            _ => ttl * 2,
        }
    }

    /// The longest the lease may go without work in a trial (from the last work before the
    /// fault to the first after it), with room for a slow machine: the bound the suite states
    /// for this fault.
    pub fn bound(&self, ttl: Duration) -> Duration {
        // A standby notices a free lease within a poll (ttl/5, plus 20% jitter) and a campaign
        // or renewal gives up after the store timeout (ttl/5); a term starts in milliseconds.
        let notice = ttl / 5 * 2;
        match self {
            // The other replica takes over once the lease expires.
            Fault::BlackHole {
                side: Side::Holder, ..
            } => ttl + notice + ttl / 2,
            // Nothing happens to the holder.
            Fault::BlackHole {
                side: Side::Standby,
                ..
            }
            | Fault::ReplicaClockJump => ttl / 2,
            // No work while nobody reaches the database. After healing, a campaign a host gave up
            // on during the hole may still reach the server and win: that replica takes the lease
            // up at its next campaign (it used to wait for its own row to expire, and one trial
            // took 9.2 s of the 8.8 allowed); the second ttl is room for reconnecting on a slow
            // machine.
            Fault::BlackHole {
                side: Side::Both, ..
            } => self.duration(ttl) + ttl * 2 + notice,
            // Statements wait for the lock or the trigger and time out on the server: the lease
            // may expire meanwhile, and is taken again once they clear.
            Fault::SlowLock | Fault::SlowTrigger => self.duration(ttl) + ttl + notice,
            // Down for the restart, then a lease that expired meanwhile is taken again. The time
            // the server itself takes to stop and start is measured in each trial and allowed on
            // top (`FaultRun::server_time`): seconds of crash recovery on a busy disk are not the
            // hosts' doing. The rest is a slow machine's room.
            Fault::Restart { .. } => self.duration(ttl) + Duration::from_secs(3) + ttl + notice,
            // The promotion (seconds), then a full ttl of hold-off from when the change is seen.
            Fault::Failover { .. } => Duration::from_secs(5) + ttl * 2 + notice,
            // The replicas see the step and stay quiet a ttl, after the lease ran out.
            Fault::DatabaseClockJump => ttl * 2 + notice,
        }
    }
}
