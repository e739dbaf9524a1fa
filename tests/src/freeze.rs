//! Freeze trials with real processes: replicas of `leasehold run` on a fresh PostgreSQL database
//! run `hello-reconciler` on a short schedule, and each trial freezes the holder (SIGSTOP) for
//! longer than the ttl, waits until another replica has acquired the lease at the next epoch, and
//! resumes it (SIGCONT). A process resumed from a freeze finds every timer due at once; what must
//! hold is docs/ARCHITECTURE.md §3.4: no guest code *starts* at or after the term's `safe_until`.
//!
//! The mark every guest call leaves outside the host is its log line, `hello from epoch N, tick
//! T: …`, stamped by the host's realtime clock, the clock this process reads with
//! [`now_time_of_day`]. The holder is frozen from before its `safe_until` (the freeze outlasts
//! the ttl, so `safe_until` — at most ttl − margin after the last renewal was sent — falls inside
//! it) until the resume, so a line of its epoch stamped at or after the resume is a call that
//! started after its `safe_until`. To keep a call that was merely *in flight* at the freeze from
//! counting, each freeze lands just after one of the holder's calls has logged, well before the
//! next is due. [`run_freeze_trials`] counts such late calls per trial, with the time from the
//! resume to the holder's `term ended` line and how long the next holder had held the lease by
//! then; the test (`tests/plugins/freeze.rs`) and the benchmark (`freeze-bench`) share it.

use crate::log::Logged;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use tempfile::TempDir;

use crate::eventually::{eventually, eventually_every, when};
use crate::host::{Host, now_time_of_day, plugin_dir, seconds_between, time_of_day};
use crate::stats::summary;
use crate::status::{Role, StatusExt};
use crate::stores::{Backend, Db};

/// The lease every replica campaigns for.
pub const LEASE: &str = "leader";

/// How a run of freeze trials is set up.
#[derive(Debug, Clone)]
pub struct FreezeSettings {
    /// Freeze trials to run.
    pub trials: usize,
    /// The replicas' `--ttl` (default timing otherwise: renew every ttl/3, margin max(2% of
    /// ttl, 250 ms), standby poll every ttl/5).
    pub ttl: Duration,
    /// The least time the holder stays frozen; longer than the ttl. A trial also keeps it frozen
    /// until another replica has acquired the lease.
    pub freeze: Duration,
    /// The reconciler's schedule (`[schedule] interval`).
    pub interval: Duration,
    /// Replicas started.
    pub replicas: usize,
}

impl FreezeSettings {
    /// Three replicas, hello-reconciler every 15 ms, freezes of ttl + 750 ms.
    pub fn new(trials: usize, ttl: Duration) -> FreezeSettings {
        FreezeSettings {
            trials,
            ttl,
            freeze: ttl + Duration::from_millis(750),
            interval: Duration::from_millis(15),
            replicas: 3,
        }
    }
}

/// A guest call of the frozen holder's epoch that started after the resume.
#[derive(Debug, Clone)]
pub struct LateCall {
    /// Its log line's time after the resume.
    pub after_resume: Duration,
    /// Its log line's time after the next holder's `lease acquired`.
    pub after_acquired: Duration,
    /// What the guest logged.
    pub message: String,
}

/// One freeze trial.
#[derive(Debug, Clone)]
pub struct FreezeTrial {
    /// The replica frozen (index into the cluster's hosts).
    pub holder: usize,
    /// The epoch it held.
    pub epoch: u64,
    /// The replica that acquired the lease while it was frozen.
    pub successor: usize,
    /// The epoch the successor acquired.
    pub successor_epoch: u64,
    /// From SIGSTOP to SIGCONT.
    pub frozen_for: Duration,
    /// From the holder's last call before the freeze (its log line) to the SIGSTOP.
    pub stop_after_last_call: Duration,
    /// Seconds since midnight UTC at the resume (taken just before SIGCONT).
    pub resumed_at: f64,
    /// Seconds since midnight UTC of the successor's `lease acquired` line.
    pub acquired_at: f64,
    /// From the resume to the holder's `term ended` line for its epoch.
    pub resume_to_term_end: Duration,
    /// The `reason` of that line.
    pub end_reason: String,
    /// Calls of the holder's epoch started after the resume, hence after its `safe_until`.
    pub late_calls: Vec<LateCall>,
    /// Calls the holder's runtime refused to start after the resume (`call not started`): the
    /// race a task can win against the driver, which the clock check then decides.
    pub refused: usize,
}

