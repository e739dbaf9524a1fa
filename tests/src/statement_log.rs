//! PostgreSQL's own record of the statements it ran (`log_min_duration_statement = 0`), read by
//! the handoff benchmark to check its figures against the database: when the release ran, how
//! long it and the successor's statements took on the server. The server stamps its lines in
//! whole milliseconds (`log_line_prefix = '%m [%p] '`), so these readings agree with the hosts'
//! own microsecond timestamps to within a millisecond, not better.

use std::path::Path;

/// The prefix [`crate::pg::Postgres::log_every_statement`] sets: a millisecond timestamp and
/// the server process.
pub const LINE_PREFIX: &str = "%m [%p] ";

/// One statement phase the server logged.
#[derive(Debug, Clone, PartialEq)]
pub struct Logged {
    /// When the line was written (the phase's end), in seconds since midnight UTC.
    pub at: f64,
    /// The server process that ran it.
    pub pid: u32,
    /// What the phase took on the server, in milliseconds.
    pub took_ms: f64,
    /// `parse`, `bind`, `execute` or `statement` (the simple protocol).
    pub phase: String,
    /// The first line of the statement's text.
    pub text: String,
}

impl Logged {
    /// Whether its text starts with `start` (after the phase's statement name).
    pub fn runs(&self, start: &str) -> bool {
        self.text.trim_start().starts_with(start)
    }
}

/// The lines of the log from byte `from` on, as statements; other lines (continuations of a
/// statement's text, messages) are skipped.
pub fn read_from(path: &Path, from: u64) -> Vec<Logged> {
    let Ok(bytes) = std::fs::read(path) else {
        return Vec::new();
    };
    let from = usize::try_from(from).unwrap_or(usize::MAX).min(bytes.len());
    String::from_utf8_lossy(&bytes[from..])
        .lines()
        .filter_map(parse)
        .collect()
}

/// The log's length now, to read what comes after it.
pub fn len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// One line: `2026-11-29 03:40:01.123 UTC [1234] LOG:  duration: 0.212 ms  execute s1: WITH …`.
pub fn parse(line: &str) -> Option<Logged> {
    let mut words = line.splitn(4, ' ');
    let (_date, time, _zone, rest) = (words.next()?, words.next()?, words.next()?, words.next()?);
    let mut hms = time.split(':');
    let h: f64 = hms.next()?.parse().ok()?;
    let m: f64 = hms.next()?.parse().ok()?;
    let s: f64 = hms.next()?.parse().ok()?;
    let (pid, rest) = rest.strip_prefix('[')?.split_once("] ")?;
    let rest = rest.strip_prefix("LOG:  duration: ")?;
    let (took, rest) = rest.split_once(" ms  ")?;
    let (phase, text) = rest.split_once(": ").unwrap_or((rest, ""));
    let phase = phase.split_whitespace().next()?.to_string();
    Some(Logged {
        at: h * 3600.0 + m * 60.0 + s,
        pid: pid.parse().ok()?,
        took_ms: took.parse().ok()?,
        phase,
        text: text.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_line_of_the_extended_protocol_is_read() {
        let line = "2026-11-29 03:40:01.123 UTC [1234] LOG:  duration: 0.212 ms  execute sqlx_s_4: WITH released AS (";
        let logged = parse(line).unwrap();
        assert!((logged.at - (3.0 * 3600.0 + 40.0 * 60.0 + 1.123)).abs() < 1e-9);
        assert_eq!(logged.pid, 1234);
        assert!((logged.took_ms - 0.212).abs() < 1e-9);
        assert_eq!(logged.phase, "execute");
        assert!(logged.runs("WITH released AS"));
    }

    #[test]
    fn other_lines_are_skipped() {
        assert_eq!(
            parse("                UPDATE leasehold_leases AS l SET"),
            None
        );
        assert_eq!(
            parse("2026-11-29 03:40:01.123 UTC [1234] LOG:  checkpoint starting: time"),
            None
        );
    }
}
