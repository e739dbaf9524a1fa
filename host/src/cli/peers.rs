//! `leasehold leases check URL`: every replica behind one name asked who holds each lease, and
//! the answer judged from outside. A headless Service (or any DNS name) resolves to every
//! replica's address; each is asked `GET /v1/leases`, and each lease must have exactly one
//! replica that says it holds it, named as the holder by every replica that answers. For a
//! deployment's own test (the chart's `helm test`) and for an operator's "is it sane?".
//!
//! - [`CheckArgs`]: the flags;
//! - [`judge`]: the pure verdict on the answers;
//! - [`check`]: resolve, ask, judge, print; again until `--wait` runs out.
//!
//! Several URLs may be given (replicas without a shared name, e.g. containers on one machine):
//! every address of every one is asked.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::http::api::{self, LeaseList};
use crate::lease::Role;
use crate::report::escape_controls;

/// Flags of `leasehold leases check`.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The replicas' HTTP address, by a name that resolves to every one of them, e.g.
    /// http://leasehold-peers:9464 (a headless Service); or each replica's address.
    #[arg(required = true, value_name = "URL")]
    pub urls: Vec<String>,
    /// How many replicas must answer; fewer is a failure [default: whoever the name resolves to].
    #[arg(long)]
    pub replicas: Option<usize>,
    /// Ask again, once a second, until the check passes or this long has gone by, e.g. 60s: a
    /// deployment just installed may still be starting [default: ask once].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub wait: Option<Duration>,
}

/// How long one replica has to answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// One replica's answer: its address and what it says, or why it said nothing.
#[derive(Debug)]
pub(crate) struct Answer {
    pub address: SocketAddr,
    pub said: Result<LeaseList, String>,
}

/// The verdict on one round of answers: a line per lease, and what is wrong, if anything.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// `lease  holder  epoch  (n of m agree)`, in lease order.
    pub lines: Vec<String>,
    /// Each fault found, in words an operator can act on; empty when the check passes.
    pub faults: Vec<String>,
}

/// One replica's word on one lease.
struct Word<'a> {
    address: SocketAddr,
    replica: &'a str,
    /// Its role is leader or uncertain: it still holds the lease.
    holds: bool,
    holder: Option<&'a str>,
    epoch: Option<i64>,
}

/// Judges one round: every replica answered (and at least `replicas` of them, when given); each
/// lease any replica campaigns for has exactly one replica that says it holds it (role leader or
/// uncertain: both still hold it); every replica that campaigns for it names that one as the
/// holder, at the same epoch.
pub(crate) fn judge(answers: &[Answer], replicas: Option<usize>) -> Verdict {
    let mut verdict = Verdict::default();
    let mut lists = Vec::new();
    for answer in answers {
        match &answer.said {
            Ok(list) => lists.push((answer.address, list)),
            Err(why) => verdict
                .faults
                .push(format!("{}: no answer: {why}", answer.address)),
        }
    }
    if let Some(wanted) = replicas
        && lists.len() < wanted
    {
        verdict.faults.push(format!(
            "{} of {wanted} replicas answered (addresses: {})",
            lists.len(),
            answers.len()
        ));
    }
    // Each replica's word on each lease it campaigns for, by lease.
    let mut words: BTreeMap<&str, Vec<Word>> = BTreeMap::new();
    for (address, list) in &lists {
        for lease in &list.leases {
            words.entry(&lease.name).or_default().push(Word {
                address: *address,
                replica: &list.replica,
                holds: lease.role != Role::Standby,
                holder: lease.holder.as_deref(),
                epoch: lease.epoch.map(|e| e.get()),
            });
        }
    }
    let epoch_text = |e: Option<i64>| e.map_or("-".to_string(), |e| e.to_string());
    for (lease, seen) in &words {
        let shown = escape_controls(lease);
        let holders: Vec<&Word> = seen.iter().filter(|w| w.holds).collect();
        match holders.as_slice() {
            [] => {
                verdict.faults.push(format!("{shown}: no replica holds it"));
                verdict.lines.push(format!("{shown}  -  -  (no holder)"));
            }
            [holder] => {
                let named = |w: &&Word| w.holder == Some(holder.replica) && w.epoch == holder.epoch;
                for word in seen.iter().filter(|w| !named(w)) {
                    verdict.faults.push(format!(
                        "{shown}: {} names {} at epoch {}, but {} holds it at epoch {}",
                        word.address,
                        word.holder.map_or("nobody".into(), escape_controls),
                        epoch_text(word.epoch),
                        holder.address,
                        epoch_text(holder.epoch),
                    ));
                }
                verdict.lines.push(format!(
                    "{shown}  {} ({})  {}  ({} of {} agree)",
                    escape_controls(holder.replica),
                    holder.address,
                    epoch_text(holder.epoch),
                    seen.iter().filter(named).count(),
                    seen.len()
                ));
            }
            many => {
                let who: Vec<String> = many
                    .iter()
                    .map(|w| format!("{} ({})", escape_controls(w.replica), w.address))
                    .collect();
                verdict.faults.push(format!(
                    "{shown}: {} replicas say they hold it: {}",
                    many.len(),
                    who.join(", ")
                ));
                verdict
                    .lines
                    .push(format!("{shown}  {}  -  (held twice)", who.join(", ")));
            }
        }
    }
    if lists.is_empty() {
        verdict.faults.push("no replica answered".into());
    } else if lists.iter().all(|(_, l)| l.leases.is_empty()) {
        verdict
            .faults
            .push("no replica campaigns for any lease".into());
    }
    verdict
}