impl FreezeTrial {
    /// How long the successor had held the lease when the frozen holder resumed.
    pub fn acquired_before_resume(&self) -> Duration {
        secs(seconds_between(self.resumed_at, self.acquired_at))
    }
}

/// The outcome of [`run_freeze_trials`].
#[derive(Debug, Clone)]
pub struct FreezeSummary {
    /// How the run was set up.
    pub settings: FreezeSettings,
    /// Every trial, in order.
    pub trials: Vec<FreezeTrial>,
    /// The whole run, start-up included.
    pub elapsed: Duration,
}

impl FreezeSummary {
    /// Guest calls started after the frozen holder's `safe_until`, over all trials: must be 0.
    pub fn calls_after_deadline(&self) -> usize {
        self.trials.iter().map(|t| t.late_calls.len()).sum()
    }

    /// Trials with at least one such call.
    pub fn trials_with_late_calls(&self) -> usize {
        self.trials
            .iter()
            .filter(|t| !t.late_calls.is_empty())
            .count()
    }

    /// Calls refused at the door over all trials, and in how many trials.
    pub fn refused(&self) -> (usize, usize) {
        let total = self.trials.iter().map(|t| t.refused).sum();
        let trials = self.trials.iter().filter(|t| t.refused > 0).count();
        (total, trials)
    }

    /// Resume → `term ended` of every trial.
    pub fn resume_to_term_end(&self) -> Vec<Duration> {
        self.trials.iter().map(|t| t.resume_to_term_end).collect()
    }

    /// The figures, one per line: trials, late calls (each listed), resume → term ended,
    /// acquisition → resume, freeze lengths, last call → stop.
    pub fn report(&self) -> String {
        let s = &self.settings;
        let mut lines = vec![
            format!(
                "freeze trials: {} replicas on PostgreSQL, ttl {:?}, frozen >= {:?}, hello-reconciler every {:?}: {} trials in {:.1?}",
                s.replicas,
                s.ttl,
                s.freeze,
                s.interval,
                self.trials.len(),
                self.elapsed
            ),
            format!(
                "guest calls started after the frozen holder's safe_until: {} (in {} of {} trials)",
                self.calls_after_deadline(),
                self.trials_with_late_calls(),
                self.trials.len()
            ),
            format!(
                "calls the resumed holder's runtime refused to start (the deadline had passed): {} (in {} of {} trials)",
                self.refused().0,
                self.refused().1,
                self.trials.len()
            ),
        ];
        for (i, t) in self.trials.iter().enumerate() {
            for call in &t.late_calls {
                lines.push(format!(
                    "  trial {i}: r{} at epoch {}, {:.2?} after the resume, {:.2?} after r{} acquired epoch {}, then term ended {:.2?} after the resume: {}",
                    t.holder,
                    t.epoch,
                    call.after_resume,
                    call.after_acquired,
                    t.successor,
                    t.successor_epoch,
                    t.resume_to_term_end,
                    call.message
                ));
            }
        }
        lines.push(summary(
            "resume -> term ended (frozen holder's log)",
            &mut self.resume_to_term_end(),
        ));
        let mut held: Vec<Duration> = self
            .trials
            .iter()
            .map(FreezeTrial::acquired_before_resume)
            .collect();
        lines.push(summary(
            "next holder acquired -> frozen holder resumed",
            &mut held,
        ));
        let mut frozen: Vec<Duration> = self.trials.iter().map(|t| t.frozen_for).collect();
        lines.push(summary("frozen for (SIGSTOP -> SIGCONT)", &mut frozen));
        let mut quiet: Vec<Duration> = self.trials.iter().map(|t| t.stop_after_last_call).collect();
        lines.push(summary(
            "last call before the freeze -> SIGSTOP (no call in flight)",
            &mut quiet,
        ));
        lines.join("\n")
    }
}

/// The replicas of a run and what they run on.
#[derive(Debug)]
pub struct FreezeCluster {
    /// The replicas, named `r0`, `r1`, …
    pub hosts: Vec<Host>,
    /// The lease database's URL.
    url: String,
    _plugins: TempDir,
    _db: Db,
}

/// hello-reconciler's manifest on the given schedule.
pub fn hello_manifest(interval: Duration) -> String {
    format!(
        "lease = \"{LEASE}\"\n[schedule]\ninterval = \"{}ms\"\n",
        interval.as_millis()
    )
}

