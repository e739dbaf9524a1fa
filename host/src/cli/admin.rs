//! Admin commands: the lease table (`leases list`, `leases handoff`, `leases release --force`),
//! a running host's status (`status --url`) and configuration checks (`config check`).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use serde_json::Value;
use tracing::warn;

use super::args::{ListArgs, RunArgs};
use crate::config::error::ConfigError;
use crate::config::{Config, Layer};
use crate::http::status::Waiting;
use crate::lease::handoff::{self, HandoffError, Outcome};
use crate::lease::history::TermEnd;
use crate::lease::{DatabaseUrl, LeaseName, LeaseRecord, LeaseStore, RawUrl, open_store};
use crate::report::escape_controls;

/// Flags of `leasehold leases release`.
#[derive(Debug, Args)]
pub(crate) struct ReleaseArgs {
    /// The lease to expire.
    pub name: String,
    /// Required: the lease is taken from its holder as it runs, and a holder that is still alive
    /// may run the lease's plugins beside the next holder's until its next renewal is refused
    /// (within ttl/3). For a live holder use `leasehold leases handoff NAME`.
    #[arg(long)]
    pub force: bool,
    /// postgres://USER@HOST/DB or sqlite:PATH [default: sqlite:./leasehold.db].
    #[arg(long, env = "LEASEHOLD_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<RawUrl>,
}

/// Flags of `leasehold leases handoff`.
#[derive(Debug, Args)]
pub(crate) struct HandoffArgs {
    /// The lease to hand over.
    pub name: String,
    /// The replica to hand it to: its replica id (`--replica-id`, or its host name), or a holder
    /// id as `/status` shows it. Other replicas may not take the lease for one ttl of it after
    /// the release; then anyone may.
    #[arg(long, value_name = "REPLICA")]
    pub to: Option<String>,
    /// How long to wait for the lease to change hands [default: twice the lease's ttl, at
    /// least 10s: the holder hears of the request at its next renewal (within ttl/3) even when
    /// the wake-up is lost, and a --to reservation lasts one ttl].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
    /// postgres://USER@HOST/DB or sqlite:PATH [default: sqlite:./leasehold.db].
    #[arg(long, env = "LEASEHOLD_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<RawUrl>,
}

/// Flags of `leasehold status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The host's HTTP address, e.g. http://10.0.0.5:9464 (or host:port).
    #[arg(
        long,
        env = "LEASEHOLD_STATUS_URL",
        default_value = "http://127.0.0.1:9464"
    )]
    pub url: String,
    /// Print the JSON as served, indented.
    #[arg(long)]
    pub json: bool,
    /// Only ask whether the host holds LEASE (GET /readyz/leases/LEASE): exit 0 when it does,
    /// 1 when it does not, 2 when it cannot say; for a container's health check without curl.
    #[arg(long, value_name = "LEASE", conflicts_with = "json")]
    pub holds: Option<String>,
}

/// Flags of `leasehold migrate`.
#[derive(Debug, Args)]
pub(crate) struct MigrateArgs {
    /// postgres://OWNER@HOST/DB or sqlite:PATH [default: sqlite:./leasehold.db].
    #[arg(long, env = "LEASEHOLD_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<RawUrl>,
}

