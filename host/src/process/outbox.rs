//! A keeper's reports on their way to the host: one thread writes them to the keeper's stdout,
//! control reports (started, signalled, killed, exited, gone) before any output waiting, and the
//! child's output in a bounded queue. A child that writes faster than the host reads (`yes`)
//! then costs the keeper at most [`OUTPUT_QUEUE_BYTES`], what did not fit is dropped and counted
//! ([`Report::Dropped`]), and the host still hears at once that the child exited: an unbounded
//! queue grew by hundreds of megabytes a second, and its `exited` and `gone` waited behind it.
//!
//! [`Report::Gone`] is the last line: it waits for the output already queued (bounded), so the
//! host reads every line the keeper kept before the keeper's end.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::protocol::{Report, Timed, monotonic_ns};

/// The most output text the queue holds: beyond it, lines are dropped until the host catches
/// up. A megabyte is seconds of what the host may log of one process (its rate is a plugin's:
/// 32 KiB a second after a burst of 128 KiB) and nothing against a flood's gigabytes.
pub(crate) const OUTPUT_QUEUE_BYTES: usize = 1024 * 1024;

/// The most output lines the queue holds, whatever their length: each costs a little beside its
/// text.
pub(crate) const OUTPUT_QUEUE_LINES: usize = 4096;

/// Where a keeper's reports wait for the writer thread; cloned into every thread that reports.
#[derive(Clone)]
pub(crate) struct Outbox(Arc<Shared>);

struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when something is queued, and when the writer is done.
    changed: Condvar,
}

#[derive(Default)]
struct Queue {
    /// Control reports, in order: few, and never dropped.
    control: VecDeque<Timed>,
    /// Output lines, bounded by [`OUTPUT_QUEUE_BYTES`] and [`OUTPUT_QUEUE_LINES`].
    output: VecDeque<Timed>,
    /// The text bytes in `output`.
    output_bytes: usize,
    /// Output dropped since the last [`Report::Dropped`]: lines and their bytes.
    dropped: (u64, u64),
    /// The writer wrote [`Report::Gone`], or can write no more (the host is gone).
    done: bool,
}

impl Queue {
    /// Queues `timed`: output that does not fit is dropped and counted.
    fn push(&mut self, timed: Timed) {
        let Report::Output { text, cut, .. } = &timed.report else {
            self.control.push_back(timed);
            return;
        };
        let bytes = text.len();
        let full = self.output.len() >= OUTPUT_QUEUE_LINES
            || self.output_bytes.saturating_add(bytes) > OUTPUT_QUEUE_BYTES;
        if full {
            self.dropped.0 += 1;
            self.dropped.1 = self
                .dropped
                .1
                .saturating_add(bytes as u64)
                .saturating_add(*cut);
            return;
        }
        self.output_bytes += bytes;
        self.output.push_back(timed);
    }

    /// The next line to write: control first (but `gone` only once the output queued before it
    /// is out), then what was dropped, then output.
    fn next(&mut self) -> Option<Timed> {
        let gone_waits = self
            .control
            .front()
            .is_some_and(|c| c.report == Report::Gone && !self.output.is_empty());
        if !gone_waits && let Some(control) = self.control.pop_front() {
            return Some(control);
        }
        if self.dropped.0 > 0 {
            let (lines, bytes) = std::mem::take(&mut self.dropped);
            return Some(Timed::new(Report::Dropped { lines, bytes }, monotonic_ns()));
        }
        let line = self.output.pop_front()?;
        if let Report::Output { text, .. } = &line.report {
            self.output_bytes = self.output_bytes.saturating_sub(text.len());
        }
        Some(line)
    }
}

