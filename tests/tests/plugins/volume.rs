//! Exhaustion by volume: a plugin that prints, writes or fails without end is contained by a
//! budget or a quota, and the host, its lease and the other plugins go on. Each test drives the
//! `misbehave` guest (a real compiled component) from a real plugin directory.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::Path;
use std::time::Duration;

use leasehold_tests::endpoint::sample;
use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::host::{HostBuilder, plugin_dir};
use leasehold_tests::in_process::InProcessHost;
use leasehold_tests::log::Logged;
use leasehold_tests::status::{PluginState, Role};
use leasehold_tests::stores::{Backend, Db};

/// An in-process host on `db` (ttl 2 s) with the plugin directory `plugins`, leading `leader`.
async fn leading(name: &str, db: &Db, plugins: &Path) -> InProcessHost {
    HostBuilder::new(name)
        .database_url(&db.url().unwrap())
        .ttl(Duration::from_secs(2))
        .plugins(plugins)
        .start_in_process_leading()
        .await
        .unwrap()
}

fn manifest(interval: &str, call_timeout: &str, config: &str) -> String {
    format!(
        "lease = \"leader\"\n[schedule]\ninterval = \"{interval}\"\n[limits]\ncall_timeout = \"{call_timeout}\"\nmemory = \"16MiB\"\n[config]\n{config}\n"
    )
}

/// The host's resident memory, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_printing_megabytes_every_call_never_fails_a_write_and_logs_within_its_budget_and_rate()
 {
    // 20,000 lines of ~100 bytes per stream and call: 2 MB, twice what a store could ever hold
    // when output was kept in a 1 MiB pipe, and every call prints as much again.
    const LINES: u64 = 20_000;
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let dir = plugin_dir(&[(
        "misbehave",
        &manifest(
            "50ms",
            "10s",
            &format!("verb = \"print\"\nlines = \"{LINES}\""),
        ),
    )])
    .unwrap();
    let host = leading("print", &db, dir.path()).await;
    let epoch = host.status().await.unwrap().leases[0].epoch;
    let calls_after = async |n: u64| {
        eventually(
            format!("{n} print calls"),
            Duration::from_secs(120),
            async || {
                when(host.plugin_status("misbehave").await, |s| {
                    s.as_ref().is_some_and(|s| s.calls >= n)
                })
            },
        )
        .await
        .unwrap()
        .unwrap()
    };
    calls_after(3).await;
    let rss_before = rss_kib();
    let status = calls_after(13).await;
    let rss_after = rss_kib();
    println!(
        "print: {} calls (init included) of {} MB per stream; host RSS {rss_before} KiB after 3, {rss_after} KiB after {}",
        status.calls,
        LINES * 100 / 1_000_000,
        status.calls
    );
    // No write failed (the guest returns an error naming the first that does), nothing trapped.
    assert_eq!(status.state, PluginState::Running, "{status:?}");
    assert_eq!(status.last_error, None, "{status:?}");
    assert_eq!(status.traps, 0, "{status:?}");

    // Per stream and call: at most 200 lines logged, fewer once the plugin's rate holds it back,
    // and every line printed is either logged or counted as dropped (the call under way, if
    // any, is counted in part).
    let dropped_series = "leasehold_plugin_log_dropped_total{plugin=\"misbehave\"}";
    let before = host.plugin_status("misbehave").await.unwrap().calls;
    let log = host.log_text();
    let dropped = sample(&host.metrics().await.unwrap(), dropped_series).unwrap() as u64;
    let after = host.plugin_status("misbehave").await.unwrap().calls;
    let mut logged = 0;
    for stream in ["stdout", "stderr"] {
        let tag = format!("stream=\"{stream}\"");
        let of_stream = log
            .lines()
            .filter(|l| l.contains(&tag) && l.contains("misbehave"))
            .count() as u64;
        assert!(
            of_stream <= after * 200,
            "{stream}: {of_stream} lines logged for {after} calls"
        );
        logged += of_stream;
    }
    // Calls are init (which prints nothing) and the reconciles, the last of which may still run.
    let printed = |calls: u64| calls.saturating_sub(1) * 2 * LINES;
    assert!(
        (printed(before - 1)..=printed(after)).contains(&(logged + dropped)),
        "{logged} lines logged and {dropped} dropped for {before}..{after} calls of {LINES} lines per stream"
    );
    // What was dropped is reported in a line of its own, not a line per call.
    let reports = log.matches("plugin output dropped in the last").count();
    assert!((1..13).contains(&reports), "{reports} drop reports");
    // The lease never moved.
    assert_eq!(host.role("leader").await, Some(Role::Leader));
    assert_eq!(host.status().await.unwrap().leases[0].epoch, epoch);
}

