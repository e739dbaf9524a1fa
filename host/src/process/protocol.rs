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

/// A reading of `CLOCK_MONOTONIC` in nanoseconds, the clock deadlines and reports' stamps are
/// given on.
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

/// An order from the host to a keeper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
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

/// What a keeper does with the processes its child leaves behind when it exits on its own,
/// and when it starts the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// The tree is the keeper's to the end: what the child leaves behind is killed (a process
    /// under a lease, a health or deactivate script).
    #[default]
    Own,
    /// What the child leaves behind when it exits before its deadline is left running: it is
    /// what the child started (a service's `activate` script starting its daemon). A child still
    /// running at its deadline is killed with its whole tree, as ever.
    Leave,
    /// The child is not started until the host asks ([`Order::Stop`]), the host is gone, or the
    /// soft deadline (a grace before the last) passes unextended: a service's `deactivate`, run
    /// by the keeper when its host cannot. It is then killed at the deadline, or a grace after
    /// it began when that is later than the deadline (the whole grace for a late start).
    Deferred,
}

impl Mode {
    /// The word `leasehold keeper --mode` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Own => "own",
            Mode::Leave => "leave",
            Mode::Deferred => "deferred",
        }
    }

    /// Reads [`Mode::as_str`]'s word.
    pub fn parse(text: &str) -> Option<Mode> {
        [Mode::Own, Mode::Leave, Mode::Deferred]
            .into_iter()
            .find(|m| m.as_str() == text)
    }
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
    /// A deferred command ([`Mode::Deferred`]) started, for this reason (asked, the deadline,
    /// or the host gone).
    Began(Why),
    /// The stop signal went to the child's process group.
    Signalled(Why),
    /// Every process of the tree was sent SIGKILL.
    Killed(Why),
    /// The child itself ended.
    Exited(Ended),
    /// The child exited leaving `count` processes of its tree behind: killed next
    /// ([`Report::Killed`] with [`Why::Leftovers`]), or left running ([`Mode::Leave`]; then
    /// `output_held` says they still held the child's output pipes when the keeper let go, so
    /// what they write there is lost, and may end them with SIGPIPE).
    Left {
        /// How many processes.
        count: u32,
        /// Whether they still held the child's stdout or stderr.
        output_held: bool,
    },
    /// The keeper dropped this much of the child's output (lines, and their bytes as written):
    /// the host was not reading it as fast as the child wrote, and the keeper's queue is bounded.
    Dropped {
        /// Lines.
        lines: u64,
        /// Their bytes.
        bytes: u64,
    },
    /// No process of the tree is left (or, with [`Mode::Leave`], none the keeper keeps); the
    /// keeper exits after this line.
    Gone,
}

/// A report as the keeper writes it: control reports carry the keeper's own reading of
/// `CLOCK_MONOTONIC` (ns) when the thing happened, so a host that was frozen while its keeper
/// acted can tell when the keeper acted, not when the host read of it. Output lines carry none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timed {
    /// What happened.
    pub report: Report,
    /// When, on the keeper's monotonic clock; `None` for output (and a keeper that did not say).
    pub at: Option<u64>,
}

impl Timed {
    /// `report`, stamped with `at` unless it is output.
    pub fn new(report: Report, at: u64) -> Timed {
        let at = (!matches!(report, Report::Output { .. })).then_some(at);
        Timed { report, at }
    }

    /// Reads a line as [`Timed`]'s `Display` writes it; `None` for anything that is no report.
    pub fn parse(line: &str) -> Option<Timed> {
        if line.starts_with("out ") || line.starts_with("err ") {
            return Report::parse(line).map(|report| Timed { report, at: None });
        }
        let stamped = line
            .rsplit_once(" @")
            .and_then(|(rest, at)| Some((rest, at.parse::<u64>().ok()?)));
        match stamped {
            Some((rest, at)) => Report::parse(rest).map(|report| Timed {
                report,
                at: Some(at),
            }),
            None => Report::parse(line).map(|report| Timed { report, at: None }),
        }
    }
}

impl fmt::Display for Timed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            Some(at) => write!(f, "{} @{at}", self.report),
            None => write!(f, "{}", self.report),
        }
    }
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
            Report::Began(why) => write!(f, "began {why}"),
            Report::Signalled(why) => write!(f, "signalled {why}"),
            Report::Killed(why) => write!(f, "killed {why}"),
            Report::Exited(ended) => write!(f, "exited {ended}"),
            Report::Left {
                count,
                output_held: false,
            } => write!(f, "left {count}"),
            Report::Left {
                count,
                output_held: true,
            } => write!(f, "left {count} output-held"),
            Report::Dropped { lines, bytes } => write!(f, "dropped {lines} {bytes}"),
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
            "began" => Report::Began(Why::parse(rest)?),
            "signalled" => Report::Signalled(Why::parse(rest)?),
            "killed" => Report::Killed(Why::parse(rest)?),
            "exited" => Report::Exited(match rest.split_once(' ')? {
                ("code", n) => Ended::Code(n.parse().ok()?),
                ("signal", n) => Ended::Signal(n.parse().ok()?),
                _ => return None,
            }),
            "left" => match rest.split_once(' ') {
                None => Report::Left {
                    count: rest.parse().ok()?,
                    output_held: false,
                },
                Some((count, "output-held")) => Report::Left {
                    count: count.parse().ok()?,
                    output_held: true,
                },
                Some(_) => return None,
            },
            "dropped" => {
                let (lines, bytes) = rest.split_once(' ')?;
                Report::Dropped {
                    lines: lines.parse().ok()?,
                    bytes: bytes.parse().ok()?,
                }
            }
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
            Report::Began(Why::HostGone),
            Report::Left {
                count: 3,
                output_held: false,
            },
            Report::Left {
                count: 1,
                output_held: true,
            },
            Report::Dropped {
                lines: 12,
                bytes: 3400,
            },
            Report::Gone,
        ];
        for report in reports {
            assert_eq!(Report::parse(&report.to_string()), Some(report.clone()));
            let timed = Timed::new(report, 123_456_789);
            assert_eq!(Timed::parse(&timed.to_string()), Some(timed));
        }
        for mode in [Mode::Own, Mode::Leave, Mode::Deferred] {
            assert_eq!(Mode::parse(mode.as_str()), Some(mode));
        }
    }

    #[test]
    fn output_that_ends_like_a_stamp_is_output_whole_and_a_report_without_one_has_no_time() {
        let line = "out 0 done @42";
        let timed = Timed::parse(line).unwrap();
        assert_eq!(timed.at, None);
        assert!(matches!(timed.report, Report::Output { ref text, .. } if text == "done @42"));
        assert_eq!(
            Timed::parse("gone"),
            Some(Timed {
                report: Report::Gone,
                at: None
            })
        );
        assert_eq!(Timed::parse("gone @x"), None);
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
