//! Hosts in the test's own process: [`HostBuilder::start_in_process`] starts a
//! [`leasehold::app::App`] (the composition root `leasehold run` wraps) for tests whose point is
//! not the process. Each host gets a tokio runtime of its own whose threads log into the host's
//! own [`Log`], in the format `leasehold run` writes to stderr, so a test reads an in-process
//! host's log as it reads a process's; `/status` and `/metrics` are read through [`Endpoint`].

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, bail};
use leasehold::app::{App, Shutdown};
use leasehold::capability::Environment;
use leasehold::config::Config;
use tempfile::TempDir;
use tokio::sync::Mutex;

use crate::endpoint::Endpoint;
use crate::host::{HostBuilder, wait_for_single_leader};
use crate::log::{Log, Logged};

/// The prefix of the compiled-component cache directories of test binaries.
const CACHE_PREFIX: &str = "leasehold-test-cache-";

/// A host running in this process; it shuts down (in the background) when dropped. Asked over
/// HTTP through its [`Endpoint`] (`host.status()`, `host.role(…)`, …).
#[derive(Debug)]
pub struct InProcessHost {
    /// A name for messages (the replica id).
    pub name: String,
    /// Its HTTP endpoint.
    endpoint: Endpoint,
    /// The host; `None` once stopped.
    app: Option<App>,
    /// The configured `shutdown_grace`, which [`InProcessHost::stop`] gives the shutdown.
    grace: Duration,
    /// What the host's tasks logged.
    log: Log,
    /// The runtime the host's tasks run on; `None` once handed to the thread that drops it.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Deref for InProcessHost {
    type Target = Endpoint;

    fn deref(&self) -> &Endpoint {
        &self.endpoint
    }
}

impl AsRef<Endpoint> for InProcessHost {
    fn as_ref(&self) -> &Endpoint {
        &self.endpoint
    }
}

impl InProcessHost {
    /// The running host (its leases, plugin statuses and metrics); `None` once stopped.
    pub fn app(&self) -> Option<&App> {
        self.app.as_ref()
    }

    /// The graceful stop, as on SIGTERM: [`App::shutdown`] (plugins stopped, every lease
    /// released) within the configured grace.
    pub async fn stop(&mut self) -> anyhow::Result<Shutdown> {
        let app = self
            .app
            .take()
            .with_context(|| format!("{} is already stopped", self.name))?;
        let runtime = self
            .runtime
            .as_ref()
            .context("the host's runtime is gone")?;
        Ok(runtime.spawn(app.shutdown(self.grace)).await??)
    }
}

impl Drop for InProcessHost {
    fn drop(&mut self) {
        // A dropped App's tasks would go on campaigning: release its leases in order, as a
        // SIGTERM would, on a thread of its own (a runtime cannot be dropped inside another).
        let (app, runtime, grace) = (self.app.take(), self.runtime.take(), self.grace);
        if let Some(runtime) = runtime {
            std::thread::spawn(move || {
                if let Some(app) = app {
                    let _ = runtime.block_on(app.shutdown(grace));
                }
                runtime.shutdown_timeout(Duration::from_secs(1));
            });
        }
    }
}

impl HostBuilder {
    /// Starts the host as an [`App`] in the test's runtime and returns once it serves HTTP. It
    /// reads the same settings as the process would, from the same config file keys; its
    /// compiled components go to a cache private to this test binary, not to `$HOME`.
    pub async fn start_in_process(self) -> anyhow::Result<InProcessHost> {
        if !self.args.is_empty() || self.shell.is_some() {
            bail!(
                "{}: arguments and shell prefixes are for processes; in-process hosts take config text",
                self.name
            );
        }
        let text = self.config_text()?;
        let file: leasehold::config::Layer = toml::from_str(&text)?;
        let config = Config::resolve(file, Default::default())?;
        let grace = config.shutdown_grace;
        // Grants read these instead of the test process's environment.
        let environment = Environment::Fixed(std::sync::Arc::new(self.env.into_iter().collect()));
        let log = Log::new(&self.name);
        let dispatch = log.dispatch();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name(format!("host-{}", self.name))
            .on_thread_start(move || {
                // For the thread's whole life: every task of this host logs into its log.
                std::mem::forget(tracing::dispatcher::set_default(&dispatch));
            })
            .build()?;
        // One start at a time in a test binary: the first compiles its components into the
        // shared cache, and those after it load them instead of compiling the same ones again
        // side by side on two cores.
        static STARTING: Mutex<()> = Mutex::const_new(());
        let app = {
            let _one = STARTING.lock().await;
            runtime
                .spawn(App::start_with(config, environment))
                .await?
                .with_context(|| format!("starting {} in-process", self.name))?
        };
        Ok(InProcessHost {
            name: self.name,
            endpoint: Endpoint::new(app.addr())?,
            app: Some(app),
            grace,
            log,
            runtime: Some(runtime),
        })
    }

