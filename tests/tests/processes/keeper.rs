//! The keeper of a process under a lease, attacked from outside: a real `leasehold keeper`
//! process, with this test playing the host on its stdin and stdout, runs shell children that
//! double-fork, ignore their stop signal, exit leaving processes behind or print a line of 100 KB.
//! The host's death (stdin closed), its silence (a frozen host sends no later deadline) and the
//! keeper's own death each leave no process of the tree alive.

#![allow(clippy::unwrap_used, missing_docs)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use leasehold::process::handle::{Kept, Spec};
use leasehold::process::protocol::monotonic_ns;
use leasehold::process::protocol::{Ended, Mode, Report, Timed, Why};
use leasehold_tests::host::binary;

/// A keeper under test: its orders pipe, and its reports with the instant each was read.
struct Keeper {
    process: Child,
    orders: Option<ChildStdin>,
    reports: Receiver<(Instant, Timed)>,
    seen: Vec<(Instant, Timed)>,
}

impl Keeper {
    /// A keeper of `sh -c script`, stop signal SIGTERM, with `grace` and a first deadline `in`
    /// from now.
    fn start(script: &str, grace: Duration, within: Duration) -> Keeper {
        Keeper::start_command(&["sh", "-c", script], grace, within)
    }

    /// A keeper of `command` as [`Keeper::start`] has it.
    fn start_command(command: &[&str], grace: Duration, within: Duration) -> Keeper {
        Keeper::start_mode(command, grace, within, Mode::Own)
    }

    /// A keeper of `command` in `mode`.
    fn start_mode(command: &[&str], grace: Duration, within: Duration, mode: Mode) -> Keeper {
        let until = monotonic_ns() + within.as_nanos() as u64;
        let mut process = Command::new(binary().unwrap())
            .args(["keeper", "--signal", "15"])
            .arg(format!("--grace-ms={}", grace.as_millis()))
            .arg(format!("--until={until}"))
            .arg(format!("--mode={}", mode.as_str()))
            .arg("--")
            .args(command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = process.stdout.take().unwrap();
        let (send, reports) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let report =
                    Timed::parse(&line).unwrap_or_else(|| panic!("not a report: {line:?}"));
                if send.send((Instant::now(), report)).is_err() {
                    break;
                }
            }
        });
        Keeper {
            orders: process.stdin.take(),
            process,
            reports,
            seen: Vec::new(),
        }
    }

    fn order(&mut self, line: &str) {
        let orders = self.orders.as_mut().unwrap();
        writeln!(orders, "{line}").unwrap();
        orders.flush().unwrap();
    }

    /// Waits for the first report that `matches`, returning when it was read.
    fn wait_for(&mut self, what: &str, matches: impl Fn(&Report) -> bool) -> Instant {
        if let Some((at, _)) = self.seen.iter().find(|(_, r)| matches(&r.report)) {
            return *at;
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.reports.recv_timeout(left) {
                Ok((at, report)) => {
                    let found = matches(&report.report);
                    self.seen.push((at, report));
                    if found {
                        return at;
                    }
                }
                Err(_) => panic!("no report {what} in 20 s; seen: {:?}", self.reports()),
            }
        }
    }

    /// Every report seen so far.
    fn reports(&self) -> Vec<&Report> {
        self.seen.iter().map(|(_, r)| &r.report).collect()
    }

    /// The keeper's own clock reading of the first report that `matches`.
    fn stamp(&self, matches: impl Fn(&Report) -> bool) -> u64 {
        self.seen
            .iter()
            .find(|(_, r)| matches(&r.report))
            .and_then(|(_, r)| r.at)
            .unwrap_or_else(|| panic!("no stamped report: {:?}", self.reports()))
    }

    /// The pids the script printed as `NAME PID` lines, for `names`.
    fn pids(&mut self, names: &[&str]) -> Vec<i32> {
        names
            .iter()
            .map(|name| {
                let prefix = format!("{name} ");
                self.wait_for(
                    name,
                    |r| matches!(r, Report::Output { text, .. } if text.starts_with(&prefix)),
                );
                self.seen
                    .iter()
                    .find_map(|(_, r)| match &r.report {
                        Report::Output { text, .. } => text.strip_prefix(&prefix)?.parse().ok(),
                        _ => None,
                    })
                    .unwrap()
            })
            .collect()
    }

    /// Waits for `gone` and for the keeper to exit with 0.
    fn gone(&mut self) -> Instant {
        let at = self.wait_for("gone", |r| *r == Report::Gone);
        let status = self.process.wait().unwrap();
        assert!(status.success(), "keeper: {status}");
        at
    }
}

