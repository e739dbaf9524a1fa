//! Figures of fencing: the latency of fenced writes against the same writes unfenced (one run,
//! interleaved, on the same PostgreSQL server), then stale writes accepted over pause trials with
//! real processes (SIGSTOP the holder past the ttl; must be 0).

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use leasehold::capability::kv::Kv;
use leasehold::capability::sql::{SqlGrant, SqlValue, Statement};
use leasehold::capability::{Capabilities, Fence};
use leasehold::lease::DatabaseUrl;
use leasehold::manifest::SqlGrantSpec;
use leasehold_tests::fencing::run_pause_trials;
use leasehold_tests::leader::Holding;
use leasehold_tests::stats::{env_count, summary};

fn grant(url: &str) -> SqlGrant {
    let spec = SqlGrantSpec {
        database_url_env: "BENCH_URL".into(),
        statement_timeout: Duration::from_secs(5),
        max_rows: 10_000,
        max_bytes: 16 << 20,
        max_connections: 2,
    };
    let url = url.to_string();
    SqlGrant::resolve("bench", &spec, move |_| Some(url.clone())).unwrap()
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let writes = env_count("BENCH_WRITES", 2000);
    let trials = env_count("BENCH_TRIALS", 100);
    let server = leasehold_tests::pg::server();
    let lease_url = server.fresh_database().await?;
    let app_url = server.fresh_database().await?;
    let parsed = DatabaseUrl::parse(&lease_url)?;
    let holding = Holding::acquire(&parsed, "bench", Duration::from_secs(600)).await?;
    // The default timing's store timeout (ttl 15 s / 5).
    let caps = Capabilities::new(parsed, Duration::from_secs(3));
    let fence = Fence::new("bench".into(), holding.holder(), Some(holding.term.clone()));
    // The plugin's own role, as the security model asks: nothing on the leasehold tables.
    let fenced = grant(&server.plugin_role(&lease_url, "bench").await?);
    let unfenced = grant(&app_url);
    assert!(fenced.is_fenced(&caps).await?);
    assert!(!unfenced.is_fenced(&caps).await?);
    let create = "CREATE TABLE bench (id bigserial PRIMARY KEY, epoch bigint, v text)";
    fenced.execute(&caps, &fence, create, &[]).await?;
    unfenced.execute(&caps, &fence, create, &[]).await?;
    let kv = caps.kv().await?;
    let Kv::Postgres(kv_pool) = kv else {
        anyhow::bail!("the lease database is not PostgreSQL")
    };
    let insert = "INSERT INTO bench (epoch, v) VALUES ($1, $2)";
    let params = [
        SqlValue::Int(fence.epoch().get()),
        SqlValue::Text("x".repeat(64)),
    ];
    let statement = [Statement {
        sql: insert.into(),
        params: params.to_vec(),
    }];
    let value = vec![7u8; 64];
    println!("fence benchmark: {writes} writes of each kind, interleaved, one PostgreSQL server");
    let mut samples: [Vec<Duration>; 5] = Default::default();
    for i in 0..writes {
        let t = Instant::now();
        fenced.execute(&caps, &fence, insert, &params).await?;
        samples[0].push(t.elapsed());
        let t = Instant::now();
        unfenced.execute(&caps, &fence, insert, &params).await?;
        samples[1].push(t.elapsed());
        let t = Instant::now();
        unfenced.transaction(&caps, &fence, &statement).await?;
        samples[2].push(t.elapsed());
        let key = format!("k{}", i % 100);
        let t = Instant::now();
        kv.put(&fence, "bench", &key, &value).await?;
        samples[3].push(t.elapsed());
        // The same upsert without the fence: what kv would cost if it trusted the holder.
        let t = Instant::now();
        sqlx::query(
            "INSERT INTO leasehold_kv AS kv (plugin, key, value, lease, epoch, updated_at)
             VALUES ($1, $2, $3, 'bench', $4, now())
             ON CONFLICT (plugin, key) DO UPDATE
                SET value = EXCLUDED.value, lease = EXCLUDED.lease,
                    epoch = EXCLUDED.epoch, updated_at = EXCLUDED.updated_at",
        )
        .bind("bench-unfenced")
        .bind(&key)
        .bind(&value)
        .bind(fence.epoch().get())
        .execute(kv_pool)
        .await?;
        samples[4].push(t.elapsed());
    }
    let labels = [
        "sql execute, fenced (lease database: BEGIN, INSERT, the fence function: bound the wait, check and lock the lease row, COMMIT)",
        "sql execute, unfenced (application database: INSERT, autocommit)",
        "sql transaction of one INSERT, unfenced (BEGIN, INSERT, COMMIT)",
        "kv put, fenced (one statement locking the lease row)",
        "the same upsert without the fence",
    ];
    for (label, s) in labels.iter().zip(samples.iter_mut()) {
        println!("{}", summary(label, s));
    }
    let m: Vec<Duration> = samples.iter_mut().map(|s| median(s)).collect();
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "ratios of medians: sql fenced/unfenced execute {:.2}, sql fenced execute/unfenced transaction {:.2}, kv fenced/unfenced {:.2}",
        ratio(m[0], m[1]),
        ratio(m[0], m[2]),
        ratio(m[3], m[4])
    );
    drop(holding);

    println!(
        "stale-write trials: {trials} × SIGSTOP the holder past the ttl (1 s), take over, resume"
    );
    let started = Instant::now();
    let out = run_pause_trials(trials, "1s").await?;
    let mut takeover: Vec<Duration> = out
        .takeover_s
        .iter()
        .map(|s| Duration::from_secs_f64(*s))
        .collect();
    println!(
        "{}",
        summary("freeze → first write of the next epoch", &mut takeover)
    );
    let accepted: u64 = out.history.accepted.values().sum();
    println!(
        "{} trials in {:.0?}: {} writes accepted over {} epochs; refusals seen in the frozen holders' logs {}; stale writes accepted: {}",
        out.trials,
        started.elapsed(),
        accepted,
        out.history
            .accepted
            .keys()
            .filter(|(s, _)| s == "fence_history")
            .count(),
        out.refused_seen,
        out.history.stale
    );
    anyhow::ensure!(out.history.stale == 0, "stale writes were accepted");
    Ok(())
}
