//! Figures per guest language on the same plugin written three times (`hello-rust`,
//! `hello-python`, `hello-js`: a log line and a fenced kv checkpoint per tick), in one process
//! and one engine: the component's size, its first compile, a cached load, instantiation from the
//! pre-linked component, `init`, one `reconcile` call (with its kv get and fenced put on a SQLite
//! lease database this process holds), and loss-to-stop: from the term's end until a call
//! spinning in guest code (`busy_at_tick`) has returned. Printed as one table of medians.
//!
//! A language whose component is missing from `guests/dist` (`LEASEHOLD_GUEST_LANGS=rust make
//! guests`) is reported as missing, not measured.

#![allow(clippy::unwrap_used)]

use leasehold::lease::Epoch;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::capability::{Capabilities, Grants, PluginCapabilities};
use leasehold::lease::{DatabaseUrl, Term};
use leasehold::manifest::CallLimits;
use leasehold::runtime::engine::EngineOptions;
use leasehold::runtime::host::LeaseView;
use leasehold::runtime::{CallFailure, Cancel, Runtime};
use leasehold_tests::host::guests_dist;
use leasehold_tests::leader::Holding;
use leasehold_tests::stats::env_count;
use tokio_util::sync::CancellationToken;

/// The three twins: language, plugin name.
const TWINS: &[(&str, &str)] = &[
    ("Rust", "hello-rust"),
    ("Python", "hello-python"),
    ("JavaScript", "hello-js"),
];

/// The examples' own manifest limits would do; a minute keeps a slow first call from failing.
const LIMITS: CallLimits = CallLimits {
    call_timeout: Duration::from_secs(60),
    memory_bytes: 128 << 20,
    fuel: None,
};

/// One row of the table.
struct Row {
    language: &'static str,
    bytes: usize,
    compile: Duration,
    cached: Duration,
    instantiate: Duration,
    init: Duration,
    call: Duration,
    stop: Duration,
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// A duration in the unit that suits it.
fn show(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.0} µs", s * 1e6)
    }
}

/// A size in the unit that suits it.
fn size(bytes: usize) -> String {
    if bytes >= 1_000_000 {
        format!("{:.1} MB", bytes as f64 / 1e6)
    } else {
        format!("{:.0} KB", bytes as f64 / 1e3)
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let trials = env_count("BENCH_LANG_TRIALS", 50);
    let dist = guests_dist();
    let db = tempfile::tempdir()?;
    let url = DatabaseUrl::parse(&format!("sqlite:{}", db.path().join("lease.db").display()))?;
    let holding = Holding::acquire(&url, "bench", Duration::from_secs(600)).await?;
    let caps = Capabilities::new(url, Duration::from_secs(3));
    let grants = Grants {
        kv: true,
        ..Grants::default()
    };
    let cache = tempfile::tempdir()?;
    let runtime = Runtime::new(
        EngineOptions::default(),
        Some(cache.path()),
        leasehold::runtime::PluginMetrics::new(),
    )?;
    println!(
        "guest languages: the same plugin in each, allocator {:?}, {trials} instantiations and stops each, 200 calls",
        runtime.allocator()
    );
    let never = CancellationToken::new();
    let mut rows = Vec::new();
    for (language, name) in TWINS {
        let path = dist.join(format!("{name}.wasm"));
        let Ok(bytes) = std::fs::read(&path) else {
            println!("{language}: {} missing: not measured", path.display());
            continue;
        };
        let file = format!("{name}.wasm");
        let cold = runtime.load_bytes(&file, &bytes)?;
        let mut cached = Vec::new();
        for _ in 0..10 {
            cached.push(runtime.load_bytes(&file, &bytes)?.load_time);
        }
        let plugin: Arc<str> = Arc::from(*name);
        let caps = || PluginCapabilities {
            plugin: plugin.clone(),
            host: caps.clone(),
            grants: grants.clone(),
        };
        let view = |term: Term| LeaseView {
            name: "bench".into(),
            holder: holding.holder(),
            term: Some(term),
            acquired_at: None,
            shard: None,
        };
        let (mut instantiate, mut init, mut calls, mut stops) = (vec![], vec![], vec![], vec![]);
        for i in 0..trials {
            let mut store = runtime.new_store(
                plugin.clone(),
                view(holding.term.clone()),
                &LIMITS,
                Some(caps()),
            );
            let started = Instant::now();
            let instance = store.instantiate(&cold.prepared, &never).await.result?;
            instantiate.push(started.elapsed());
            let started = Instant::now();
            store.init(&instance, &[]).await.result?;
            init.push(started.elapsed());
            if i == 0 {
                for tick in 0..200 {
                    let started = Instant::now();
                    store.reconcile(&instance, tick).await.result?;
                    calls.push(started.elapsed());
                }
            }
        }
        // Loss-to-stop: a call spinning in guest code when its term ends.
        let busy = vec![("busy_at_tick".to_string(), "0".to_string())];
        for _ in 0..trials {
            let far = tokio::time::Instant::now() + Duration::from_secs(3600);
            let (term, control) = Term::standalone("bench", Epoch::new(1), far);
            let mut store = runtime.new_store(plugin.clone(), view(term), &LIMITS, None);
            let instance = store.instantiate(&cold.prepared, &never).await.result?;
            store.init(&instance, &busy).await.result?;
            let task = tokio::spawn(async move {
                let called = store.reconcile(&instance, 0).await;
                (called.result, Instant::now())
            });
            tokio::time::sleep(Duration::from_millis(5)).await;
            let lost = Instant::now();
            control.end();
            let (result, stopped) = task.await?;
            match result {
                Err(CallFailure::Cancelled {
                    reason: Cancel::TermEnded,
                    ..
                }) => stops.push(stopped.saturating_duration_since(lost)),
                other => anyhow::bail!("{name}: the busy call ended with {other:?}"),
            }
        }
        rows.push(Row {
            language,
            bytes: bytes.len(),
            compile: cold.load_time,
            cached: median(&mut cached),
            instantiate: median(&mut instantiate),
            init: median(&mut init),
            call: median(&mut calls),
            stop: median(&mut stops),
        });
    }
    println!(
        "| language | component | first compile | cached load | instantiate | init | reconcile (kv get + fenced put) | loss-to-stop |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            r.language,
            size(r.bytes),
            show(r.compile),
            show(r.cached),
            show(r.instantiate),
            show(r.init),
            show(r.call),
            show(r.stop)
        );
    }
    drop(holding);
    Ok(())
}
