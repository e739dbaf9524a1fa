//! Figures of the plugin runtime on the real guest components (`make guests`), in one process:
//! compile (cold) and cached load, instantiation from the pre-linked component, the overhead of a
//! reconcile call, and loss-to-stop — from the end of a term (token cancelled, epoch bumped, as
//! the supervisor does) until a guest spinning in `reconcile` has been dropped with its store.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::runtime::bindings::types::ReconcileContext;
use leasehold::runtime::engine::EngineOptions;
use leasehold::runtime::host::{CallLimits, LeaseView};
use leasehold::runtime::{Prepared, Runtime};
use leasehold_tests::host::guests_dist;
use leasehold_tests::stats::summary;
use tokio_util::sync::CancellationToken;

fn view() -> LeaseView {
    LeaseView {
        name: "bench".into(),
        holder: "bench-1".into(),
        term: None,
        acquired_at: None,
    }
}

const LIMITS: CallLimits = CallLimits {
    call_timeout: Duration::from_secs(60),
    memory_bytes: 64 << 20,
    fuel: None,
};

fn ctx(tick: u64) -> ReconcileContext {
    ReconcileContext {
        lease: "bench".into(),
        epoch: 1,
        tick,
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let trials: usize = std::env::var("BENCH_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let dist = guests_dist();
    let hello = std::fs::read(dist.join("hello-reconciler.wasm"))?;
    let misbehave = std::fs::read(dist.join("misbehave.wasm"))?;
    let cache = tempfile::tempdir()?;
    let runtime = Runtime::new(
        EngineOptions::default(),
        cache.path(),
        leasehold::metrics::Metrics::new(),
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
    let Prepared::Reconciler(pre) = cold.prepared else {
        anyhow::bail!("hello is not a reconciler")
    };

    let name: Arc<str> = Arc::from("hello");
    let mut instantiate = Vec::new();
    let mut calls = Vec::new();
    for i in 0..1000u64 {
        let mut store = runtime.new_store(name.clone(), view(), &LIMITS, None);
        let started = Instant::now();
        let instance = pre.instantiate_async(&mut store.store).await?;
        instantiate.push(started.elapsed());
        if i < 200 {
            store
                .call(async |s| instance.call_init(s, &[]).await)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            for tick in 0..5 {
                let started = Instant::now();
                store
                    .call(async |s| instance.call_reconcile(s, &ctx(tick)).await)
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
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

    let loaded = runtime.load_bytes("misbehave.wasm", &misbehave)?;
    let Prepared::Reconciler(spin) = loaded.prepared else {
        anyhow::bail!("misbehave is not a reconciler")
    };
    let config = vec![("verb".to_string(), "loop".to_string())];
    let mut stops = Vec::new();
    for _ in 0..trials {
        let mut store = runtime.new_store(Arc::from("misbehave"), view(), &LIMITS, None);
        let instance = spin.instantiate_async(&mut store.store).await?;
        store
            .call(async |s| instance.call_init(s, &config).await)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let term = CancellationToken::new();
        let ended = term.clone();
        let task = tokio::spawn(async move {
            tokio::select! {
                biased;
                _ = ended.cancelled() => {}
                _ = store.call(async |s| instance.call_reconcile(s, &ctx(0)).await) => panic!("the spinning call returned"),
            }
            drop(store);
            Instant::now()
        });
        // Let it spin.
        tokio::time::sleep(Duration::from_millis(3)).await;
        let lost = Instant::now();
        term.cancel();
        runtime.engine().increment_epoch();
        let stopped = task.await?;
        stops.push(stopped.saturating_duration_since(lost));
    }
    println!(
        "{}",
        summary(
            "loss-to-stop (term ends -> spinning guest dropped)",
            &mut stops
        )
    );
    Ok(())
}
