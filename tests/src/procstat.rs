//! What a process costs, read from `/proc`: CPU seconds (user + system) of a process, or of a
//! PostgreSQL server with every backend it forked, and resident memory. The benchmarks turn two
//! readings into CPU % over a window.

use anyhow::Context;

/// Clock ticks per second of `/proc/PID/stat`'s times.
fn ticks_per_second() -> f64 {
    rustix::param::clock_ticks_per_second() as f64
}

/// Fields of `/proc/PID/stat` after the command name (which may hold spaces): index 0 is the
/// state, 1 the parent pid, 11 utime, 12 stime, 13 cutime, 14 cstime.
fn stat_fields(pid: u32) -> anyhow::Result<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("malformed /proc/PID/stat")?;
    Ok(rest.split_whitespace().map(str::to_string).collect())
}

fn field(fields: &[String], i: usize) -> f64 {
    fields.get(i).and_then(|f| f.parse().ok()).unwrap_or(0.0)
}

/// CPU seconds process `pid` has used so far, all its threads, user and system.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let f = stat_fields(pid)?;
    Ok((field(&f, 11) + field(&f, 12)) / ticks_per_second())
}

/// CPU seconds of process `root` and every live process it forked, plus what the ones it has
/// reaped used (a PostgreSQL server: the postmaster, its backends and helpers).
pub fn tree_cpu_seconds(root: u32) -> anyhow::Result<f64> {
    let f = stat_fields(root)?;
    let mut total = field(&f, 11) + field(&f, 12) + field(&f, 13) + field(&f, 14);
    for entry in std::fs::read_dir("/proc")? {
        let Some(pid) = entry?
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // A process may end between the listing and the read: it no longer counts here.
        if let Ok(f) = stat_fields(pid)
            && field(&f, 1) as u32 == root
        {
            total += field(&f, 11) + field(&f, 12);
        }
    }
    Ok(total / ticks_per_second())
}

/// A memory figure of process `pid` from `/proc/PID/status` (`VmRSS`, `VmHWM`), in KiB.
fn status_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
}

/// The resident set of process `pid` now (`VmRSS`), in KiB.
pub fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    status_kib(pid, "VmRSS")
}

/// The peak resident set of process `pid` so far (`VmHWM`), in KiB.
pub fn peak_rss_kib(pid: u32) -> anyhow::Result<u64> {
    status_kib(pid, "VmHWM")
}

/// The parent of process `pid`.
pub fn parent(pid: u32) -> anyhow::Result<u32> {
    Ok(field(&stat_fields(pid)?, 1) as u32)
}

/// CPU readings of several processes over one window.
#[derive(Debug)]
pub struct CpuWindow {
    started: std::time::Instant,
    readings: Vec<f64>,
}

impl CpuWindow {
    /// Starts a window with the current CPU seconds of each reading.
    pub fn start(readings: Vec<f64>) -> CpuWindow {
        CpuWindow {
            started: std::time::Instant::now(),
            readings,
        }
    }

    /// Each reading's CPU use over the window so far, as % of one core.
    pub fn percent(&self, now: &[f64]) -> Vec<f64> {
        let wall = self.started.elapsed().as_secs_f64().max(1e-9);
        self.readings
            .iter()
            .zip(now)
            .map(|(before, after)| (after - before) / wall * 100.0)
            .collect()
    }
}

/// The PostgreSQL server's postmaster, found as the parent of `conn`'s backend: the root of the
/// server's process tree for [`tree_cpu_seconds`].
pub async fn postmaster(conn: &mut sqlx::PgConnection) -> anyhow::Result<u32> {
    let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(conn)
        .await?;
    parent(u32::try_from(backend)?)
}