/// Whether process `pid` exists (a zombie counts as gone: it runs no code).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

/// A child that prints its pid, starts a grandchild that double-forks into a session of its
/// own (as a daemon does) and prints its pid, and then waits; both ignore SIGTERM if `stubborn`.
fn daemonising(stubborn: bool) -> String {
    let trap = if stubborn { "trap '' TERM; " } else { "" };
    format!(
        "{trap}echo child $$; (setsid sh -c '{trap}echo grandchild $$; exec sleep 300' &); exec sleep 300"
    )
}

const LONG: Duration = Duration::from_secs(300);

#[test]
fn when_the_host_is_gone_the_child_and_its_double_forked_grandchild_die_at_once() {
    let mut keeper = Keeper::start(&daemonising(true), Duration::from_secs(10), LONG);
    let pids = keeper.pids(&["child", "grandchild"]);
    assert!(pids.iter().all(|&p| alive(p)), "{pids:?}");
    let closed = Instant::now();
    keeper.orders = None;
    keeper.wait_for("killed", |r| *r == Report::Killed(Why::HostGone));
    let gone = keeper.gone();
    for pid in pids {
        assert!(!alive(pid), "{pid} outlived its keeper's host");
    }
    let took = gone - closed;
    eprintln!("host gone → tree gone: {took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(
        keeper
            .reports()
            .contains(&&Report::Exited(Ended::Signal(9))),
        "{:?}",
        keeper.reports()
    );
}

#[test]
fn a_silent_host_s_child_is_signalled_a_grace_before_its_deadline_and_killed_at_it() {
    // The host is alive but says nothing more, as a frozen one does.
    let grace = Duration::from_millis(500);
    let within = Duration::from_millis(1500);
    let started = Instant::now();
    let mut keeper = Keeper::start(&daemonising(true), grace, within);
    let pids = keeper.pids(&["child", "grandchild"]);
    let signalled = keeper.wait_for("signalled", |r| *r == Report::Signalled(Why::Deadline));
    keeper.wait_for("killed", |r| *r == Report::Killed(Why::Deadline));
    let gone = keeper.gone();
    for pid in pids {
        assert!(!alive(pid), "{pid} outlived its deadline");
    }
    eprintln!(
        "signalled at {:?}, gone at {:?}, deadline {within:?}",
        signalled - started,
        gone - started
    );
    assert!(signalled - started >= within - grace - Duration::from_millis(50));
    // The kill lands at the deadline, not a poll later: well within a ttl's margin.
    assert!(
        gone - started < within + Duration::from_millis(400),
        "{:?}",
        gone - started
    );
}

