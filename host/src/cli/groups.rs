//! `leasehold leases groups`: the lease groups as the database has them, the cluster's view
//! rather than one replica's `/status`: each live member with the shard count it is configured
//! with and the shards it holds, and a line for a group whose members disagree on the count.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;

use clap::Args;

use super::admin::{format_ms, open};
use crate::lease::{LeaseRecord, MemberRecord, RawUrl};
use crate::report::escape_controls;

/// Rows read per query while counting the shards each member holds.
const PAGE: u32 = 500;

/// Flags of `leasehold leases groups`.
#[derive(Debug, Args)]
pub(crate) struct GroupsArgs {
    /// postgres://USER@HOST/DB or sqlite:PATH [default: sqlite:./leasehold.db].
    #[arg(long, env = "LEASEHOLD_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<RawUrl>,
    /// Print a JSON array of the members instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// A member as the command shows it: its row and the shards of its group it holds.
#[derive(serde::Serialize)]
struct Shown<'a> {
    /// The member row.
    #[serde(flatten)]
    row: &'a MemberRecord,
    /// Shards of its group held by it now.
    held: u32,
}

/// `leasehold leases groups`.
pub(crate) async fn groups(args: GroupsArgs) -> anyhow::Result<ExitCode> {
    let (url, store) = open(args.database_url).await?;
    let members = store.members().await?;
    let held = held_shards(&*store, &members).await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let shown: Vec<Shown> = members
            .iter()
            .map(|row| Shown {
                row,
                held: held
                    .get(&(row.group.clone(), row.member.clone()))
                    .copied()
                    .unwrap_or(0),
            })
            .collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&shown)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if members.is_empty() {
        writeln!(out, "no lease group has a live member in {url}")?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "{:<24} {:<40} {:>7} {:>5} {:>11} {:>11}",
        "GROUP", "MEMBER", "SHARDS", "HELD", "MEMBER_FOR", "EXPIRES_IN"
    )?;
    for m in &members {
        let count = m.shards.map_or("-".to_string(), |n| n.to_string());
        let holding = held
            .get(&(m.group.clone(), m.member.clone()))
            .copied()
            .unwrap_or(0);
        writeln!(
            out,
            "{:<24} {:<40} {:>7} {:>5} {:>11} {:>11}",
            escape_controls(&m.group),
            escape_controls(&m.member),
            count,
            holding,
            format_ms(m.member_for_ms),
            format_ms(m.expires_in_ms)
        )?;
    }
    for note in disagreements(&members) {
        writeln!(out, "{note}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// How many shards of its group each (group, member) holds now, from every lease row.
async fn held_shards(
    store: &dyn crate::lease::LeaseStore,
    members: &[MemberRecord],
) -> anyhow::Result<BTreeMap<(String, String), u32>> {
    let mut held = BTreeMap::new();
    if members.is_empty() {
        return Ok(held);
    }
    let groups: std::collections::BTreeSet<&str> =
        members.iter().map(|m| m.group.as_str()).collect();
    let mut after: Option<String> = None;
    loop {
        let rows: Vec<LeaseRecord> = store.list(after.as_deref(), PAGE).await?;
        for row in rows.iter().filter(|r| r.is_held()) {
            if let Some((group, _)) = row.name.rsplit_once('/')
                && groups.contains(group)
            {
                *held
                    .entry((group.to_string(), row.holder.clone()))
                    .or_insert(0) += 1;
            }
        }
        if rows.len() < PAGE as usize {
            return Ok(held);
        }
        after = rows.last().map(|r| r.name.clone());
    }
}

/// A line for each group whose live members are configured with different shard counts: the
/// count in force (its longest-standing member's, as every member judges it) and who has which.
fn disagreements(members: &[MemberRecord]) -> Vec<String> {
    let mut by_group: BTreeMap<&str, Vec<&MemberRecord>> = BTreeMap::new();
    for m in members {
        by_group.entry(m.group.as_str()).or_default().push(m);
    }
    let mut notes = Vec::new();
    for (group, rows) in by_group {
        let Some((in_force, eldest)) = crate::lease::groups::count_in_force(
            rows.iter()
                .map(|m| (m.member.as_str(), m.member_for_ms, m.shards)),
        ) else {
            continue;
        };
        let others: Vec<String> = rows
            .iter()
            .filter_map(|m| Some((m, m.shards?)))
            .filter(|(_, n)| *n != in_force)
            .map(|(m, n)| format!("{} has {n}", escape_controls(&m.member)))
            .collect();
        if !others.is_empty() {
            notes.push(format!(
                "{}: members disagree on the shard count: it runs with {in_force} (its longest-standing member {}'s); {} and take(s) no part until configured alike",
                escape_controls(group),
                escape_controls(eldest),
                others.join(", ")
            ));
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(group: &str, id: &str, age_ms: i64, shards: Option<u32>) -> MemberRecord {
        MemberRecord {
            group: group.into(),
            member: id.into(),
            member_for_ms: age_ms,
            expires_in_ms: 1000,
            shards,
        }
    }

    #[test]
    fn a_group_whose_members_disagree_on_the_count_gets_a_line_naming_the_count_in_force() {
        let members = [
            member("orders", "a-1", 60_000, Some(12)),
            member("orders", "b-1", 5_000, Some(6)),
            member("orders", "c-1", 50_000, None),
            member("billing", "a-1", 60_000, Some(4)),
        ];
        let notes = disagreements(&members);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].starts_with("orders: members disagree on the shard count: it runs with 12 (its longest-standing member a-1's); b-1 has 6"),
            "{}",
            notes[0]
        );
    }
}
