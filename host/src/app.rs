//! The composition root: one running host. [`App::start`] wires the lease store, the driver, the
//! plugin runtime, the supervisor and the HTTP endpoint from a [`Config`]; [`App::shutdown`]
//! releases every lease in order (plugins stopped first) within a grace period. The command line
//! adds only flags, signals and exit codes around it, and the tests start it in-process.
//!
//! The cancellation tree: `root` (this app) → one child token per leadership term (the driver)
//! → every guest task of that term (the supervisor, under the term's tracker).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinError, JoinHandle};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::capability::{Capabilities, Environment};
use crate::config::Config;
use crate::http::{AppState, EndpointMetrics, HttpMetrics};
use crate::lease::group_runner::Runner;
use crate::lease::groups::GroupSpec;
use crate::lease::seams::Seams;
use crate::lease::{Driver, Epoch, Leases, Role, StoreError, open_store};
use crate::metrics::{Exposition, LeaseMetrics};
use crate::plugin::PluginSet;
use crate::runtime::engine::EngineOptions;
use crate::runtime::{EngineError, PluginMetrics, Runtime};
use crate::supervisor::{
    ProcessContext, ProcessMetrics, ProcessState, ProcessStatus, StatusBoard, Supervisor,
    how_it_ended, start_processes,
};

