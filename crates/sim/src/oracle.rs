//! The oracle: what every run must show, read from its history once it is over. The deadline
//! rule (no work after the database let the term go) and the liveness rule are judged while the
//! run goes on, by the history and the world loop; the rest here.

use std::collections::BTreeMap;

use leasehold_lease_core::Epoch;

use crate::history::{At, History, ms};

/// Judges the history, recording what it finds broken.
pub fn judge(history: &History) {
    one_holder_per_epoch_and_epochs_only_go_up(history);
    terms_of_a_lease_never_overlap(history);
}

/// Each epoch of a lease is handed out once, and each one handed out is greater than every one
/// before it.
fn one_holder_per_epoch_and_epochs_only_go_up(history: &History) {
    let wins = history.lock().wins.clone();
    let mut last: BTreeMap<&str, Epoch> = BTreeMap::new();
    for win in &wins {
        if let Some(&before) = last.get(win.lease.as_str())
            && win.epoch <= before
        {
            history.violation(
                "epochs only go up",
                format!(
                    "{} won {} at epoch {} at {:.3} ms, after epoch {before} was handed out",
                    win.holder,
                    win.lease,
                    win.epoch,
                    ms(win.at.t)
                ),
            );
        }
        last.insert(&win.lease, win.epoch);
    }
}

/// The work of two terms of one lease never overlaps: every effect of an epoch comes before
/// every effect of a later one, in true time (and, within one instant, in execution order).
fn terms_of_a_lease_never_overlap(history: &History) {
    let effects = history.lock().effects.clone();
    // lease -> epoch -> (first, last, replica)
    let mut spans: BTreeMap<&str, BTreeMap<Epoch, (At, At, &str)>> = BTreeMap::new();
    for e in &effects {
        let span = spans
            .entry(&e.lease)
            .or_default()
            .entry(e.epoch)
            .or_insert((e.at, e.at, &e.replica));
        span.0 = span.0.min(e.at);
        span.1 = span.1.max(e.at);
    }
    for (lease, epochs) in &spans {
        let mut latest: Option<(Epoch, At, &str)> = None;
        for (&epoch, &(first, last, replica)) in epochs {
            if let Some((before, before_last, before_replica)) = latest
                && before_last >= first
            {
                history.violation(
                    "terms never overlap",
                    format!(
                        "{lease}: {before_replica}'s work at epoch {before} went on until {:.3} ms, after {replica}'s work at epoch {epoch} began at {:.3} ms",
                        ms(before_last.t),
                        ms(first.t)
                    ),
                );
            }
            if latest.is_none_or(|(_, l, _)| last > l) {
                latest = Some((epoch, last, replica));
            }
        }
    }
}
