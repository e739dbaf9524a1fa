//! A term's trace and span ids, derived from what every replica knows of it: the service name
//! (the namespace of one deployment), the lease and the epoch. The successor of a term links to
//! it by computing the same ids, without asking the store or the previous holder anything.

use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
use sha2::{Digest, Sha256};

/// The ids of the term of `lease` at `epoch` in `namespace`: a trace of its own (the first 16
/// bytes of a SHA-256 of the three) and its root span (the next 8).
pub(crate) fn term_context(namespace: &str, lease: &str, epoch: i64) -> SpanContext {
    let mut hash = Sha256::new();
    // Separated by NUL, which none of the three holds, so no two triples hash the same text.
    hash.update(b"leasehold term\0");
    hash.update(namespace.as_bytes());
    hash.update(b"\0");
    hash.update(lease.as_bytes());
    hash.update(b"\0");
    hash.update(epoch.to_string().as_bytes());
    let digest = hash.finalize();
    let mut trace = [0u8; 16];
    trace.copy_from_slice(&digest[..16]);
    let mut span = [0u8; 8];
    span.copy_from_slice(&digest[16..24]);
    // All zeros is the invalid id, which exporters drop: one chance in 2^64, but cheap to rule out.
    if trace == [0; 16] {
        trace[15] = 1;
    }
    if span == [0; 8] {
        span[7] = 1;
    }
    SpanContext::new(
        TraceId::from_bytes(trace),
        SpanId::from_bytes(span),
        TraceFlags::SAMPLED,
        false,
        TraceState::default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_replica_derives_the_same_ids_for_a_term_and_other_ids_for_any_other_term() {
        let a = term_context("payments", "leader", 7);
        assert_eq!(a, term_context("payments", "leader", 7));
        assert!(a.is_valid() && a.is_sampled());
        for other in [
            term_context("payments", "leader", 8),
            term_context("payments", "leader2", 7),
            term_context("billing", "leader", 7),
            // The separator keeps "a" + "b\0c" and "a\0b" + "c" apart.
            term_context("payments\0leader", "7", 7),
        ] {
            assert_ne!(a.trace_id(), other.trace_id());
            assert_ne!(a.span_id(), other.span_id());
        }
    }
}