#[test]
fn later_deadlines_keep_the_child_running_and_a_stop_ends_it_with_its_signal() {
    let mut keeper = Keeper::start(
        "echo child $$; exec sleep 300",
        Duration::from_millis(200),
        Duration::from_millis(700),
    );
    let pid = keeper.pids(&["child"])[0];
    for _ in 0..10 {
        keeper.order(&format!("until {}", monotonic_ns() + 700_000_000));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(alive(pid));
    assert!(
        !keeper
            .reports()
            .iter()
            .any(|r| matches!(r, Report::Signalled(_) | Report::Killed(_))),
        "{:?}",
        keeper.reports()
    );
    keeper.order("stop");
    keeper.wait_for("exited", |r| *r == Report::Exited(Ended::Signal(15)));
    keeper.gone();
    assert!(
        !keeper
            .reports()
            .iter()
            .any(|r| matches!(r, Report::Killed(_))),
        "a child that stops on its signal is not killed: {:?}",
        keeper.reports()
    );
}

#[test]
fn a_child_that_ignores_its_stop_signal_is_killed_when_the_grace_runs_out() {
    let grace = Duration::from_millis(400);
    let mut keeper = Keeper::start(&daemonising(true), grace, LONG);
    let pids = keeper.pids(&["child", "grandchild"]);
    let asked = Instant::now();
    keeper.order("stop");
    keeper.wait_for("signalled", |r| *r == Report::Signalled(Why::Asked));
    let killed = keeper.wait_for("killed", |r| *r == Report::Killed(Why::Grace));
    keeper.gone();
    for pid in pids {
        assert!(!alive(pid), "{pid} outlived the grace");
    }
    let waited = killed - asked;
    eprintln!("stop → kill: {waited:?} (grace {grace:?})");
    assert!(waited >= grace && waited < grace + Duration::from_millis(400));
}

#[test]
fn what_the_child_leaves_behind_dies_with_it() {
    let mut keeper = Keeper::start(
        "(setsid sh -c 'echo left $$; exec sleep 300' &); sleep 0.2; exit 3",
        Duration::from_secs(5),
        LONG,
    );
    let left = keeper.pids(&["left"])[0];
    keeper.wait_for("exited", |r| *r == Report::Exited(Ended::Code(3)));
    keeper.wait_for("left", |r| {
        *r == Report::Left {
            count: 1,
            output_held: false,
        }
    });
    keeper.wait_for("killed", |r| *r == Report::Killed(Why::Leftovers));
    keeper.gone();
    assert!(!alive(left), "{left} outlived the child that started it");
}

/// A service's `activate` (`--mode leave`): what it leaves running when it exits is the service
/// it started, and runs on after the keeper is gone; the keeper says how many, and whether they
/// still held the script's output.
#[test]
fn in_leave_mode_what_the_child_leaves_running_runs_on_after_the_keeper() {
    let mut keeper = Keeper::start_mode(
        &[
            "sh",
            "-c",
            "(setsid sh -c 'echo daemon $$; exec sleep 300' </dev/null &); sleep 0.2; exit 0",
        ],
        Duration::ZERO,
        LONG,
        Mode::Leave,
    );
    let daemon = keeper.pids(&["daemon"])[0];
    keeper.wait_for("exited", |r| *r == Report::Exited(Ended::Code(0)));
    // The daemon's stdout is still the script's pipe: the keeper says so.
    keeper.wait_for("left", |r| {
        *r == Report::Left {
            count: 1,
            output_held: true,
        }
    });
    keeper.gone();
    assert!(
        !keeper
            .reports()
            .iter()
            .any(|r| matches!(r, Report::Killed(_))),
        "{:?}",
        keeper.reports()
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(alive(daemon), "the daemon {daemon} died with its keeper");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(daemon).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
}

/// In leave mode a script still running at its deadline is killed with its whole tree, as ever.
#[test]
fn in_leave_mode_a_child_still_running_at_its_deadline_is_killed_with_its_tree() {
    let mut keeper = Keeper::start_mode(
        &["sh", "-c", &daemonising(true)],
        Duration::ZERO,
        Duration::from_millis(500),
        Mode::Leave,
    );
    let pids = keeper.pids(&["child", "grandchild"]);
    keeper.wait_for("killed", |r| *r == Report::Killed(Why::Deadline));
    keeper.gone();
    for pid in pids {
        assert!(!alive(pid), "{pid} outlived its deadline");
    }
}

/// A service's `deactivate` held ready (`--mode deferred`) does not start while deadlines keep
/// coming; once they stop (a frozen host), it starts on its own a grace before the last one, is
/// killed at it if it has not exited, and every report carries the keeper's clock.
#[test]
fn a_deferred_command_starts_on_its_own_a_grace_before_an_unextended_deadline() {
    let grace = Duration::from_millis(300);
    let mut keeper = Keeper::start_mode(
        &["sh", "-c", "echo began; exec sleep 300"],
        grace,
        Duration::from_millis(600),
        Mode::Deferred,
    );
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(150));
        let until = monotonic_ns() + 600_000_000;
        keeper.order(&format!("until {until}"));
    }
    assert!(keeper.reports.try_recv().is_err(), "it began while renewed");
    let last = monotonic_ns() + 600_000_000;
    keeper.order(&format!("until {last}"));
    keeper.wait_for("began", |r| *r == Report::Began(Why::Deadline));
    keeper.wait_for("killed", |r| *r == Report::Killed(Why::Deadline));
    keeper.gone();
    let began = keeper.stamp(|r| *r == Report::Began(Why::Deadline));
    let killed = keeper.stamp(|r| *r == Report::Killed(Why::Deadline));
    let soft = last - grace.as_nanos() as u64;
    eprintln!(
        "began {:.1} ms after the soft deadline, killed {:.1} ms after the deadline",
        began.saturating_sub(soft) as f64 / 1e6,
        killed.saturating_sub(last) as f64 / 1e6
    );
    assert!(
        began >= soft && began < soft + 100_000_000,
        "{began} vs {soft}"
    );
    assert!(
        killed >= last && killed < last + 100_000_000,
        "{killed} vs {last}"
    );
}