impl FreezeCluster {
    /// Starts `settings.replicas` replicas with hello-reconciler on a fresh PostgreSQL database.
    pub async fn start(settings: &FreezeSettings) -> anyhow::Result<FreezeCluster> {
        let db = Db::new(Backend::Postgres).await?;
        let url = db.url().context("no URL for the PostgreSQL database")?;
        let plugins = plugin_dir(&[("hello-reconciler", &hello_manifest(settings.interval))])?;
        let ttl = format!("{}ms", settings.ttl.as_millis());
        let args = [
            "--database-url",
            url.as_str(),
            "--ttl",
            ttl.as_str(),
            "--lease",
            LEASE,
            "--plugins",
            plugins.path().to_str().context("plugin dir path")?,
        ];
        let mut hosts = Vec::with_capacity(settings.replicas);
        for i in 0..settings.replicas {
            hosts.push(Host::start(&format!("r{i}"), &args).await?);
        }
        Ok(FreezeCluster {
            hosts,
            url,
            _plugins: plugins,
            _db: db,
        })
    }

    /// Waits until exactly one replica reports itself `leader`, the others `standby`, and the
    /// leader's reconciler has run at its epoch; returns the leader's index and epoch.
    pub async fn holder(&self, timeout: Duration) -> anyhow::Result<(usize, u64)> {
        eventually(
            "a single reconciling leader: (role, epoch) per replica",
            timeout,
            async || {
                let mut seen = Vec::new();
                for host in &self.hosts {
                    let status = host.status().await.ok();
                    let lease = status.as_ref().and_then(|s| s.lease(LEASE));
                    let role = lease.map(|l| l.role);
                    let epoch = lease.and_then(|l| l.epoch?.for_guest());
                    seen.push((role, epoch));
                }
                let leaders: Vec<usize> = (0..seen.len())
                    .filter(|&i| seen[i].0 == Some(Role::Leader))
                    .collect();
                let standbys = seen
                    .iter()
                    .filter(|(role, _)| *role == Some(Role::Standby))
                    .count();
                if let [leader] = leaders[..]
                    && standbys == self.hosts.len() - 1
                    && let Some(epoch) = seen[leader].1
                    && self.hosts[leader]
                        .log_lines_from(0)
                        .iter()
                        .rev()
                        .any(|l| l.contains(&call_tag(epoch)))
                {
                    return Ok((leader, epoch));
                }
                Err(seen)
            },
        )
        .await
    }
}

/// Starts the replicas and runs `settings.trials` freeze trials, each on the current holder.
pub async fn run_freeze_trials(settings: &FreezeSettings) -> anyhow::Result<FreezeSummary> {
    ensure!(
        settings.freeze > settings.ttl,
        "a freeze of {:?} does not outlast the ttl {:?}",
        settings.freeze,
        settings.ttl
    );
    ensure!(
        settings.replicas >= 2,
        "a freeze trial needs a second replica"
    );
    let started = Instant::now();
    let cluster = FreezeCluster::start(settings).await?;
    let settle = settings.ttl * 10 + Duration::from_secs(10);
    let mut trials = Vec::with_capacity(settings.trials);
    for trial in 0..settings.trials {
        let (holder, epoch) = cluster
            .holder(settle)
            .await
            .with_context(|| format!("before trial {trial}"))?;
        let t = freeze_trial(&cluster.hosts, &cluster.url, holder, epoch, settings)
            .await
            .with_context(|| format!("trial {trial}: r{holder} at epoch {epoch}"))?;
        trials.push(t);
    }
    // Count once more at the end, in case a line was still in a pipe when its trial ended. An
    // epoch is one term of one replica, so the holder's whole log has only this trial's calls.
    for t in &mut trials {
        let log = cluster.hosts[t.holder].log_lines_from(0);
        t.late_calls = late_calls(&log, t.epoch, t.resumed_at, t.acquired_at);
    }
    Ok(FreezeSummary {
        settings: settings.clone(),
        trials,
        elapsed: started.elapsed(),
    })
}

/// The sessions of the database `url` points at, one line each, with what they wait on.
async fn sessions(url: &str) -> anyhow::Result<Vec<String>> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await?;
    let rows: Vec<String> = sqlx::query_scalar(
        r"SELECT format('%s %s %s %s %s', pid, coalesce(state, '-'),
                        coalesce(wait_event_type || ':' || wait_event, '-'),
                        coalesce((clock_timestamp() - xact_start)::text, '-'),
                        left(regexp_replace(query, '\s+', ' ', 'g'), 160))
             FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid()
            ORDER BY xact_start NULLS LAST",
    )
    .fetch_all(&mut conn)
    .await?;
    Ok(rows)
}

