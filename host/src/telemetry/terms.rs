//! A span per leadership term, built from what the host sees of it through the [`Leadership`]
//! watches: the lease, its epoch, this holder, the group shard and how the term ended. A term is a
//! trace of its own, with the ids [`super::ids`] derives, linked to the term before it (epoch − 1)
//! so that a handoff or a takeover reads as one chain across replicas.
//!
//! A term's span is sent when the term ends; a short "lease acquired" child goes out at once, so
//! a collector sees the acquisition within the queue's batch delay, and an "ordered stop" child
//! covers the end to the lease's release (or loss).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SpanData, SpanEvents, SpanLinks};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::ids::term_context;
use super::queue::Queue;
use crate::lease::{Leadership, Leases, Role, Term};

/// Where the term spans go: the namespace of their ids and the export queue, both the
/// process's for its whole life.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sink {
    /// The namespace of the terms' ids.
    pub(crate) namespace: &'static str,
    /// The export queue.
    pub(crate) queue: &'static Queue,
}

/// Follows every lease of `leases` until `root` is cancelled, under `tasks` (which a shutdown
/// waits for, so every ended term's span is queued before the last flush).
pub(crate) fn follow(
    sink: Sink,
    leases: &Arc<Leases>,
    root: &CancellationToken,
    tasks: &TaskTracker,
) {
    let holder = leases.holder().to_string();
    let ttl = leases.timing().ttl;
    for lease in leases.lease_names() {
        if let Some(rx) = leases.subscribe(lease) {
            let following =
                follow_one(sink, rx, (holder.clone(), ttl), root.clone(), tasks.clone());
            tasks.spawn(following);
        }
    }
}

/// Reports each term of one lease as it starts, and again as it ends.
async fn follow_one(
    sink: Sink,
    mut rx: watch::Receiver<Leadership>,
    (holder, ttl): (String, Duration),
    root: CancellationToken,
    tasks: TaskTracker,
) {
    let mut last = None;
    loop {
        let term = rx.borrow_and_update().term.clone();
        if let Some(term) = term
            && last != Some(term.epoch)
        {
            last = Some(term.epoch);
            tasks.spawn(report(sink, term, (holder.clone(), ttl), rx.clone()));
        }
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return },
            _ = root.cancelled() => return,
        }
    }
}

/// Queues the term's "lease acquired" span now and its own span when it ends.
async fn report(
    sink: Sink,
    term: Term,
    (holder, ttl): (String, Duration),
    mut rx: watch::Receiver<Leadership>,
) {
    let epoch = term.epoch.get();
    let context = term_context(sink.namespace, &term.lease, epoch);
    let mut attributes = vec![
        KeyValue::new("lease", term.lease.clone()),
        KeyValue::new("epoch", epoch),
        KeyValue::new("holder", holder),
    ];
    if let Some((group, shard)) = shard_of(&term.lease) {
        attributes.push(KeyValue::new("group", group.to_string()));
        attributes.push(KeyValue::new("shard", shard));
    }
    let acquired = child_of(&context);
    sink.queue.push(span(
        acquired,
        context.span_id(),
        "lease acquired",
        (term.began, term.began),
        attributes.clone(),
        Vec::new(),
    ));
    term.cancelled().await;
    if term.ended().is_none() {
        // Cancelled from above (the host is stopping): the driver records why as it publishes
        // the end, once the term's work has stopped. Waited for, never past the ttl, by when the
        // lease has expired whatever became of it.
        let published = |l: &Leadership| l.term.as_ref().map(|t| t.change) != Some(term.change);
        let _ = tokio::time::timeout(ttl, rx.wait_for(published)).await;
    }
    // No recorded end: the driver's control of the term was dropped (the host stopping at once).
    let (ended, at) = match term.ended() {
        Some(end) => (end.reason.as_str(), end.at),
        None => ("dropped", SystemTime::now()),
    };
    attributes.push(KeyValue::new("ended", ended));
    // Every acquisition takes the previous epoch + 1, so the term before this one is at
    // epoch − 1. After a database failover the store lifts epochs to a floor instead; the link
    // then names a term that never ran, which a trace viewer shows as missing: harmless.
    let links = match epoch > 1 {
        true => vec![Link::with_context(term_context(
            sink.namespace,
            &term.lease,
            epoch - 1,
        ))],
        false => Vec::new(),
    };
    sink.queue.push(span(
        context.clone(),
        SpanId::INVALID,
        "term",
        (term.began, at),
        attributes.clone(),
        links,
    ));
    // The ordered stop: from the term's end until the driver publishes the lease as no longer
    // held here (released once the term's work has stopped, or lost), or a new term of it.
    // Never waited for past the ttl.
    let not_held = |l: &Leadership| {
        l.role == Role::Standby || l.term.as_ref().is_some_and(|t| t.change != term.change)
    };
    if let Ok(Ok(_)) = tokio::time::timeout(ttl, rx.wait_for(not_held)).await {
        let stop = child_of(&context);
        let now = SystemTime::now().max(at);
        sink.queue.push(span(
            stop,
            context.span_id(),
            "ordered stop",
            (at, now),
            attributes,
            Vec::new(),
        ));
    }
}

/// A new span of the term's trace, for one of the term's children.
fn child_of(term: &SpanContext) -> SpanContext {
    SpanContext::new(
        term.trace_id(),
        RandomIdGenerator::default().new_span_id(),
        TraceFlags::SAMPLED,
        false,
        TraceState::default(),
    )
}

/// A finished span, as the SDK's tracer would build it.
fn span(
    span_context: SpanContext,
    parent_span_id: SpanId,
    name: &'static str,
    (start_time, end_time): (SystemTime, SystemTime),
    attributes: Vec<KeyValue>,
    links: Vec<Link>,
) -> SpanData {
    SpanData {
        span_context,
        parent_span_id,
        parent_span_is_remote: false,
        span_kind: SpanKind::Internal,
        name: name.into(),
        start_time,
        end_time,
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: {
            let mut kept = SpanLinks::default();
            kept.links = links;
            kept
        },
        status: Status::Unset,
        instrumentation_scope: scope(),
    }
}

/// The scope every span of the host's own is reported under.
fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("leasehold")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

/// A group's shard (`jobs/3`: group `jobs`, shard 3); `None` for a lease of its own.
pub(crate) fn shard_of(lease: &str) -> Option<(&str, i64)> {
    let (group, shard) = lease.rsplit_once('/')?;
    let shard = shard.parse::<u32>().ok()?;
    Some((group, i64::from(shard)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_shard_is_named_by_its_group_and_number_and_a_plain_lease_is_none() {
        assert_eq!(shard_of("jobs/3"), Some(("jobs", 3)));
        assert_eq!(shard_of("a/b/12"), Some(("a/b", 12)));
        assert_eq!(shard_of("leader"), None);
        assert_eq!(shard_of("a/b"), None);
    }
}
