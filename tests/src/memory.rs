//! The attacks on the host's memory, each a plugin of the `misbehave` guest, and a run of all of
//! them at once in a real `leasehold` process whose peak RSS (`VmHWM`) is compared with the budget
//! its plugins' limits add up to (README "Memory budget"). Used by the `memory_attacks` tests and
//! `memory-bench`.

use std::fmt;
use std::time::Duration;

use anyhow::Context;

use crate::endpoint::Endpoint;
use crate::eventually::{eventually, when};
use crate::host::{HostBuilder, guests_dist};
use crate::procstat::peak_rss_kib;
use crate::status::{PluginStatus, StatusExt};
use crate::stores::{Backend, Db};

/// The environment variable the attacks' `[grants.sql]` reads the application database from.
pub const APP_URL_ENV: &str = "MEMORY_APP_DATABASE_URL";

/// One attack: a `misbehave` plugin and how its call must end.
#[derive(Debug, Clone, Copy)]
pub struct Attack {
    /// The plugin's name.
    pub name: &'static str,
    /// Its `[config]` lines (the verb and its settings).
    pub config: &'static str,
    /// Its `limits.memory`, in MiB.
    pub memory_mib: u64,
    /// Whether it needs the sql grant.
    pub sql: bool,
    /// Words the plugin's `last_error` must contain.
    pub expect: &'static str,
    /// Whether the call must end as a trap (else as an error the guest returned).
    pub traps: bool,
}

/// Every attack, with the limit that stops it.
pub const ATTACKS: &[Attack] = &[
    Attack {
        name: "random-flood",
        config: "verb = \"random-flood\"\nmib = \"64\"",
        memory_mib: 32,
        sql: false,
        expect: "exceeds limit 1048576",
        traps: true,
    },
    Attack {
        name: "handle-flood",
        config: "verb = \"handle-flood\"",
        memory_mib: 32,
        sql: false,
        expect: "no free keys",
        traps: true,
    },
    Attack {
        name: "big-params",
        config: "verb = \"big-params\"\nmib = \"60\"\ncopies = \"8\"",
        memory_mib: 80,
        sql: true,
        expect: "too much data is being copied between the host and the guest",
        traps: true,
    },
    Attack {
        name: "big-params-small",
        config: "verb = \"big-params\"\nmib = \"3\"\ncopies = \"2\"",
        memory_mib: 32,
        sql: true,
        expect: "too-large (too large: the SQL and parameters of one call take",
        traps: false,
    },
    Attack {
        name: "null-rows",
        config: "verb = \"null-rows\"",
        memory_mib: 32,
        sql: true,
        expect: "(max_bytes of [grants.sql])",
        traps: false,
    },
    Attack {
        name: "alloc",
        config: "verb = \"alloc\"",
        memory_mib: 32,
        sql: false,
        expect: "exceeded its memory limit",
        traps: true,
    },
];

/// The attack named `name`.
pub fn attack(name: &str) -> Attack {
    ATTACKS
        .iter()
        .find(|a| a.name == name)
        .copied()
        .unwrap_or_else(|| panic!("no attack {name}"))
}

impl Attack {
    /// Its manifest, bound to the lease `leader`.
    pub fn manifest(&self) -> String {
        let grant = if self.sql {
            format!("[grants.sql]\ndatabase_url_env = \"{APP_URL_ENV}\"\n")
        } else {
            String::new()
        };
        format!(
            "lease = \"leader\"\n[schedule]\ninterval = \"200ms\"\n[limits]\ncall_timeout = \"5s\"\nmemory = \"{}MiB\"\n{grant}[config]\n{}\n",
            self.memory_mib, self.config
        )
    }

    /// Whether `status` shows the call ended as it must.
    pub fn ended_as_expected(&self, status: &PluginStatus) -> bool {
        status
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains(self.expect))
            && (status.traps > 0) == self.traps
    }
}

/// A plugin directory holding `attacks` (the `misbehave` guest under each name) and
/// hello-reconciler bound to the lease `other`.
pub fn plugin_dir(attacks: &[Attack]) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    for attack in attacks {
        std::fs::copy(
            guests_dist().join("misbehave.wasm"),
            dir.path().join(format!("{}.wasm", attack.name)),
        )?;
        std::fs::write(
            dir.path().join(format!("{}.toml", attack.name)),
            attack.manifest(),
        )?;
    }
    std::fs::copy(
        guests_dist().join("hello-reconciler.wasm"),
        dir.path().join("hello-reconciler.wasm"),
    )?;
    std::fs::write(
        dir.path().join("hello-reconciler.toml"),
        format!(
            "lease = \"other\"\n[schedule]\ninterval = \"200ms\"\n[limits]\nmemory = \"{HELLO_MEMORY_MIB}MiB\"\n[config]\ngreeting = \"still here\"\n"
        ),
    )?;
    Ok(dir)
}

/// hello-reconciler's `limits.memory`, in MiB.
const HELLO_MEMORY_MIB: u64 = 16;

