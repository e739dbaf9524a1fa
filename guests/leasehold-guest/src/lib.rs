//! Write leasehold plugins in Rust.
//!
//! leasehold runs plugins on the replica that holds a *lease* (a named lock kept in a database
//! that one replica at a time may hold). A plugin is a WebAssembly component built from a Rust
//! library crate for the `wasm32-wasip2` target. This crate hides the component plumbing: a
//! plugin author writes one trait implementation and one macro call.
//!
//! There are two kinds of plugins:
//!
//! - a **reconciler** ([`Reconciler`], exported with [`export_reconciler!`]) is started when its
//!   replica acquires the lease and called on a schedule until the lease is lost; each call
//!   brings some part of the world closer to its desired state. A reconciler that also
//!   implements [`EventHandler`] and is exported with [`export_event_reconciler!`] is, besides,
//!   called for PostgreSQL notifications on the channels its manifest lists;
//! - a **health check** ([`HealthCheck`], exported with [`export_health_check!`]) is asked, on
//!   the holder, whether the holder should keep the lease and, on the other replicas, whether
//!   they may compete for it.
//!
//! ```no_run
//! use leasehold_guest::{info, Config, Context, Error, Outcome, Reconciler};
//!
//! struct Hello {
//!     greeting: String,
//! }
//!
//! impl Reconciler for Hello {
//!     fn init(config: Config) -> Result<Self, Error> {
//!         Ok(Hello { greeting: config.get_or("greeting", "hello").to_string() })
//!     }
//!
//!     fn reconcile(&mut self, ctx: Context) -> Result<Outcome, Error> {
//!         info!("{} from epoch {}", self.greeting, ctx.epoch());
//!         Ok(Outcome::default())
//!     }
//! }
//!
//! leasehold_guest::export_reconciler!(Hello);
//! ```
//!
//! The crate must be a `cdylib` (`[lib] crate-type = ["cdylib"]` in its `Cargo.toml`) and a
//! `NAME.toml` manifest beside the built `NAME.wasm` tells the host which lease the plugin is
//! bound to, how often to call it, its limits and its [`Config`] values (see the README of the
//! `guests/` directory).
//!
//! Besides the trait, a plugin can read the state of its lease with the functions of [`lease`]
//! and write to the host's log with [`info!`] and the other macros of [`log`]. Text printed to
//! stdout or stderr also reaches the host's log, and so does the message of a panic.
//!
//! # Errors
//!
//! The trait methods return [`Error`], which `?` builds from any [`std::error::Error`] (the
//! [`CapabilityError`] of [`kv`] and [`sql`], `ParseIntError`, `io::Error`, ...) and from the
//! `String` messages of the [`Config`] helpers; [`bail!`], [`ensure!`] and [`Error::msg`] make
//! one from a message, and [`ErrorContext::context`] says what was being done. The host gets the
//! error's text, its whole chain of causes (`reading checkpoint: invalid digit found in string`),
//! and shows it in its log and `/status`.
//!
//! # Testing
//!
//! [`testing::Fake`] stands in for the host in a plugin crate's native `cargo test`: a fake
//! lease, kv store and sql, and the log lines for the test to read back. Outside a WebAssembly
//! build and without a `Fake`, every capability behaves the same documented way, without
//! panicking: [`lease`] as a replica that does not hold the lease (`None`s and empty names),
//! [`kv`] and [`sql`] calls fail with [`CapabilityError::Unavailable`], and [`log`] lines go to
//! stderr.
//!
//! # Capabilities
//!
//! A reconciler (either kind) may use more of the host when its manifest grants it (a health
//! check may not: its world imports neither `kv` nor `sql`):
//!
//! - [`kv`]: a key-value store scoped to the plugin and kept in the lease database;
//! - [`sql`]: statements on a PostgreSQL database whose URL the host keeps;
//! - events: PostgreSQL notifications on the listed channels, delivered to
//!   [`EventHandler::handle_event`] of a plugin exported with [`export_event_reconciler!`].
//!
//! ```toml
//! [grants]
//! kv = true                       # fenced key-value store in the lease database
//!
//! [grants.sql]
//! database_url_env = "APP_DATABASE_URL"  # env var of the HOST holding the PostgreSQL URL; never shown to the plugin
//! statement_timeout = "2s"        # optional
//! max_rows = 10000                # optional, per result
//! max_bytes = "16MiB"             # optional, per result as the host holds it
//! max_connections = 4             # optional, pool size for this grant
//!
//! [events]
//! channels = ["sandbox_events"]   # PostgreSQL LISTEN channels (on the sql grant's database, else the lease database)
//! ```
//!
//! Calls return `Result<_, `[`CapabilityError`]`>`; without the grant they return
//! [`CapabilityError::NotGranted`].
//!
//! **The lease-lost contract.** Writes to the lease database — [`kv::put`], [`kv::delete`],
//! and [`sql::execute`] and [`sql::transaction`] when the sql grant reaches the lease
//! database — are *fenced*: each commits only if this replica still holds the lease at the
//! epoch the plugin runs under, checked in the same transaction. If it does not, the call
//! returns [`CapabilityError::LeaseLost`] and **nothing of it was kept**, so a replica that lost
//! the lease without knowing it yet can never overwrite the new holder's work. On `LeaseLost`
//! stop writing and return: the instance is about to be stopped, and the new holder carries on.
//! Reads ([`kv::get`], [`kv::list`], [`sql::query`]) are not fenced. Writes to a database other
//! than the lease database are not fenced by the host: pass [`Context::epoch`] along.

