//! What a guest prints: its stdout and stderr (WASI grants it no other place to write), streamed
//! to the host's log line by line as it is written, tagged with the stream. The call's span names
//! the plugin, the lease and the epoch (see the `log` import in [`super::host`]): a line does not
//! repeat them.
//!
//! Nothing of it accumulates: a [`LineSink`] keeps only the line being written, cut at
//! [`MAX_LINE_BYTES`], and logs each whole line through [`crate::report::guest_text`]. Each call
//! may log [`LINES_PER_CALL`] lines and [`BYTES_PER_CALL`] bytes per stream, and the plugin no
//! more than its rate across calls ([`crate::output_rate`]); the rest are counted, and reported with the
//! plugin's other dropped output. Writes never fail, so a guest may print forever (until its
//! deadline or fuel ends the call) without an error, a panic in its `println!`, or host memory
//! growing with what it printed.
//!
//! The last few lines a call wrote to stderr are kept until the call ends ([`TAIL_LINES`], each
//! cut at [`TAIL_LINE_BYTES`]): a guest that traps usually said why there just before (a Rust
//! panic's message, a Python traceback, an uncaught JavaScript exception), and the host adds
//! those lines to the trap it reports in `/status`.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use crate::output_rate::{Dropped, OutputRate};

/// Lines per stream and call that reach the log: enough for a call's diagnostics, too few for a
/// guest printing in a loop to drown the host's log.
const LINES_PER_CALL: u32 = 200;

/// Bytes per stream and call that reach the log: 200 lines of a few hundred bytes, so long
/// lines cannot multiply the line budget into megabytes.
const BYTES_PER_CALL: usize = 64 << 10;

/// The longest line kept whole; the rest of a longer line is dropped. A diagnostic line fits,
/// and it is all the memory one stream holds between newlines.
const MAX_LINE_BYTES: usize = 4 << 10;

/// stderr lines of a call kept for its trap report: a traceback's last frame, the exception, and
/// the runtime's own line about it.
const TAIL_LINES: usize = 4;

/// The longest stderr line kept whole for a trap report.
const TAIL_LINE_BYTES: usize = 300;

/// Lines that say nothing about the guest's failure: Rust's hint about backtraces, which a
/// plugin cannot act on.
const TAIL_NOISE: &[&str] = &["note: run with `RUST_BACKTRACE=1`"];

/// How much the guest may hand over in one write: the usual WASI stream permit, so no write
/// makes the host allocate much.
const WRITE_PERMIT: usize = 64 << 10;

/// One store's stdout and stderr.
pub(super) struct GuestOutput {
    /// The guest's stdout.
    stdout: LineSink,
    /// The guest's stderr.
    stderr: LineSink,
}

impl GuestOutput {
    /// Fresh sinks, wired into `wasi` as the guest's stdout and stderr, both within the plugin's
    /// `rate`.
    pub(super) fn capture(wasi: &mut WasiCtxBuilder, rate: &Arc<OutputRate>) -> Self {
        let stdout = LineSink::new("stdout", rate);
        let stderr = LineSink::new("stderr", rate);
        wasi.stdout(stdout.clone()).stderr(stderr.clone());
        GuestOutput { stdout, stderr }
    }

    /// Ends a call: logs an unfinished last line and renews the budgets for the next call.
    /// Returns the call's last stderr lines, joined by ` / `, when it wrote any, and what the
    /// budgets dropped (for the plugin's report).
    pub(super) fn flush(&mut self) -> (Option<String>, Dropped) {
        let (_, mut dropped) = self.stdout.end_call();
        let (tail, more) = self.stderr.end_call();
        dropped.add(more);
        (tail, dropped)
    }
}

/// A guest stream that logs whole lines as they are written, within a per-call budget.
#[derive(Clone)]
pub(super) struct LineSink(Arc<Mutex<Lines>>);

