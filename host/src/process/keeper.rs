//! The keeper: a small process of its own between the host and one child the host runs under a
//! lease (`leasehold keeper`, started by the host, never by a person). It exists so that the
//! child's deadline does not share the host's fate:
//!
//! - the host is killed: the keeper's stdin closes, and it kills the tree at once;
//! - the host is frozen (SIGSTOP, a debugger, a stuck runtime): no later deadline comes, and the
//!   keeper sends the stop signal a grace before the last deadline it was given and kills the
//!   tree at it, on its own clock;
//! - the keeper itself is killed: the child has it as its parent-death signal's parent and gets
//!   SIGKILL (what the child started may then outlive it: nothing is left to kill it).
//!
//! The keeper is the tree's subreaper ([`super::tree`]), in a process group of its own (a
//! terminal's Ctrl-C, sent to the host's group, does not reach it), and starts the child in
//! another, through itself again ([`exec_child`]): that second start sets the parent-death
//! signal and then becomes the command, with no unsafe code around `fork`.
//!
//! Threads, so that nothing the host or the child does can hold up the deadline: one reads
//! orders, one reaps, one writes reports, one per output stream; the main thread keeps time.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::time::Duration;

use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitOptions};

use super::protocol::{Ended, MAX_LINE_BYTES, Order, Report, Why};
use super::tree;

/// What a keeper is started with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The signal that asks the child to stop (SIGTERM unless configured).
    pub signal: Signal,
    /// How long the child has between the stop signal and SIGKILL.
    pub grace: Duration,
    /// The first deadline, as [`Order::Until`] gives later ones.
    pub until: u64,
    /// The command and its arguments.
    pub command: Vec<OsString>,
}

/// How often the keeper repeats its kill while processes are left: each round kills the
/// processes that the last one made its children.
const KILL_ROUND: Duration = Duration::from_millis(2);

/// How long the keeper waits, once the tree is gone, for the child's last output to be passed
/// on: the pipes closed when the tree died, so this is the time to write what was read.
const OUTPUT_DRAIN: Duration = Duration::from_millis(500);

/// A reading of `CLOCK_MONOTONIC` in nanoseconds, the clock deadlines are given on.
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

/// What the main thread hears.
enum Heard {
    /// An order from the host.
    Order(Order),
    /// The host's end of stdin closed.
    HostGone,
    /// A process of the tree ended and was reaped.
    Reaped(Pid, rustix::process::WaitStatus),
    /// The keeper has no child left: the tree is gone.
    NoChildren,
}

/// Runs the keeper until its tree is gone; the exit code is 0 unless the keeper itself could
/// not work (then 1, with the reason on stderr).
pub fn run(settings: Settings) -> ExitCode {
    let me = rustix::process::getpid();
    if let Err(e) = rustix::process::set_child_subreaper(Some(me)) {
        eprintln!("leasehold keeper: cannot become the subreaper of its tree: {e}");
        return ExitCode::FAILURE;
    }
    let (reports, last_written) = reporter();
    let Some(program) = std::env::current_exe().ok() else {
        eprintln!("leasehold keeper: cannot find its own executable");
        return ExitCode::FAILURE;
    };
    let spawned = Command::new(program)
        .arg("keeper")
        .arg("--child-of")
        .arg(me.as_raw_nonzero().to_string())
        .arg("--")
        .args(&settings.command)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let _ = reports.send(Report::NotStarted(e.to_string()));
            let _ = reports.send(Report::Gone);
            drop(reports);
            let _ = last_written.recv_timeout(OUTPUT_DRAIN);
            return ExitCode::SUCCESS;
        }
    };
    let Some(group) = Pid::from_raw(i32::try_from(child.id()).unwrap_or(0)) else {
        return ExitCode::FAILURE;
    };
    let _ = reports.send(Report::Started(child.id()));
    let (heard, hear) = mpsc::channel();
    let (drained, outputs_done) = mpsc::channel();
    for (err, stream) in [
        (
            false,
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        ),
        (
            true,
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        ),
    ] {
        if let Some(stream) = stream {
            let reports = reports.clone();
            let drained = drained.clone();
            std::thread::spawn(move || {
                pass_on(stream, err, &reports);
                let _ = drained.send(());
            });
        }
    }
    drop(drained);
    read_orders(heard.clone());
    reap(heard);
    keep_time(&settings, group, &hear, &reports);
    // The tree is gone; its pipes closed with it.
    let until = std::time::Instant::now() + OUTPUT_DRAIN;
    for _ in 0..2 {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if outputs_done.recv_timeout(left).is_err() {
            break;
        }
    }
    let _ = reports.send(Report::Gone);
    drop(reports);
    // The last line out before the keeper exits; a host that does not read (frozen) is not
    // waited for long.
    let _ = last_written.recv_timeout(OUTPUT_DRAIN);
    ExitCode::SUCCESS
}

