//! One driver for everything that runs bound to a lease (docs/ARCHITECTURE.md §7.3–7.4): start
//! the work, take each outcome to the failure [`policy`](super::policy), back off, start afresh,
//! quarantine or stop. What runs is a [`Work`]: a reconciler for one term, a health check for one
//! role. A kind of work says only how it starts, what its next unit is and what an outcome means
//! to it; the sequence around them, and the policy, are here, once.

use tokio::time::sleep;
use tracing::warn;

use super::failure::Failure;
use super::policy::{Failures, Next, Step};
use super::status::{PluginState, StatusBoard};

/// One kind of work that runs in a term (or a role): what the [`drive`] loop asks of it.
pub(super) trait Work {
    /// What a start gives: an instance in its store.
    type Running;

    /// Starts the work afresh. Its outcome counts as [`Step::Start`].
    async fn start(&mut self) -> Result<Self::Running, Failure>;

    /// Waits for the next unit of work, does it and returns its outcome, which counts as
    /// [`Step::Call`]; `None` once the work is over here (its term ended, its file retired, its
    /// role changed).
    async fn next(&mut self, running: &mut Self::Running) -> Option<Result<(), Failure>>;

    /// Hears each outcome once the policy has counted it, before the driver acts on the policy's
    /// decision: logs it, and may act on it (a health check steps down).
    fn judged(&mut self, step: Step, outcome: Result<(), &Failure>, failures: &mut Failures);

    /// Resolves once the work is over here: it cuts a backoff short.
    async fn over(&mut self);

    /// After a call refused or cut off at the term's deadline: resolves `true` to go on (a
    /// renewal moved the deadline), `false` when the work is over.
    async fn resumed(&mut self) -> bool;

    /// Hears that the policy quarantined the work after `failures` in a row: says so. A kind
    /// of work that means something else by it (a process gives its lease up) says that.
    fn quarantined(&mut self, failures: u32) {
        warn!(
            failures,
            "plugin quarantined until the next term or a new file; its instance and store are dropped"
        );
    }

    /// Stops a started instance. Dropping it is a forced stop; a kind whose work outlives a drop
    /// (a process) ends it here.
    async fn stop(&mut self, running: Self::Running) {
        drop(running);
    }
}

/// How the driver goes on after an outcome, once the policy's wait is over.
enum Then {
    /// With the same instance.
    Go,
    /// With a fresh instance.
    Fresh,
    /// Not at all: the work is over, stopped or quarantined.
    End,
}

/// Runs `work` until it is over or quarantined: starts it, takes every outcome to `failures`, and
/// carries out what follows. The card of plugin `name` on `board` shows running, backoff and
/// quarantine as they happen. An instance is stopped before a fresh one starts, and before this
/// returns.
pub(super) async fn drive<W: Work>(
    work: &mut W,
    failures: &mut Failures,
    board: &StatusBoard,
    name: &str,
) {
    let mut shown = Shown {
        board,
        name,
        state: None,
    };
    loop {
        let (running, outcome) = match work.start().await {
            Ok(running) => (Some(running), Ok(())),
            Err(failure) => (None, Err(failure)),
        };
        let then = judge(work, failures, &mut shown, Step::Start, outcome).await;
        let mut running = match (then, running) {
            (Then::Go, Some(running)) => running,
            (then, running) => {
                if let Some(running) = running {
                    work.stop(running).await;
                }
                match then {
                    Then::End => return,
                    // An instance that did not start is of no use: start again.
                    Then::Go | Then::Fresh => continue,
                }
            }
        };
        let then = loop {
            let Some(outcome) = work.next(&mut running).await else {
                break Then::End;
            };
            match judge(work, failures, &mut shown, Step::Call, outcome).await {
                Then::Go => {}
                then => break then,
            }
        };
        work.stop(running).await;
        if let Then::End = then {
            return;
        }
    }
}

/// What the card shows, as this driver last set it: it is updated only on a change.
struct Shown<'a> {
    /// The board.
    board: &'a StatusBoard,
    /// The plugin's card.
    name: &'a str,
    /// The state last shown.
    state: Option<PluginState>,
}

impl Shown<'_> {
    fn show(&mut self, state: PluginState) {
        if self.state != Some(state) {
            self.board.update(self.name, |s| s.state = state);
            self.state = Some(state);
        }
    }
}

/// Counts one outcome, lets `work` hear it, shows it and waits out what the policy says.
async fn judge<W: Work>(
    work: &mut W,
    failures: &mut Failures,
    shown: &mut Shown<'_>,
    step: Step,
    outcome: Result<(), Failure>,
) -> Then {
    let next = failures.after(step, outcome.as_ref().map(|_| ()));
    work.judged(step, outcome.as_ref().map(|_| ()), failures);
    match next {
        // Whatever returned normally shows the plugin running: an instance that started, a call
        // after failures.
        Next::Proceed => {
            shown.show(PluginState::Running);
            Then::Go
        }
        Next::Retry { after, fresh } => {
            shown.show(PluginState::Backoff);
            tokio::select! {
                _ = work.over() => return Then::End,
                _ = sleep(after) => {}
            }
            if fresh { Then::Fresh } else { Then::Go }
        }
        Next::Quarantine => {
            // The driver ends here and the instance is stopped, dropping its store and their
            // memory: a quarantined plugin holds nothing until the next term or a new file.
            work.quarantined(failures.count());
            shown.show(PluginState::Quarantined);
            Then::End
        }
        Next::AwaitTerm { fresh } => match (work.resumed().await, fresh) {
            (false, _) => Then::End,
            (true, true) => Then::Fresh,
            (true, false) => Then::Go,
        },
        Next::Stop => Then::End,
    }
}
