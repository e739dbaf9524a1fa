//! Plugins written in Python (componentize-py) and JavaScript (componentize-js), in real
//! `leasehold` processes, held to what the Rust guests are held to: only the holder runs them,
//! they stop when the lease is lost, their kv writes are fenced, and their exceptions reach
//! `/status` and the log with the guest's own message.
//!
//! The examples `hello-python`, `hello-js` and their Rust twin `hello-rust` behave alike: each tick they log a greeting and add
//! one to a checkpoint in their kv store (a fenced put); `fail_at_tick` makes them throw an
//! ordinary exception on that tick.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use leasehold_tests::host::{Host, HostBuilder, plugin_dir, run_to_exit, wait_for_single_leader};
use leasehold_tests::log::Logged;
use leasehold_tests::status::{PluginState, PluginStatus, Role};
use leasehold_tests::stores::{Backend, Db};

/// Each example: its name, the greeting a test gives it (so its lines tell it apart), and how
/// its exception at tick 2 reads: the exception's class and message.
const GUESTS: &[(&str, &str, &str)] = &[
    // The Rust twin: the SDK's error has no class, only its message.
    ("hello-rust", "rs-hi", "asked to fail at tick 2"),
    (
        "hello-python",
        "py-hi",
        "RuntimeError: asked to fail at tick 2",
    ),
    ("hello-js", "js-hi", "Error: asked to fail at tick 2"),
];

/// A manifest for an example: ticks every 200 ms, kv granted, `extra` config lines.
fn manifest(greeting: &str, extra: &str) -> String {
    format!(
        "lease = \"leader\"\n[schedule]\ninterval = \"200ms\"\n[limits]\ncall_timeout = \"2s\"\n\
         memory = \"64MiB\"\n[grants]\nkv = true\n[config]\ngreeting = \"{greeting}\"\n{extra}\n"
    )
}

/// A plugin directory with every example, each given `extra` config lines.
fn examples_dir(extra: &str) -> tempfile::TempDir {
    let manifests: Vec<(&str, String)> = GUESTS
        .iter()
        .map(|(name, greeting, _)| (*name, manifest(greeting, extra)))
        .collect();
    let pairs: Vec<(&str, &str)> = manifests.iter().map(|(n, m)| (*n, m.as_str())).collect();
    plugin_dir(&pairs).unwrap()
}

/// A host on the SQLite `db` (ttl 3 s) running the plugins of `dir`.
async fn sqlite_host(db: &Db, dir: &std::path::Path) -> Host {
    HostBuilder::new("a")
        .database_url(&db.url().unwrap())
        .ttl(Duration::from_secs(3))
        .plugins(dir)
        .spawn()
        .await
        .unwrap()
}

/// `name`'s status once it has a last error.
async fn first_error(host: &Host, name: &str) -> PluginStatus {
    host.wait_for_plugin(name, "its first error", Duration::from_secs(30), |s| {
        s.last_error.is_some()
    })
    .await
    .unwrap()
}

/// The checkpoints `greeting` logged at `epoch`, in order: "GREETING from epoch E, tick T:
/// checkpoint N".
fn checkpoints(log: &str, greeting: &str, epoch: u64) -> Vec<u64> {
    let prefix = format!("{greeting} from epoch {epoch}, tick ");
    log.lines()
        .filter_map(|line| {
            let rest = &line[line.find(&prefix)? + prefix.len()..];
            let n = rest.split(": checkpoint ").nth(1)?;
            n.split_whitespace().next()?.parse().ok()
        })
        .collect()
}

