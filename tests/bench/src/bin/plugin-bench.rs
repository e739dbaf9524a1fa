//! Figures of the plugin runtime on the real guest components (`make guests`), in one process:
//! compile (cold) and cached load, instantiation from the pre-linked component, the overhead of a
//! reconcile call, and two stops of a guest spinning in `reconcile`: loss-to-stop, from the end of
//! a term (its token cancelled; the runtime bumps the epoch itself) until the call has returned,
//! and deadline-to-stop, from the term's `safe_until` passing with nothing cancelled (the clock
//! alone, as after a freeze) until the call has returned.

#![allow(clippy::unwrap_used)]

use leasehold::lease::Epoch;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::lease::Term;
use leasehold::manifest::CallLimits;
use leasehold::runtime::engine::EngineOptions;
use leasehold::runtime::host::LeaseView;
use leasehold::runtime::{CallFailure, Cancel, Runtime};
use leasehold_tests::host::guests_dist;
use leasehold_tests::stats::{env_count, summary};
use tokio_util::sync::CancellationToken;

fn view(term: Option<Term>) -> LeaseView {
    LeaseView {
        name: "bench".into(),
        holder: "bench-1".into(),
        term,
        acquired_at: None,
        shard: None,
    }
}

const LIMITS: CallLimits = CallLimits {
    call_timeout: Duration::from_secs(60),
    memory_bytes: 64 << 20,
    fuel: None,
};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let trials = env_count("BENCH_TRIALS", 300);
    let dist = guests_dist();
    let hello = std::fs::read(dist.join("hello-reconciler.wasm"))?;
    let misbehave = std::fs::read(dist.join("misbehave.wasm"))?;
    let cache = tempfile::tempdir()?;
    let runtime = Runtime::new(
        EngineOptions::default(),
        Some(cache.path()),
        leasehold::runtime::PluginMetrics::new(),
    )?;
    println!(
        "plugin benchmark: allocator {:?}, {trials} trials for loss-to-stop",
        runtime.allocator()
    );

    let cold = runtime.load_bytes("hello-reconciler.wasm", &hello)?;
    println!(
        "compile hello-reconciler ({} bytes), cold cache: {:.2?} ({:?})",
        hello.len(),
        cold.load_time,
        cold.cache
    );
    let mut cached = Vec::new();
    for _ in 0..20 {
        cached.push(
            runtime
                .load_bytes("hello-reconciler.wasm", &hello)?
                .load_time,
        );
    }
    println!(
        "{}",
        summary(
            "cached load (read + checksum + deserialize + link)",
            &mut cached
        )
    );
    let never = CancellationToken::new();
    let name: Arc<str> = Arc::from("hello");
    let mut instantiate = Vec::new();
    let mut calls = Vec::new();
    for i in 0..1000u64 {
        let mut store = runtime.new_store(name.clone(), view(None), &LIMITS, None);
        let started = Instant::now();
        let instance = store.instantiate(&cold.prepared, &never).await.result?;
        instantiate.push(started.elapsed());
        if i < 200 {
            store.init(&instance, &[]).await.result?;
            for tick in 0..5 {
                let started = Instant::now();
                store.reconcile(&instance, tick).await.result?;
                calls.push(started.elapsed());
            }
        }
    }
    println!(
        "{}",
        summary(
            "instantiate from InstancePre (fresh store)",
            &mut instantiate
        )
    );
    println!(
        "{}",
        summary(
            "reconcile call (hello: two host imports + a log line)",
            &mut calls
        )
    );

    let spin = runtime.load_bytes("misbehave.wasm", &misbehave)?.prepared;
    let config = vec![("verb".to_string(), "loop".to_string())];
    let far = Duration::from_secs(3600);
    let mut stops = Vec::new();
    let mut deadline_stops = Vec::new();
    for trial in 0..trials * 2 {
        // Even trials end the term by its token; odd ones let its deadline pass 3 ms in.
        let by_token = trial % 2 == 0;
        let now = tokio::time::Instant::now();
        let safe_until = now
            + if by_token {
                far
            } else {
                Duration::from_millis(3)
            };
        let (term, control) = Term::standalone("bench", Epoch::new(1), safe_until);
        let mut store = runtime.new_store(Arc::from("misbehave"), view(Some(term)), &LIMITS, None);
        let instance = store.instantiate(&spin, &never).await.result?;
        store.init(&instance, &config).await.result?;
        let task = tokio::spawn(async move {
            let called = store.reconcile(&instance, 0).await;
            (called.result, Instant::now())
        });
        let (result, stopped) = if by_token {
            // Let it spin.
            tokio::time::sleep(Duration::from_millis(3)).await;
            let lost = Instant::now();
            control.end();
            let (result, stopped) = task.await?;
            stops.push(stopped.saturating_duration_since(lost));
            (result, stopped)
        } else {
            let (result, stopped) = task.await?;
            let passed = safe_until.into_std();
            deadline_stops.push(stopped.saturating_duration_since(passed));
            (result, stopped)
        };
        let _ = stopped;
        let expected = if by_token {
            Cancel::TermEnded
        } else {
            Cancel::Deadline
        };
        match result {
            Err(CallFailure::Cancelled { reason, .. }) if reason == expected => {}
            other => anyhow::bail!("the spinning call ended with {other:?}, not {expected:?}"),
        }
        drop(control);
    }
    println!(
        "{}",
        summary(
            "loss-to-stop (term ends -> spinning guest's call returns)",
            &mut stops
        )
    );
    println!(
        "{}",
        summary(
            "deadline-to-stop (safe_until passes, nothing cancelled -> call returns)",
            &mut deadline_stops
        )
    );
    Ok(())
}