/// One trial on `hosts[holder]`, which holds the lease at `epoch`.
async fn freeze_trial(
    hosts: &[Host],
    url: &str,
    holder: usize,
    epoch: u64,
    settings: &FreezeSettings,
) -> anyhow::Result<FreezeTrial> {
    let host = &hosts[holder];
    let offsets: Vec<usize> = hosts.iter().map(Host::log_len).collect();
    let (stopped_at, last_call) = freeze_between_calls(host, epoch, settings.interval).await?;
    let frozen = Instant::now();

    // Another replica acquires the next epoch (and the freeze lasts at least `settings.freeze`).
    // How soon is not what a trial proves, and the bound is loose: at a 1 s ttl a store call
    // times out after 200 ms, and on two cores busy compiling components the standbys' campaigns
    // did for 8 s in a row (their logs: `campaign timed out after 200ms`). A longer freeze only
    // gives the frozen holder's timers more to fire once it resumes.
    let acquired = eventually_every(
        "another replica to acquire the lease while the holder is frozen",
        settings.ttl * 3 + Duration::from_secs(30),
        Duration::from_millis(5),
        async || {
            hosts
                .iter()
                .enumerate()
                .find_map(|(i, h)| {
                    (i != holder)
                        .then(|| h.log_lines_from(offsets[i]))?
                        .iter()
                        .filter(|l| l.contains("lease acquired"))
                        .find_map(|l| {
                            let e = field_u64(l, "epoch")?;
                            (e > epoch).then_some((i, e, time_of_day(l)?))
                        })
                })
                .ok_or(frozen.elapsed())
        },
    )
    .await;
    let (successor, successor_epoch, acquired_at) = match acquired {
        Ok(found) => found,
        Err(e) => {
            // The database's sessions while the holder is still frozen: what the campaigns
            // waited on, if anything.
            let sessions = sessions(url)
                .await
                .unwrap_or_else(|e| vec![format!("sessions unknown: {e:#}")]);
            host.signal("CONT")?;
            // What each other replica said meanwhile: why none of them took the lease.
            let said: Vec<String> = hosts
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != holder)
                .map(|(i, h)| format!("r{i}:\n{}", h.log_lines_from(offsets[i]).join("\n")))
                .collect();
            return Err(anyhow::anyhow!(
                "{e:#}\n{}\nthe database's sessions (pid, state, wait, transaction age, query):\n{}",
                said.join("\n"),
                sessions.join("\n")
            ));
        }
    };
    if let Some(rest) = settings.freeze.checked_sub(frozen.elapsed()) {
        // The freeze itself: its length is the trial's parameter, not a condition to wait for.
        tokio::time::sleep(rest).await;
    }
    let resumed_at = now_time_of_day();
    host.signal("CONT")?;

    // The resumed holder ends its term at this epoch…
    let ended = eventually_every(
        format!("r{holder} to log `term ended` for epoch {epoch} after the resume"),
        settings.ttl * 2 + Duration::from_secs(10),
        Duration::from_millis(5),
        async || {
            host.log_lines_from(offsets[holder])
                .into_iter()
                .find(|l| l.contains("term ended") && field_u64(l, "epoch") == Some(epoch))
                .ok_or(())
        },
    )
    .await?;
    let ended_at = time_of_day(&ended).context("term ended line without a time")?;
    ensure!(
        seconds_between(ended_at, resumed_at) >= 0.0,
        "the term ended before the freeze: {ended}"
    );
    // …and settles as a standby, still running.
    eventually(
        format!("r{holder} to settle as a standby after the resume (its role)"),
        settings.ttl * 3 + Duration::from_secs(10),
        async || when(host.role(LEASE).await, |r| *r == Some(Role::Standby)),
    )
    .await?;

    let log = host.log_lines_from(offsets[holder]);
    Ok(FreezeTrial {
        holder,
        epoch,
        successor,
        successor_epoch,
        frozen_for: secs(seconds_between(resumed_at, stopped_at)),
        stop_after_last_call: secs(seconds_between(stopped_at, last_call)),
        resumed_at,
        acquired_at,
        resume_to_term_end: secs(seconds_between(ended_at, resumed_at)),
        end_reason: string_field(&ended, "reason").unwrap_or_default(),
        late_calls: late_calls(&log, epoch, resumed_at, acquired_at),
        refused: log
            .iter()
            .filter(|l| l.contains("call not started") && l.contains(&format!("epoch={epoch}")))
            .count(),
    })
}