/// The lease is taken from its holder by a forced release while a standby waits. Until then only the holder runs the plugins; then the standby takes over at epoch 2,
/// the old holder's next checkpoint writes are refused by the fence (the guests say so in their
/// own words), the old holder stops its plugins once it notices, and the new holder's first
/// checkpoint follows the last one the old holder saved: the refused writes changed nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_plugins_in_python_javascript_and_rust_run_only_on_the_holder_are_fenced_and_stop_on_loss()
 {
    let db = Db::new(Backend::Postgres).await.unwrap();
    let url = db.url().unwrap();
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let dir = examples_dir("");
    // A long ttl: the holder's next renewal (ttl/3) is seconds away, so it keeps calling its
    // plugins after the lease was taken from it.
    let host = |name| {
        HostBuilder::new(name)
            .database_url(&url)
            .ttl(Duration::from_secs(9))
            .plugins(dir.path())
    };
    let a = host("a").spawn().await.unwrap();
    wait_for_single_leader(&[&a], "leader", Duration::from_secs(30))
        .await
        .unwrap();
    for (_, greeting, _) in GUESTS {
        a.wait_for_log(
            &format!("{greeting} from epoch 1, tick 2: checkpoint 3"),
            Duration::from_secs(20),
        )
        .await
        .unwrap();
    }
    // The standby loads the same plugins and runs none of them.
    let b = host("b").spawn().await.unwrap();
    for (name, _, _) in GUESTS {
        let status = b
            .wait_for_plugin(name, "the standby to load", Duration::from_secs(30), |_| {
                true
            })
            .await
            .unwrap();
        assert_eq!(status.state, PluginState::Idle, "{status:?}");
        assert_eq!(status.calls, 0, "{status:?}");
    }
    assert_eq!(b.role("leader").await, Some(Role::Standby));

    // Just after one of the holder's renewals (its deadline moves out), so that its next one is
    // ttl/3 = 3 s away whatever the phase the test reached this point at: released a moment
    // before a renewal, the holder would stop its plugins before one of them wrote again.
    let mut last = u64::MAX;
    leasehold_tests::eventually::eventually(
        "a renewal of a's to land",
        Duration::from_secs(10),
        async || {
            let (_, body) = a.get("/v1/leases/leader").await?;
            let left = serde_json::from_str::<serde_json::Value>(&body)?["stop_within_ms"]
                .as_u64()
                .unwrap_or_default();
            let renewed = left > last.saturating_add(1_000);
            last = left;
            match renewed {
                true => Ok(()),
                false => Err(anyhow::anyhow!("stop_within_ms {left}")),
            }
        },
    )
    .await
    .unwrap();

    // Break-glass: the standby hears the release and campaigns at once; the holder learns of it
    // only at its next renewal, seconds away.
    let (exit, out) = run_to_exit(
        &[
            "leases",
            "release",
            "leader",
            "--force",
            "--database-url",
            &url,
        ],
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    assert!(exit.success(), "{out}");
    for (name, greeting, _) in GUESTS {
        b.wait_for_log(
            &format!("{greeting} from epoch 2, tick 0: checkpoint"),
            Duration::from_secs(20),
        )
        .await
        .unwrap();
        // The old holder's guest saw its put refused and said so.
        let status = a
            .wait_for_plugin(name, "a refused checkpoint", Duration::from_secs(10), |s| {
                s.refused_writes > 0
            })
            .await
            .unwrap();
        let error = status.last_error.as_deref().unwrap_or_default();
        assert!(
            error.contains("checkpoint not saved: lease lost"),
            "{name}: {status:?}"
        );
    }
    let lost = a
        .wait_for_log("lease lost", Duration::from_secs(10))
        .await
        .unwrap();
    for (name, _, _) in GUESTS {
        a.wait_for_plugin(name, "a to stop its plugins", Duration::from_secs(5), |s| {
            s.state == PluginState::Idle
        })
        .await
        .unwrap();
    }
    // Let b write a few more checkpoints, then read both logs.
    for (_, greeting, _) in GUESTS {
        b.wait_for_log(
            &format!("{greeting} from epoch 2, tick 3: checkpoint"),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    }
    let (a_log, b_log) = (a.log_text(), b.log_text());
    let after_loss = &a_log[a_log.find(&lost).unwrap()..];
    for (name, greeting, _) in GUESTS {
        assert!(
            !after_loss.contains(&format!("{greeting} from epoch 1")),
            "{name} ran on a after it noticed the loss:\n{after_loss}"
        );
        let saved = checkpoints(&a_log, greeting, 1);
        let next = checkpoints(&b_log, greeting, 2);
        assert_eq!(
            next.first().copied(),
            saved.last().map(|n| n + 1),
            "{name}: a saved {saved:?}, b wrote {next:?}"
        );
        assert!(
            next.windows(2).all(|w| w[1] == w[0] + 1),
            "{name}: {next:?}"
        );
        let epoch: i64 = sqlx::query_scalar(
            "SELECT epoch FROM leasehold_kv WHERE plugin = $1 AND key = 'checkpoint'",
        )
        .bind(name)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(epoch, 2, "{name}");
    }
}

/// An ordinary exception thrown by a Python or JavaScript plugin is a failed call whose error
/// is the exception's class and message (the Rust twin's error: its message), in `/status` and
/// in the host's log; the plugin then runs again after its backoff and its checkpoint goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_and_exceptions_of_python_javascript_and_rust_plugins_reach_status_and_the_log_in_the_guests_words()
 {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let dir = examples_dir("fail_at_tick = \"2\"");
    let host = sqlite_host(&db, dir.path()).await;
    for (name, greeting, message) in GUESTS {
        let status = first_error(&host, name).await;
        assert_eq!(
            status.last_error.as_deref(),
            Some(format!("returned an error: {message}").as_str()),
            "{name}"
        );
        assert_eq!(
            status.traps, 0,
            "{name}: an exception is an error, not a trap"
        );
        host.wait_for_log(
            &format!("plugin call failed: returned an error: {message}"),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        // After the backoff the next tick runs and counts on from the last saved checkpoint.
        host.wait_for_log(
            &format!("{greeting} from epoch 1, tick 3: checkpoint 3"),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    }
}

/// A plugin that uses kv without `[grants] kv = true`: in every language the call fails as an
/// error (not a trap, not a crash of the guest's runtime) whose one line names the manifest key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_grant_reads_as_one_line_naming_the_manifest_key_in_every_language() {
    let db = Db::new(Backend::Sqlite).await.unwrap();
    let ungranted: Vec<(&str, String)> = GUESTS
        .iter()
        .map(|(name, greeting, _)| (*name, manifest(greeting, "").replace("kv = true", "")))
        .collect();
    let pairs: Vec<(&str, &str)> = ungranted.iter().map(|(n, m)| (*n, m.as_str())).collect();
    let dir = plugin_dir(&pairs).unwrap();
    let host = sqlite_host(&db, dir.path()).await;
    for (name, _, _) in GUESTS {
        let status = first_error(&host, name).await;
        let error = status.last_error.as_deref().unwrap();
        assert!(
            error.starts_with("returned an error: ")
                && error
                    .contains("kv is not granted: add [grants] kv = true to the plugin's manifest")
                && !error.contains('\n'),
            "{name}: {error}"
        );
        assert_eq!(status.traps, 0, "{name}: {status:?}");
    }
}
