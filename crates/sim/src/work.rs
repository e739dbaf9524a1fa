//! The work of a term, as a recorder: for every term a replica starts, a task under the term that
//! does a side effect now and then and records it with true time. It stops the way plugins and
//! processes do: no effect begins once the term has ended or its `safe_until` has passed on the
//! replica's own clock (the door of guest code); an effect under way when the term ends is
//! drained, landing only if `safe_until` has not passed by then (a guest call's epoch deadline is
//! never later); and the term's tracker makes the ordered release wait for the drain.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use leasehold_lease::handle::Leases;
use leasehold_lease::memory::MemoryStore;
use leasehold_lease::store::LeaseStore;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::history::History;

/// Follows `lease` on a replica: starts the work of each new term. Each effect is also a
/// fenced write to `store`, judged by the fence rule when the fence accepts it.
pub async fn follow(
    leases: Arc<Leases>,
    store: Arc<MemoryStore>,
    lease: String,
    replica: String,
    history: History,
    seed: u64,
) {
    let holder = leases.holder().as_str().to_string();
    let Some(mut watch) = leases.subscribe(&lease) else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut last = None;
    loop {
        let term = watch.borrow_and_update().term.clone();
        if let Some(term) = term.filter(|t| Some(t.epoch) != last) {
            last = Some(term.epoch);
            history.note(format!(
                "{replica}: term of {lease} at epoch {} begins",
                term.epoch
            ));
            let (history, replica, seed) = (history.clone(), replica.clone(), rng.random());
            let (lease, store, holder) = (lease.clone(), store.clone(), holder.clone());
            let inner = term.clone();
            term.spawn(async move {
                let mut rng = SmallRng::seed_from_u64(seed);
                loop {
                    // The clock decides, as at the door of guest code.
                    if !inner.is_live() {
                        break;
                    }
                    // An effect takes a while to land, and is drained, not dropped, if the term
                    // ends meanwhile; past the deadline it is cut off, as a guest call is.
                    let landing = Duration::from_millis(rng.random_range(0..=20));
                    tokio::time::sleep(landing).await;
                    if leasehold_lease::seams::now() >= inner.safe_until() {
                        break;
                    }
                    history.effect(&replica, &lease, inner.epoch);
                    // The fence: the row still names this holder and epoch, unexpired.
                    let names = [lease.clone()];
                    if let Some(Ok(rows)) = store.get(&names).now_or_never()
                        && rows.first().is_some_and(|r| {
                            r.holder == holder && r.epoch == inner.epoch && r.is_held()
                        })
                    {
                        history.fenced_write(&replica, &lease, inner.epoch);
                    }
                    let pause = Duration::from_millis(rng.random_range(1..=40));
                    tokio::select! {
                        biased;
                        _ = inner.cancelled() => break,
                        _ = tokio::time::sleep(pause) => {}
                    }
                }
                history.stopped(&lease, inner.epoch);
                let why = inner
                    .ended()
                    .map_or("its deadline passed", |end| end.reason.as_str());
                history.note(format!(
                    "{replica}: work of {lease} at epoch {} stopped ({why})",
                    inner.epoch
                ));
            });
        }
        if watch.changed().await.is_err() {
            return;
        }
    }
}
