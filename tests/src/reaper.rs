//! What a test starts in a process group of its own (a browser and its driver, an etcd server and
//! its agents) ends with the test process, however that ends: [`watch_group`] starts a watchdog
//! that kills the group and removes its files once the test process is gone.

use std::path::Path;
use std::process::Stdio;

use anyhow::Context;
use rustix::process::Pid;
use tokio::process::{Child, Command};

/// The process group of `leader` (spawned with `process_group(0)`), and a watchdog of its own
/// group, out of reach of a Ctrl-C meant for the tests, that kills `leader`'s group and removes
/// `dir` once this process has exited without doing so. Dropping the watchdog's [`Child`] kills
/// it: keep it as long as the group lives. `what` names the group in errors.
pub fn watch_group(leader: &Child, what: &str, dir: &Path) -> anyhow::Result<(Pid, Child)> {
    let group = leader
        .id()
        .and_then(|id| Pid::from_raw(i32::try_from(id).ok()?))
        .with_context(|| format!("{what} has no pid"))?;
    // `kill -KILL -PGID`: dash's kill takes no `--`.
    let watchdog = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "while kill -0 {parent} 2>/dev/null; do sleep 0.5; done; \
             kill -KILL -{group} 2>/dev/null; rm -rf '{dir}'",
            parent = std::process::id(),
            group = group.as_raw_nonzero(),
            dir = dir.display(),
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting the watchdog of {what}"))?;
    Ok((group, watchdog))
}
