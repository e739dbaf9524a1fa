//! What bound work may write to the host's log over time: one token bucket per plugin, in bytes,
//! shared by everything it writes (the `log` import, stdout, stderr) and by all of its stores —
//! every term, every shard of a group, every version of its file — so that neither a schedule of
//! short calls, nor many instances, nor a reload loop gets it more than its rate; and one per
//! bound process or service, shared by all of its runs ([`OutputRate::for_process`]).
//!
//! The per-call budgets (the runtime's `output`, [`crate::runtime::host::LOG_LINES_PER_CALL`]) bound one call;
//! this bounds the plugin across calls. A line costs its text plus [`LINE_COST`], so the bucket
//! bounds lines as well as bytes. What is refused is dropped and counted
//! (`leasehold_plugin_log_dropped_total`), together with what the per-call budgets dropped, and
//! reported in one host line per plugin at most every [`REPORT_INTERVAL`]: the first at the end of
//! the first call that dropped anything, then at most one per interval.
//!
//! - `OutputRates`: the buckets of every plugin the runtime has run, by plugin name;
//! - [`OutputRate`]: one plugin's (or process's) bucket, what it dropped and when that was last reported;
//! - `Bucket` and `Pending`: the pure logic, driven by the instants it is given.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::time::Instant;

use crate::metrics::PluginLabel;

/// Where dropped lines are counted, by the name of the work that wrote them
/// (`leasehold_plugin_log_dropped`, which the runtime registers).
pub type DroppedLines = Family<PluginLabel, Counter>;

/// Bytes a second a plugin may write to the host's log, lines costed as [`LINE_COST`] plus their
/// text. A chatty plugin's steady info lines fit several times over, while a flood adds at most
/// ~1.9 MiB a minute per plugin (the host's own text included): hours before a disk notices.
pub(crate) const RATE_BYTES_PER_SECOND: u64 = 32 << 10;

/// What a plugin may write at once after a quiet spell: a stack of 200 lines of 300 bytes on an
/// error (200 × (300 + [`LINE_COST`]) ≈ 109 KiB) gets through whole, and at most 512 lines, so
/// that even 16 plugins bursting together do not fill the host's 8,192-line log queue.
pub(crate) const BURST_BYTES: u64 = 128 << 10;

/// What a line costs besides its text: what the host writes around it (timestamp, level, target,
/// plugin, lease and stream: ~120 bytes as text, ~170 as JSON), rounded up so that the bucket
/// also bounds lines, at [`RATE_BYTES_PER_SECOND`] / 256 = 128 a second.
pub(crate) const LINE_COST: u64 = 256;

/// How often at most a plugin's dropped output is reported: often enough to follow a flood as it
/// happens, rarely enough that the reports are no flood themselves.
pub(crate) const REPORT_INTERVAL: Duration = Duration::from_secs(10);

/// The target of the report of dropped output, as it was when the runtime kept the rate: log
/// filters name it.
const LOG_TARGET: &str = "leasehold::runtime::rate";

/// A token bucket in bytes: full at [`BURST_BYTES`], refilled at [`RATE_BYTES_PER_SECOND`].
#[derive(Debug, Clone)]
pub(crate) struct Bucket {
    /// Bytes that may be written now (fractions carried between refills).
    tokens: f64,
    /// When `tokens` was last refilled.
    at: Instant,
}

impl Bucket {
    /// A full bucket.
    pub(crate) fn full(now: Instant) -> Self {
        Bucket {
            tokens: BURST_BYTES as f64,
            at: now,
        }
    }

    /// Takes the cost of a line of `text_bytes` if the bucket holds it; else takes nothing.
    pub(crate) fn take(&mut self, now: Instant, text_bytes: usize) -> bool {
        self.refill(now);
        let cost = (text_bytes as u64).saturating_add(LINE_COST) as f64;
        if cost > self.tokens {
            return false;
        }
        self.tokens -= cost;
        true
    }

    /// Whether the bucket is full at `now`: it then owes nothing, and a fresh one is the same.
    fn is_full(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.tokens >= BURST_BYTES as f64
    }

    fn refill(&mut self, now: Instant) {
        // An instant before `at` (another instance's clock read a moment earlier) adds nothing.
        let elapsed = now.saturating_duration_since(self.at);
        self.tokens = (self.tokens + elapsed.as_secs_f64() * RATE_BYTES_PER_SECOND as f64)
            .min(BURST_BYTES as f64);
        self.at = self.at.max(now);
    }
}

/// Lines and the bytes the guest wrote in them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Lines.
    pub lines: u64,
    /// Their bytes as the guest wrote them.
    pub bytes: u64,
}

