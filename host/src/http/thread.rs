//! Where the endpoint runs: a thread of its own with a single-threaded runtime ([`spawn`]).
//!
//! Served on the lease loop's runtime, hundreds of clients asking as fast as the host answers
//! put hundreds of ready tasks in its queues, and each step of a renewal waited behind them: a
//! flood of `/status`, `/` and `/metrics` (answered from memory) made the renewal of 1,000 leases
//! on PostgreSQL take 1.8 s instead of 27 ms, and lost them all. On a thread of its own request
//! handling takes at most one core, and the lease loop's tasks never queue behind it. The
//! snapshots' store reads still run on the lease loop's runtime, whose pools they use
//! ([`super::snapshot`]).

use std::io;
use std::net::TcpListener as StdListener;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::AppState;
use super::guard::AllowedHosts;

/// Serves the router on `listener` from a new thread until `shutdown` is cancelled; the future
/// resolves with how the server ended. Call it on the lease loop's runtime, after building `state`
/// there. Fails only when the thread cannot be started.
pub fn spawn(
    listener: TcpListener,
    state: AppState,
    allowed_hosts: AllowedHosts,
    shutdown: CancellationToken,
) -> io::Result<impl Future<Output = io::Result<()>> + Send + 'static> {
    let listener: StdListener = listener.into_std()?;
    let (done_tx, done) = oneshot::channel();
    std::thread::Builder::new()
        .name("leasehold-http".into())
        .spawn(move || {
            let served = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                // Tasks woken from other threads first. The watch streams are woken by the lease
                // loop's thread (every renewal of a watched lease, every change of term): by
                // default the scheduler takes one such task per 31 of its own, and under a flood
                // of requests 500 watchers fell seconds behind their renewals. They are cheap
                // and bounded in number (by the watchers' and connections' bounds).
                .global_queue_interval(1)
                .build()
                .and_then(|runtime| {
                    runtime.block_on(async {
                        let listener = TcpListener::from_std(listener)?;
                        super::serve(listener, state, allowed_hosts, shutdown).await
                    })
                });
            let _ = done_tx.send(served);
        })?;
    Ok(async move {
        done.await
            .unwrap_or_else(|_| Err(io::Error::other("the HTTP thread ended without a word")))
    })
}
