//! Figures of the image as operators run it, beside the same figures for plain processes, on one
//! PostgreSQL and the example plugin hello-reconciler: how long from `podman run` to leading
//! (cold: the plugin compiled at start; warm: loaded from a cache volume), and the handoff when
//! the holder is stopped (`podman stop` against SIGTERM to a process), measured from the moment
//! the stop is sent to the standby's `lease acquired` line, and from the holder's `lease released`
//! line to it (the handoff without the stop's own delivery).
//!
//! The image is this build's binary in the Dockerfile's runtime stage (scripts/image.sh).
//! BENCH_TRIALS sets the trials per figure (default 5).

#![allow(clippy::unwrap_used)]

use std::process::ExitStatus;
use std::time::{Duration, Instant};

use leasehold_tests::containers::{
    Container, ContainerBuilder, from_container, image, podman_out, readable_by_all,
};
use leasehold_tests::endpoint::Endpoint;
use leasehold_tests::host::{
    Host, HostBuilder, log_time, now_time_of_day, plugin_dir, wait_for_single_leader,
};
use leasehold_tests::log::Logged;
use leasehold_tests::stats::{env_count, summary};
use leasehold_tests::status::Role;

const MANIFEST: &str = "lease = \"leader\"\n[schedule]\ninterval = \"1s\"\n[limits]\n\
                        call_timeout = \"2s\"\nmemory = \"64MiB\"\n[config]\ngreeting = \"hello\"\n";

/// Seconds from `sent` (time of day) to the first `lease acquired` line of `log` at `epoch`.
fn acquired_after(log: &str, epoch: u64, sent: f64) -> Duration {
    let line = log
        .lines()
        .find(|l| l.contains("lease acquired") && l.contains(&format!("epoch={epoch}")))
        .unwrap_or_else(|| panic!("no acquisition at epoch {epoch}:\n{log}"));
    let at = leasehold_tests::host::time_of_day(line).unwrap();
    Duration::from_secs_f64((at - sent).max(0.0))
}

/// From the old holder's `lease released` line to the new holder's `lease acquired` at epoch 2:
/// the handoff itself, without the time the stop took to reach the process.
fn release_to_acquired(old: &str, new: &str) -> Duration {
    let released = log_time(old, "lease released").unwrap_or_else(|| panic!("no release:\n{old}"));
    acquired_after(new, 2, released)
}

/// A replica the bench stops gracefully: a container (`podman stop`) or a process (SIGTERM).
trait Replica: AsRef<Endpoint> + Logged {
    /// Stops it gracefully and waits for it to exit.
    async fn stop_gracefully(&mut self) -> anyhow::Result<ExitStatus>;
}

impl Replica for Container {
    async fn stop_gracefully(&mut self) -> anyhow::Result<ExitStatus> {
        self.stop(Duration::from_secs(30)).await
    }
}

impl Replica for Host {
    async fn stop_gracefully(&mut self) -> anyhow::Result<ExitStatus> {
        self.stop(Duration::from_secs(30)).await
    }
}

/// Stops the holder of a pair at epoch 1 and returns how long the standby took to acquire epoch
/// 2, from the stop being sent and from the holder's `lease released` line.
async fn handoff<R: Replica>(mut pair: Vec<R>) -> anyhow::Result<(Duration, Duration)> {
    let holder = wait_for_single_leader(&pair, "leader", Duration::from_secs(20)).await?;
    let mut old = pair.remove(holder);
    let sent = now_time_of_day();
    old.stop_gracefully().await?;
    wait_for_single_leader(&pair, "leader", Duration::from_secs(20)).await?;
    let new = pair[0].log_text();
    Ok((
        acquired_after(&new, 2, sent),
        release_to_acquired(&old.log_text(), &new),
    ))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let trials = env_count("BENCH_TRIALS", 5);
    let server = leasehold_tests::pg::server();
    let plugins = plugin_dir(&[("hello-reconciler", MANIFEST)])?;
    readable_by_all(plugins.path())?;
    let built = Instant::now();
    image();
    println!(
        "container-bench: image ready in {:.1?} (scripts/image.sh, {})",
        built.elapsed(),
        leasehold_tests::host::binary()?.display()
    );

    // podman run → leading, with the plugin compiled at start (cold) and loaded from a volume
    // that an earlier container filled (warm).
    let volume = format!("leasehold-bench-cache-{}", std::process::id());
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    for trial in 0..trials * 2 + 1 {
        let url = from_container(&server.fresh_lease_database().await?);
        let cached = trial > 0 && trial % 2 == 0;
        let mut builder = ContainerBuilder::new(&format!("run{trial}"))
            .plugins(plugins.path())
            .env("LEASEHOLD_DATABASE_URL", &url);
        // Trial 0 fills the volume; odd trials run cold, even ones warm.
        if trial % 2 == 0 {
            builder = builder.options(&["--volume", &format!("{volume}:/var/cache/leasehold")]);
        }
        let started = Instant::now();
        let mut c = builder.start().await?;
        while c.role("leader").await != Some(Role::Leader) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let took = started.elapsed();
        let cache = if c.log_text().contains("cache=Hit") {
            "hit"
        } else {
            "compiled"
        };
        match (trial, cached) {
            (0, _) => {}
            (_, true) => warm.push(took),
            (_, false) => cold.push(took),
        }
        if trial > 0 && cached != (cache == "hit") {
            println!(
                "container-bench: trial {trial} expected a cache {} but saw {cache}",
                if cached { "hit" } else { "miss" }
            );
        }
        c.stop(Duration::from_secs(30)).await?;
    }
    let _ = podman_out(&["volume", "rm", "--force", &volume]);
    println!(
        "{}",
        summary("podman run → leading, plugin compiled at start", &mut cold)
    );
    println!(
        "{}",
        summary(
            "podman run → leading, plugin from the cache volume",
            &mut warm
        )
    );

    // Handoff on a graceful stop: containers, then plain processes, the same plugin.
    let mut containers = Vec::new();
    let mut processes = Vec::new();
    let mut container_release = Vec::new();
    let mut process_release = Vec::new();
    for trial in 0..trials {
        let url = server.fresh_lease_database().await?;
        let from_inside = from_container(&url);
        let mut pair: Vec<Container> = Vec::new();
        for side in ["a", "b"] {
            pair.push(
                ContainerBuilder::new(&format!("handoff{trial}{side}"))
                    .plugins(plugins.path())
                    .env("LEASEHOLD_DATABASE_URL", &from_inside)
                    .start()
                    .await?,
            );
        }
        let (from_stop, from_release) = handoff(pair).await?;
        containers.push(from_stop);
        container_release.push(from_release);

        let url = server.fresh_lease_database().await?;
        let mut pair: Vec<Host> = Vec::new();
        for side in ["a", "b"] {
            pair.push(
                HostBuilder::new(&format!("handoff{trial}{side}"))
                    .database_url(&url)
                    .plugins(plugins.path())
                    .spawn()
                    .await?,
            );
        }
        let (from_stop, from_release) = handoff(pair).await?;
        processes.push(from_stop);
        process_release.push(from_release);
    }
    println!(
        "{}",
        summary(
            "handoff, podman stop → standby container leads",
            &mut containers
        )
    );
    println!(
        "{}",
        summary("handoff, SIGTERM → standby process leads", &mut processes)
    );
    println!(
        "{}",
        summary(
            "containers: holder's `lease released` → standby's `lease acquired`",
            &mut container_release
        )
    );
    println!(
        "{}",
        summary(
            "processes: holder's `lease released` → standby's `lease acquired`",
            &mut process_release
        )
    );
    Ok(())
}