impl Dropped {
    /// Adds `other` to these.
    pub fn add(&mut self, other: Dropped) {
        self.lines = self.lines.saturating_add(other.lines);
        self.bytes = self.bytes.saturating_add(other.bytes);
    }
}

/// What a plugin dropped since its last report, and when that was.
#[derive(Debug, Clone, Default)]
pub(crate) struct Pending {
    /// Over the rate.
    over_rate: Dropped,
    /// Over a call's budget.
    over_budget: Dropped,
    /// When the first of these was dropped.
    since: Option<Instant>,
    /// When the last report was made.
    reported: Option<Instant>,
}

/// One report of dropped output: what, and over how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Report {
    /// Dropped over the rate.
    pub(crate) over_rate: Dropped,
    /// Dropped over a call's budget.
    pub(crate) over_budget: Dropped,
    /// Since the last report, or since the first drop for a first report.
    pub(crate) over: Duration,
}

impl Pending {
    fn add(&mut self, now: Instant, over_rate: Dropped, over_budget: Dropped) {
        if over_rate.lines + over_budget.lines == 0 {
            return;
        }
        self.over_rate.add(over_rate);
        self.over_budget.add(over_budget);
        self.since.get_or_insert(now);
    }

    fn is_empty(&self) -> bool {
        self.since.is_none()
    }

    /// The report due at `now`, if one is: during a call, once [`REPORT_INTERVAL`] has passed
    /// since the last report (or the first drop); at a call's end, also when there was none yet.
    pub(crate) fn due(&mut self, now: Instant, call_ended: bool) -> Option<Report> {
        let since = self.since?;
        let start = self.reported.unwrap_or(since);
        let waited = now.saturating_duration_since(start) >= REPORT_INTERVAL;
        if !(waited || call_ended && self.reported.is_none()) {
            return None;
        }
        let report = Report {
            over_rate: std::mem::take(&mut self.over_rate),
            over_budget: std::mem::take(&mut self.over_budget),
            over: now.saturating_duration_since(start),
        };
        self.since = None;
        self.reported = Some(now);
        Some(report)
    }
}

/// One plugin's bucket, shared by all of its stores; or one bound process's, shared by all of
/// its runs ([`OutputRate::for_process`]).
#[derive(Debug)]
pub struct OutputRate {
    /// What writes through it, for the report: `plugin` or `process`.
    kind: &'static str,
    /// The plugin (or process), for the report.
    plugin: Arc<str>,
    /// `leasehold_plugin_log_dropped_total` of the plugin.
    dropped: Counter,
    /// The bucket and what waits to be reported.
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    bucket: Bucket,
    pending: Pending,
}