/// A deferred command starts at once when its host is gone (stdin closed: the host was killed),
/// and runs to its end (here it exits by itself) rather than being killed with the host.
#[test]
fn a_deferred_command_starts_at_once_when_the_host_is_gone_and_runs_to_its_end() {
    let mut keeper = Keeper::start_mode(
        &["sh", "-c", "sleep 0.2; echo done"],
        Duration::from_secs(5),
        LONG,
        Mode::Deferred,
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(keeper.reports.try_recv().is_err(), "it began on its own");
    let closed = Instant::now();
    keeper.orders = None;
    let began = keeper.wait_for("began", |r| *r == Report::Began(Why::HostGone));
    keeper.wait_for(
        "done",
        |r| matches!(r, Report::Output { text, .. } if text == "done"),
    );
    keeper.wait_for("exited", |r| *r == Report::Exited(Ended::Code(0)));
    keeper.gone();
    assert!(
        began - closed < Duration::from_millis(200),
        "{:?}",
        began - closed
    );
    assert!(
        !keeper
            .reports()
            .iter()
            .any(|r| matches!(r, Report::Killed(_))),
        "{:?}",
        keeper.reports()
    );
}

/// Asked by its host, a deferred command starts at once and may run its grace, no longer.
#[test]
fn a_deferred_command_asked_to_begin_starts_at_once_and_is_killed_after_its_grace() {
    let grace = Duration::from_millis(300);
    let mut keeper = Keeper::start_mode(
        &["sh", "-c", "trap '' TERM; exec sleep 300"],
        grace,
        LONG,
        Mode::Deferred,
    );
    let asked = Instant::now();
    keeper.order("stop");
    keeper.wait_for("began", |r| *r == Report::Began(Why::Asked));
    let killed = keeper.wait_for("killed", |r| matches!(r, Report::Killed(_)));
    keeper.gone();
    let took = killed - asked;
    assert!(
        took >= grace && took < grace + Duration::from_millis(400),
        "{took:?}"
    );
}

#[test]
fn when_the_keeper_itself_is_killed_its_child_dies_with_it() {
    let mut keeper = Keeper::start(
        "echo child $$; exec sleep 300",
        Duration::from_secs(5),
        LONG,
    );
    let pid = keeper.pids(&["child"])[0];
    keeper.process.kill().unwrap();
    keeper.process.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    // Reparented to init (or this test's reaper), the child is reaped there.
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!alive(pid), "{pid} outlived its keeper");
}

