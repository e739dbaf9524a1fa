//! The terms of a lease as the cluster recorded them: who held it at which epoch, from when to
//! when, and how each term ended. The stores keep the newest [`TERMS_KEPT`] of each lease
//! (the lease crate's `LeaseStore::terms`); this module fills what a lost write left open ([`complete`])
//! and finds the last handoff in them ([`last_handoff`]), both pure. Nothing here
//! decides anything: the history is for people (`/status`, the page), and fencing rests on epochs.

use serde::{Deserialize, Serialize};

use super::epoch::Epoch;

/// How many terms of each lease a store keeps at least. Enough to see a lease flap (a handful of
/// handoffs in a row), few enough that 10,000 leases cost 200,000 small rows.
pub const TERMS_KEPT: u32 = 20;

/// A campaign that opens a term whose epoch is a multiple of this prunes its lease's oldest down
/// to [`TERMS_KEPT`]; the others skip the work, which is on the handoff's path. A lease keeps
/// fewer than `TERMS_KEPT + PRUNE_EVERY` terms.
pub const PRUNE_EVERY: u32 = 16;

/// How a term ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TermEnd {
    /// Its holder gave the lease up: a shutdown, a step-down, a lease group rebalancing.
    Released,
    /// Its holder stopped renewing (crashed, frozen or cut off) and the ttl ran out.
    Expired,
    /// An operator force-released it (`leasehold leases release NAME --force`).
    Forced,
}

impl TermEnd {
    /// The word a store writes.
    pub fn as_str(self) -> &'static str {
        match self {
            TermEnd::Released => "released",
            TermEnd::Expired => "expired",
            TermEnd::Forced => "forced",
        }
    }

    /// Reads the word a store wrote; `None` for any other.
    pub fn parse(word: &str) -> Option<Self> {
        [TermEnd::Released, TermEnd::Expired, TermEnd::Forced]
            .into_iter()
            .find(|end| end.as_str() == word)
    }
}

/// One term of a lease as the cluster recorded it: a row of the history, for display, not the
/// live term this replica's plugins run under (`leadership::Term`). Times are ages: milliseconds
/// before the store was read, by the clock it records terms with (the database's, or the
/// machine's wall clock for SQLite), never negative.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedTerm {
    /// The epoch the term was acquired with.
    pub epoch: Epoch,
    /// The replica that held it.
    pub holder: String,
    /// How long ago it began.
    pub started_ms_ago: i64,
    /// How long ago it ended; `None` while it is the lease's current term.
    pub ended_ms_ago: Option<i64>,
    /// How it ended; `None` while it is the lease's current term.
    pub end: Option<TermEnd>,
}

/// A [`RecordedTerm`] of a named lease, as a store reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermRecord {
    /// The lease.
    pub lease: String,
    /// The term.
    pub term: RecordedTerm,
}

/// A change of holder: the term `to_epoch` began after the term `from_epoch` ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handoff {
    /// How long ago the new term began.
    pub at_ms_ago: i64,
    /// The holder of the term that ended.
    pub from: String,
    /// Its epoch.
    pub from_epoch: Epoch,
    /// The holder of the term that began.
    pub to: String,
    /// Its epoch.
    pub to_epoch: Epoch,
    /// Why the earlier term ended.
    pub reason: TermEnd,
}

/// Completes one lease's terms, newest first: a term left open below a newer one (its closing
/// lost, e.g. in a database failover) ended, at the latest, when the next began, and since
/// nothing recorded why, it is counted as expired.
pub fn complete(mut terms: Vec<RecordedTerm>) -> Vec<RecordedTerm> {
    let mut next_started = None;
    for term in &mut terms {
        if let (None, Some(next)) = (term.end, next_started) {
            term.ended_ms_ago = Some(std::cmp::min(next, term.started_ms_ago));
            term.end = Some(TermEnd::Expired);
        }
        next_started = Some(term.started_ms_ago);
    }
    terms
}

/// The newest handoff in one lease's terms, newest first: the newest term that began after an
/// ended one.
pub fn last_handoff(terms: &[RecordedTerm]) -> Option<Handoff> {
    terms.windows(2).find_map(|pair| {
        let (to, from) = (&pair[0], &pair[1]);
        Some(Handoff {
            at_ms_ago: to.started_ms_ago,
            from: from.holder.clone(),
            from_epoch: from.epoch,
            to: to.holder.clone(),
            to_epoch: to.epoch,
            reason: from.end?,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(
        epoch: Epoch,
        holder: &str,
        started: i64,
        ended: Option<(i64, TermEnd)>,
    ) -> RecordedTerm {
        RecordedTerm {
            epoch,
            holder: holder.to_string(),
            started_ms_ago: started,
            ended_ms_ago: ended.map(|(ago, _)| ago),
            end: ended.map(|(_, end)| end),
        }
    }

    #[test]
    fn the_current_term_stays_open() {
        let terms = vec![term(Epoch::new(2), "b", 100, None)];
        assert_eq!(complete(terms.clone()), terms);
    }

    #[test]
    fn a_term_left_open_below_a_newer_one_ended_when_the_next_began() {
        let done = complete(vec![
            term(Epoch::new(3), "c", 100, None),
            term(Epoch::new(2), "b", 900, None),
        ]);
        assert_eq!(done[0].end, None);
        assert_eq!(
            done[1],
            term(Epoch::new(2), "b", 900, Some((100, TermEnd::Expired)))
        );
    }

    #[test]
    fn the_last_handoff_is_the_newest_term_after_an_ended_one_with_its_reason() {
        let terms = vec![
            term(Epoch::new(3), "a", 100, None),
            term(Epoch::new(2), "b", 900, Some((120, TermEnd::Released))),
            term(Epoch::new(1), "a", 2000, Some((950, TermEnd::Forced))),
        ];
        assert_eq!(
            last_handoff(&terms),
            Some(Handoff {
                at_ms_ago: 100,
                from: "b".into(),
                from_epoch: Epoch::new(2),
                to: "a".into(),
                to_epoch: Epoch::new(3),
                reason: TermEnd::Released,
            })
        );
        assert_eq!(last_handoff(&terms[..1]), None);
        assert_eq!(last_handoff(&[]), None);
    }

    #[test]
    fn end_words_read_back_and_nothing_else_does() {
        for end in [TermEnd::Released, TermEnd::Expired, TermEnd::Forced] {
            assert_eq!(TermEnd::parse(end.as_str()), Some(end));
            let json = serde_json::to_string(&end).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", end.as_str()));
        }
        assert_eq!(TermEnd::parse("lost"), None);
    }
}
