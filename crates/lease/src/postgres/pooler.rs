//! What stands between the host and PostgreSQL, checked once at start-up before anything else.
//!
//! The store needs a session of its own per client connection: `LISTEN` for the instant
//! handoff, the migrator's session-level advisory lock, prepared statements and the session's
//! settings all live in the server process behind the connection. A pooler in transaction or
//! statement mode (PgBouncer's most common setting) hands that server process to another client
//! after each transaction, and what the host set up there goes with it: prepared statements
//! collide ("prepared statement \"sqlx_s_3\" already exists"), notifications go to nobody, and a
//! migrator's lock stays behind in the pool, where every later migrator waits for it. So the
//! host finds out, and refuses with the cause, rather than fail later at something unrelated.
//!
//! The check holds two client connections open at once and asks each for its server process
//! (`pg_backend_pid()`), in turns. With a direct connection or session pooling two open client
//! connections never share a server process, and one's never changes; through a pooler in
//! transaction mode either happens: PgBouncer hands the server process just released to the next
//! client (last in, first out), so the second connection gets the first's. A pooler that hands
//! out its idle servers first in, first out could alternate two of them in step with the turns,
//! so the turns are not strictly alternate: one connection asking twice in a row then gets
//! another server. Only simple-query statements: they work through any pooler, before anything
//! is prepared.
//!
//! The same connection tells whether the session settings the host sends at connect
//! (`super::session_settings`, in the startup packet's `options`) arrived: a pooler that does not
//! pass them on (PgBouncer refuses them unless told to ignore them with
//! `ignore_startup_parameters = options`) leaves the host to set them itself on each connection.

use std::collections::BTreeSet;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgRow};
use sqlx::{Connection, Row};

/// Which connection asks, turn by turn: 0 and 1 alternate, then each asks twice in a row, so
/// that neither a last-in-first-out pool (the second gets the first's server at once) nor a
/// first-in-first-out one (the same connection gets a different server) goes unseen.
const TURNS: [usize; 8] = [0, 1, 0, 0, 1, 1, 0, 1];

/// What the check saw of the server processes behind two client connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sessions {
    /// Each connection kept one server process of its own: a direct connection or session pooling.
    OwnEach {
        /// Whether the settings sent at connect were found in the session (`false`: a pooler
        /// dropped them, and the host sets them on each connection).
        settings_arrived: bool,
    },
    /// Two connections were served by one server process, or one by several: a pooler in
    /// transaction or statement mode.
    Shared(Evidence),
}

/// What gave a transaction pooler away, for the error message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Evidence {
    /// Two open client connections were served by the same server process.
    SameServer(i32),
    /// One client connection was served by these server processes in turn.
    Moved(Vec<i32>),
}

impl std::fmt::Display for Evidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Evidence::SameServer(pid) => write!(
                f,
                "two open connections were served by the same server process (pid {pid})"
            ),
            Evidence::Moved(pids) => {
                let pids: Vec<String> = pids.iter().map(i32::to_string).collect();
                write!(
                    f,
                    "one connection was served by server processes {} in turn",
                    pids.join(", ")
                )
            }
        }
    }
}

/// Why the check could not finish.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// A connection could not be made, or a statement failed.
    #[error(transparent)]
    Driver(#[from] sqlx::Error),
    /// The second connection, or a turn, got no answer within the bound.
    #[error("{0}")]
    Stalled(&'static str),
}

/// Connects twice with `options` (each connection within `bound`) and asks, in [`TURNS`], whose
/// server process serves each; every turn together within `bound` as well. `protocol` is the
/// value the settings announce (`leasehold.protocol`), to tell whether they arrived.
pub async fn check(
    options: &PgConnectOptions,
    bound: Duration,
    protocol: &str,
) -> Result<Sessions, CheckError> {
    let connect = || async {
        tokio::time::timeout(bound, PgConnection::connect_with(options))
            .await
            .map_err(|_| CheckError::Stalled("no connection"))?
            .map_err(CheckError::from)
    };
    let first = connect().await?;
    // The second while the first is still open: only then may they not share a server.
    let second = match connect().await {
        Ok(second) => second,
        Err(CheckError::Stalled(_)) => {
            return Err(CheckError::Stalled(
                "a second connection, while the first was open, did not connect",
            ));
        }
        Err(e) => return Err(e),
    };
    let mut conns = [first, second];
    let turns = tokio::time::timeout(bound, take_turns(&mut conns, protocol)).await;
    for conn in conns {
        let _ = conn.close().await;
    }
    match turns {
        Ok(result) => result,
        // Typically a pooler in session mode with a pool of one: the second client waits for a
        // server the first keeps. The host needs several sessions at once anyway.
        Err(_) => Err(CheckError::Stalled(
            "two connections open at once did not both get a server session to answer",
        )),
    }
}

async fn take_turns(conns: &mut [PgConnection; 2], protocol: &str) -> Result<Sessions, CheckError> {
    let mut seen: [Vec<i32>; 2] = [Vec::new(), Vec::new()];
    let mut settings_arrived = true;
    for (turn, &who) in TURNS.iter().enumerate() {
        let row: PgRow = sqlx::raw_sql(
            "SELECT pg_backend_pid(), coalesce(current_setting('leasehold.protocol', true), '')",
        )
        .fetch_one(&mut conns[who])
        .await?;
        let pid: i32 = row.try_get(0)?;
        if turn == 0 {
            let announced: String = row.try_get(1)?;
            settings_arrived = announced == protocol;
        }
        seen[who].push(pid);
    }
    Ok(judge(&seen, settings_arrived))
}

/// The verdict on the server processes `seen` by each connection, in turn order.
fn judge(seen: &[Vec<i32>; 2], settings_arrived: bool) -> Sessions {
    let [a, b] = seen;
    if let Some(pid) = a.iter().find(|pid| b.contains(pid)) {
        return Sessions::Shared(Evidence::SameServer(*pid));
    }
    for pids in seen {
        let distinct: BTreeSet<i32> = pids.iter().copied().collect();
        if distinct.len() > 1 {
            let mut in_turn = pids.clone();
            in_turn.dedup();
            return Sessions::Shared(Evidence::Moved(in_turn));
        }
    }
    Sessions::OwnEach { settings_arrived }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_connections_each_with_a_server_of_its_own_are_sessions() {
        assert_eq!(
            judge(&[vec![7, 7, 7, 7], vec![9, 9, 9, 9]], true),
            Sessions::OwnEach {
                settings_arrived: true
            }
        );
    }

    #[test]
    fn a_server_handed_from_one_connection_to_the_other_is_transaction_pooling() {
        assert_eq!(
            judge(&[vec![7, 7, 7, 7], vec![7, 7, 7, 7]], true),
            Sessions::Shared(Evidence::SameServer(7))
        );
    }

    #[test]
    fn a_connection_served_by_several_servers_is_transaction_pooling() {
        assert_eq!(
            judge(&[vec![7, 8, 7, 8], vec![9, 9, 9, 9]], true),
            Sessions::Shared(Evidence::Moved(vec![7, 8, 7, 8]))
        );
    }

    #[test]
    fn the_turns_have_each_connection_ask_twice_in_a_row() {
        // Two servers handed out first in, first out follow strict alternation unseen.
        assert!(TURNS.windows(2).any(|w| w == [0, 0]));
        assert!(TURNS.windows(2).any(|w| w == [1, 1]));
    }
}
