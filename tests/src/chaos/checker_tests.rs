use super::*;

/// A witness row of `lease` at epoch `epoch` by `holder` at `at` µs.
fn row(lease: &str, holder: &str, epoch: i64, at: i64) -> WitnessRow {
    WitnessRow {
        id: at,
        lease: lease.to_string(),
        holder: holder.to_string(),
        epoch,
        tick: 0,
        at,
    }
}

/// Fenced kv writes of plugin `p` on lease `leader`, in commit order.
fn commits(epochs: &[i64]) -> Vec<FencedCommit> {
    epochs
        .iter()
        .enumerate()
        .map(|(i, &epoch)| FencedCommit {
            seq: i as i64 + 1,
            lease: "leader".to_string(),
            plugin: "p".to_string(),
            key: "last".to_string(),
            epoch,
        })
        .collect()
}

#[test]
fn terms_that_follow_each_other_are_safe() {
    let rows = [
        row("leader", "a", 1, 10),
        row("leader", "a", 1, 20),
        row("leader", "b", 2, 30),
        row("leader", "a", 3, 40),
    ];
    let verdict = check(&rows, &commits(&[1, 1, 2, 3]));
    assert!(verdict.is_safe(), "{verdict}");
    assert_eq!(verdict, Verdict::default());
}

#[test]
fn two_epochs_whose_work_interleaves_is_an_overlap() {
    let rows = [
        row("leader", "a", 1, 10),
        row("leader", "b", 2, 20),
        row("leader", "a", 1, 30),
        row("leader", "b", 2, 40),
    ];
    let verdict = check(&rows, &[]);
    assert_eq!(verdict.overlaps, 1, "{verdict}");
    assert!(!verdict.is_safe());
    let example = &verdict.examples[0];
    assert!(
        example.contains("epoch 1") && example.contains("epoch 2") && example.contains("\"a\""),
        "{example}"
    );
}

#[test]
fn a_term_wholly_inside_another_is_an_overlap() {
    let rows = [
        row("leader", "a", 1, 10),
        row("leader", "b", 2, 20),
        row("leader", "a", 1, 50),
    ];
    assert_eq!(check(&rows, &[]).overlaps, 1);
}

#[test]
fn terms_of_different_leases_never_overlap() {
    let rows = [
        row("x", "a", 1, 10),
        row("y", "b", 1, 15),
        row("x", "a", 1, 20),
        row("y", "b", 2, 25),
    ];
    assert!(check(&rows, &[]).is_safe());
}

#[test]
fn a_lower_epoch_after_a_higher_one_is_a_regression() {
    // Rows given out of time order: the checker sorts them by time.
    let rows = [
        row("leader", "a", 1, 30),
        row("leader", "b", 2, 20),
        row("leader", "a", 1, 10),
    ];
    let verdict = check(&rows, &[]);
    assert_eq!(verdict.epoch_regressions, 1, "{verdict}");
}

#[test]
fn an_epoch_seen_with_two_holders_is_reported() {
    // A promoted standby that missed the last campaign hands epoch 2 out again.
    let rows = [
        row("leader", "a", 1, 10),
        row("leader", "b", 2, 20),
        row("leader", "c", 2, 30),
    ];
    let verdict = check(&rows, &[]);
    assert_eq!(verdict.reused_epochs, 1, "{verdict}");
    assert!(verdict.examples[0].contains("epoch 2 held by [\"b\", \"c\"]"));
    assert!(!verdict.is_safe());
}

#[test]
fn a_fenced_write_committed_after_a_newer_epochs_is_stale() {
    let verdict = check(&[], &commits(&[1, 2, 1, 2, 3, 2]));
    assert_eq!(verdict.stale_commits, 2, "{verdict}");
    assert!(verdict.examples[0].contains("epoch 1 committed (seq 3) after epoch 2 (seq 2)"));
}

#[test]
fn fenced_writes_of_different_plugins_are_judged_apart() {
    let mut log = commits(&[2, 1]);
    log[1].plugin = "q".to_string();
    assert!(check(&[], &log).is_safe());
}

#[test]
fn examples_stop_at_a_few_but_counts_are_complete() {
    let epochs: Vec<i64> = std::iter::once(9).chain(1..=8).collect();
    let verdict = check(&[], &commits(&epochs));
    assert_eq!(verdict.stale_commits, 8);
    assert_eq!(verdict.examples.len(), EXAMPLES);
}

#[test]
fn recovery_is_the_time_to_the_first_row_at_or_after_the_instant() {
    let rows = [
        row("leader", "a", 1, 1_000_000),
        row("leader", "b", 2, 4_500_000),
        row("leader", "b", 2, 4_000_000),
    ];
    assert_eq!(recovery(&rows, 2_000_000), Some(Duration::from_secs(2)));
    assert_eq!(recovery(&rows, 4_000_000), Some(Duration::ZERO));
    assert_eq!(recovery(&rows, 5_000_000), None);
    assert_eq!(last_before(&rows, 4_000_000), Some(1_000_000));
    assert_eq!(last_before(&rows, 1_000_000), None);
}

#[test]
fn takeover_is_the_time_to_the_first_row_of_a_newer_term_of_the_lease() {
    let rows = [
        row("leader", "a", 1, 1_000_000),
        row("leader", "a", 1, 2_000_000),
        row("other", "c", 5, 2_500_000),
        row("leader", "b", 2, 3_500_000),
    ];
    assert_eq!(
        takeover(&rows, "leader", 1, 1_500_000),
        Some(Duration::from_secs(2))
    );
    assert_eq!(takeover(&rows, "leader", 2, 1_500_000), None);
    assert_eq!(takeover(&rows, "leader", 1, 4_000_000), None);
}

#[test]
fn a_summary_prints_one_line_per_fault() {
    let mut summary = Summary::default();
    let safe = Verdict::default();
    for secs in [4, 6, 5] {
        summary.add("black-hole holder", &safe, Some(Duration::from_secs(secs)));
    }
    let unsafe_one = Verdict {
        reused_epochs: 1,
        ..Verdict::default()
    };
    summary.add("failover", &unsafe_one, None);
    let text = summary.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "black-hole holder  trials 3  overlaps 0  stale 0  regressions 0  reused 0  recovery median 5.0 s  max 6.0 s",
            "failover           trials 1  overlaps 0  stale 0  regressions 0  reused 1  unrecovered 1",
        ]
    );
    assert!(!summary.is_safe());
    assert_eq!(summary.fault("black-hole holder").unwrap().trials, 3);
}

#[test]
fn the_longest_pause_runs_from_the_last_work_before_the_fault_to_the_first_after_it() {
    let rows = [
        row("leader", "a", 1, 100),
        row("leader", "a", 1, 200),
        // The fault begins at 250 and is healed at 900.
        row("leader", "b", 2, 700),
        row("leader", "b", 2, 720),
        row("leader", "b", 2, 950),
        row("leader", "b", 2, 5_000),
    ];
    let us = Duration::from_micros;
    assert_eq!(longest_pause(&rows, 250, 900), Some(us(500)));
    // Work that never stopped shows only its own cadence.
    assert_eq!(longest_pause(&rows, 705, 710), Some(us(20)));
    // No work after healing: no end to the pause.
    assert_eq!(longest_pause(&rows, 250, 6_000), None);
}
