//! A keeper's tree: the child it started and every process below it, found and killed without
//! cgroups. The keeper is the tree's subreaper, so a grandchild whose parent exits (a daemon
//! that double-forks and calls `setsid`) becomes the keeper's own child instead of init's: the
//! tree is exactly the keeper's children and theirs, and killing every child of the keeper,
//! again and again until none is left, kills all of it, whatever groups and sessions it made.

use rustix::process::{Pid, Signal, getpid, kill_process, kill_process_group};

/// The pids whose parent is this process now, read from `/proc` (which needs nothing the kernel
/// may leave out, unlike `/proc/PID/task/TID/children`).
pub fn children() -> Vec<Pid> {
    children_with_state()
        .into_iter()
        .map(|(pid, _)| pid)
        .collect()
}

/// The pids whose parent is this process now, each with its state letter (`Z` for one that
/// ended and waits to be reaped), read from `/proc`.
pub(crate) fn children_with_state() -> Vec<(Pid, char)> {
    let me = getpid().as_raw_nonzero().get();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            (parent_in_stat(&stat) == Some(me)).then_some(())?;
            Some((Pid::from_raw(pid)?, state_in_stat(&stat)?))
        })
        .collect()
}

/// The state letter in a `/proc/PID/stat` line (`R`, `S`, `Z` …), after the command name.
fn state_in_stat(stat: &str) -> Option<char> {
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// The parent pid in a `/proc/PID/stat` line: `pid (comm) state ppid …`, where `comm` may
/// hold spaces and parentheses of its own and so ends at the last `)`.
fn parent_in_stat(stat: &str) -> Option<i32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Sends `signal` to the process group `group` (the child's, which it leads), a group that no
/// longer exists being no error.
pub(crate) fn signal_group(group: Pid, signal: Signal) {
    let _ = kill_process_group(group, signal);
}

/// SIGKILL to the group `group` and to every child of this process, and to the group each child
/// leads if it made one. Processes below a child killed now become this process's children in
/// turn: the caller repeats until [`children`] is empty (the reaper thread tells it).
pub(crate) fn kill_round(group: Pid) {
    signal_group(group, Signal::KILL);
    for child in children() {
        let _ = kill_process(child, Signal::KILL);
        let _ = kill_process_group(child, Signal::KILL);
    }
}

#[cfg(test)]
mod tests {
    use super::{parent_in_stat, state_in_stat};

    #[test]
    fn the_parent_is_read_after_a_command_name_with_spaces_and_parentheses() {
        assert_eq!(parent_in_stat("12 (sh) S 7 12 12 0"), Some(7));
        assert_eq!(parent_in_stat("12 (a) b) (c) Z 1 0"), Some(1));
        assert_eq!(parent_in_stat("12 (sh"), None);
        assert_eq!(state_in_stat("12 (a) b) (c) Z 1 0"), Some('Z'));
    }
}