/// The main thread's work: signal and kill as the deadlines say, until no process is left.
fn keep_time(
    settings: &Settings,
    group: Pid,
    hear: &mpsc::Receiver<Heard>,
    reports: &Sender<Report>,
) {
    let grace = u64::try_from(settings.grace.as_nanos()).unwrap_or(u64::MAX);
    let mut until = settings.until;
    // The kill after a stop the host asked for: the grace after it.
    let mut asked_by: Option<u64> = None;
    let mut signalled = false;
    let mut killing: Option<Why> = None;
    let mut exited = false;
    loop {
        let now = monotonic_ns();
        if killing.is_none() {
            if !signalled && now >= until.saturating_sub(grace) {
                tree::signal_group(group, settings.signal);
                signalled = true;
                let _ = reports.send(Report::Signalled(Why::Deadline));
            }
            if now >= until {
                killing = Some(Why::Deadline);
            } else if asked_by.is_some_and(|at| now >= at) {
                killing = Some(Why::Grace);
            }
            if let Some(why) = killing {
                let _ = reports.send(Report::Killed(why));
            }
        }
        let wait = if killing.is_some() {
            tree::kill_round(group);
            KILL_ROUND
        } else {
            let soft = if signalled {
                u64::MAX
            } else {
                until.saturating_sub(grace)
            };
            let next = soft.min(until).min(asked_by.unwrap_or(u64::MAX));
            Duration::from_nanos(next.saturating_sub(now))
        };
        match hear.recv_timeout(wait) {
            Ok(Heard::Order(Order::Until(ns))) => until = ns,
            Ok(Heard::Order(Order::Stop)) => {
                if !signalled {
                    tree::signal_group(group, settings.signal);
                    signalled = true;
                    let _ = reports.send(Report::Signalled(Why::Asked));
                }
                asked_by.get_or_insert(monotonic_ns().saturating_add(grace));
            }
            Ok(Heard::HostGone) => {
                if killing.is_none() {
                    killing = Some(Why::HostGone);
                    let _ = reports.send(Report::Killed(Why::HostGone));
                }
            }
            Ok(Heard::Reaped(pid, status)) => {
                if pid == group && !exited {
                    exited = true;
                    let ended = match (status.exit_status(), status.terminating_signal()) {
                        (Some(code), _) => Ended::Code(code),
                        (None, Some(signal)) => Ended::Signal(signal),
                        (None, None) => Ended::Code(-1),
                    };
                    let _ = reports.send(Report::Exited(ended));
                    // Whatever the child left behind goes with it.
                    if killing.is_none() && !tree::children().is_empty() {
                        killing = Some(Why::Leftovers);
                        let _ = reports.send(Report::Killed(Why::Leftovers));
                    }
                }
            }
            Ok(Heard::NoChildren) | Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// Writes each report on its own line to stdout, on a thread of its own: a host that does not
/// read (frozen) blocks this thread, never the one that keeps time.
/// The receiver hears once the last report, [`Report::Gone`], is written (or cannot be).
fn reporter() -> (Sender<Report>, mpsc::Receiver<()>) {
    let (send, receive) = mpsc::channel::<Report>();
    let (written, last_written) = mpsc::channel();
    std::thread::spawn(move || {
        let stdout = std::io::stdout();
        for report in receive {
            let mut out = stdout.lock();
            if writeln!(out, "{report}")
                .and_then(|()| out.flush())
                .is_err()
            {
                // The host is gone; the stdin thread says so too.
                break;
            }
            if report == Report::Gone {
                break;
            }
        }
        let _ = written.send(());
    });
    (send, last_written)
}

/// Passes each line of the child's `stream` on as a report, cut at [`MAX_LINE_BYTES`], until
/// the stream closes.
fn pass_on(stream: Box<dyn Read + Send>, err: bool, reports: &Sender<Report>) {
    let mut reader = BufReader::with_capacity(MAX_LINE_BYTES, stream);
    let mut line: Vec<u8> = Vec::with_capacity(256);
    let mut cut: u64 = 0;
    loop {
        let chunk = match reader.fill_buf() {
            Ok([]) => break,
            Ok(chunk) => chunk,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let (part, ends) = match chunk.iter().position(|&b| b == b'\n') {
            Some(at) => (&chunk[..at], Some(at + 1)),
            None => (chunk, None),
        };
        let room = MAX_LINE_BYTES.saturating_sub(line.len());
        line.extend_from_slice(&part[..part.len().min(room)]);
        cut += (part.len().saturating_sub(room)) as u64;
        let used = ends.unwrap_or(chunk.len());
        reader.consume(used);
        if ends.is_some() {
            send_line(reports, err, &mut line, &mut cut);
        }
    }
    if !line.is_empty() || cut > 0 {
        send_line(reports, err, &mut line, &mut cut);
    }
}

fn send_line(reports: &Sender<Report>, err: bool, line: &mut Vec<u8>, cut: &mut u64) {
    let text = String::from_utf8_lossy(line).into_owned();
    let _ = reports.send(Report::Output {
        err,
        text,
        cut: *cut,
    });
    line.clear();
    *cut = 0;
}

/// Reads orders from stdin on a thread of its own; its end (the host closed it, or died) is
/// [`Heard::HostGone`]. A line that is no order is ignored.
fn read_orders(heard: Sender<Heard>) {
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut line = String::new();
        loop {
            line.clear();
            match stdin.lock().read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if let Some(order) = Order::parse(line.trim_end_matches('\n'))
                        && heard.send(Heard::Order(order)).is_err()
                    {
                        return;
                    }
                }
            }
        }
        let _ = heard.send(Heard::HostGone);
    });
}