/// What the database holds of `plugin`'s kv: entries and their bytes counted from the rows, and
/// the usage row the quota is checked against.
async fn kv_usage(db: &Db, plugin: &str) -> ((i64, i64), (i64, i64)) {
    let url = db.url().unwrap();
    let counted = "SELECT count(*), coalesce(sum(octet_length(key) + octet_length(value)), 0)
                     FROM leasehold_kv WHERE plugin = $1";
    let usage = "SELECT coalesce(max(keys), 0), coalesce(max(bytes), 0)
                   FROM leasehold_kv_usage WHERE plugin = $1";
    match db.backend {
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&url).await.unwrap();
            let q = async |sql: &'static str| -> (i64, i64) {
                sqlx::query_as(sql)
                    .bind(plugin)
                    .fetch_one(&pool)
                    .await
                    .unwrap()
            };
            (q(counted).await, q(usage).await)
        }
        _ => {
            let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
            let counted = counted.replace("octet_length(key)", "length(CAST(key AS BLOB))");
            let counted = counted.replace("octet_length(value)", "length(value)");
            let q = async |sql: &str| -> (i64, i64) {
                sqlx::query_as(sqlx::AssertSqlSafe(sql.replace("$1", "?1")))
                    .bind(plugin)
                    .fetch_one(&pool)
                    .await
                    .unwrap()
            };
            (q(&counted).await, q(usage).await)
        }
    }
}

/// A plugin directory with hello-reconciler and two copies of misbehave flooding kv, one against
/// a key quota and one against a byte quota, all on lease `leader`.
fn flood_dir() -> tempfile::TempDir {
    let hello =
        "lease = \"leader\"\n[schedule]\ninterval = \"100ms\"\n[config]\ngreeting = \"hi\"\n";
    let dir = plugin_dir(&[("hello-reconciler", hello)]).unwrap();
    let flood = |quota: &str, bytes: u32| {
        format!(
            "lease = \"leader\"\n[schedule]\ninterval = \"200ms\"\n[limits]\ncall_timeout = \"10s\"\n[grants]\nkv = true\n{quota}\n[config]\nverb = \"kv-flood\"\nlines = \"100000\"\nbytes = \"{bytes}\"\n"
        )
    };
    let wasm = leasehold_tests::host::guests_dist().join("misbehave.wasm");
    for (name, manifest) in [
        ("flood-keys", flood("kv_max_keys = 50", 100)),
        ("flood-bytes", flood("kv_max_bytes = \"64KiB\"", 4096)),
    ] {
        std::fs::copy(&wasm, dir.path().join(format!("{name}.wasm"))).unwrap();
        std::fs::write(dir.path().join(format!("{name}.toml")), manifest).unwrap();
    }
    dir
}

