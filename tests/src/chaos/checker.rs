//! Judges the history of a fault trial ([`check`]): the witness rows (work of each term, by the
//! witness's clock) and the fenced writes in commit order. Pure: no database, no clock.
//!
//! Safety says that the work of two terms of one lease never runs at the same time, that a
//! fenced write of an old term never commits after one of a newer term, and that a term's epoch
//! is never handed out twice. Liveness is measured, not judged: how long after a fault healed
//! the lease had a writer again ([`recovery`]).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::witness::{FencedCommit, WitnessRow};

/// How many violations a [`Verdict`] describes in words; the counts are complete.
pub const EXAMPLES: usize = 5;

/// What the checker found in one trial.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Pairs of different epochs of one lease whose witness intervals (first to last row)
    /// intersect: work of a lost term still ran after the next term's work began.
    pub overlaps: usize,
    /// Fenced writes committed after a write of a newer epoch in the same scope (lease and
    /// plugin).
    pub stale_commits: usize,
    /// Witness rows, in time order per lease, whose epoch is lower than one seen before.
    pub epoch_regressions: usize,
    /// Epochs of one lease seen with more than one holder: an epoch handed out twice.
    pub reused_epochs: usize,
    /// The first few violations in words, for error messages.
    pub examples: Vec<String>,
}

impl Verdict {
    /// No overlap, no stale commit, no regression, no reused epoch.
    pub fn is_safe(&self) -> bool {
        self.overlaps + self.stale_commits + self.epoch_regressions + self.reused_epochs == 0
    }

    fn example(&mut self, text: String) {
        if self.examples.len() < EXAMPLES {
            self.examples.push(text);
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "overlaps {}  stale {}  regressions {}  reused epochs {}",
            self.overlaps, self.stale_commits, self.epoch_regressions, self.reused_epochs
        )?;
        for example in &self.examples {
            write!(f, "\n  {example}")?;
        }
        Ok(())
    }
}

/// The witness rows of one term.
#[derive(Debug)]
struct Term<'a> {
    first: i64,
    last: i64,
    holders: Vec<&'a str>,
}

/// Judges one trial's history: `rows` from the witness (any order), `commits` in commit order.
pub fn check(rows: &[WitnessRow], commits: &[FencedCommit]) -> Verdict {
    let mut verdict = Verdict::default();
    let mut rows: Vec<&WitnessRow> = rows.iter().collect();
    rows.sort_by_key(|r| (r.at, r.id));

    let mut terms: BTreeMap<(&str, i64), Term> = BTreeMap::new();
    for row in &rows {
        let term = terms.entry((&row.lease, row.epoch)).or_insert(Term {
            first: row.at,
            last: row.at,
            holders: Vec::new(),
        });
        term.last = row.at;
        if !term.holders.contains(&row.holder.as_str()) {
            term.holders.push(&row.holder);
        }
    }
    for ((lease, epoch), term) in &terms {
        if term.holders.len() > 1 {
            verdict.reused_epochs += 1;
            verdict.example(format!(
                "lease {lease}: epoch {epoch} held by {:?}",
                term.holders
            ));
        }
    }
    let terms: Vec<_> = terms.iter().collect();
    for (i, ((lease, old), a)) in terms.iter().enumerate() {
        for ((other, new), b) in &terms[i + 1..] {
            if other != lease {
                break;
            }
            if a.first <= b.last && b.first <= a.last {
                verdict.overlaps += 1;
                verdict.example(format!(
                    "lease {lease}: epoch {old} ({:?}, {} to {}) overlaps epoch {new} ({:?}, {} to {}), µs",
                    a.holders, a.first, a.last, b.holders, b.first, b.last
                ));
            }
        }
    }

    let mut newest: BTreeMap<&str, &WitnessRow> = BTreeMap::new();
    for row in &rows {
        let seen = newest.entry(&row.lease).or_insert(row);
        if row.epoch < seen.epoch {
            verdict.epoch_regressions += 1;
            let text = format!(
                "lease {}: epoch {} ({}) at {} µs after epoch {} ({}) at {} µs",
                row.lease, row.epoch, row.holder, row.at, seen.epoch, seen.holder, seen.at
            );
            verdict.example(text);
        } else {
            *seen = row;
        }
    }

    let mut newest: BTreeMap<(&str, &str), &FencedCommit> = BTreeMap::new();
    for commit in commits {
        let seen = newest
            .entry((&commit.lease, &commit.plugin))
            .or_insert(commit);
        if commit.epoch < seen.epoch {
            verdict.stale_commits += 1;
            let text = format!(
                "lease {} plugin {}: epoch {} committed (seq {}) after epoch {} (seq {})",
                commit.lease, commit.plugin, commit.epoch, commit.seq, seen.epoch, seen.seq
            );
            verdict.example(text);
        } else {
            *seen = commit;
        }
    }
    verdict
}