/// Why the host could not start or stop cleanly; each variant names what failed.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The lease store could not be opened (or its schema created).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The HTTP address could not be bound.
    #[error(
        "cannot listen on {addr} for HTTP ({set_by}): {source}; choose another address with {set_by}"
    )]
    Listen {
        /// The configured address.
        addr: SocketAddr,
        /// Where the address was set: the flag or variable, the file's key, or the default.
        set_by: &'static str,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
    /// This program's own file cannot be found, to run as the keeper of a bound process.
    #[error("cannot find this program's own file, to run as a process's keeper: {0}")]
    Keeper(#[source] std::io::Error),
    /// The HTTP endpoint's thread could not be started.
    #[error("cannot start the HTTP thread: {0}")]
    HttpThread(#[source] std::io::Error),
    /// The configured plugin directory is missing.
    #[error("plugin directory {} does not exist or is not a directory", .0.display())]
    NoPluginDirectory(PathBuf),
    /// The plugin directory could not be listed.
    #[error("reading plugin directory {}: {source}", .dir.display())]
    ReadPluginDirectory {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The plugin directory could not be watched for changes.
    #[error("watching plugin directory {}: {source}", .dir.display())]
    WatchPluginDirectory {
        /// The directory.
        dir: PathBuf,
        /// The watcher's error.
        #[source]
        source: notify::Error,
    },
    /// The WebAssembly engine could not be built.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The lease driver ended before it was asked to.
    #[error("the lease driver stopped unexpectedly")]
    DriverStopped,
    /// The lease driver panicked.
    #[error("the lease driver panicked: {0}")]
    DriverPanicked(#[source] JoinError),
}

/// What [`App::shutdown`] did with each lease this replica held when it began.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Shutdown {
    /// The leases released after their plugins stopped, with their epochs: the standbys were
    /// told, and one takes each over at once.
    pub released: Vec<(String, Epoch)>,
    /// The leases left to expire by their ttl: nobody takes them over before then.
    pub left: Vec<LeftToExpire>,
    /// How each OS process that ran when the stop began ended (`name (lease) exited with code
    /// 0, stopped in 12 ms`).
    pub processes: Vec<String>,
}

/// A lease [`App::shutdown`] could not release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftToExpire {
    /// The lease.
    pub lease: String,
    /// The epoch this replica held it at.
    pub epoch: Epoch,
    /// The latest wall-clock time the database counts it as held: the ttl after the last
    /// renewal that may still land (one store timeout from now).
    pub expires_by: SystemTime,
    /// Why it was not released: the store's error, or the grace running out first.
    pub why: String,
}

impl Shutdown {
    /// Whether every lease held was released.
    pub fn all_released(&self) -> bool {
        self.left.is_empty()
    }

    /// One line for the log's last: what became of each lease and process, and why.
    pub fn summary(&self) -> String {
        let leases = self.leases_summary();
        match self.processes.is_empty() {
            true => leases,
            false => format!("{leases}; processes: {}", self.processes.join(", ")),
        }
    }

    fn leases_summary(&self) -> String {
        let list = |items: Vec<String>| items.join(", ");
        let released = list(
            self.released
                .iter()
                .map(|(lease, epoch)| format!("{lease} at epoch {epoch}"))
                .collect(),
        );
        if self.left.is_empty() {
            return match self.released.len() {
                0 => "stopped: this replica held no lease".to_string(),
                n => format!("stopped: released {n} of {n} leases held ({released})"),
            };
        }
        let left = list(
            self.left
                .iter()
                .map(|l| {
                    format!(
                        "{} at epoch {} expires by {} at the latest ({})",
                        l.lease,
                        l.epoch,
                        humantime::format_rfc3339_seconds(l.expires_by),
                        l.why
                    )
                })
                .collect(),
        );
        let held = self.left.len() + self.released.len();
        let mut line = format!(
            "stopped, but {} of {held} leases held were left to expire, not handed over: {left}",
            self.left.len()
        );
        if !self.released.is_empty() {
            line.push_str(&format!("; released: {released}"));
        }
        line
    }
}

/// Every layer's metrics, each registered by its own family struct, in the order `/metrics`
/// lists them.
#[derive(Debug)]
pub struct Metrics {
    /// The lease layer's: roles, epochs, renewals, groups and store errors.
    pub lease: Arc<LeaseMetrics>,
    /// The guest runtime's, per plugin (and the dropped output of bound processes).
    pub plugin: Arc<PluginMetrics>,
    /// The OS processes bound to leases.
    pub process: Arc<ProcessMetrics>,
    /// The HTTP endpoint's watchers.
    pub http: Arc<HttpMetrics>,
    /// What `/metrics` encodes: all of the above.
    pub exposition: Arc<Exposition>,
}

impl Metrics {
    /// Every family, registered.
    pub fn new() -> Self {
        let (lease, plugin, process, http) = (
            Arc::<LeaseMetrics>::default(),
            PluginMetrics::new(),
            ProcessMetrics::new(),
            HttpMetrics::new(),
        );
        let mut registry = prometheus_client::registry::Registry::default();
        lease.register_lease(&mut registry);
        lease.register_faults(&mut registry);
        plugin.register(&mut registry);
        lease.register_group(&mut registry);
        process.register(&mut registry);
        http.register(&mut registry);
        // Last, and only while trace export is on: its queue's drops and failures.
        crate::telemetry::register(&mut registry);
        Metrics {
            lease,
            plugin,
            process,
            http,
            exposition: Arc::new(Exposition::new(registry)),
        }
    }

    /// What the HTTP endpoint reads and writes of them.
    fn endpoint(&self) -> EndpointMetrics {
        EndpointMetrics {
            exposition: self.exposition.clone(),
            lease: self.lease.clone(),
            http: self.http.clone(),
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// One running host.
#[derive(Debug)]
pub struct App {
    /// Where `/status` and `/metrics` are served.
    addr: SocketAddr,
    /// Each lease's leadership, as the driver publishes it.
    leases: Arc<Leases>,
    /// What `/status` shows of each plugin; `None` without a plugin directory.
    plugins: Option<StatusBoard>,
    /// Every metric this host records.
    metrics: Arc<Metrics>,
    /// The root of the cancellation tree: cancelling it ends every term and releases every lease.
    root: CancellationToken,
    /// Stops the HTTP server, after the leases are released (so `/status` shows the release).
    http_stop: CancellationToken,
    /// The HTTP server.
    http: JoinHandle<std::io::Result<()>>,
    /// The lease driver: it returns once every lease is released.
    driver: JoinHandle<()>,
    /// The supervisor, when a plugin directory is configured: it returns once the root token is
    /// cancelled and its health checks have stopped (reconcilers stop with their terms, which the
    /// driver waits for).
    supervisor: Option<JoinHandle<()>>,
    /// One task per bound process, following its lease's terms; they return once the root
    /// token is cancelled (each term's run is under the term's tracker, which the release
    /// waits for).
    processes: Vec<JoinHandle<()>>,
    /// The group runner, when groups are configured: it returns once it has left its groups.
    groups: Option<JoinHandle<()>>,
    /// Every task above: shutdown waits for all of them, so none outlives the app.
    tasks: TaskTracker,
    /// The plugin set's sender: the directory watcher publishes through a clone, and the
    /// supervisor stops when every sender is gone. Its components keep the engine (and the
    /// memory it reserved) alive until the app is dropped.
    _plugin_set: Option<watch::Sender<Arc<PluginSet>>>,
}

/// How warnings name the lease database's URL: where it may have been set.
pub const LEASE_DATABASE: &str =
    "the lease database (--database-url, LEASEHOLD_DATABASE_URL or database_url)";

/// How long a host that has released its leases waits before tearing itself down (the app holds
/// the store, through its [`Leases`], and the plugin engine until it is dropped). Teardown is not
/// free: in a profiled handoff, unmapping the plugins' reserved memory took ~2 ms of CPU and each
/// closed database connection ~1-2 ms of the server's (its backend exits). Done at once, it lands
/// on the successor's campaign and first plugin call, on any machine or database server the two
/// share: it was most of a graceful handoff's time. 100 ms is many times a takeover (a few ms)
/// and not felt by whoever stops the host.
pub const SETTLE: Duration = Duration::from_millis(100);

impl App {
    /// Opens the store, loads the plugins, binds HTTP and starts campaigning.
    pub async fn start(config: Config) -> Result<App, AppError> {
        Self::start_with(config, Environment::Process).await
    }

    /// [`App::start`], with plugin grants reading the variables they name from `environment`.
    pub async fn start_with(config: Config, environment: Environment) -> Result<App, AppError> {
        // The one place the lease layer's wall clock and randomness come from (its seams): the
        // system's here, a seed's in the simulator.
        let seams = Seams::system();
        let holder = seams.holder_id(&config.replica_id);
        if let Some(warning) = config
            .database_url
            .plaintext_warning(LEASE_DATABASE, |k| std::env::var(k).ok())
        {
            warn!("{warning}");
        }
        let store = open_store(
            &config.database_url,
            config.connect_timeout,
            config.timing.store_timeout,
        )
        .await?;
        let listener = bind_http(&config).await?;
        let addr = listener.local_addr().map_err(|source| AppError::Listen {
            addr: config.http,
            set_by: config.http_set_by.unwrap_or(DEFAULT_HTTP_SET_BY),
            source,
        })?;
        info!(
            holder = %holder,
            store = %config.database_url,
            leases = ?config.leases,
            groups = ?config.groups.iter().map(|g| format!("{}={}", g.name, g.shards)).collect::<Vec<_>>(),
            ttl = ?config.timing.ttl,
            "leasehold starting"
        );

        let root = CancellationToken::new();
        let metrics = Arc::new(Metrics::new());
        let (driver, leases) = Driver::with_shards(
            store,
            holder,
            config.timing,
            config.leases.iter().map(|l| l.to_string()),
            config.groups.iter().flat_map(GroupSpec::leases),
            root.clone(),
            seams,
        );
        let places = config
            .leases
            .iter()
            .map(|l| l.to_string())
            .chain(config.groups.iter().flat_map(GroupSpec::leases))
            .map(|name| {
                let place = config.place_of(&name);
                (name, place)
            })
            .collect();
        let mut driver = driver
            .with_metrics(metrics.lease.clone())
            .with_places(places);
        let tasks = TaskTracker::new();
        let mut groups = None;
        if !config.groups.is_empty() {
            let (runner, left) = Runner::new(leases.clone(), &config.groups, metrics.lease.clone());
            driver = driver.leaving_groups_first(left);
            groups = Some(tasks.spawn(runner.run(root.clone())));
        }
        // Plugins are compiled and pre-linked before the first campaign, so that an acquisition
        // only has to instantiate them.
        let (plugins, plugin_set, supervisor) = match &config.plugins {
            Some(dir) => {
                let (supervisor, set) = start_plugins(
                    dir,
                    &config,
                    environment,
                    leases.clone(),
                    metrics.plugin.clone(),
                    &root,
                )?;
                let board = supervisor.board().clone();
                let supervisor = tasks.spawn(supervisor.run(root.clone()));
                (Some(board), Some(set), Some(supervisor))
            }
            None => (None, None, None),
        };
        // OS processes and services bound to leases, each under a keeper that is this very
        // program. They show on the plugins' board, which `/status` reads: a host without
        // plugins has a board all the same.
        let mut plugins = plugins;
        let mut processes = Vec::new();
        if !config.processes.is_empty() || !config.services.is_empty() {
            let context = ProcessContext {
                leases: leases.clone(),
                keeper: std::env::current_exe().map_err(AppError::Keeper)?.into(),
                board: plugins
                    .get_or_insert_with(|| StatusBoard::new(metrics.plugin.clone()))
                    .clone(),
                metrics: metrics.process.clone(),
                dropped_lines: metrics.plugin.log_dropped.clone(),
            };
            processes =
                start_processes(&config.processes, &config.services, &context, &root, &tasks);
        }
        let http_stop = CancellationToken::new();
        let mut state = AppState::new(leases.clone(), plugins.clone(), metrics.endpoint());
        if let Some(token) = config.admin_token.clone() {
            info!(token_file = %token.file().display(), "admin API on: POST /v1/admin/leases/NAME/handoff answers requests that carry the admin token");
            state = state.with_admin(token);
        }
        // Logged only now: until the plugins are loaded a request would wait unanswered, and
        // scripts take this line to mean "ready to be asked".
        info!(addr = %addr, "http listening");
        let served = crate::http::thread::spawn(
            listener,
            state,
            config.http_allowed_hosts.clone(),
            http_stop.clone(),
        )
        .map_err(AppError::HttpThread)?;
        let http = tasks.spawn(served);
        let driver = tasks.spawn(driver.run());
        // Under the app's tasks, which a shutdown waits for: every ended term's span is queued
        // before the last flush.
        crate::telemetry::follow_terms(&leases, &root, &tasks);
        tasks.close();
        Ok(App {
            addr,
            leases,
            plugins,
            metrics,
            root,
            http_stop,
            http,
            driver,
            supervisor,
            processes,
            groups,
            tasks,
            _plugin_set: plugin_set,
        })
    }

    /// The bound HTTP address (the configured one, with port 0 resolved).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Each lease's leadership.
    pub fn leases(&self) -> &Arc<Leases> {
        &self.leases
    }

    /// What `/status` shows of each plugin, when a plugin directory is configured.
    pub fn plugins(&self) -> Option<&StatusBoard> {
        self.plugins.as_ref()
    }

    /// Every metric this host records.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Resolves only if the lease driver ends on its own (it never should before
    /// [`App::shutdown`]): the host has stopped working and should exit.
    pub async fn failed(&mut self) -> AppError {
        match (&mut self.driver).await {
            Ok(()) => AppError::DriverStopped,
            Err(e) => AppError::DriverPanicked(e),
        }
    }

    /// Ends every term (plugins stopped first) and releases every lease, then waits for the
    /// supervisor and the group runner, all within `grace`; then, after [`SETTLE`], stops the HTTP
    /// server and waits for every task of the app. Says what became of each lease held when it
    /// began: released, or left to expire (its release failed, or `grace` ran out first), the
    /// same account whichever came first.
    pub async fn shutdown(mut self, grace: Duration) -> Result<Shutdown, AppError> {
        let held: Vec<(String, Epoch)> = self
            .leases
            .lease_names()
            .filter_map(|name| {
                let l = self.leases.leadership(name)?;
                let epoch = l.epoch.filter(|_| l.role != Role::Standby)?;
                Some((name.to_string(), epoch))
            })
            .collect();
        let deadline = tokio::time::Instant::now() + grace;
        // The processes at work now, to say at the end how each ended.
        let working: Vec<ProcessStatus> = self
            .plugins
            .iter()
            .flat_map(StatusBoard::processes)
            .filter(|p| p.state != ProcessState::Idle && p.state != ProcessState::GaveUp)
            .collect();
        self.root.cancel();
        let finished = tokio::select! {
            r = &mut self.driver => match r {
                Ok(()) => Ok(true),
                Err(e) => Err(AppError::DriverPanicked(e)),
            },
            _ = tokio::time::sleep_until(deadline) => Ok(false),
        };
        // Both end with the root token; what the grace has left bounds the wait.
        let processes = std::mem::take(&mut self.processes)
            .into_iter()
            .map(|task| ("a bound process", Some(task)));
        for (what, task) in [
            ("the supervisor", self.supervisor.take()),
            ("the group runner", self.groups.take()),
        ]
        .into_iter()
        .chain(processes)
        {
            let Some(task) = task else { continue };
            match tokio::time::timeout_at(deadline, task).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => warn!("{what} panicked: {e}"),
                Err(_) => warn!("{what} did not stop within shutdown_grace"),
            }
        }
        let after = self
            .plugins
            .iter()
            .flat_map(StatusBoard::processes)
            .collect::<Vec<_>>();
        let ended: Vec<String> = working
            .iter()
            .filter_map(|before| {
                let now = after
                    .iter()
                    .find(|p| p.name == before.name && p.lease == before.lease)?;
                Some(how_it_ended(before, now))
            })
            .collect();
        let outcome = finished.map(|finished| {
            let mut report = self.account(held, finished, grace);
            report.processes = ended;
            if report.all_released() {
                info!("every lease released");
            }
            report
        });
        if matches!(outcome, Ok(ref r) if r.all_released()) {
            tokio::time::sleep(SETTLE).await;
        }
        self.http_stop.cancel();
        if tokio::time::timeout(Duration::from_secs(1), &mut self.http)
            .await
            .is_err()
        {
            warn!("the HTTP server did not stop within 1s");
        }
        // Every task was waited for above or given up on with a warning; this makes sure, within
        // what is left of the grace (a task already done answers at once, however late).
        if tokio::time::timeout_at(deadline, self.tasks.wait())
            .await
            .is_err()
        {
            warn!(
                "{} of the host's tasks still run after shutdown_grace",
                self.tasks.len()
            );
        }
        outcome
    }
}

impl App {
    /// What became of each of the `held` leases: the driver's releases, and for a lease it did
    /// not get to (`finished` false: the grace ran out), the grace as the reason.
    fn account(&self, held: Vec<(String, Epoch)>, finished: bool, grace: Duration) -> Shutdown {
        let done = self.leases.releases();
        let timing = self.leases.timing();
        let expires_by = SystemTime::now() + timing.ttl + timing.store_timeout;
        let mut report = Shutdown::default();
        for (lease, epoch) in held {
            let release = done
                .iter()
                .rev()
                .find(|(l, e, _)| *l == lease && *e == epoch);
            let why = match release {
                Some((_, _, None)) => {
                    report.released.push((lease, epoch));
                    continue;
                }
                Some((_, _, Some(error))) => format!("release failed: {error}"),
                None if finished => "no release was sent: the lease was lost first".to_string(),
                None => format!(
                    "shutdown_grace ({}) ran out before its release was done",
                    crate::report::duration(grace)
                ),
            };
            report.left.push(LeftToExpire {
                lease,
                epoch,
                expires_by,
                why,
            });
        }
        report
    }
}

/// How the default HTTP address is named in an error: nobody set it.
const DEFAULT_HTTP_SET_BY: &str = "the default; set --http, LEASEHOLD_HTTP or http";

/// Binds the HTTP address. The default one (nobody set it) taken by another process, a second
/// replica on the same machine, gives way to a free port of the same IP, with a warning naming
/// both; an address someone chose stays theirs, and its being taken is an error naming where it
/// was set.
async fn bind_http(config: &Config) -> Result<TcpListener, AppError> {
    let refused = |source| AppError::Listen {
        addr: config.http,
        set_by: config.http_set_by.unwrap_or(DEFAULT_HTTP_SET_BY),
        source,
    };
    match TcpListener::bind(config.http).await {
        Ok(listener) => Ok(listener),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && config.http_set_by.is_none() => {
            let instead = SocketAddr::new(config.http.ip(), 0);
            let listener = TcpListener::bind(instead).await.map_err(refused)?;
            let chosen = listener.local_addr().map_err(refused)?;
            warn!(
                taken = %config.http,
                chosen = %chosen,
                "the default HTTP address {} is taken (another replica on this machine?): serving on {chosen} instead; set --http, LEASEHOLD_HTTP or http to choose",
                config.http
            );
            Ok(listener)
        }
        Err(e) => Err(refused(e)),
    }
}

/// `leasehold check`: loads one component file and its manifest as `run` would (default engine,
/// the shared compile cache, so the host's next load of the same file is fast). The outer error
/// is the engine's; the inner one says what is wrong with the plugin.
pub fn check_plugin(
    wasm: &Path,
    manifest: Option<&Path>,
) -> Result<Result<crate::plugin::Checked, crate::plugin::LoadError>, AppError> {
    let runtime = Runtime::new(
        EngineOptions::default(),
        crate::runtime::cache::default_dir().as_deref(),
        PluginMetrics::new(),
    )?;
    Ok(crate::plugin::check_file(&runtime, wasm, manifest))
}

/// Builds the runtime, loads the plugin directory and returns the supervisor to run.
fn start_plugins(
    dir: &Path,
    config: &Config,
    environment: Environment,
    leases: Arc<Leases>,
    metrics: Arc<PluginMetrics>,
    root: &CancellationToken,
) -> Result<(Supervisor, watch::Sender<Arc<PluginSet>>), AppError> {
    if !dir.is_dir() {
        return Err(AppError::NoPluginDirectory(dir.to_path_buf()));
    }
    let options = EngineOptions {
        fuel: config.runtime.fuel,
        ..EngineOptions::default()
    };
    let runtime = Runtime::new(options, config.cache_dir.as_deref(), metrics)?;
    let capabilities = Capabilities::with_environment(
        config.database_url.clone(),
        config.timing.store_timeout,
        environment,
        config.grant_url_variables.clone(),
    );
    let set = crate::plugin::scan(dir, &runtime, &capabilities, &PluginSet::default()).map_err(
        |source| AppError::ReadPluginDirectory {
            dir: dir.to_path_buf(),
            source,
        },
    )?;
    // A plugin bound to a lease this replica does not campaign for is the supervisor's warning
    // (at load and at every reload), shown in /status.
    info!(dir = %dir.display(), plugins = set.len(), allocator = ?runtime.allocator(), "plugins loaded");
    let (tx, rx) = watch::channel(Arc::new(set));
    crate::plugin::watch::spawn(
        dir.to_path_buf(),
        runtime.clone(),
        capabilities.clone(),
        tx.clone(),
        root.clone(),
    )
    .map_err(|source| AppError::WatchPluginDirectory {
        dir: dir.to_path_buf(),
        source,
    })?;
    Ok((Supervisor::new(runtime, leases, capabilities, rx), tx))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The families, in the order `/metrics` has always listed them: their names are a contract.
    const FAMILIES: [&str; 40] = [
        "leasehold_lease_is_leader",
        "leasehold_lease_epoch",
        "leasehold_lease_transitions",
        "leasehold_leases",
        "leasehold_lease_renew_seconds",
        "leasehold_lease_expires_in_seconds",
        "leasehold_lease_ttl_seconds",
        "leasehold_lease_loss_to_stop_seconds",
        "leasehold_lease_grants",
        "leasehold_lease_preemptions",
        "leasehold_group_count_conflicts",
        "leasehold_store_errors",
        "leasehold_plugin_calls",
        "leasehold_plugin_call_seconds",
        "leasehold_plugin_traps",
        "leasehold_plugin_errors",
        "leasehold_plugin_fuel_consumed",
        "leasehold_plugin_call_fuel",
        "leasehold_plugin_memory_high_water_bytes",
        "leasehold_plugin_refused_writes",
        "leasehold_plugin_forced_stops",
        "leasehold_plugin_log_dropped",
        "leasehold_plugin_stores",
        "leasehold_group_shards_held",
        "leasehold_group_target",
        "leasehold_group_members",
        "leasehold_group_moves",
        "leasehold_group_handoffs",
        "leasehold_group_takeovers",
        "leasehold_group_gated",
        "leasehold_process_starts",
        "leasehold_process_exits",
        "leasehold_process_forced_kills",
        "leasehold_process_keeper_stops",
        "leasehold_process_unconfirmed_stops",
        "leasehold_process_last_stop_seconds",
        "leasehold_process_running",
        "leasehold_http_watchers",
        "leasehold_http_watchers_refused",
        "leasehold_http_watchers_stalled",
    ];

    #[test]
    fn every_layer_registers_its_families_once_under_their_names_in_the_order_they_always_had() {
        // The registry's own account lists every family, those without a series yet included.
        let account = format!("{:?}", Metrics::new().exposition);
        let listed: Vec<&str> = account
            .split("name: \"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .collect();
        assert_eq!(listed, FAMILIES, "{account}");
    }

    #[test]
    fn a_label_value_cannot_end_its_series_or_forge_another() {
        let metrics = Metrics::new();
        metrics
            .plugin
            .calls_of("evil\"} 1\nleasehold_plugin_calls_total{plugin=\"payments\"} 1\n#\\")
            .inc();
        metrics
            .lease
            .is_leader
            .get_or_create(&LeaseMetrics::lease(
                "a\nleasehold_lease_is_leader{lease=\"payments\"} 1",
            ))
            .set(1);
        let text = metrics.exposition.encode();
        assert!(
            text.contains(
                "leasehold_lease_is_leader{lease=\"a\\nleasehold_lease_is_leader{lease=\\\"payments\\\"} 1\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "leasehold_plugin_calls_total{plugin=\"evil\\\"} 1\\nleasehold_plugin_calls_total{plugin=\\\"payments\\\"} 1\\n#\\\\\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            !text.lines().any(|l| {
                l.starts_with("leasehold_lease_is_leader{lease=\"payments")
                    || l.starts_with("leasehold_plugin_calls_total{plugin=\"payments")
            }),
            "{text}"
        );
    }
}