impl Outbox {
    /// Starts the writer thread on `out` (the keeper's stdout): a host that does not read
    /// (frozen) blocks that thread, never the ones that keep time or read the child's output.
    pub fn start(out: impl Write + Send + 'static) -> Outbox {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            changed: Condvar::new(),
        });
        let writer = shared.clone();
        std::thread::spawn(move || write_all(&writer, out));
        Outbox(shared)
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        // Each step leaves the queue whole: a panic elsewhere cannot poison it.
        self.0.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `report`, stamped with the keeper's clock now. Output that does not fit is
    /// dropped and counted.
    pub fn say(&self, report: Report) {
        self.queue().push(Timed::new(report, monotonic_ns()));
        self.0.changed.notify_all();
    }

    /// Waits up to `timeout` for the writer to be done: [`Report::Gone`] written, or the host
    /// gone. Whether it is.
    pub fn wait_done(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        let mut queue = self.queue();
        while !queue.done {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            queue = self
                .0
                .changed
                .wait_timeout(queue, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }
}

/// The writer thread: one line a report, buffered, flushed whenever nothing more waits.
fn write_all(shared: &Shared, out: impl Write) {
    let mut out = std::io::BufWriter::new(out);
    let mut unflushed = false;
    let lock = || shared.queue.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        let next = {
            let mut queue = lock();
            loop {
                if let Some(next) = queue.next() {
                    break Some(next);
                }
                if unflushed {
                    break None;
                }
                queue = shared
                    .changed
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        };
        let written = match &next {
            // Nothing waits: what was written goes out now.
            None => out.flush(),
            Some(timed) => writeln!(out, "{timed}"),
        };
        unflushed = next.is_some();
        let gone = next.is_some_and(|t| t.report == Report::Gone);
        let finished = match (written, gone) {
            (Err(_), _) => true,
            (Ok(()), true) => {
                let _ = out.flush();
                true
            }
            (Ok(()), false) => false,
        };
        if finished {
            lock().done = true;
            shared.changed.notify_all();
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::protocol::Ended;
    use super::*;

    /// A writer that keeps what it is given.
    #[derive(Clone, Default)]
    struct Kept(Arc<Mutex<Vec<u8>>>);

    impl Write for Kept {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn output(n: usize) -> Report {
        Report::Output {
            err: false,
            text: format!("{n:08}").repeat(100),
            cut: 0,
        }
    }

    #[test]
    fn output_beyond_the_bound_is_dropped_and_counted_and_gone_comes_last() {
        let mut queue = Queue::default();
        for n in 0..2000 {
            queue.push(Timed::new(output(n), 1));
        }
        queue.push(Timed::new(Report::Exited(Ended::Code(0)), 2));
        queue.push(Timed::new(Report::Gone, 3));
        // The exit first, whatever output waits; then what was dropped; then the output; then
        // gone.
        let first = queue.next().unwrap().report;
        assert_eq!(first, Report::Exited(Ended::Code(0)));
        let Report::Dropped { lines, bytes } = queue.next().unwrap().report else {
            panic!("no dropped report");
        };
        let kept = OUTPUT_QUEUE_BYTES / 800;
        assert_eq!(lines as usize, 2000 - kept);
        assert_eq!(bytes as usize, (2000 - kept) * 800);
        let mut outputs = 0;
        let last = loop {
            match queue.next().unwrap().report {
                Report::Output { .. } => outputs += 1,
                other => break other,
            }
        };
        assert_eq!(outputs, kept);
        assert_eq!(last, Report::Gone);
        assert!(queue.next().is_none());
    }

    #[test]
    fn the_writer_writes_every_report_and_says_when_gone_is_out() {
        let sink = Kept::default();
        let outbox = Outbox::start(sink.clone());
        outbox.say(Report::Started(7));
        outbox.say(output(1));
        outbox.say(Report::Gone);
        assert!(outbox.wait_done(Duration::from_secs(5)));
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("started 7 @"), "{text}");
        assert!(lines[1].starts_with("out 0 00000001"), "{text}");
        assert!(lines[2].starts_with("gone @"), "{text}");
    }
}