/// `leasehold migrate`: opening the store applies every pending migration; it says how many.
pub(crate) async fn migrate(args: MigrateArgs) -> anyhow::Result<ExitCode> {
    let url = parse_url(args.database_url)?;
    let before = crate::lease::applied_migrations(&url).await;
    let _store = open_store(
        &url,
        crate::config::DEFAULT_CONNECT_TIMEOUT,
        crate::lease::Timing::default().store_timeout,
    )
    .await?;
    let after = crate::lease::applied_migrations(&url).await;
    match (before, after) {
        (Some(before), Some(after)) if after > before => println!(
            "{url}: applied {} migration{}; the lease schema is up to date ({after} in all)",
            after - before,
            if after - before == 1 { "" } else { "s" }
        ),
        (Some(_), Some(after)) => {
            println!("{url}: the lease schema was already up to date ({after} migrations)")
        }
        _ => println!("{url}: the lease schema is up to date"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Flags of `leasehold config check`.
#[derive(Debug, Args)]
pub(crate) struct ConfigCheckArgs {
    /// The config file [default: $LEASEHOLD_CONFIG, else the built-in defaults].
    pub file: Option<PathBuf>,
    /// The same flags and LEASEHOLD_* variables `leasehold run` applies over the file.
    #[command(flatten)]
    pub run: RunArgs,
}

/// The database URL of an admin command: the flag or variable, else the default SQLite file.
fn parse_url(raw: Option<RawUrl>) -> anyhow::Result<DatabaseUrl> {
    Ok(match raw {
        Some(raw) => DatabaseUrl::parse(raw.expose())
            .map_err(|e| e.from_origin(crate::config::DATABASE_URL_FLAG))?,
        None => DatabaseUrl::default_sqlite(),
    })
}

/// The store an admin command works on (the default SQLite file when no URL is given), opened
/// with the defaults of `leasehold run`. It creates no database: a SQLite file that does not
/// exist is not the one the hosts use, and an empty new one would answer as if no lease were
/// held.
pub(super) async fn open(
    raw: Option<RawUrl>,
) -> anyhow::Result<(DatabaseUrl, Arc<dyn LeaseStore>)> {
    let given = raw.is_some();
    let url = parse_url(raw)?;
    if let DatabaseUrl::Sqlite { path } = &url
        && !path.exists()
    {
        let how = match given {
            true => "the database URL given",
            false => "the default, sqlite:./leasehold.db, as no database URL was given",
        };
        bail!(
            "no SQLite lease file at {} ({how}); this command creates none: point it at the database the hosts use with --database-url or LEASEHOLD_DATABASE_URL",
            escape_controls(&path.display().to_string())
        );
    }
    let store = open_store(
        &url,
        crate::config::DEFAULT_CONNECT_TIMEOUT,
        crate::lease::Timing::default().store_timeout,
    )
    .await?;
    Ok((url, store))
}

/// `leasehold leases release NAME --force`.
pub(crate) async fn release(args: ReleaseArgs) -> anyhow::Result<ExitCode> {
    // Only a lease name can be held: anything else is refused before the store is opened.
    let name = LeaseName::parse(&args.name)?;
    if !args.force {
        bail!(
            "refusing to release lease {:?} without --force: it is taken from its holder as it runs (its fenced writes are refused at once, but its plugins may run beside the next holder's until its next renewal); for a live holder, `leasehold leases handoff {}` hands it over in order",
            name.as_str(),
            name.as_str()
        );
    }
    let (url, store) = open(args.database_url).await?;
    match store.force_release(&name).await? {
        Some((holder, epoch)) => {
            let holder = escape_controls(&holder);
            warn!(lease = %name, holder = %holder, epoch = epoch.get(), store = %url, "lease force-released by an operator: expired now, epoch kept");
            println!(
                "released {name}: was held by {holder} at epoch {epoch}; the next holder gets epoch {}",
                epoch.next()
            );
            println!(
                "if {holder} is still running, it may run {name}'s plugins beside the next holder's until its next renewal is refused (within a third of its ttl); its fenced writes are refused already. For a live holder, `leasehold leases handoff {name}` stops them first."
            );
            Ok(ExitCode::SUCCESS)
        }
        None if !store.get(&[name.to_string()]).await?.is_empty() => {
            println!("{name}: not held by anyone; nothing to release");
            Ok(ExitCode::SUCCESS)
        }
        None => {
            // A misspelt name must not read as done: the hint looks through the first names.
            let names: Vec<String> = store
                .list(None, 10_000)
                .await
                .map(|rows| rows.into_iter().map(|r| r.name).collect())
                .unwrap_or_default();
            let close = crate::report::similar(name.as_str(), names.iter().map(String::as_str));
            let hint = match close.as_slice() {
                [] => format!("`leasehold leases list` shows the leases of {url}"),
                close => format!("did you mean {}?", close.join(" or ")),
            };
            bail!("no lease named {name} in {url}: {hint}")
        }
    }
}

/// `leasehold leases handoff NAME [--to REPLICA]`: asks the holder to release the lease in order
/// now (its plugins stopped first), and waits until another term has begun. Exit 0 once it has
/// (and, with `--to`, the named replica holds it); 1 when nobody holds the lease, on a timeout,
/// or when the lease went to another replica than the one named.
pub(crate) async fn handoff(args: HandoffArgs) -> anyhow::Result<ExitCode> {
    let name = LeaseName::parse(&args.name)?;
    if let Some(to) = &args.to {
        handoff::check_to(to).map_err(|why| match why {
            HandoffError::InvalidTo { reason, .. } => {
                anyhow::anyhow!("invalid --to {:?}: {reason}", escape_controls(to))
            }
            other => other.into(),
        })?;
    }
    let (url, store) = open(args.database_url).await?;
    let asked = match handoff::request(store.as_ref(), &name, args.to.as_deref()).await {
        Ok(asked) => asked,
        // The command's own words, with the store it read.
        Err(HandoffError::NoSuchLease { .. }) => {
            bail!("no lease named {name} in {url}: no replica has ever held it")
        }
        Err(HandoffError::NotHeld { .. }) => bail!(
            "lease {name} is not held by anyone in {url}: there is nothing to hand over (a replica that campaigns for it takes it by itself)"
        ),
        Err(HandoffError::AlreadyHeldByTo { holder, to, .. }) => bail!(
            "lease {name} is held by {} already, which --to {} names",
            escape_controls(&holder),
            escape_controls(&to)
        ),
        Err(e) => return Err(e.into()),
    };
    let old = escape_controls(&asked.holder).into_owned();
    let timeout = args.timeout.unwrap_or_else(|| asked.default_timeout());
    let target = match &args.to {
        Some(to) => format!(" to {}", escape_controls(to)),
        None => String::new(),
    };
    warn!(lease = %name, holder = %old, epoch = asked.epoch.get(), to = args.to.as_deref(), store = %url, "handoff requested by an operator");
    println!(
        "asked {old} to hand {name} over{target} (epoch {}); waiting up to {}",
        asked.epoch,
        humantime::format_duration(timeout)
    );
    let outcome = handoff::wait(store.as_ref(), &asked, timeout).await?;
    let (new_holder, new_epoch, how) = match &outcome {
        Outcome::Moved {
            holder,
            epoch,
            ended,
        } => (holder, *epoch, how_it_ended(*ended)),
        Outcome::Released { ended } => {
            eprintln!(
                "{name}: {old} gave it up at epoch {} ({}), but no replica took it within {}; a replica that campaigns for it will",
                asked.epoch,
                how_it_ended(*ended),
                humantime::format_duration(timeout)
            );
            return Ok(ExitCode::FAILURE);
        }
        Outcome::Kept => {
            eprintln!(
                "{name}: {old} did not hand it over within {}; is it running? For a holder that is gone, `leasehold leases release {name} --force`",
                humantime::format_duration(timeout)
            );
            return Ok(ExitCode::FAILURE);
        }
    };
    let holder = escape_controls(new_holder);
    println!(
        "{name}: {old} (epoch {}) -> {holder} (epoch {new_epoch}); the old term {how}",
        asked.epoch
    );
    if outcome.missed(&asked)
        && let Some(to) = &args.to
    {
        eprintln!(
            "{name} went to {holder}, not to {}: the reservation lapsed before that replica campaigned (is it running, and does it campaign for {name}?)",
            escape_controls(to)
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// How a handed-over term ended, as `leases handoff` says it.
fn how_it_ended(ended: Option<TermEnd>) -> &'static str {
    match ended {
        Some(TermEnd::Released) => "released in order: its plugins stopped before the release",
        Some(TermEnd::Expired) => {
            "expired: the holder did not release it (gone, or cut off) and it ran out"
        }
        Some(TermEnd::Forced) => "force-released by an operator meanwhile",
        None => "still open",
    }
}

/// How long `leasehold status` waits for the host's answer.
const STATUS_TIMEOUT: Duration = Duration::from_secs(5);

/// `leasehold status --url URL`.
pub(crate) async fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let base = if args.url.contains("://") {
        args.url.trim_end_matches('/').to_string()
    } else {
        format!("http://{}", args.url.trim_end_matches('/'))
    };
    let client = reqwest::Client::builder()
        .timeout(STATUS_TIMEOUT)
        .build()
        .context("building the HTTP client")?;
    if let Some(lease) = &args.holds {
        return holds(&client, &base, lease).await;
    }
    let url = format!("{base}/status");
    let response = client
        .get(&url)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    let code = response.status();
    if !code.is_success() {
        // The host's refusal says what to change (a 421 names `http_allowed_hosts`): show its
        // first line, without control characters a terminal would act on.
        let said = first_line(&response.text().await.unwrap_or_default());
        anyhow::bail!("GET {url}: {code}: {said}");
    }
    let status: Value = response
        .json()
        .await
        .with_context(|| format!("GET {url}: not a leasehold status"))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&status)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    write!(out, "{}", render_status(&status))?;
    Ok(ExitCode::SUCCESS)
}

/// The first line of a host's answer, without control characters a terminal would act on, at
/// most 400 characters: a host of another version, or a proxy, may answer anything.
fn first_line(text: &str) -> String {
    text.lines()
        .next()
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_control())
        .take(400)
        .collect()
}

/// `leasehold status --holds LEASE`: the host's answer to `/readyz/leases/LEASE` on one line;
/// exit 0 on 200, 1 on 503 (held elsewhere, or renewals failing here), 2 on any other answer (an
/// unknown lease's 404 names the known ones) or none.
async fn holds(client: &reqwest::Client, base: &str, lease: &str) -> anyhow::Result<ExitCode> {
    let url = format!("{base}/readyz/leases/{lease}");
    let answer = match client.get(&url).send().await {
        Ok(response) => Ok((response.status(), response.text().await.unwrap_or_default())),
        Err(e) => Err(e),
    };
    match answer {
        Ok((code, said)) => {
            let said = first_line(&said);
            match code.as_u16() {
                200 => println!("{said}"),
                503 => println!("{said}"),
                _ => eprintln!("leasehold: GET {url}: {code}: {said}"),
            }
            Ok(ExitCode::from(match code.as_u16() {
                200 => 0,
                503 => 1,
                _ => 2,
            }))
        }
        Err(e) => {
            eprintln!(
                "leasehold: cannot say whether the host holds {}: GET {url}: {}",
                crate::report::escape_controls(lease),
                unanswered(&e)
            );
            Ok(ExitCode::from(2))
        }
    }
}

/// Why a request got no answer, in the words of its deepest cause (`Connection refused (os
/// error 111)`, `dns error: …`): the client's own text ("error sending request for url") names
/// no cause.
fn unanswered(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        return format!("no answer within {} s", STATUS_TIMEOUT.as_secs());
    }
    let deepest = std::iter::successors(std::error::Error::source(error), |e| e.source()).last();
    match deepest {
        Some(cause) => cause.to_string(),
        None => error.to_string(),
    }
}

/// The `/status` document as tables.
pub(crate) fn render_status(status: &Value) -> String {
    // A host of another version, or a proxy, may serve any text: a table shows it on one line,
    // with nothing a terminal would act on.
    let text = |v: &Value| match v {
        Value::Null => "-".to_string(),
        Value::String(s) => escape_controls(s).into_owned(),
        other => escape_controls(&other.to_string()).into_owned(),
    };
    let mut out = format!(
        "replica {}  store {}\n",
        text(&status["replica"]),
        text(&status["store"])
    );
    if let Some(error) = status["store_error"].as_str() {
        out.push_str(&format!("store error: {}\n", escape_controls(error)));
    }
    let failing = &status["lease_calls_failing"];
    if !failing.is_null() {
        out.push_str(&format!(
            "cannot campaign: {} failed {} time(s) in a row ({}): {}\n",
            text(&failing["op"]),
            text(&failing["failures"]),
            text(&failing["cause"]),
            text(&failing["error"])
        ));
    }
    out.push_str(&format!(
        "\n{:<24} {:<10} {:<40} {:>7} {:>12}  LAST HANDOFF\n",
        "LEASE", "ROLE", "HOLDER", "EPOCH", "EXPIRES_IN"
    ));
    for lease in status["leases"].as_array().into_iter().flatten() {
        let expires = match lease["expires_in_ms"].as_i64() {
            Some(ms) => format!("{ms}ms"),
            None => "-".into(),
        };
        let handoff = &lease["last_handoff"];
        let handoff = match handoff["at_ms_ago"].as_i64() {
            Some(ms) => format!(
                "{:.1}s ago, {} from {}",
                Duration::from_millis(ms.unsigned_abs()).as_secs_f64(),
                text(&handoff["reason"]),
                text(&handoff["from"])
            ),
            None => "-".into(),
        };
        out.push_str(&format!(
            "{:<24} {:<10} {:<40} {:>7} {:>12}  {}\n",
            text(&lease["name"]),
            text(&lease["role"]),
            text(&lease["holder"]),
            text(&lease["epoch"]),
            expires,
            handoff
        ));
    }
    let groups = status["groups"].as_array().cloned().unwrap_or_default();
    if !groups.is_empty() {
        out.push_str(&format!(
            "\n{:<24} {:>7} {:>5} {:>7} {:>8} {:<8}  NOTE\n",
            "GROUP", "SHARDS", "HELD", "TARGET", "MEMBERS", "MEMBER"
        ));
        for g in &groups {
            let conflict = &g["count_conflict"];
            let note = if !conflict.is_null() {
                format!(
                    "takes no part: the group runs with {} shards ({}'s)",
                    text(&conflict["shards"]),
                    text(&conflict["member"])
                )
            } else if g["gated"].as_bool() == Some(true) {
                "gated: a health check bound to the group fails".to_string()
            } else if g["other_counts"].as_u64().is_some_and(|n| n > 0) {
                format!(
                    "{} member(s) configured with another shard count take no part",
                    text(&g["other_counts"])
                )
            } else {
                String::new()
            };
            out.push_str(
                format!(
                    "{:<24} {:>7} {:>5} {:>7} {:>8} {:<8}  {}",
                    text(&g["name"]),
                    text(&g["shards"]),
                    text(&g["held"]),
                    text(&g["target"]),
                    text(&g["members"]),
                    if g["member"].as_bool() == Some(true) {
                        "yes"
                    } else {
                        "not yet"
                    },
                    note
                )
                .trim_end(),
            );
            out.push('\n');
        }
    }
    let plugins = status["plugins"].as_array().cloned().unwrap_or_default();
    if !plugins.is_empty() {
        out.push_str(&format!(
            "\n{:<24} {:<16} {:<17} {:<12} {:>7} {:>6} {:>8}  LAST ERROR\n",
            "PLUGIN", "LEASE", "WORLD", "STATE", "CALLS", "TRAPS", "REFUSED"
        ));
        for p in &plugins {
            out.push_str(&format!(
                "{:<24} {:<16} {:<17} {:<12} {:>7} {:>6} {:>8}  {}\n",
                text(&p["name"]),
                text(&p["lease"]),
                text(&p["world"]),
                text(&p["state"]),
                text(&p["calls"]),
                text(&p["traps"]),
                text(&p["refused_writes"]),
                text(&p["last_error"])
            ));
        }
    }
    let processes = status["processes"].as_array().cloned().unwrap_or_default();
    if !processes.is_empty() {
        out.push_str(&format!(
            "\n{:<24} {:<16} {:<9} {:>8} {:>6} {:>6} {:>10} {:>11}  EXITS\n",
            "PROCESS", "LEASE", "STATE", "PID", "STARTS", "KILLS", "LAST STOP", "UNCONFIRMED"
        ));
        for p in &processes {
            let exits = p["exits"]
                .as_object()
                .map(|by| {
                    by.iter()
                        .map(|(how, n)| format!("{}: {}", escape_controls(how), text(n)))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            let last_stop = p["last_stop_ms"]
                .as_f64()
                .map_or("-".to_string(), |ms| format!("{ms:.0} ms"));
            out.push_str(
                format!(
                    "{:<24} {:<16} {:<9} {:>8} {:>6} {:>6} {:>10} {:>11}  {}",
                    text(&p["name"]),
                    text(&p["lease"]),
                    text(&p["state"]),
                    text(&p["pid"]),
                    text(&p["starts"]),
                    text(&p["forced_kills"]),
                    last_stop,
                    text(&p["unconfirmed_stops"]),
                    exits
                )
                .trim_end(),
            );
            out.push('\n');
        }
    }
    out
}

/// `leasehold config check [FILE]`: exit 0 and print the effective configuration when valid.
/// `file` is the file `args` name, as the entry read it (an error it met is this command's).
pub(crate) fn config_check(
    args: ConfigCheckArgs,
    file: Option<Result<Layer, ConfigError>>,
) -> anyhow::Result<ExitCode> {
    let path = args.file.clone().or(args.run.config.clone());
    let config = Config::resolve(file.transpose()?.unwrap_or_default(), args.run.settings)?;
    if let Some(dir) = config.plugins.as_ref().filter(|d| !d.is_dir()) {
        bail!(
            "plugin directory {} does not exist or is not a directory",
            dir.display()
        );
    }
    if let Some(warning) = config
        .database_url
        .plaintext_warning(crate::app::LEASE_DATABASE, |k| std::env::var(k).ok())
    {
        println!("# warning: {warning}");
    }
    let shown = path.map_or("built-in defaults".to_string(), |p| p.display().to_string());
    println!("# {shown}: ok; the effective configuration (password redacted):");
    print!("{}", config.to_toml());
    // What the standard variables make of the `[telemetry]` table, as `run` would start it.
    let export = config.telemetry.describe(|k| std::env::var(k).ok())?;
    println!("# trace export: {export}");
    Ok(ExitCode::SUCCESS)
}

/// `leasehold leases list`.
pub(crate) async fn list(args: ListArgs) -> anyhow::Result<()> {
    let (_, store) = open(args.database_url).await?;
    let mut out = std::io::stdout().lock();
    let mut after = args.after;
    let mut remaining = args.limit.unwrap_or(u64::MAX);
    let mut first = true;
    if args.json {
        write!(out, "[")?;
    } else {
        writeln!(
            out,
            "{:<32} {:<40} {:>8} {:<9} {:>12}  NEXT",
            "NAME", "HOLDER", "EPOCH", "STATE", "EXPIRES_IN"
        )?;
    }
    // Whether rows were left unread because --limit was reached.
    let mut more = false;
    loop {
        let page = args.page_size;
        let rows = store.list(after.as_deref(), page).await?;
        let names: Vec<String> = rows.iter().map(|r| r.name.clone()).collect();
        // How each free lease's last term ended; a lease whose holder went silent has a term
        // that only the next campaign closes, so no end reads as expired.
        let ends: std::collections::HashMap<String, Option<TermEnd>> = store
            .terms(&names, 1)
            .await?
            .into_iter()
            .map(|t| (t.lease, t.term.end))
            .collect();
        // Each lease's line, the next holder first.
        let mut lines: std::collections::HashMap<String, Vec<Waiting>> = Default::default();
        for w in store.line(&names).await? {
            lines.entry(w.lease).or_default().push(Waiting {
                holder: w.holder,
                priority: w.priority,
                waited_ms: w.waited_ms,
            });
        }
        for (i, row) in rows.iter().enumerate() {
            if args.held && !row.is_held() {
                continue;
            }
            if remaining == 0 {
                more = true;
                break;
            }
            let state = lease_state(row, ends.get(&row.name).copied().flatten());
            let line = lines.remove(&row.name).unwrap_or_default();
            if args.json {
                let listed = Listed { row, state, line };
                write!(
                    out,
                    "{}{}",
                    if first { "\n  " } else { ",\n  " },
                    serde_json::to_string(&listed)?
                )?;
            } else {
                let expires = if row.is_held() {
                    format_ms(row.expires_in_ms)
                } else {
                    "-".into()
                };
                // The next in line, and how many wait behind it.
                let next = match line.as_slice() {
                    [] => "-".to_string(),
                    [w, rest @ ..] => format!(
                        "{} (priority {}, waiting {}){}",
                        escape_controls(&w.holder),
                        w.priority,
                        format_ms(w.waited_ms),
                        match rest.len() {
                            0 => String::new(),
                            n => format!(" +{n}"),
                        }
                    ),
                };
                // Rows written by another version or by hand may hold any text.
                writeln!(
                    out,
                    "{:<32} {:<40} {:>8} {:<9} {:>12}  {}",
                    escape_controls(&row.name),
                    escape_controls(&row.holder),
                    row.epoch,
                    state,
                    expires,
                    next
                )?;
            }
            first = false;
            remaining -= 1;
            after = Some(rows[i].name.clone());
        }
        if more || rows.len() < page as usize {
            break;
        }
        after = rows.last().map(|r| r.name.clone());
    }
    if args.json {
        writeln!(out, "{}]", if first { "" } else { "\n" })?;
    }
    if more {
        // On stderr, so that the table or the JSON stays whole for whoever parses it.
        if let Some(last) = &after {
            eprintln!(
                "more leases follow: leasehold leases list --after {}",
                escape_controls(last)
            );
        }
    }
    Ok(())
}

/// A row of `leases list --json`: the lease row and its state.
#[derive(serde::Serialize)]
struct Listed<'a> {
    /// The row as the store read it.
    #[serde(flatten)]
    row: &'a LeaseRecord,
    /// `held`, or how its last term ended: `released`, `forced` or `expired`.
    state: &'static str,
    /// The standbys waiting in its line, the next holder first.
    line: Vec<Waiting>,
}

/// A lease's state for `leases list`: `held`, or how its last term ended (`released` by its
/// holder, `forced` by an operator, or `expired`: its holder went silent).
fn lease_state(row: &LeaseRecord, last_end: Option<TermEnd>) -> &'static str {
    match (row.is_held(), last_end) {
        (true, _) => "held",
        (false, Some(end)) => end.as_str(),
        (false, None) => TermEnd::Expired.as_str(),
    }
}

/// Milliseconds as a person reads them: `850ms`, `12.4s`.
pub(super) fn format_ms(ms: i64) -> String {
    if ms.abs() < 1_000 {
        format!("{ms}ms")
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}