#[test]
fn a_command_that_cannot_start_says_why_and_exits_127() {
    let mut keeper =
        Keeper::start_command(&["/nonexistent/command", "x"], Duration::from_secs(5), LONG);
    keeper.wait_for("exited", |r| *r == Report::Exited(Ended::Code(127)));
    keeper.gone();
    assert!(
        keeper
            .reports()
            .iter()
            .any(|r| matches!(r, Report::Output { err: true, text, .. }
            if text.starts_with("leasehold: cannot start /nonexistent/command: No such file"))),
        "{:?}",
        keeper.reports()
    );
}

#[test]
fn a_line_of_100_kb_is_cut_and_counted_and_the_next_line_is_whole() {
    let mut keeper = Keeper::start(
        "head -c 100000 /dev/zero | tr '\\0' a; echo; echo next",
        Duration::from_secs(5),
        LONG,
    );
    keeper.wait_for(
        "next",
        |r| matches!(r, Report::Output { text, .. } if text == "next"),
    );
    keeper.gone();
    let long = keeper
        .reports()
        .into_iter()
        .find_map(|r| match r {
            Report::Output { text, cut, .. } if text.starts_with('a') => Some((text.len(), *cut)),
            _ => None,
        })
        .unwrap();
    assert_eq!(long, (8 * 1024, 100_000 - 8 * 1024));
}

/// The host's side ([`Kept`]), on the tokio clock the lease's terms keep: deadlines sent as
/// renewals would keep the child running past the first one; the stop ends it with its signal;
/// the child sees its lease in its environment.
#[tokio::test]
async fn the_host_side_keeps_the_child_running_with_later_deadlines_and_stops_it() {
    let spec = Spec {
        command: ["sh", "-c", "echo lease=$LEASEHOLD_LEASE; exec sleep 300"]
            .map(Into::into)
            .to_vec(),
        signal: rustix::process::Signal::TERM,
        grace: Duration::from_millis(100),
        mode: Mode::Own,
    };
    let first = tokio::time::Instant::now() + Duration::from_millis(400);
    let env = [("LEASEHOLD_LEASE", "nightly".to_string())];
    let mut kept = Kept::spawn(&binary().unwrap(), &spec, &env, first).unwrap();
    assert!(matches!(kept.report().await, Some(Report::Started(_))));
    assert_eq!(
        kept.report().await,
        Some(Report::Output {
            err: false,
            text: "lease=nightly".into(),
            cut: 0
        })
    );
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let until = tokio::time::Instant::now() + Duration::from_millis(400);
        kept.extend(until).await.unwrap();
    }
    kept.stop().await.unwrap();
    let mut reports = Vec::new();
    while let Some(report) = kept.report().await {
        reports.push(report);
    }
    assert_eq!(
        reports,
        [
            Report::Signalled(Why::Asked),
            Report::Exited(Ended::Signal(15)),
            Report::Gone
        ]
    );
    assert!(kept.wait().await.unwrap().success());
}

#[tokio::test]
async fn dropping_the_host_side_kills_the_tree() {
    let spec = Spec {
        command: ["sh", "-c", &daemonising(true)].map(Into::into).to_vec(),
        signal: rustix::process::Signal::TERM,
        grace: Duration::from_secs(10),
        mode: Mode::Own,
    };
    let until = tokio::time::Instant::now() + LONG;
    let mut kept = Kept::spawn(&binary().unwrap(), &spec, &[], until).unwrap();
    let mut pids = Vec::new();
    while pids.len() < 2 {
        match kept.report().await.unwrap() {
            Report::Output { text, .. } => {
                pids.push(text.rsplit_once(' ').unwrap().1.parse::<i32>().unwrap())
            }
            Report::Started(_) => {}
            other => panic!("{other:?}"),
        }
    }
    drop(kept);
    let deadline = Instant::now() + Duration::from_secs(2);
    while pids.iter().any(|&p| alive(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        !pids.iter().any(|&p| alive(p)),
        "{pids:?} outlived a dropped handle"
    );
}
