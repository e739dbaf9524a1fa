//! What the host and a keeper say to each other, one line at a time: orders on the keeper's
//! stdin, reports (and the child's output) on its stdout. Pure text in and out, so both ends are
//! tested without a process.
//!
//! Deadlines travel as absolute readings of `CLOCK_MONOTONIC` in nanoseconds: the clock is one
//! for every process of the machine, so a deadline means the same instant to both ends however
//! late the keeper reads it (a relative "in 2 s" would stretch by every delay on the way).

use std::fmt;

/// The longest line of a child's output that is passed on whole; the rest of a longer line is
/// dropped and counted, so one line without a newline cannot hold megabytes in the keeper or
/// the host. The same bound as a plugin's output lines.
pub const MAX_LINE_BYTES: usize = 8 * 1024;

/// An order from the host to a keeper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// The child may run until this reading of `CLOCK_MONOTONIC` (ns), no longer: the keeper
    /// sends the stop signal a grace before it and kills the whole tree at it. Sent again on
    /// every renewal that moves the term's deadline.
    Until(u64),
    /// Stop the child now: the stop signal at once, the whole tree killed after the grace (or at
    /// the deadline, if that comes first).
    Stop,
}

impl fmt::Display for Order {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Order::Until(ns) => write!(f, "until {ns}"),
            Order::Stop => f.write_str("stop"),
        }
    }
}

impl Order {
    /// Reads an order line (without its newline); `None` for anything else.
    pub fn parse(line: &str) -> Option<Order> {
        match line.split_once(' ') {
            Some(("until", ns)) => ns.parse().ok().map(Order::Until),
            None if line == "stop" => Some(Order::Stop),
            _ => None,
        }
    }
}

/// Why a keeper signalled or killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The host asked ([`Order::Stop`]).
    Asked,
    /// The deadline came without a later one from the host (a frozen or cut-off host, or
    /// renewals that stopped landing).
    Deadline,
    /// The grace after the stop signal ran out.
    Grace,
    /// The host is gone: the keeper's stdin closed.
    HostGone,
    /// The child exited and left processes behind.
    Leftovers,
}

impl Why {
    fn as_str(self) -> &'static str {
        match self {
            Why::Asked => "asked",
            Why::Deadline => "deadline",
            Why::Grace => "grace",
            Why::HostGone => "host-gone",
            Why::Leftovers => "leftovers",
        }
    }

    fn parse(text: &str) -> Option<Why> {
        [
            Why::Asked,
            Why::Deadline,
            Why::Grace,
            Why::HostGone,
            Why::Leftovers,
        ]
        .into_iter()
        .find(|w| w.as_str() == text)
    }
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this code.
    Code(i32),
    /// A signal of this number ended it.
    Signal(i32),
}

impl fmt::Display for Ended {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ended::Code(code) => write!(f, "code {code}"),
            Ended::Signal(signal) => write!(f, "signal {signal}"),
        }
    }
}

/// A line from a keeper to the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// The child started with this pid (its process group has the same id).
    Started(u32),
    /// The child could not be started: why, as the system said.
    NotStarted(String),
    /// A line the child wrote to stdout (`err == false`) or stderr, cut at [`MAX_LINE_BYTES`]
    /// with `cut` bytes dropped.
    Output {
        /// Whether it came from stderr.
        err: bool,
        /// The line, without its newline.
        text: String,
        /// How many bytes of the line were dropped.
        cut: u64,
    },
    /// The stop signal went to the child's process group.
    Signalled(Why),
    /// Every process of the tree was sent SIGKILL.
    Killed(Why),
    /// The child itself ended.
    Exited(Ended),
    /// No process of the tree is left; the keeper exits after this line.
    Gone,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Report::Started(pid) => write!(f, "started {pid}"),
            Report::NotStarted(why) => write!(f, "not-started {}", one_line(why)),
            Report::Output { err, text, cut } => {
                let stream = if *err { "err" } else { "out" };
                write!(f, "{stream} {cut} {}", one_line(text))
            }
            Report::Signalled(why) => write!(f, "signalled {why}"),
            Report::Killed(why) => write!(f, "killed {why}"),
            Report::Exited(ended) => write!(f, "exited {ended}"),
            Report::Gone => f.write_str("gone"),
        }
    }
}

impl Report {
    /// Reads a report line (without its newline); `None` for anything else.
    pub fn parse(line: &str) -> Option<Report> {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        Some(match word {
            "started" => Report::Started(rest.parse().ok()?),
            "not-started" => Report::NotStarted(rest.to_string()),
            "out" | "err" => {
                let (cut, text) = rest.split_once(' ').unwrap_or((rest, ""));
                Report::Output {
                    err: word == "err",
                    text: text.to_string(),
                    cut: cut.parse().ok()?,
                }
            }
            "signalled" => Report::Signalled(Why::parse(rest)?),
            "killed" => Report::Killed(Why::parse(rest)?),
            "exited" => Report::Exited(match rest.split_once(' ')? {
                ("code", n) => Ended::Code(n.parse().ok()?),
                ("signal", n) => Ended::Signal(n.parse().ok()?),
                _ => return None,
            }),
            "gone" if rest.is_empty() => Report::Gone,
            _ => return None,
        })
    }
}

/// `text` on one line: a carriage return or newline inside it (a child's `\r` progress output)
/// would split the report.
fn one_line(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains(['\n', '\r']) {
        text.replace(['\n', '\r'], " ").into()
    } else {
        text.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_order_and_report_reads_back_as_written() {
        for order in [Order::Until(0), Order::Until(u64::MAX), Order::Stop] {
            assert_eq!(Order::parse(&order.to_string()), Some(order));
        }
        let reports = [
            Report::Started(42),
            Report::NotStarted("no such file: ./x".into()),
            Report::Output {
                err: false,
                text: "hello  world ".into(),
                cut: 0,
            },
            Report::Output {
                err: true,
                text: String::new(),
                cut: 7,
            },
            Report::Signalled(Why::Deadline),
            Report::Killed(Why::HostGone),
            Report::Killed(Why::Leftovers),
            Report::Exited(Ended::Code(-1)),
            Report::Exited(Ended::Signal(9)),
            Report::Gone,
        ];
        for report in reports {
            assert_eq!(Report::parse(&report.to_string()), Some(report));
        }
    }

    #[test]
    fn a_line_break_inside_output_cannot_forge_a_report() {
        let report = Report::Output {
            err: false,
            text: "x\ngone\rkilled asked".into(),
            cut: 0,
        };
        let line = report.to_string();
        assert!(!line.contains(['\n', '\r']), "{line:?}");
        assert!(matches!(Report::parse(&line), Some(Report::Output { .. })));
    }

    #[test]
    fn anything_else_is_no_order_and_no_report() {
        for line in ["", "until", "until -1", "until x", "stop now", "STOP"] {
            assert_eq!(Order::parse(line), None, "{line:?}");
        }
        for line in [
            "",
            "started",
            "exited code",
            "exited twice 3",
            "gone 1",
            "killed why",
        ] {
            assert_eq!(Report::parse(line), None, "{line:?}");
        }
    }
}
