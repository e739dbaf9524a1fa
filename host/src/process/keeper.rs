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
//! Three [`Mode`]s: a process under a lease is the keeper's to the end (`own`: what it leaves
//! behind when it exits is killed); a service's `activate` script starts what it leaves behind
//! (`leave`: those processes are the service, and run on); a service's `deactivate` is held
//! ready (`deferred`): it starts when the host asks, when the host is gone, or a grace before
//! the deadline when no later one came, so the service is stopped on time even when its host
//! cannot stop it.
//!
//! Every report but output carries the keeper's own clock reading ([`super::protocol::Timed`]): a host resumed
//! from a freeze tells when its keeper acted, not when it read of it.
//!
//! The keeper is the tree's subreaper ([`super::tree`]), in a process group of its own (a
//! terminal's Ctrl-C, sent to the host's group, does not reach it), and starts the child in
//! another, through itself again ([`exec_child`]): that second start sets the parent-death
//! signal and then becomes the command, with no unsafe code around `fork`.
//!
//! Threads, so that nothing the host or the child does can hold up the deadline: one reads
//! orders, one reaps, one writes reports, one per output stream; the main thread keeps time.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::time::Duration;

use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitOptions};

use super::outbox::Outbox;
use super::protocol::{Ended, MAX_LINE_BYTES, Mode, Order, Report, Why};
use super::tree;

/// What a keeper is started with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The signal that asks the child to stop (SIGTERM unless configured).
    pub signal: Signal,
    /// How long the child has between the stop signal and SIGKILL; with [`Mode::Deferred`],
    /// how long the command may run once it begins.
    pub grace: Duration,
    /// The first deadline, as [`Order::Until`] gives later ones.
    pub until: u64,
    /// What becomes of what the child leaves behind, and when it starts.
    pub mode: Mode,
    /// The command and its arguments.
    pub command: Vec<OsString>,
}

/// How often the keeper repeats its kill while processes are left: each round kills the
/// processes that the last one made its children.
const KILL_ROUND: Duration = Duration::from_millis(2);

/// How long the keeper waits, once the tree is gone, for the child's last output to be passed
/// on: the pipes closed when the tree died, so this is the time to write what was read.
const OUTPUT_DRAIN: Duration = Duration::from_millis(500);

/// How long a keeper that leaves processes running ([`Mode::Leave`]) waits for the child's
/// pipes to close: what the child wrote before it exited is read by then, and a daemon that kept
/// the pipes open would otherwise hold the activation up for the whole [`OUTPUT_DRAIN`].
const LEAVE_DRAIN: Duration = Duration::from_millis(100);

use super::protocol::monotonic_ns;

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
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

/// How the main thread's watch over the tree ended.
enum Watched {
    /// No process of the tree is left.
    TreeGone,
    /// The child exited before its deadline and left this many processes, which are left
    /// running ([`Mode::Leave`]).
    LeftRunning(u32),
}

/// The deadlines the child runs under once started.
struct Deadlines {
    /// The tree is killed at this reading.
    until: u64,
    /// Whether later deadlines, the stop and the host's end still move them: not for a
    /// deferred command, whose end was set when it began.
    follows_host: bool,
}

/// Runs the keeper until its tree is gone; the exit code is 0 unless the keeper itself could
/// not work (then 1, with the reason on stderr).
pub fn run(settings: Settings) -> ExitCode {
    let me = rustix::process::getpid();
    if let Err(e) = rustix::process::set_child_subreaper(Some(me)) {
        eprintln!("leasehold keeper: cannot become the subreaper of its tree: {e}");
        return ExitCode::FAILURE;
    }
    let reports = Outbox::start(std::io::stdout());
    let Some(program) = std::env::current_exe().ok() else {
        eprintln!("leasehold keeper: cannot find its own executable");
        return ExitCode::FAILURE;
    };
    let (heard, hear) = mpsc::channel();
    read_orders(heard.clone());
    let deadlines = match settings.mode {
        Mode::Deferred => {
            let (why, until) = await_start(&settings, &hear);
            reports.say(Report::Began(why));
            Deadlines {
                until,
                follows_host: false,
            }
        }
        Mode::Own | Mode::Leave => Deadlines {
            until: settings.until,
            follows_host: true,
        },
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
            reports.say(Report::NotStarted(e.to_string()));
            reports.say(Report::Gone);
            reports.wait_done(OUTPUT_DRAIN);
            return ExitCode::SUCCESS;
        }
    };
    let Some(group) = Pid::from_raw(i32::try_from(child.id()).unwrap_or(0)) else {
        return ExitCode::FAILURE;
    };
    reports.say(Report::Started(child.id()));
    let (drained, outputs_done) = mpsc::channel();
    let mut streams = 0;
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
            streams += 1;
            let reports = reports.clone();
            let drained = drained.clone();
            std::thread::spawn(move || {
                pass_on(stream, err, &reports);
                let _ = drained.send(());
            });
        }
    }
    drop(drained);
    reap(heard);
    let watched = keep_time(&settings, deadlines, group, &hear, &reports);
    // The tree is gone, its pipes closed with it; or the processes left running may hold them.
    let drain = match watched {
        Watched::TreeGone => OUTPUT_DRAIN,
        Watched::LeftRunning(_) => LEAVE_DRAIN,
    };
    let until = std::time::Instant::now() + drain;
    let mut closed = 0;
    while closed < streams {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if outputs_done.recv_timeout(left).is_err() {
            break;
        }
        closed += 1;
    }
    if let Watched::LeftRunning(count) = watched {
        reports.say(Report::Left {
            count,
            output_held: closed < streams,
        });
    }
    reports.say(Report::Gone);
    // The last line out before the keeper exits; a host that does not read (frozen) is not
    // waited for long.
    reports.wait_done(OUTPUT_DRAIN);
    ExitCode::SUCCESS
}

