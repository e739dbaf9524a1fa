//! Small statistics for the benchmarks' printed figures, and the settings they read from their
//! environment.

use std::time::Duration;

/// The `q` quantile (0.99 for p99) of `sorted`, the nearest sample; zero for none.
pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    match sorted.len() {
        0 => Duration::ZERO,
        n => sorted[((n - 1) as f64 * q).round() as usize],
    }
}

/// Median, 99th percentile and worst of `samples` (sorted in place), as a printable line.
pub fn summary(label: &str, samples: &mut [Duration]) -> String {
    if samples.is_empty() {
        return format!("{label}: no samples");
    }
    samples.sort();
    format!(
        "{label}: n={} median={:.2?} p99={:.2?} worst={:.2?} best={:.2?}",
        samples.len(),
        quantile(samples, 0.5),
        quantile(samples, 0.99),
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

/// A duration as `Debug` prints it (`1.234ms`, `812.5µs`, `1.5s`), as the host logs it.
pub fn parse_debug_duration(text: &str) -> Option<Duration> {
    let (number, unit) = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map(|i| text.split_at(i))?;
    let value: f64 = number.parse().ok()?;
    let seconds = match unit {
        "s" => value,
        "ms" => value / 1e3,
        "µs" | "us" => value / 1e6,
        "ns" => value / 1e9,
        _ => return None,
    };
    Some(Duration::from_secs_f64(seconds))
}