/// The URL's scheme, host and port, checked: the replicas are asked by address.
fn parse(url: &str) -> anyhow::Result<(String, u16)> {
    let full = match url.contains("://") {
        true => url.to_string(),
        false => format!("http://{url}"),
    };
    let parsed = url::Url::parse(&full).with_context(|| format!("{url}: not a URL"))?;
    anyhow::ensure!(
        parsed.scheme() == "http",
        "{url}: the replicas serve plain http"
    );
    let host = parsed
        .host_str()
        .with_context(|| format!("{url}: no host name"))?
        .trim_matches(['[', ']'])
        .to_string();
    Ok((host, parsed.port().unwrap_or(9464)))
}

/// Every address `host` resolves to, in order, each once.
async fn addresses(host: &str, port: u16) -> anyhow::Result<Vec<SocketAddr>> {
    let mut found: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .with_context(|| format!("resolving {host}"))?
        .collect();
    found.sort();
    found.dedup();
    Ok(found)
}

async fn ask(client: &reqwest::Client, address: SocketAddr) -> Answer {
    let url = format!("http://{address}{}", api::PREFIX);
    let said = async {
        let response = client.get(&url).send().await.map_err(|e| e.to_string())?;
        let code = response.status();
        if !code.is_success() {
            return Err(format!("GET {url}: {code}"));
        }
        response
            .json::<LeaseList>()
            .await
            .map_err(|e| format!("GET {url}: not a lease list: {e}"))
    }
    .await;
    Answer { address, said }
}

/// `leasehold leases check URL...`: exit 0 when the check passes, 1 when it does not (each
/// fault on stderr, a name that does not resolve among them).
pub(crate) async fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let targets = args
        .urls
        .iter()
        .map(|url| parse(url))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let client = reqwest::Client::builder()
        .timeout(ASK_TIMEOUT)
        .build()
        .context("building the HTTP client")?;
    let deadline = tokio::time::Instant::now() + args.wait.unwrap_or_default();
    loop {
        let mut found = Vec::new();
        let mut unresolved = Vec::new();
        for (host, port) in &targets {
            match addresses(host, *port).await {
                Ok(addresses) if addresses.is_empty() => {
                    unresolved.push(format!("{host} resolves to no address"))
                }
                Ok(addresses) => found.extend(addresses),
                Err(e) => unresolved.push(format!("{e:#}")),
            }
        }
        found.sort();
        found.dedup();
        let asked = futures::future::join_all(found.iter().map(|a| ask(&client, *a))).await;
        let mut verdict = judge(&asked, args.replicas);
        verdict.faults.splice(0..0, unresolved);
        let done = verdict.faults.is_empty() || tokio::time::Instant::now() >= deadline;
        if done {
            for line in &verdict.lines {
                println!("{line}");
            }
            for fault in &verdict.faults {
                eprintln!("leasehold: {fault}");
            }
            return Ok(match verdict.faults.is_empty() {
                true => ExitCode::SUCCESS,
                false => ExitCode::from(1),
            });
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::http::api::LeaseView;

    fn view(name: &str, role: Role, holder: Option<&str>, epoch: Option<i64>) -> LeaseView {
        serde_json::from_value(serde_json::json!({
            "name": name, "role": role, "holder": holder, "epoch": epoch,
            "stop_within_ms": 0, "ttl_ms": 15000, "holder_read_ms_ago": 0,
        }))
        .unwrap()
    }

    fn answer(port: u16, replica: &str, leases: Vec<LeaseView>) -> Answer {
        Answer {
            address: SocketAddr::from(([10, 0, 0, 1], port)),
            said: Ok(LeaseList {
                replica: replica.into(),
                leases,
            }),
        }
    }

    #[test]
    fn one_holder_named_by_every_replica_passes() {
        let answers = [
            answer(
                1,
                "a",
                vec![view("leader", Role::Leader, Some("a"), Some(7))],
            ),
            answer(
                2,
                "b",
                vec![view("leader", Role::Standby, Some("a"), Some(7))],
            ),
        ];
        let verdict = judge(&answers, Some(2));
        assert!(verdict.faults.is_empty(), "{verdict:?}");
        assert_eq!(verdict.lines, ["leader  a (10.0.0.1:1)  7  (2 of 2 agree)"]);
    }

    #[test]
    fn two_holders_no_holder_a_stale_view_and_a_missing_replica_each_fail() {
        let answers = [
            answer(1, "a", vec![view("x", Role::Leader, Some("a"), Some(3))]),
            answer(2, "b", vec![view("x", Role::Uncertain, Some("b"), Some(2))]),
        ];
        let faults = judge(&answers, None).faults;
        assert!(
            faults[0].contains("2 replicas say they hold it"),
            "{faults:?}"
        );

        let answers = [answer(1, "a", vec![view("x", Role::Standby, None, None)])];
        assert_eq!(judge(&answers, None).faults, ["x: no replica holds it"]);

        let answers = [
            answer(1, "a", vec![view("x", Role::Leader, Some("a"), Some(3))]),
            answer(2, "b", vec![view("x", Role::Standby, Some("c"), Some(2))]),
        ];
        let faults = judge(&answers, None).faults;
        assert!(faults[0].contains("names c at epoch 2"), "{faults:?}");

        let answers = [answer(
            1,
            "a",
            vec![view("x", Role::Leader, Some("a"), Some(3))],
        )];
        let faults = judge(&answers, Some(3)).faults;
        assert_eq!(faults, ["1 of 3 replicas answered (addresses: 1)"]);
    }

    #[test]
    fn a_url_names_a_host_and_port_and_only_plain_http() {
        assert_eq!(
            parse("http://leasehold-peers:9464").unwrap(),
            ("leasehold-peers".into(), 9464)
        );
        assert_eq!(parse("peers").unwrap(), ("peers".into(), 9464));
        assert!(parse("https://x").is_err());
    }
}