/// The time from `instant` (witness µs, e.g. a fault healed) to the first witness row at or
/// after it; `None` when no work ran after it.
pub fn recovery(rows: &[WitnessRow], instant: i64) -> Option<Duration> {
    let first = rows
        .iter()
        .map(|r| r.at)
        .filter(|at| *at >= instant)
        .min()?;
    Some(Duration::from_micros(u64::try_from(first - instant).ok()?))
}

/// The time from `instant` (witness µs, e.g. the holder was cut off) to the first witness row of
/// `lease` at or after it with an epoch above `epoch`: how long until a newer term worked.
pub fn takeover(rows: &[WitnessRow], lease: &str, epoch: i64, instant: i64) -> Option<Duration> {
    let first = rows
        .iter()
        .filter(|r| r.lease == lease && r.epoch > epoch)
        .map(|r| r.at)
        .filter(|at| *at >= instant)
        .min()?;
    Some(Duration::from_micros(u64::try_from(first - instant).ok()?))
}

/// The longest stretch without work around a fault that began at `start` and ended at `healed`
/// (witness µs): from the last row before `start` (or `start`) through the first row at or after
/// `healed`, the longest time between consecutive rows. `None` when no row follows `healed`.
pub fn longest_pause(rows: &[WitnessRow], start: i64, healed: i64) -> Option<Duration> {
    let end = rows.iter().map(|r| r.at).filter(|at| *at >= healed).min()?;
    let from = last_before(rows, start).unwrap_or(start);
    let mut times: Vec<i64> = rows
        .iter()
        .map(|r| r.at)
        .filter(|at| (from..=end).contains(at))
        .collect();
    times.push(from);
    times.sort_unstable();
    let longest = times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    Some(Duration::from_micros(u64::try_from(longest).unwrap_or(0)))
}

/// The time of the last witness row before `instant` (witness µs, e.g. a fault began).
pub fn last_before(rows: &[WitnessRow], instant: i64) -> Option<i64> {
    rows.iter().map(|r| r.at).filter(|at| *at < instant).max()
}

/// The totals of many trials, one line per fault.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    faults: BTreeMap<String, FaultTotals>,
}

/// The totals of the trials of one fault.
#[derive(Debug, Clone, Default)]
pub struct FaultTotals {
    /// Trials judged.
    pub trials: usize,
    /// Sums of the trials' [`Verdict`] counts.
    pub overlaps: usize,
    /// See [`Verdict::stale_commits`].
    pub stale_commits: usize,
    /// See [`Verdict::epoch_regressions`].
    pub epoch_regressions: usize,
    /// See [`Verdict::reused_epochs`].
    pub reused_epochs: usize,
    /// The recoveries measured.
    pub recoveries: Vec<Duration>,
    /// Trials in which the lease had no writer again after the fault.
    pub unrecovered: usize,
}

impl Summary {
    /// Adds one trial of `fault` (a name such as `black-hole holder`) with its verdict and its
    /// recovery (`None`: the lease had no writer again).
    pub fn add(&mut self, fault: &str, verdict: &Verdict, recovery: Option<Duration>) {
        self.add_run(fault, verdict, &[recovery]);
    }

    /// Adds a run of `fault` judged as a whole: its verdict once, one trial per pause (`None`: the
    /// lease had no writer again).
    pub fn add_run(&mut self, fault: &str, verdict: &Verdict, pauses: &[Option<Duration>]) {
        let totals = self.faults.entry(fault.to_string()).or_default();
        totals.trials += pauses.len();
        totals.overlaps += verdict.overlaps;
        totals.stale_commits += verdict.stale_commits;
        totals.epoch_regressions += verdict.epoch_regressions;
        totals.reused_epochs += verdict.reused_epochs;
        for pause in pauses {
            match pause {
                Some(r) => totals.recoveries.push(*r),
                None => totals.unrecovered += 1,
            }
        }
    }

    /// The totals of `fault`, if any trial of it was added.
    pub fn fault(&self, fault: &str) -> Option<&FaultTotals> {
        self.faults.get(fault)
    }

    /// Whether every trial of every fault was safe.
    pub fn is_safe(&self) -> bool {
        self.faults
            .values()
            .all(|t| t.overlaps + t.stale_commits + t.epoch_regressions + t.reused_epochs == 0)
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self.faults.keys().map(|k| k.len()).max().unwrap_or(0);
        for (i, (fault, t)) in self.faults.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(
                f,
                "{fault:width$}  trials {}  overlaps {}  stale {}  regressions {}  reused {}",
                t.trials, t.overlaps, t.stale_commits, t.epoch_regressions, t.reused_epochs
            )?;
            let mut sorted = t.recoveries.clone();
            sorted.sort();
            if let (Some(median), Some(max)) = (sorted.get(sorted.len() / 2), sorted.last()) {
                let (median, max) = (median.as_secs_f64(), max.as_secs_f64());
                write!(f, "  recovery median {median:.1} s  max {max:.1} s")?;
            }
            if t.unrecovered > 0 {
                write!(f, "  unrecovered {}", t.unrecovered)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "checker_tests.rs"]
mod tests;
