//! `sql`: statements on the PostgreSQL database named in a plugin's `[grants.sql]`. The host
//! reads the URL from its own environment; the plugin never sees it. Each grant has its own small
//! pool with a server-side statement timeout, and results are capped in rows and bytes.
//!
//! When the granted database is the lease database (the lease store's own `leasehold_database`,
//! holding the same id, whatever URL, role or `search_path` reaches it: [`crate::capability::identity`]), `execute`
//! and `transaction` are fenced: they run in one transaction whose last statement before the
//! commit checks the lease and locks its row ([`super::fence`]), so the row is locked around the
//! commit only, however long the plugin's statements run. When the grant cannot tell (its role
//! may not read that table), its writes are refused rather than run unfenced. `query` always runs
//! read-only, so writes cannot bypass the fence through it, and runs either way.
//!
//! A statement is never simply abandoned: each call runs as a task of the plugin's term
//! ([`SqlGrant::in_term`]). When the guest call that issued it is dropped (term end, timeout,
//! retire), the task stops sending, ends this grant's sessions on the server
//! (`pg_terminate_backend`) and waits until the server lists none of them; the term's tracker,
//! and so the release of the lease, waits for that. Only a `COMMIT` already sent cannot be
//! called back: its outcome is reported as unknown, and fenced writes need no cancel to be safe.
//!
//! Order (each module may use only those listed before it; `host/tests/layers.rs` checks):
//!
//! 1. [`guard`]: which statements a plugin may run;
//! 2. [`value`]: statements, parameters, rows and column values;
//! 3. [`grant`]: a plugin's grant, its pool and its calls.

pub mod grant;
pub mod guard;
pub mod value;

pub use grant::SqlGrant;
pub use value::{Rows, SqlValue, Statement};
