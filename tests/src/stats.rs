//! Small statistics for the benchmarks' printed figures, and the settings they read from their
//! environment.

use std::time::Duration;

/// Median, 99th percentile and worst of `samples` (sorted in place), as a printable line.
pub fn summary(label: &str, samples: &mut [Duration]) -> String {
    if samples.is_empty() {
        return format!("{label}: no samples");
    }
    samples.sort();
    let pick = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    format!(
        "{label}: n={} median={:.2?} p99={:.2?} worst={:.2?} best={:.2?}",
        samples.len(),
        pick(0.5),
        pick(0.99),
        samples[samples.len() - 1],
        samples[0]
    )
}

/// A count from the environment variable `name` (e.g. `BENCH_TRIALS`), else `default`.
pub fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A duration such as `2s` from the environment variable `name` (e.g. `BENCH_TTL`), else
/// `default`; a value that does not parse is an error naming the variable.
pub fn env_duration(name: &str, default: Duration) -> anyhow::Result<Duration> {
    match std::env::var(name) {
        Ok(text) => {
            humantime::parse_duration(&text).map_err(|e| anyhow::anyhow!("{name} {text:?}: {e}"))
        }
        Err(_) => Ok(default),
    }
}