/// A deferred command's wait for its start: the host asks ([`Order::Stop`]), the host is gone,
/// or the last deadline less the grace passes unextended (the host is frozen, or its renewals
/// fail). Returns why, and when the command is to be killed: a grace after it began, but no
/// later than the deadline while that is still ahead (a start past the deadline, the keeper
/// itself having been frozen, gets its whole grace).
fn await_start(settings: &Settings, hear: &mpsc::Receiver<Heard>) -> (Why, u64) {
    let grace = nanos(settings.grace);
    let mut until = settings.until;
    let end = |until: u64| {
        let now = monotonic_ns();
        match now < until {
            true => now.saturating_add(grace).min(until),
            false => now.saturating_add(grace),
        }
    };
    loop {
        let soft = until.saturating_sub(grace);
        let now = monotonic_ns();
        if now >= soft {
            return (Why::Deadline, end(until));
        }
        match hear.recv_timeout(Duration::from_nanos(soft - now)) {
            Ok(Heard::Order(Order::Until(ns))) => until = ns,
            Ok(Heard::Order(Order::Stop)) => return (Why::Asked, end(until)),
            Ok(Heard::HostGone) | Err(RecvTimeoutError::Disconnected) => {
                return (Why::HostGone, end(until));
            }
            Ok(Heard::Reaped(..) | Heard::NoChildren) | Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// The main thread's work: signal and kill as the deadlines say, until no process is left (or,
/// with [`Mode::Leave`], until the child exits leaving processes to run on).
fn keep_time(
    settings: &Settings,
    deadlines: Deadlines,
    group: Pid,
    hear: &mpsc::Receiver<Heard>,
    reports: &Outbox,
) -> Watched {
    let grace = nanos(settings.grace);
    let Deadlines {
        mut until,
        follows_host,
    } = deadlines;
    // The kill after a stop the host asked for: the grace after it.
    let mut asked_by: Option<u64> = None;
    // A deferred command gets no stop signal: it is the stop, killed at its end.
    let mut signalled = !follows_host;
    let mut killing: Option<Why> = None;
    let mut exited = false;
    loop {
        let now = monotonic_ns();
        if killing.is_none() {
            if !signalled && now >= until.saturating_sub(grace) {
                tree::signal_group(group, settings.signal);
                signalled = true;
                reports.say(Report::Signalled(Why::Deadline));
            }
            if now >= until {
                killing = Some(Why::Deadline);
            } else if asked_by.is_some_and(|at| now >= at) {
                if exited && tree::children().is_empty() {
                    // The child ended on its signal and left nothing: the reaper's word that no
                    // child is left is on its way (late on a loaded machine); a kill now would
                    // report one that never happened.
                    asked_by = None;
                } else {
                    killing = Some(Why::Grace);
                }
            }
            if let Some(why) = killing {
                reports.say(Report::Killed(why));
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
            Ok(Heard::Order(Order::Until(ns))) if follows_host => until = ns,
            Ok(Heard::Order(Order::Stop)) if follows_host => {
                if !signalled {
                    tree::signal_group(group, settings.signal);
                    signalled = true;
                    reports.say(Report::Signalled(Why::Asked));
                }
                asked_by.get_or_insert(monotonic_ns().saturating_add(grace));
            }
            Ok(Heard::HostGone) if follows_host => {
                if killing.is_none() {
                    killing = Some(Why::HostGone);
                    reports.say(Report::Killed(Why::HostGone));
                }
            }
            // A deferred command's end was set when it began.
            Ok(Heard::Order(_) | Heard::HostGone) => {}
            Ok(Heard::Reaped(pid, status)) => {
                if pid == group && !exited {
                    exited = true;
                    let ended = match (status.exit_status(), status.terminating_signal()) {
                        (Some(code), _) => Ended::Code(code),
                        (None, Some(signal)) => Ended::Signal(signal),
                        (None, None) => Ended::Code(-1),
                    };
                    reports.say(Report::Exited(ended));
                    let left = match killing {
                        Some(_) => 0,
                        None => u32::try_from(tree::children().len()).unwrap_or(u32::MAX),
                    };
                    if left > 0 {
                        if settings.mode == Mode::Leave {
                            // What it started is what it was run to start.
                            return Watched::LeftRunning(left);
                        }
                        // Whatever the child left behind goes with it.
                        reports.say(Report::Left {
                            count: left,
                            output_held: false,
                        });
                        killing = Some(Why::Leftovers);
                        reports.say(Report::Killed(Why::Leftovers));
                    }
                }
            }
            Ok(Heard::NoChildren) | Err(RecvTimeoutError::Disconnected) => {
                return Watched::TreeGone;
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// Passes each line of the child's `stream` on as a report, cut at [`MAX_LINE_BYTES`], until
/// the stream closes.
fn pass_on(stream: Box<dyn Read + Send>, err: bool, reports: &Outbox) {
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

fn send_line(reports: &Outbox, err: bool, line: &mut Vec<u8>, cut: &mut u64) {
    let text = String::from_utf8_lossy(line).into_owned();
    reports.say(Report::Output {
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
