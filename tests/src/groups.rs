//! Lease groups seen from outside: each replica's share read from `/status`, and a checker that
//! samples every replica's `/status` while shards move and proves from the recorded history that
//! no shard was ever led by two replicas at once.
//!
//! A replica shows a shard as `leader` only while its term runs, and a term ends before the
//! release that lets the next holder in. `/status` reads the database's holder and epoch just
//! before the replica's role, so a sample counts only where the two agree. So each (replica, epoch) that was seen leading a shard
//! was leading it at least from its first such sample to its last; two of those spans that
//! overlap for one shard are two holders at once. Samples taken at different moments can only
//! make a span shorter than the truth, never longer, so the check has no false alarms.
//!
//! `/status` is a snapshot, `snapshot_age_ms` old when it is answered, sometime between the
//! request and its answer. So a sample's moment is placed as late as it can be (the answer's
//! arrival less the age) where it opens a span, and as early as it can be (the request's
//! departure less the age) where it extends one: spans still only get shorter than the truth.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::endpoint::Endpoint;
use crate::status::{Role, Status};

/// The group entry `name` of a status, if the replica takes part in it.
pub fn group<'a>(
    status: &'a Status,
    name: &str,
) -> Option<&'a leasehold::lease::groups::GroupStatus> {
    status.groups.iter().find(|g| g.name == name)
}

/// The shards of `group` that `status` shows its replica leading.
pub fn led(status: &Status, group: &str) -> Vec<String> {
    let prefix = format!("{group}/");
    status
        .leases
        .iter()
        .filter(|l| l.name.starts_with(&prefix) && l.role == Role::Leader)
        .map(|l| l.name.clone())
        .collect()
}

/// From first to last sample of one replica leading one shard at one epoch (a span of one sample
/// may end before it starts: its moment is only known to lie between the two).
#[derive(Debug, Clone, Copy)]
pub struct Span {
    /// The first sample that saw it.
    pub first: Instant,
    /// The last sample that saw it.
    pub last: Instant,
}

/// (shard, replica, epoch) → the span it was seen leading.
type History = BTreeMap<(String, String, i64), Span>;

/// Samples the `/status` of every replica in its list, each on its own task, every `every`.
pub struct Checker {
    /// The replicas sampled; a test adds and removes them as they start and stop.
    replicas: Arc<Mutex<Vec<(String, Endpoint)>>>,
    /// What the samplers saw.
    history: Arc<Mutex<History>>,
    /// How many samples were taken, to show the check had material.
    samples: Arc<Mutex<u64>>,
    /// Stops the samplers.
    stop: CancellationToken,
    /// The sampler loop.
    task: Option<JoinHandle<()>>,
}

impl Checker {
    /// Starts sampling every `every`, the shards whose lease names start with `group/`.
    pub fn start(group: &str, every: Duration) -> Checker {
        let replicas: Arc<Mutex<Vec<(String, Endpoint)>>> = Arc::default();
        let history: Arc<Mutex<History>> = Arc::default();
        let samples: Arc<Mutex<u64>> = Arc::default();
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let (replicas, history, samples, stop) = (
                replicas.clone(),
                history.clone(),
                samples.clone(),
                stop.clone(),
            );
            let prefix = format!("{group}/");
            async move {
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                while !stop.is_cancelled() {
                    tick.tick().await;
                    let now: Vec<(String, Endpoint)> = replicas.lock().unwrap().clone();
                    let mut polls = tokio::task::JoinSet::new();
                    for (name, endpoint) in now {
                        let (history, samples, prefix) =
                            (history.clone(), samples.clone(), prefix.clone());
                        polls.spawn(async move {
                            let sent = Instant::now();
                            // A replica that is stopping or gone does not answer: nothing to record.
                            let Ok(status) = endpoint.status().await else {
                                return;
                            };
                            let age = Duration::from_millis(status.snapshot_age_ms);
                            let before = |t: Instant| t.checked_sub(age).unwrap_or(t);
                            let (earliest, latest) = (before(sent), before(Instant::now()));
                            *samples.lock().unwrap() += 1;
                            let mut history = history.lock().unwrap();
                            for lease in &status.leases {
                                if !lease.name.starts_with(&prefix) || lease.role != Role::Leader {
                                    continue;
                                }
                                // The role is the replica's own; holder and epoch are the
                                // database's, read a moment before. Only a sample where the
                                // two agree says which epoch the replica leads at; the others
                                // are left out, which can only shorten a span.
                                let (Some(epoch), Some(holder)) = (lease.epoch, &lease.holder)
                                else {
                                    continue;
                                };
                                if *holder != status.replica {
                                    continue;
                                }
                                let key = (lease.name.clone(), name.clone(), epoch);
                                history
                                    .entry(key)
                                    .and_modify(|s| {
                                        s.first = s.first.min(latest);
                                        s.last = s.last.max(earliest);
                                    })
                                    .or_insert(Span {
                                        first: latest,
                                        last: earliest,
                                    });
                            }
                        });
                    }
                    polls.join_all().await;
                }
            }
        });
        Checker {
            replicas,
            history,
            samples,
            stop,
            task: Some(task),
        }
    }

    /// Samples `endpoint` too, as replica `name`.
    pub fn add(&self, name: &str, endpoint: &Endpoint) {
        self.replicas
            .lock()
            .unwrap()
            .push((name.to_string(), endpoint.clone()));
    }

    /// Stops sampling replica `name`.
    pub fn remove(&self, name: &str) {
        self.replicas.lock().unwrap().retain(|(n, _)| n != name);
    }

    /// Stops sampling and checks the history: for every shard, no two replicas' spans overlap,
    /// and a later span has a higher epoch. Returns the number of samples and of spans, and
    /// the longest gap between one holder's last sample and the next one's first.
    pub async fn finish(mut self) -> anyhow::Result<Verdict> {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.await?;
        }
        let history = self.history.lock().unwrap().clone();
        let mut by_shard: BTreeMap<&str, Vec<(&str, i64, Span)>> = BTreeMap::new();
        for ((shard, replica, epoch), span) in &history {
            by_shard
                .entry(shard)
                .or_default()
                .push((replica, *epoch, *span));
        }
        let mut longest_gap = Duration::ZERO;
        for (shard, mut spans) in by_shard {
            spans.sort_by_key(|(_, _, s)| s.first);
            for pair in spans.windows(2) {
                let ((a, ea, sa), (b, eb, sb)) = (pair[0], pair[1]);
                anyhow::ensure!(
                    a == b || sa.last < sb.first,
                    "{shard} was led by {a} (epoch {ea}) and {b} (epoch {eb}) at once: \
                     {a} from {:?} to {:?}, {b} from {:?}",
                    sa.first,
                    sa.last,
                    sb.first
                );
                anyhow::ensure!(
                    eb > ea,
                    "{shard}: epoch {eb} of {b} was seen after epoch {ea} of {a}"
                );
                if a != b {
                    longest_gap = longest_gap.max(sb.first.saturating_duration_since(sa.last));
                }
            }
        }
        Ok(Verdict {
            samples: *self.samples.lock().unwrap(),
            spans: history.len(),
            longest_gap,
        })
    }
}

/// What [`Checker::finish`] found.
#[derive(Debug, Clone, Copy)]
pub struct Verdict {
    /// Samples of `/status` taken.
    pub samples: u64,
    /// (shard, replica, epoch) spans seen.
    pub spans: usize,
    /// The longest a shard went from one replica's last sample leading it to another's first.
    pub longest_gap: Duration,
}