/// What a host may hold on one plugin's behalf besides its memory, in MiB (README "Memory
/// budget"): 8 MiB copied out of the guest per host call, its SQL parameters held up to four
/// times (16 MiB) or a result of up to `max_bytes` (16 MiB), and the driver's buffers.
pub const HOST_MIB_PER_PLUGIN: u64 = 32;

/// The host itself with its plugins compiled and loaded, in MiB: the runtime, the compiled code,
/// the database pools, the HTTP server (a dev build idles at well under half of it).
pub const HOST_BASE_MIB: u64 = 128;

/// The memory budget of a host running some plugins: its base and, per plugin, its
/// `limits.memory` and [`HOST_MIB_PER_PLUGIN`].
#[derive(Debug, Clone)]
pub struct Budget {
    /// Each plugin's `limits.memory`, in MiB.
    pub plugins: Vec<u64>,
}

impl Budget {
    /// The budget, in MiB.
    pub fn total_mib(&self) -> u64 {
        HOST_BASE_MIB
            + self
                .plugins
                .iter()
                .map(|m| m + HOST_MIB_PER_PLUGIN)
                .sum::<u64>()
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let memories: Vec<String> = self.plugins.iter().map(u64::to_string).collect();
        write!(
            f,
            "{} MiB (host {HOST_BASE_MIB} + {} plugins × {HOST_MIB_PER_PLUGIN} host-side + their memories {} MiB)",
            self.total_mib(),
            self.plugins.len(),
            memories.join(" + ")
        )
    }
}

/// What a run of every attack at once showed.
#[derive(Debug)]
pub struct Report {
    /// The host's peak RSS, in KiB.
    pub peak_kib: u64,
    /// Its peak RSS once it served HTTP, in KiB.
    pub started_kib: u64,
    /// The budget its plugins add up to.
    pub budget: Budget,
    /// Each attack's `/status` entry once it ended as expected.
    pub ended: Vec<(Attack, PluginStatus)>,
    /// The epochs of `leader` and `other` at the end (both were 1 from the start).
    pub epochs: (Option<i64>, Option<i64>),
    /// Whether hello-reconciler on `other` still ran after the attacks.
    pub other_ran: bool,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "peak RSS {} MiB under the memory attacks ({} MiB once serving HTTP); budget {}",
            self.peak_kib / 1024,
            self.started_kib / 1024,
            self.budget
        )?;
        for (attack, status) in &self.ended {
            writeln!(
                f,
                "  {:<17} {:?}: {}",
                attack.name,
                status.state,
                status.last_error.as_deref().unwrap_or_default()
            )?;
        }
        write!(
            f,
            "  epochs after: leader {:?}, other {:?}; hello-reconciler on other still ran: {}",
            self.epochs.0, self.epochs.1, self.other_ran
        )
    }
}

/// Runs every attack at once in one `leasehold` process (lease store and application database
/// on the harness's PostgreSQL), with hello-reconciler on another lease, until each attack has
/// ended as it must; then reads the process's peak RSS.
pub async fn run_all() -> anyhow::Result<Report> {
    let db = Db::new(Backend::Postgres).await?;
    let url = db.url().context("no url")?;
    let app_url = crate::pg::server().fresh_database().await?;
    let dir = plugin_dir(ATTACKS)?;
    let host = HostBuilder::new("memory-attacks")
        .database_url(&url)
        .lease("leader")
        .lease("other")
        .ttl(Duration::from_secs(4))
        .plugins(dir.path())
        .env(APP_URL_ENV, &app_url)
        .spawn()
        .await?;
    let started_kib = peak_rss_kib(host.pid())?;
    let ended = wait_for_attacks(&host, ATTACKS, Duration::from_secs(60)).await?;
    let calls_before = host
        .plugin_status("hello-reconciler")
        .await
        .map_or(0, |s| s.calls);
    // A while longer: the attacks come back after their backoff until quarantined.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let peak_kib = peak_rss_kib(host.pid())?;
    let status = host.status().await?;
    let epoch = |lease: &str| status.lease(lease).and_then(|l| l.epoch).map(|e| e.get());
    let other_ran = host
        .plugin_status("hello-reconciler")
        .await
        .is_some_and(|s| s.calls > calls_before && s.last_error.is_none());
    let mut plugins: Vec<u64> = ATTACKS.iter().map(|a| a.memory_mib).collect();
    plugins.push(HELLO_MEMORY_MIB);
    Ok(Report {
        peak_kib,
        started_kib,
        budget: Budget { plugins },
        ended,
        epochs: (epoch("leader"), epoch("other")),
        other_ran,
    })
}

/// Waits until each of `attacks` has ended as it must on `host`; their entries then.
pub async fn wait_for_attacks(
    host: &Endpoint,
    attacks: &[Attack],
    timeout: Duration,
) -> anyhow::Result<Vec<(Attack, PluginStatus)>> {
    let mut ended = Vec::new();
    for attack in attacks {
        let status = eventually(
            format!("{} to end as it must ({})", attack.name, attack.expect),
            timeout,
            async || {
                when(host.plugin_status(attack.name).await, |s| {
                    s.as_ref().is_some_and(|s| attack.ended_as_expected(s))
                })
            },
        )
        .await?
        .context("no entry")?;
        ended.push((*attack, status));
    }
    Ok(ended)
}