/// SIGSTOPs `host` just after one of its calls at `epoch` has logged, so that no call is in
/// flight while it is frozen: a call logs within microseconds of starting and the next one is
/// an `interval` away. A stop that lands later than half an interval after the last call is
/// undone at once (SIGCONT, milliseconds after the stop) and tried again. Returns the stop time
/// and the last call's time (seconds since midnight UTC).
async fn freeze_between_calls(
    host: &Host,
    epoch: u64,
    interval: Duration,
) -> anyhow::Result<(f64, f64)> {
    let tag = call_tag(epoch);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let from = host.log_len();
        while !host.log_lines_from(from).iter().any(|l| l.contains(&tag)) {
            ensure!(
                Instant::now() < deadline,
                "{} stopped reconciling at epoch {epoch}",
                host.name
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        host.signal("STOP")?;
        let stopped_at = now_time_of_day();
        // Let the log reader drain what the process wrote before the stop.
        let mut len = host.log_len();
        loop {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let now = host.log_len();
            if now == len {
                break;
            }
            len = now;
        }
        let last_call = host
            .log_lines_from(from)
            .iter()
            .rev()
            .find(|l| l.contains(&tag))
            .and_then(|l| time_of_day(l))
            .context("call line without a time")?;
        if seconds_between(stopped_at, last_call) < interval.as_secs_f64() / 2.0 {
            return Ok((stopped_at, last_call));
        }
        host.signal("CONT")?;
        ensure!(
            Instant::now() < deadline,
            "could not stop {} within half an interval of a call",
            host.name
        );
    }
}

/// The text hello-reconciler logs on each call at `epoch` (the comma keeps epoch 1 from
/// matching epoch 12).
fn call_tag(epoch: u64) -> String {
    format!("hello from epoch {epoch},")
}

/// The calls at `epoch` in `log` stamped at or after `resumed_at`.
fn late_calls(log: &[String], epoch: u64, resumed_at: f64, acquired_at: f64) -> Vec<LateCall> {
    let tag = call_tag(epoch);
    log.iter()
        .filter(|l| l.contains(&tag))
        .filter_map(|l| {
            let t = time_of_day(l)?;
            (seconds_between(t, resumed_at) >= 0.0).then(|| LateCall {
                after_resume: secs(seconds_between(t, resumed_at)),
                after_acquired: secs(seconds_between(t, acquired_at)),
                message: l.find(&tag).map_or(l.as_str(), |at| &l[at..]).to_string(),
            })
        })
        .collect()
}

/// The number in the last ` NAME=123` of a text log line (fields follow the message; a span
/// prefix may carry the same name earlier).
fn field_u64(line: &str, name: &str) -> Option<u64> {
    let rest = &line[line.rfind(&format!(" {name}="))? + name.len() + 2..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The value of ` NAME="…"` in a text log line.
fn string_field(line: &str, name: &str) -> Option<String> {
    let rest = &line[line.rfind(&format!(" {name}=\""))? + name.len() + 3..];
    Some(rest.split('"').next()?.to_string())
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENDED: &str = "2026-11-23T12:37:12.012626Z  INFO leasehold::lease::driver: term ended: plugins stopped lease=leader epoch=12 holder=r0-1 reason=\"safe_until reached without a landed renewal\"";
    const CALL: &str = "2026-11-23T23:59:59.990000Z  INFO plugin{plugin=hello-reconciler lease=leader epoch=1}: leasehold::runtime::host: hello from epoch 1, tick 3: lease \"leader\" has 0 ms left";

    #[test]
    fn fields_are_read_after_the_message() {
        assert_eq!(field_u64(ENDED, "epoch"), Some(12));
        assert_eq!(
            string_field(ENDED, "reason").as_deref(),
            Some("safe_until reached without a landed renewal")
        );
        assert_eq!(field_u64(CALL, "epoch"), Some(1));
    }

    #[test]
    fn late_calls_are_those_of_the_epoch_at_or_after_the_resume_even_across_midnight() {
        let log = vec![CALL.to_string(), CALL.replace("epoch 1,", "epoch 11,")];
        let late = late_calls(&log, 1, 86_399.98, 86_399.0);
        assert_eq!(late.len(), 1);
        assert!(late[0].message.starts_with("hello from epoch 1, tick 3"));
        assert!(
            late_calls(&log, 1, 5.0, 0.0).is_empty(),
            "5 s past midnight"
        );
        assert!(late_calls(&log, 2, 0.0, 0.0).is_empty());
    }
}