async fn a_kv_flood_is_refused_at_the_quota(backend: Backend) {
    let db = Db::new(backend).await.unwrap();
    let dir = flood_dir();
    let host = leading("flood", &db, dir.path()).await;
    let epoch = host.status().await.unwrap().leases[0].epoch;
    // (plugin, the put refused, the entries kept): 50 keys; 15 entries of 14 + 4096 bytes
    // (61,650 bytes), as a 16th would pass 64 KiB.
    for (plugin, refused, keys) in [("flood-keys", 50, 50), ("flood-bytes", 15, 15)] {
        let status = eventually(
            format!("{plugin} to report its refused put in /status"),
            Duration::from_secs(30),
            async || {
                when(host.plugin_status(plugin).await, |s| {
                    s.as_ref()
                        .and_then(|s| s.last_error.as_deref())
                        .is_some_and(|e| e.contains("kv quota exceeded"))
                })
            },
        )
        .await
        .unwrap()
        .unwrap();
        let error = status.last_error.unwrap();
        assert!(
            error.contains(&format!("put {refused} refused"))
                && error.contains(&format!("plugin {plugin}: kv quota exceeded")),
            "{plugin}: {error}"
        );
        println!("{backend:?} {plugin}: {error}");
        let (rows, usage) = kv_usage(&db, plugin).await;
        assert_eq!(rows.0, keys, "{plugin}: entries kept");
        assert_eq!(
            rows, usage,
            "{plugin}: the usage row disagrees with the rows"
        );
    }
    let log = host
        .wait_for_log("write refused: plugin flood-keys", Duration::from_secs(5))
        .await
        .unwrap();
    assert!(log.contains("kv_max_keys"), "{log}");
    // The other plugin goes on, and the lease never moved.
    let before = host.log_text().matches("hi from epoch").count();
    eventually(
        "hello-reconciler to go on",
        Duration::from_secs(10),
        async || {
            when(host.log_text().matches("hi from epoch").count(), |n| {
                *n >= before + 3
            })
        },
    )
    .await
    .unwrap();
    assert_eq!(host.role("leader").await, Some(Role::Leader));
    assert_eq!(host.status().await.unwrap().leases[0].epoch, epoch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kv_flood_on_sqlite_is_refused_at_the_quota_and_the_lease_keeps_its_epoch() {
    a_kv_flood_is_refused_at_the_quota(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kv_flood_on_postgres_is_refused_at_the_quota_and_the_lease_keeps_its_epoch() {
    a_kv_flood_is_refused_at_the_quota(Backend::Postgres).await;
}

/// The quota's arithmetic on a real store, under a held lease: a replacement counts the
/// difference, a delete frees room, and concurrent puts of one plugin cannot pass it together.
async fn kv_quota_is_exact(backend: Backend) {
    use leasehold::capability::{Capabilities, CapabilityError, Fence};
    use leasehold::lease::DatabaseUrl;
    use leasehold::manifest::KvQuota;
    let db = Db::new(backend).await.unwrap();
    let url = DatabaseUrl::parse(&db.url().unwrap()).unwrap();
    let holding = leasehold_tests::leader::Holding::acquire(&url, "q", Duration::from_secs(60))
        .await
        .unwrap();
    let caps = Capabilities::new(url, Duration::from_secs(1));
    let kv = caps.kv().await.unwrap();
    let f = Fence::new("q".into(), holding.holder(), Some(holding.term.clone()));
    let quota = KvQuota {
        max_keys: 3,
        max_bytes: 30,
    };
    let put =
        async |key: &str, len: usize| kv.put_within(&f, "p", key, &vec![b'v'; len], &quota).await;
    let refused =
        |r: &Result<(), CapabilityError>| matches!(r, Err(CapabilityError::QuotaExceeded(_)));
    // Entries of 10 bytes: a one-byte key and nine bytes of value.
    put("a", 9).await.unwrap();
    put("b", 9).await.unwrap();
    put("a", 9).await.unwrap(); // a replacement adds no key and no bytes
    put("c", 9).await.unwrap(); // 3 keys, 30 bytes: at the quota, not over it
    assert!(refused(&put("d", 0).await), "a fourth key");
    assert!(
        refused(&put("a", 10).await),
        "a replacement one byte larger"
    );
    put("a", 5).await.unwrap(); // smaller: 26 bytes
    assert!(kv.delete(&f, "p", "b").await.unwrap());
    put("d", 9).await.unwrap(); // the delete made room: 3 keys, 26 bytes
    assert_eq!(kv_usage(&db, "p").await.0, (3, 26));

    // Eight puts of new keys at once against room for two more keys.
    let quota = KvQuota {
        max_keys: 5,
        max_bytes: 1 << 20,
    };
    let puts = (0..8).map(|i| {
        let (kv, f) = (kv.clone(), f.clone());
        tokio::spawn(async move {
            kv.put_within(&f, "p", &format!("new/{i}"), b"x", &quota)
                .await
        })
    });
    let results = futures_results(puts).await;
    let kept = results.iter().filter(|r| r.is_ok()).count();
    assert!(
        results.iter().all(|r| r.is_ok() || refused(r)),
        "{results:?}"
    );
    assert_eq!(kept, 2, "{results:?}");
    let (rows, usage) = kv_usage(&db, "p").await;
    assert_eq!(rows.0, 5);
    assert_eq!(rows, usage);
}

async fn futures_results<T: std::fmt::Debug>(
    tasks: impl Iterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<T> {
    let mut out = Vec::new();
    for task in tasks.collect::<Vec<_>>() {
        out.push(task.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_kv_quota_on_sqlite_counts_replacements_deletes_and_concurrent_puts_exactly() {
    kv_quota_is_exact(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_kv_quota_on_postgres_counts_replacements_deletes_and_concurrent_puts_exactly() {
    kv_quota_is_exact(Backend::Postgres).await;
}

/// `leasehold_plugin_stores` of `plugin` on `host`.
async fn stores(host: &InProcessHost, plugin: &str) -> Option<f64> {
    let metrics = host.metrics().await.ok()?;
    leasehold_tests::endpoint::sample(
        &metrics,
        &format!("leasehold_plugin_stores{{plugin=\"{plugin}\"}}"),
    )
}

/// Waits up to `timeout` until `plugin` on `host` is in `state` with `live` stores.
async fn wait_for_state_and_stores(
    host: &InProcessHost,
    plugin: &str,
    state: PluginState,
    live: f64,
    timeout: Duration,
) {
    eventually(
        format!("{plugin} {state:?} with {live} stores"),
        timeout,
        async || {
            let seen = host.plugin_status(plugin).await.map(|s| s.state);
            let stores = stores(host, plugin).await;
            when((seen, stores), |s| *s == (Some(state), Some(live)))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\nthe host's log:\n{}", host.log_text()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantined_plugin_gives_back_its_store_until_a_new_file_starts_it() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let hello =
        "lease = \"leader\"\n[schedule]\ninterval = \"100ms\"\n[config]\ngreeting = \"hi\"\n";
    let failing = manifest("100ms", "1s", "verb = \"fail\"");
    let dir = plugin_dir(&[("misbehave", &failing), ("hello-reconciler", hello)]).unwrap();
    let host = leading("quarantine", &db, dir.path()).await;
    let epoch = host.status().await.unwrap().leases[0].epoch;
    // Failing, in backoff: the instance and its store are kept for the retry.
    wait_for_state_and_stores(
        &host,
        "misbehave",
        PluginState::Backoff,
        1.0,
        Duration::from_secs(10),
    )
    .await;
    // Five failures in a row (0.5 + 1 + 2 + 4 s of backoff): quarantined, and its store gone.
    wait_for_state_and_stores(
        &host,
        "misbehave",
        PluginState::Quarantined,
        0.0,
        Duration::from_secs(20),
    )
    .await;
    host.wait_for_log("its instance and store are dropped", Duration::from_secs(1))
        .await
        .unwrap();
    // The other plugin keeps its store and runs; the lease never moved.
    assert_eq!(stores(&host, "hello-reconciler").await, Some(1.0));
    assert_eq!(host.status().await.unwrap().leases[0].epoch, epoch);
    assert_eq!(host.role("leader").await, Some(Role::Leader));

    // A new file starts it again.
    std::fs::write(
        dir.path().join("misbehave.toml"),
        manifest("100ms", "1s", "verb = \"ok\""),
    )
    .unwrap();
    wait_for_state_and_stores(
        &host,
        "misbehave",
        PluginState::Running,
        1.0,
        Duration::from_secs(15),
    )
    .await;
    assert_eq!(host.status().await.unwrap().leases[0].epoch, epoch);
}
