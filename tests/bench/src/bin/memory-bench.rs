//! The host's peak RSS under the attacks on its memory (README "Memory budget"): one real
//! `leasehold` process on a real PostgreSQL runs every attack of [`leasehold_tests::memory`] at
//! once, beside a well-behaved plugin on another lease; prints its peak RSS (`VmHWM`) against
//! the budget its plugins' limits add up to, and how each attack ended.

#![allow(clippy::unwrap_used)]

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let report = leasehold_tests::memory::run_all().await?;
    println!("{report}");
    Ok(())
}