#![deny(missing_docs)]

#[doc(hidden)]
pub mod __private;
mod capability;
mod config;
mod context;
mod error;
pub mod kv;
pub mod lease;
pub mod log;
pub mod sql;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

pub use capability::CapabilityError;
pub use config::Config;
pub use context::{Context, Outcome, Role};
pub use error::{Error, ErrorContext};

/// A plugin that reconciles on a schedule while its replica holds the lease.
///
/// The host creates a fresh plugin instance each time its replica acquires the lease (a new
/// *term*), calls [`init`](Reconciler::init) once, then calls
/// [`reconcile`](Reconciler::reconcile) on the manifest's schedule until the lease is lost, when
/// the instance is stopped (interrupted if need be) and thrown away. Nothing survives from one
/// term to the next: keep durable state outside the plugin and fence writes to it with
/// [`Context::epoch`].
///
/// Export the implementing type with [`export_reconciler!`].
pub trait Reconciler: Sized + 'static {
    /// Builds the plugin from its manifest's `[config]` values, once per term, before the first
    /// call to [`reconcile`](Reconciler::reconcile).
    ///
    /// An error is reported by the host as a failure to start the plugin.
    fn init(config: Config) -> Result<Self, Error>;

    /// Does one round of work.
    ///
    /// Return [`Outcome::default()`] to be called again after the interval of the manifest's
    /// `[schedule]`, or [`Outcome::requeue_after`] to be called again sooner or later than that.
    /// An error counts as a failure: the host logs it and retries with backoff, and stops
    /// calling a plugin that keeps failing.
    ///
    /// Each call has a deadline (`call_timeout` in the manifest): a call still running then is
    /// interrupted, the instance is discarded and the plugin is restarted with a new
    /// [`init`](Reconciler::init). Keep calls short and requeue instead of waiting.
    fn reconcile(&mut self, ctx: Context) -> Result<Outcome, Error>;
}

/// A [`Reconciler`] that also reacts to PostgreSQL notifications.
///
/// The manifest lists the channels:
///
/// ```toml
/// [events]
/// channels = ["sandbox_events"]   # PostgreSQL LISTEN channels (on the sql grant's database, else the lease database)
/// ```
///
/// While its replica holds the lease, the host listens on them and calls
/// [`handle_event`](EventHandler::handle_event) for each notification (`NOTIFY channel,
/// 'payload'` or `pg_notify(channel, payload)`), one call at a time, between reconciles, on the
/// same instance. Notifications sent while no replica listens (during a handover, say) are
/// lost: use them for latency and keep [`reconcile`](Reconciler::reconcile) as the fallback
/// that eventually finds all the work.
///
/// Export the implementing type with [`export_event_reconciler!`].
///
/// ```no_run
/// use leasehold_guest::{debug, Config, Context, Error, EventHandler, Outcome, Reconciler};
///
/// struct Sweeper;
///
/// impl Sweeper {
///     fn sweep(&mut self) -> Result<(), Error> {
///         Ok(()) // ... the work ...
///     }
/// }
///
/// impl Reconciler for Sweeper {
///     fn init(_config: Config) -> Result<Self, Error> {
///         Ok(Sweeper)
///     }
///
///     fn reconcile(&mut self, _ctx: Context) -> Result<Outcome, Error> {
///         self.sweep()?;
///         Ok(Outcome::default())
///     }
/// }
///
/// impl EventHandler for Sweeper {
///     fn handle_event(&mut self, channel: &str, payload: &str) -> Result<(), Error> {
///         debug!("{channel}: {payload}");
///         self.sweep()
///     }
/// }
///
/// leasehold_guest::export_event_reconciler!(Sweeper);
/// ```
pub trait EventHandler: Reconciler {
    /// Handles one notification: its channel and its payload (`""` when it had none).
    ///
    /// An error counts as a failure, like a failed [`reconcile`](Reconciler::reconcile). The
    /// call has the same deadline as a reconcile.
    fn handle_event(&mut self, channel: &str, payload: &str) -> Result<(), Error>;
}