/// The state of one stream.
struct Lines {
    /// `stdout` or `stderr`.
    stream: &'static str,
    /// The plugin's rate, across its calls and stores.
    rate: Arc<OutputRate>,
    /// The line being written, at most [`MAX_LINE_BYTES`].
    partial: Vec<u8>,
    /// Whether the line being written was longer than what `partial` kept.
    overlong: bool,
    /// The bytes of the line being written, kept or not.
    written: usize,
    /// Lines this call may still log.
    lines_left: u32,
    /// Bytes this call may still log.
    bytes_left: usize,
    /// What this call wrote over its budget.
    dropped: Dropped,
    /// The call's last lines (stderr only), for a trap report.
    tail: Option<std::collections::VecDeque<String>>,
}

impl LineSink {
    fn new(stream: &'static str, rate: &Arc<OutputRate>) -> Self {
        LineSink(Arc::new(Mutex::new(Lines {
            stream,
            rate: rate.clone(),
            partial: Vec::new(),
            overlong: false,
            written: 0,
            lines_left: LINES_PER_CALL,
            bytes_left: BYTES_PER_CALL,
            dropped: Dropped::default(),
            tail: (stream == "stderr").then(std::collections::VecDeque::new),
        })))
    }

    fn lines(&self) -> std::sync::MutexGuard<'_, Lines> {
        // The state stays consistent at every step: a panic elsewhere cannot poison it.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn take(&self, bytes: &[u8]) {
        self.lines().take(bytes);
    }

    fn end_call(&self) -> (Option<String>, Dropped) {
        self.lines().end_call()
    }
}

impl Lines {
    /// Takes what the guest wrote: each newline ends a line.
    fn take(&mut self, bytes: &[u8]) {
        for piece in bytes.split_inclusive(|b| *b == b'\n') {
            let (text, ends) = match piece.split_last() {
                Some((b'\n', text)) => (text, true),
                _ => (piece, false),
            };
            let room = MAX_LINE_BYTES - self.partial.len();
            self.partial
                .extend_from_slice(&text[..text.len().min(room)]);
            self.overlong |= text.len() > room;
            self.written = self.written.saturating_add(text.len());
            if ends {
                self.end_line();
            }
        }
    }

    /// Logs the line written so far, if the call's budget and the plugin's rate allow, else
    /// counts it.
    fn end_line(&mut self) {
        let overlong = std::mem::take(&mut self.overlong);
        let written = std::mem::take(&mut self.written);
        let mut text = String::from_utf8_lossy(&self.partial).into_owned();
        self.partial.clear();
        if text.trim().is_empty() {
            return;
        }
        if let Some(tail) = &mut self.tail
            && !TAIL_NOISE.iter().any(|noise| text.starts_with(noise))
        {
            if tail.len() == TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(crate::report::guest_text(
                cut(text.trim_end(), TAIL_LINE_BYTES).to_string(),
            ));
        }
        if self.lines_left == 0 || text.len() > self.bytes_left {
            self.dropped.lines += 1;
            self.dropped.bytes += written as u64;
            return;
        }
        // Within the call's budget, whether the rate lets it through or not: past the budget,
        // a flood costs a count, not an escape and a lock per line.
        self.lines_left -= 1;
        self.bytes_left -= text.len();
        // Output is logged at info: a host that does not log it charges nothing to the rate.
        if !tracing::enabled!(tracing::Level::INFO) {
            return;
        }
        if overlong {
            text.push_str("… (truncated)");
        }
        let line = crate::report::guest_text(text);
        if !self.rate.admit(line.len(), written) {
            return;
        }
        // Written while the call runs (or as it ends), in its span: see the module's comment.
        tracing::info!(stream = self.stream, "{line}");
    }