impl OutputRate {
    fn new(plugin: Arc<str>, dropped: Counter, now: Instant) -> Self {
        OutputRate {
            kind: "plugin",
            plugin,
            dropped,
            state: Mutex::new(State {
                bucket: Bucket::full(now),
                pending: Pending::default(),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Each step leaves the state whole: a panic elsewhere cannot poison it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The bucket of a bound process `name`, at the same rate as a plugin's: its output lines
    /// cost the host's log what a guest's do. Its dropped lines are counted under its name.
    pub(crate) fn for_process(name: &str, dropped: &DroppedLines) -> Self {
        let name: Arc<str> = name.into();
        let dropped = dropped.get_or_create(&PluginLabel::of(&name)).clone();
        OutputRate {
            kind: "process",
            ..OutputRate::new(name, dropped, Instant::now())
        }
    }

    /// Whether a line of `text_bytes` (as the host would write it) may be written now; if not, it
    /// is counted as dropped, `written` being its size as the guest wrote it.
    pub fn admit(&self, text_bytes: usize, written: usize) -> bool {
        self.admit_at(Instant::now(), text_bytes, written)
    }

    fn admit_at(&self, now: Instant, text_bytes: usize, written: usize) -> bool {
        let mut state = self.state();
        if state.bucket.take(now, text_bytes) {
            return true;
        }
        let line = Dropped {
            lines: 1,
            bytes: written as u64,
        };
        state.pending.add(now, line, Dropped::default());
        let report = state.pending.due(now, false);
        drop(state);
        self.dropped.inc();
        if let Some(report) = report {
            self.report(&report);
        }
        false
    }

    /// Counts `lines` (`bytes` as written) that never reached the host: a process's keeper
    /// dropped them when the host did not read as fast as the process wrote. Reported with the
    /// lines the rate dropped.
    pub fn dropped_before(&self, lines: u64, bytes: u64) {
        let now = Instant::now();
        let report = {
            let mut state = self.state();
            state
                .pending
                .add(now, Dropped { lines, bytes }, Dropped::default());
            state.pending.due(now, false)
        };
        self.dropped.inc_by(lines);
        if let Some(report) = report {
            self.report(&report);
        }
    }

    /// A process's run is over: what it had dropped is reported now if nothing of it was yet,
    /// as at a plugin call's end, so a short flood is told too.
    pub fn run_ended(&self) {
        self.call_ended(Dropped::default());
    }

    /// Ends a call that dropped `over_budget` for want of its per-call budget, and reports what
    /// waits to be, if that is due.
    pub(crate) fn call_ended(&self, over_budget: Dropped) {
        let now = Instant::now();
        let report = {
            let mut state = self.state();
            state.pending.add(now, Dropped::default(), over_budget);
            state.pending.due(now, true)
        };
        self.dropped.inc_by(over_budget.lines);
        if let Some(report) = report {
            self.report(&report);
        }
    }

    /// Lines dropped so far, over the rate or a call's budget.
    #[cfg(test)]
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.get()
    }

    fn report(&self, report: &Report) {
        let mut parts = Vec::new();
        for (dropped, why) in [
            (report.over_rate, "over its rate"),
            (report.over_budget, "over the per-call budget"),
        ] {
            if dropped.lines > 0 {
                parts.push(format!(
                    "{} lines ({}) {why}",
                    dropped.lines,
                    size(dropped.bytes)
                ));
            }
        }
        tracing::warn!(
            target: LOG_TARGET,
            plugin = &*self.plugin,
            "{} output dropped in the last {:.1} s: {} (its rate: {} a second, burst {})",
            self.kind,
            report.over.as_secs_f64(),
            parts.join(", "),
            size(RATE_BYTES_PER_SECOND),
            size(BURST_BYTES),
        );
    }
}

/// `bytes` for a reader: `300 B`, `12.5 KiB`, `800.0 MiB`.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// The bucket of every plugin the runtime has run, by name: a plugin's file replaced, removed and
/// put back, or its lease lost and won again, finds the bucket it left.
#[derive(Debug)]
pub(crate) struct OutputRates {
    /// Where each plugin's dropped lines are counted.
    dropped: DroppedLines,
    /// The buckets.
    plugins: Mutex<HashMap<Arc<str>, Arc<OutputRate>>>,
}

impl OutputRates {
    pub(crate) fn new(dropped: DroppedLines) -> Self {
        OutputRates {
            dropped,
            plugins: Mutex::new(HashMap::new()),
        }
    }

    /// `plugin`'s bucket, made full the first time it is asked for.
    pub(crate) fn of(&self, plugin: &Arc<str>) -> Arc<OutputRate> {
        let mut plugins = self.plugins.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(rate) = plugins.get(plugin) {
            return rate.clone();
        }
        let now = Instant::now();
        // Forget the buckets no store holds that owe nothing: a fresh one would be the same, and
        // a host that saw many plugin names come and go keeps none of them.
        plugins.retain(|_, rate| {
            Arc::strong_count(rate) > 1 || {
                let mut state = rate.state();
                !(state.bucket.is_full(now) && state.pending.is_empty())
            }
        });
        let dropped = self.dropped.get_or_create(&PluginLabel::of(plugin)).clone();
        let rate = Arc::new(OutputRate::new(plugin.clone(), dropped, now));
        plugins.insert(plugin.clone(), rate.clone());
        rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_full_bucket_lets_a_stack_of_200_lines_through_then_only_the_rate() {
        let t0 = Instant::now();
        let mut bucket = Bucket::full(t0);
        assert!(
            (0..200).all(|_| bucket.take(t0, 300)),
            "the stack got through"
        );
        // What is left of the burst, then nothing more at the same instant.
        let mut more = 0;
        while bucket.take(t0, 300) {
            more += 1;
        }
        assert_eq!(more, (BURST_BYTES / (300 + LINE_COST)) - 200);
        // A second later: one second's rate, and what was left of a line's cost before.
        let t1 = t0 + SECOND;
        let mut in_a_second = 0;
        while bucket.take(t1, 300) {
            in_a_second += 1;
        }
        let cost = 300 + LINE_COST;
        assert_eq!(
            in_a_second,
            (BURST_BYTES % cost + RATE_BYTES_PER_SECOND) / cost
        );
    }

    #[test]
    fn a_flood_of_empty_lines_is_held_to_the_line_rate() {
        let t0 = Instant::now();
        let mut bucket = Bucket::full(t0);
        let mut admitted = 0u64;
        // Ten seconds of a line every millisecond.
        for ms in 0..10_000 {
            admitted += u64::from(bucket.take(t0 + Duration::from_millis(ms), 0));
        }
        let most = (BURST_BYTES + 10 * RATE_BYTES_PER_SECOND) / LINE_COST;
        assert!(
            admitted <= most && admitted >= most - 2,
            "{admitted} of {most}"
        );
    }

    #[test]
    fn a_bucket_refills_to_its_burst_and_no_further() {
        let t0 = Instant::now();
        let mut bucket = Bucket::full(t0);
        assert!(bucket.take(t0, 64 << 10));
        assert!(!bucket.is_full(t0));
        let hour = t0 + Duration::from_secs(3600);
        assert!(bucket.is_full(hour));
        let mut lines = 0;
        while bucket.take(hour, 0) {
            lines += 1;
        }
        assert_eq!(lines, BURST_BYTES / LINE_COST);
        // A line longer than the burst never gets through, and costs nothing.
        let mut bucket = Bucket::full(t0);
        assert!(!bucket.take(t0, BURST_BYTES as usize));
        assert!(bucket.is_full(t0));
        // An instant read a moment earlier by another instance takes nothing back.
        assert!(bucket.take(t0 + SECOND, 0));
        assert!(bucket.take(t0, 0));
    }

    #[test]
    fn drops_are_reported_after_the_first_call_then_once_per_interval() {
        let t0 = Instant::now();
        let mut pending = Pending::default();
        let line = Dropped {
            lines: 1,
            bytes: 100,
        };
        assert_eq!(
            pending.due(t0, true),
            None,
            "nothing dropped, nothing to say"
        );
        // A first drop is reported when its call ends, not as it happens.
        pending.add(t0, line, Dropped::default());
        assert_eq!(pending.due(t0 + SECOND, false), None);
        let first = pending
            .due(t0 + 2 * SECOND, true)
            .expect("first call's report");
        assert_eq!(first.over_rate, line);
        assert_eq!(first.over, 2 * SECOND);
        // Then a flood: a drop every 10 ms and a call ending every 100 ms, for 25 s.
        let mut reports = Vec::new();
        for ms in (2_010..27_000).step_by(10) {
            let now = t0 + Duration::from_millis(ms);
            pending.add(
                now,
                line,
                Dropped {
                    lines: 5,
                    bytes: 50,
                },
            );
            reports.extend(pending.due(now, ms % 100 == 0).map(|r| (ms, r)));
        }
        let at: Vec<u64> = reports.iter().map(|(ms, _)| *ms).collect();
        assert_eq!(at, [12_000, 22_000], "one report per interval");
        for (_, report) in &reports {
            assert_eq!(report.over, REPORT_INTERVAL);
            assert_eq!(
                report.over_rate,
                Dropped {
                    lines: 1_000,
                    bytes: 100_000
                }
            );
            assert_eq!(
                report.over_budget,
                Dropped {
                    lines: 5_000,
                    bytes: 50_000
                }
            );
        }
        // What came after the last report waits for the next interval, even at a call's end.
        assert_eq!(pending.due(t0 + Duration::from_millis(27_000), true), None);
        let last = pending
            .due(t0 + Duration::from_millis(32_000), true)
            .expect("the rest");
        assert_eq!(last.over_rate.lines, 499);
    }

    #[test]
    fn a_plugin_keeps_its_bucket_while_a_store_holds_it_and_idle_full_ones_are_forgotten() {
        let t0 = Instant::now();
        let rates = OutputRates::new(DroppedLines::default());
        let (a, b, c): (Arc<str>, Arc<str>, Arc<str>) = (Arc::from("a"), "b".into(), "c".into());
        let first = rates.of(&a);
        // Emptied by one store, the bucket is the same for the next (a reload, a shard).
        while first.admit_at(t0, 0, 0) {}
        assert!(!rates.of(&a).admit_at(t0, 0, 0));
        drop(first);
        // No store holds it, but it owes: it stays when another plugin's bucket is made.
        let b_store = rates.of(&b);
        assert!(
            !rates.of(&a).admit_at(t0, 0, 0),
            "a reload loop reset the bucket"
        );
        let dropped = rates.dropped.get(&PluginLabel::of("a")).map(|c| c.get());
        assert_eq!(dropped, Some(3));
        drop(b_store);
        let _c_store = rates.of(&c);
        let plugins = rates.plugins.lock().unwrap();
        assert!(!plugins.contains_key(&b), "an idle full bucket was kept");
        assert!(plugins.contains_key(&a));
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(size(300), "300 B");
        assert_eq!(size(12 << 10 | 512), "12.5 KiB");
        assert_eq!(size(800 << 20), "800.0 MiB");
    }
}