    /// [`HostBuilder::start_in_process`], then up to 15 s until the host leads `leader` (its
    /// default lease): for tests whose scenario starts from a holder.
    pub async fn start_in_process_leading(self) -> anyhow::Result<InProcessHost> {
        let host = self.start_in_process().await?;
        wait_for_single_leader(&[&host], "leader", Duration::from_secs(15)).await?;
        Ok(host)
    }

    /// The builder's settings as a config file, over the text given to
    /// [`HostBuilder::config`].
    fn config_text(&self) -> anyhow::Result<String> {
        use toml::Value;
        let mut table: toml::Table = match &self.config {
            Some(text) => toml::from_str(text).context("the config text")?,
            None => toml::Table::new(),
        };
        let path = |p: &Path| -> anyhow::Result<Value> {
            Ok(Value::from(p.to_str().context("a path that is not UTF-8")?))
        };
        table.insert("replica_id".into(), Value::from(self.name.as_str()));
        table.insert("http".into(), Value::from("127.0.0.1:0"));
        if let Some(url) = &self.database_url {
            table.insert("database_url".into(), Value::from(url.as_str()));
        }
        if !self.leases.is_empty() {
            table.insert("leases".into(), Value::from(self.leases.clone()));
        }
        if let Some(dir) = &self.plugins {
            table.insert("plugins".into(), path(dir)?);
        }
        if !table.contains_key("cache_dir") {
            table.insert("cache_dir".into(), path(cache_dir()?)?);
        }
        if let Some(ttl) = self.ttl {
            let timing = table
                .entry("timing")
                .or_insert_with(|| Value::Table(toml::Table::new()))
                .as_table_mut()
                .context("timing is not a table")?;
            timing.insert("ttl".into(), Value::from(format!("{}ms", ttl.as_millis())));
        }
        Ok(toml::to_string(&table)?)
    }
}

/// The compiled-component cache of this test binary's in-process hosts: a temporary directory,
/// created on first use. A static is never dropped, so each one left by a binary that has exited
/// is removed by the next binary that creates its own.
fn cache_dir() -> anyhow::Result<&'static Path> {
    static DIR: OnceLock<TempDir> = OnceLock::new();
    if let Some(dir) = DIR.get() {
        return Ok(dir.path());
    }
    remove_stale_caches();
    let dir = tempfile::Builder::new()
        .prefix(&format!("{CACHE_PREFIX}{}-", std::process::id()))
        .tempdir()?;
    // Another test may have won the race; its directory is as good, and this one is removed.
    Ok(DIR.get_or_init(|| dir).path())
}

/// Removes the cache directories of test binaries that are no longer running.
fn remove_stale_caches() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(CACHE_PREFIX))
            .and_then(|rest| rest.split('-').next())
        else {
            continue;
        };
        if !PathBuf::from("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl Logged for InProcessHost {
    fn log(&self) -> &Log {
        &self.log
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builder_settings_override_the_config_text_and_resolve() {
        let builder = HostBuilder::new("r1")
            .database_url("sqlite:/tmp/x.db")
            .lease("a")
            .lease("b")
            .ttl(Duration::from_millis(1500))
            .config("shutdown_grace = \"3s\"\nreplica_id = \"other\"\n[runtime]\nfuel = false\n");
        let text = builder.config_text().unwrap();
        let file: leasehold::config::Layer = toml::from_str(&text).unwrap();
        let config = Config::resolve(file, Default::default()).unwrap();
        assert_eq!(config.replica_id, "r1");
        assert_eq!(config.leases, vec!["a", "b"]);
        assert_eq!(config.timing.ttl, Duration::from_millis(1500));
        assert_eq!(config.shutdown_grace, Duration::from_secs(3));
        assert!(!config.runtime.fuel);
        assert!(
            config
                .cache_dir
                .is_some_and(|d| d.starts_with(std::env::temp_dir()))
        );
        assert_eq!(config.http.port(), 0);
    }
}
