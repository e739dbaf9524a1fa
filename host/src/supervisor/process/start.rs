//! Starting the processes and services of a host's config: the host made the subreaper of their
//! keepers' trees, each service's campaign gate shut until its first standby check passes, and
//! one task per process or service, following its lease.

use std::path::Path;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

use super::metrics::ProcessMetrics;
use super::{exec, service};
use crate::lease::{GateSource, Leases};
use crate::output_rate::DroppedLines;
use crate::process::adopted;
use crate::process::bound::BoundProcess;
use crate::process::service::BoundService;
use crate::supervisor::StatusBoard;

/// What processes and services run with: the leases they follow, the keeper program each runs
/// under (this very program), the board `/status` reads and the metrics they count in.
#[derive(Debug, Clone)]
pub struct ProcessContext {
    /// The leases of this replica.
    pub leases: Arc<Leases>,
    /// The program each keeper runs: `leasehold keeper`.
    pub keeper: Arc<Path>,
    /// Where each process's card is written.
    pub board: StatusBoard,
    /// Where each process's runs are counted.
    pub metrics: Arc<ProcessMetrics>,
    /// Where the lines of their output over the rate are counted, as a plugin's are.
    pub dropped_lines: DroppedLines,
}

/// Starts every process and service on `tasks`, each following its lease until `shutdown`;
/// returns their tasks, which end once their work is stopped. Call it before the lease driver
/// starts: a service's gate is shut here, so that even the first campaign waits for its check.
pub fn start(
    processes: &[BoundProcess],
    services: &[BoundService],
    context: &ProcessContext,
    shutdown: &CancellationToken,
    tasks: &TaskTracker,
) -> Vec<JoinHandle<()>> {
    if processes.is_empty() && services.is_empty() {
        return Vec::new();
    }
    // The subreaper of its keepers' trees: a keeper killed on its own leaves its orphans to this
    // host, which kills them before the work starts again or the lease goes; and reaps what
    // comes to it (a service's daemon, once it ends).
    if let Err(e) = adopted::become_subreaper() {
        warn!(
            "cannot become the subreaper of the processes' trees ({e}): should a keeper be killed on its own, what its process started may run on"
        );
    }
    tasks.spawn(adopted::reap_loop(shutdown.clone()));
    let ProcessContext {
        leases,
        keeper,
        board,
        metrics,
        dropped_lines,
    } = context;
    let mut started = Vec::new();
    for bound in processes {
        started.push(tasks.spawn(exec::follow(
            Arc::new(bound.clone()),
            leases.clone(),
            keeper.to_path_buf(),
            board.clone(),
            (metrics.clone(), dropped_lines.clone()),
            shutdown.clone(),
        )));
    }
    for bound in services {
        // Shut until its first standby check passes.
        if bound.health.is_some() {
            let source = GateSource::Service(bound.name.clone());
            leases.allow_campaigns(bound.lease.as_str(), source, false);
        }
        started.push(tasks.spawn(service::follow(
            Arc::new(bound.clone()),
            leases.clone(),
            keeper.to_path_buf(),
            board.clone(),
            (metrics.clone(), dropped_lines.clone()),
            shutdown.clone(),
        )));
    }
    started
}
