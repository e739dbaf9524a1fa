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
//!
//! An empty history has no overlap either, so the checker counts, per replica, the samples that
//! saw it leading: [`Checker::finish`] fails when none did, and a test asserts a floor for each
//! replica it expects to lead ([`Verdict::each_seen_leading`]), waiting for it before it moves
//! the shards on ([`Checker::until_seen_leading`]).

use std::collections::BTreeMap;
use std::fmt::Display;
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

/// Replica → the samples that saw it leading at least one shard.
type Leading = BTreeMap<String, u64>;

/// Samples the `/status` of every replica in its list, each on its own task, every `every`.
pub struct Checker {
    /// The replicas sampled; a test adds and removes them as they start and stop.
    replicas: Arc<Mutex<Vec<(String, Endpoint)>>>,
    /// What the samplers saw.
    history: Arc<Mutex<History>>,
    /// How many samples were taken, to show the check had material.
    samples: Arc<Mutex<u64>>,
    /// How many of them saw each replica leading.
    leading: Arc<Mutex<Leading>>,
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
        let leading: Arc<Mutex<Leading>> = Arc::default();
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let (replicas, history, samples, leading, stop) = (
                replicas.clone(),
                history.clone(),
                samples.clone(),
                leading.clone(),
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
                        let (history, samples, leading, prefix) = (
                            history.clone(),
                            samples.clone(),
                            leading.clone(),
                            prefix.clone(),
                        );
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
                            let mut led = false;
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
                                led = true;
                                let key = (lease.name.clone(), name.clone(), epoch.get());
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
                            if led {
                                *leading.lock().unwrap().entry(name).or_default() += 1;
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
            leading,
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

    /// How many samples so far saw replica `name` leading.
    pub fn seen_leading(&self, name: &str) -> u64 {
        self.leading.lock().unwrap().get(name).copied().unwrap_or(0)
    }

    /// Waits until at least `floor` samples saw each of `names` leading: before a test moves
    /// their shards on, so that the history has something to check for each.
    pub async fn until_seen_leading(
        &self,
        names: &[impl Display],
        floor: u64,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let names: Vec<String> = names.iter().map(ToString::to_string).collect();
        crate::eventually::eventually(
            format!("the checker to see each of {names:?} leading in {floor} samples"),
            timeout,
            async || {
                let seen: Vec<(&str, u64)> = names
                    .iter()
                    .map(|n| (n.as_str(), self.seen_leading(n)))
                    .collect();
                crate::eventually::when(seen, |seen| seen.iter().all(|(_, n)| *n >= floor))
            },
        )
        .await?;
        Ok(())
    }

    /// Stops sampling and checks the history: some sample saw a replica leading (an empty
    /// history proves nothing), for every shard no two replicas' spans overlap, and a later span
    /// has a higher epoch. Returns the number of samples, those that saw each replica leading, the
    /// number of spans, and the longest gap between one holder's last sample and the next one's
    /// first.
    pub async fn finish(mut self) -> anyhow::Result<Verdict> {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.await?;
        }
        let history = self.history.lock().unwrap().clone();
        let samples = *self.samples.lock().unwrap();
        anyhow::ensure!(
            !history.is_empty(),
            "the checker saw no replica leading in {samples} samples: nothing was checked"
        );
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
            samples,
            leading: self.leading.lock().unwrap().clone(),
            spans: history.len(),
            longest_gap,
        })
    }
}

/// What [`Checker::finish`] found.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// Samples of `/status` taken.
    pub samples: u64,
    /// Replica → the samples that saw it leading at least one shard.
    pub leading: BTreeMap<String, u64>,
    /// (shard, replica, epoch) spans seen.
    pub spans: usize,
    /// The longest a shard went from one replica's last sample leading it to another's first.
    pub longest_gap: Duration,
}

impl Verdict {
    /// Fails unless at least `floor` samples saw each of `names` leading: a replica the history
    /// barely saw was barely checked.
    pub fn each_seen_leading(&self, names: &[impl Display], floor: u64) -> anyhow::Result<()> {
        for name in names {
            let seen = self.leading.get(&name.to_string()).copied().unwrap_or(0);
            anyhow::ensure!(
                seen >= floor,
                "the checker saw {name} leading in {seen} samples, fewer than {floor}: {self:?}"
            );
        }
        Ok(())
    }
}