/// Reaps every process of the tree as it ends, on a thread of its own, until the keeper has no
/// child left.
fn reap(heard: Sender<Heard>) {
    std::thread::spawn(move || {
        loop {
            match rustix::process::wait(WaitOptions::empty()) {
                Ok(Some((pid, status))) => {
                    if heard.send(Heard::Reaped(pid, status)).is_err() {
                        return;
                    }
                }
                Err(Errno::INTR) => {}
                Ok(None) | Err(_) => break,
            }
        }
        let _ = heard.send(Heard::NoChildren);
    });
}

/// The child's own start (`leasehold keeper --child-of PID -- CMD …`): asks for SIGKILL when its
/// parent, the keeper, dies, makes sure the keeper is still there (it may have died before the
/// request was made), then becomes the command. Returns only when the command cannot start: 127
/// when it is not found, 126 otherwise (as a shell does), the reason on stderr.
pub fn exec_child(parent: u32, command: &[OsString]) -> ExitCode {
    let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
    let parent_now = rustix::process::getppid().map(|p| p.as_raw_nonzero().get());
    if parent_now != i32::try_from(parent).ok() {
        return ExitCode::from(125);
    }
    let Some((program, args)) = command.split_first() else {
        eprintln!("leasehold: no command to run");
        return ExitCode::from(127);
    };
    let error = Command::new(program).args(args).exec();
    eprintln!(
        "leasehold: cannot start {}: {error}",
        crate::report::escape_controls(&program.to_string_lossy())
    );
    if error.kind() == std::io::ErrorKind::NotFound {
        ExitCode::from(127)
    } else {
        ExitCode::from(126)
    }
}
