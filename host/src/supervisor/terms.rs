//! Following one lease's terms on this replica, for the work bound to a lease from outside the
//! plugin set: a process (`process::exec`) runs on each term, a service (`process::service`)
//! activates on each and checks its health in between.

use std::future::Future;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::lease::{Leadership, Term};

/// Runs `on_term(term)` on each term of the lease `leadership` follows, one after another and
/// under the term's tracker (the term's release waits for it); while this replica holds no term,
/// `between()` runs, and is dropped at the next change of leadership. Returns at `shutdown`, or
/// once the lease is no longer followed.
pub(super) async fn each_term<R, B>(
    mut leadership: watch::Receiver<Leadership>,
    shutdown: &CancellationToken,
    mut on_term: impl FnMut(Term) -> R,
    mut between: impl FnMut() -> B,
) where
    R: Future<Output = ()> + Send + 'static,
    B: Future<Output = ()>,
{
    loop {
        let term = leadership.borrow_and_update().term.clone();
        match term.filter(|t| !t.is_cancelled()) {
            Some(term) => {
                let task = term.spawn(on_term(term.clone()));
                tokio::select! {
                    _ = task => {}
                    _ = shutdown.cancelled() => return,
                }
                // One run a term: wait for the next.
                tokio::select! {
                    _ = term.cancelled() => {}
                    _ = shutdown.cancelled() => return,
                }
            }
            None => {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    changed = leadership.changed() => match changed {
                        Ok(()) => continue,
                        Err(_) => return,
                    },
                    _ = between() => {}
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = leadership.changed() => if changed.is_err() { return },
        }
    }
}