/// A plugin that says whether its replica is fit to hold the lease.
///
/// On the replica holding the lease the host calls [`check`](HealthCheck::check) with
/// [`Role::Active`] before renewals; after `failure_threshold` consecutive failures (see the
/// manifest's `[health]` section) the replica gives the lease up. On the other replicas it calls
/// it with [`Role::Standby`]; a replica whose standby check fails does not compete for the lease.
///
/// Export the implementing type with [`export_health_check!`].
pub trait HealthCheck: Sized + 'static {
    /// Builds the check from its manifest's `[config]` values, once per instance, before the
    /// first call to [`check`](HealthCheck::check).
    ///
    /// An error is reported by the host as a failure to start the plugin. If the host never
    /// calls it, the check is built with an empty [`Config`] on the first call.
    fn init(config: Config) -> Result<Self, Error>;

    /// Returns `Ok(())` when healthy, or an error saying what is wrong (its text is shown in
    /// the host's status page and log).
    fn check(&mut self, role: Role) -> Result<(), Error>;
}

/// Makes a type implementing [`Reconciler`] the plugin of this crate.
///
/// Call it once, at the top level of the crate, with the type's name:
///
/// ```ignore
/// leasehold_guest::export_reconciler!(MyReconciler);
/// ```
///
/// The component exports the `reconciler` world: it receives no events, even if its manifest
/// lists `[events] channels` (use [`export_event_reconciler!`] for that).
///
/// A crate exports exactly one plugin: one `export_reconciler!`, `export_event_reconciler!` or
/// `export_health_check!`.
#[macro_export]
macro_rules! export_reconciler {
    ($plugin:ty $(,)?) => {
        const _: () = {
            type __LeaseholdReconciler = $crate::__private::ReconcilerExport<$plugin>;
            $crate::__private::reconciler::__leasehold_export_reconciler_world!(
                __LeaseholdReconciler with_types_in $crate::__private::reconciler
            );
        };
    };
}

/// Makes a type implementing [`Reconciler`] and [`EventHandler`] the plugin of this crate, as a
/// component of the `event-reconciler` world.
///
/// Call it once, at the top level of the crate, with the type's name:
///
/// ```ignore
/// leasehold_guest::export_event_reconciler!(MySweeper);
/// ```
///
/// A crate exports exactly one plugin: one `export_reconciler!`, `export_event_reconciler!` or
/// `export_health_check!`.
#[macro_export]
macro_rules! export_event_reconciler {
    ($plugin:ty $(,)?) => {
        const _: () = {
            type __LeaseholdEventReconciler = $crate::__private::EventReconcilerExport<$plugin>;
            $crate::__private::event_reconciler::__leasehold_export_event_reconciler_world!(
                __LeaseholdEventReconciler with_types_in $crate::__private::event_reconciler
            );
        };
    };
}

/// Makes a type implementing [`HealthCheck`] the plugin of this crate.
///
/// Call it once, at the top level of the crate, with the type's name:
///
/// ```ignore
/// leasehold_guest::export_health_check!(MyCheck);
/// ```
///
/// A crate exports exactly one plugin: one `export_reconciler!`, `export_event_reconciler!` or
/// `export_health_check!`.
#[macro_export]
macro_rules! export_health_check {
    ($plugin:ty $(,)?) => {
        const _: () = {
            type __LeaseholdHealthCheck = $crate::__private::HealthCheckExport<$plugin>;
            $crate::__private::health_check::__leasehold_export_health_check_world!(
                __LeaseholdHealthCheck with_types_in $crate::__private::health_check
            );
        };
    };
}
