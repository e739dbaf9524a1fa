//! A host's log as a test reads it: the lines a process wrote to stderr, or the lines an
//! in-process host's tasks logged (captured by a subscriber of its own, in the same format).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::eventually::{Text, eventually};

/// The lines one host has logged so far.
#[derive(Debug, Clone)]
pub struct Log {
    /// The host's name, for messages.
    name: String,
    /// Every line, in order.
    lines: Arc<Mutex<Vec<String>>>,
}

impl Log {
    /// An empty log of host `name`.
    pub fn new(name: &str) -> Log {
        Log {
            name: name.to_string(),
            lines: Arc::default(),
        }
    }

    /// Appends one line.
    pub fn push(&self, line: String) {
        self.lines.lock().unwrap().push(line);
    }

    /// Everything logged so far.
    pub fn text(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// How many lines were logged so far: an offset for [`Log::lines_from`].
    pub fn len(&self) -> usize {
        self.lines.lock().unwrap().len()
    }

    /// Whether nothing was logged yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The lines logged from line `offset` on (0-based), without copying the whole log.
    pub fn lines_from(&self, offset: usize) -> Vec<String> {
        let lines = self.lines.lock().unwrap();
        lines
            .get(offset..)
            .map(<[String]>::to_vec)
            .unwrap_or_default()
    }

    /// Waits up to `timeout` for a line containing `needle`, and returns the first such line.
    pub async fn wait_for(&self, needle: &str, timeout: Duration) -> anyhow::Result<String> {
        eventually(
            format!("{} to log {needle:?} (its log)", self.name),
            timeout,
            async || {
                let log = self.text();
                match log.lines().find(|l| l.contains(needle)) {
                    Some(line) => Ok(line.to_string()),
                    None => Err(Text(log)),
                }
            },
        )
        .await
    }

    /// A tracing dispatcher that writes into this log as `leasehold run` writes to stderr: the
    /// same text format (without colour) and the same default filter.
    pub fn dispatch(&self) -> tracing::Dispatch {
        let filter = tracing_subscriber::EnvFilter::new(leasehold::cli::DEFAULT_LOG_FILTER);
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(self.clone())
            .finish();
        tracing::Dispatch::new(subscriber)
    }
}

/// A host whose log a test reads: a process or an in-process host, asked the same way.
pub trait Logged {
    /// The host's log.
    fn log(&self) -> &Log;

    /// Everything the host logged so far.
    fn log_text(&self) -> String {
        self.log().text()
    }

    /// How many lines the host logged so far: an offset for [`Logged::log_lines_from`].
    fn log_len(&self) -> usize {
        self.log().len()
    }

    /// The lines logged from line `offset` on (0-based), without copying the whole log.
    fn log_lines_from(&self, offset: usize) -> Vec<String> {
        self.log().lines_from(offset)
    }

    /// Waits up to `timeout` for a log line containing `needle`, and returns the first such line.
    fn wait_for_log(
        &self,
        needle: &str,
        timeout: Duration,
    ) -> impl std::future::Future<Output = anyhow::Result<String>> {
        self.log().wait_for(needle, timeout)
    }
}

/// The batched renewals `host` logged from line `from` on (`renewal returned elapsed=…`).
pub fn renewals(host: &impl Logged, from: usize) -> Vec<Duration> {
    host.log_lines_from(from)
        .iter()
        .filter(|l| l.contains("renewal returned"))
        .filter_map(|l| l.split("elapsed=").nth(1)?.split_whitespace().next())
        .filter_map(crate::stats::parse_debug_duration)
        .collect()
}

/// One formatted event, split into the log's lines.
pub struct LineWriter(Log);

impl std::io::Write for LineWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // The formatter writes each event whole, newline included.
        for line in String::from_utf8_lossy(buf).lines() {
            self.0.push(line.to_string());
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Log {
    type Writer = LineWriter;

    fn make_writer(&'a self) -> LineWriter {
        LineWriter(self.clone())
    }
}
