//! Small statistics for the benchmarks' printed figures.

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