    /// See [`GuestOutput::flush`].
    fn end_call(&mut self) -> (Option<String>, Dropped) {
        if !self.partial.is_empty() {
            self.end_line();
        }
        let dropped = std::mem::take(&mut self.dropped);
        self.lines_left = LINES_PER_CALL;
        self.bytes_left = BYTES_PER_CALL;
        let tail = self.tail.as_mut().map(std::mem::take).unwrap_or_default();
        (
            (!tail.is_empty()).then(|| Vec::from(tail).join(" / ")),
            dropped,
        )
    }
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl IsTerminal for LineSink {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LineSink {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for LineSink {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.take(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        // Every whole line is logged as it is written: nothing is held to flush.
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_PERMIT)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LineSink {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for LineSink {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.take(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate() -> Arc<OutputRate> {
        crate::output_rate::OutputRates::new(Default::default()).of(&Arc::from("p"))
    }

    fn sink() -> LineSink {
        LineSink::new("stdout", &rate())
    }

    #[test]
    fn lines_split_across_writes_are_joined_and_the_excess_is_counted() {
        let s = sink();
        s.take(b"hel");
        s.take(b"lo\nwor");
        assert_eq!(s.lines().lines_left, LINES_PER_CALL - 1);
        assert_eq!(s.lines().partial, b"wor");
        for _ in 0..LINES_PER_CALL + 5 {
            s.take(b"x\n");
        }
        assert_eq!(s.lines().lines_left, 0);
        // "wor" + "x" went out as one line, so 6 lines are over the budget.
        assert_eq!(s.lines().dropped, Dropped { lines: 6, bytes: 6 });
        assert_eq!(s.end_call().1, Dropped { lines: 6, bytes: 6 });
        assert_eq!(s.lines().lines_left, LINES_PER_CALL);
        assert_eq!(s.lines().dropped, Dropped::default());
    }

    #[test]
    fn a_calls_last_stderr_lines_are_kept_for_its_trap_report_and_then_forgotten() {
        let s = LineSink::new("stderr", &rate());
        s.take(b"Traceback (most recent call last):\n  File \"app.py\", line 3\n");
        s.take(b"RuntimeError: boom\nthread panicked at lib.rs:1:2:\n");
        s.take(b"Python function threw an unexpected exception\n");
        s.take(b"note: run with `RUST_BACKTRACE=1` environment variable\n");
        s.take(&[b'z'; 1000]);
        let tail = s.end_call().0.expect("stderr lines were written");
        assert_eq!(
            tail,
            format!(
                "RuntimeError: boom / thread panicked at lib.rs:1:2: / \
                 Python function threw an unexpected exception / {}",
                "z".repeat(TAIL_LINE_BYTES)
            )
        );
        assert_eq!(s.end_call().0, None, "the next call starts with no tail");
        let out = sink();
        out.take(b"hello\n");
        assert_eq!(out.end_call().0, None, "stdout keeps no tail");
    }

    #[test]
    fn stdout_and_stderr_share_the_plugins_rate_across_calls() {
        use crate::output_rate::{BURST_BYTES, LINE_COST};
        let rate = rate();
        let out = LineSink::new("stdout", &rate);
        let err = LineSink::new("stderr", &rate);
        let line = [b'z'; 99];
        let burst = BURST_BYTES / (100 + LINE_COST);
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_writer(std::io::sink)
            .finish();
        // Calls of 100 lines each, alternating streams, at once: the burst, then nothing more.
        tracing::subscriber::with_default(subscriber, || {
            for call in 0..10 {
                let sink = if call % 2 == 0 { &out } else { &err };
                for _ in 0..100 {
                    sink.take(&line);
                    sink.take(b" \n");
                }
                assert_eq!(
                    sink.end_call().1,
                    Dropped::default(),
                    "within the call's budget"
                );
            }
        });
        let logged = 1_000 - rate.dropped();
        assert!(
            (burst..=burst + 8).contains(&logged),
            "{logged} lines of {burst}"
        );
    }

    #[test]
    fn a_line_without_end_holds_at_most_the_line_limit() {
        let s = sink();
        let chunk = vec![b'y'; WRITE_PERMIT];
        for _ in 0..64 {
            s.take(&chunk);
        }
        assert_eq!(s.lines().partial.len(), MAX_LINE_BYTES);
        assert!(s.lines().overlong);
        s.take(b"\n");
        assert!(s.lines().partial.is_empty());
        assert_eq!(s.lines().bytes_left, BYTES_PER_CALL - MAX_LINE_BYTES);
    }
}
