//! Waiting for a condition: [`eventually`] polls an async probe until it yields a value or a
//! timeout passes, and a timeout names what was awaited and the last thing the probe saw, so a
//! failed wait says more than "timed out".

use std::fmt::{self, Debug, Display};
use std::time::Duration;

use tokio::time::Instant;

/// How often [`eventually`] polls: often enough that a wait costs little beyond the condition
/// itself, rarely enough that probes over HTTP or SQL do not load a two-core machine.
pub const POLL: Duration = Duration::from_millis(10);

/// Polls `probe` every [`POLL`] until it returns `Ok(value)`, and returns that value. Each
/// `Err(seen)` means "not yet": after `timeout` the error names `what` and the last `seen`.
pub async fn eventually<T, E: Debug>(
    what: impl Display,
    timeout: Duration,
    probe: impl AsyncFnMut() -> Result<T, E>,
) -> anyhow::Result<T> {
    eventually_every(what, timeout, POLL, probe).await
}

/// [`eventually`] polling every `every` instead of [`POLL`].
pub async fn eventually_every<T, E: Debug>(
    what: impl Display,
    timeout: Duration,
    every: Duration,
    mut probe: impl AsyncFnMut() -> Result<T, E>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        let seen = match probe().await {
            Ok(value) => return Ok(value),
            Err(seen) => seen,
        };
        if Instant::now() >= deadline {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}; last seen: {seen:#?}");
        }
        tokio::time::sleep(every).await;
    }
}

/// `Ok(seen)` when `ok(&seen)` holds, else `Err(seen)`: a value-and-condition probe for
/// [`eventually`], e.g. `when(host.role("leader").await, |r| *r == Some(Role::Leader))`.
pub fn when<T>(seen: T, ok: impl FnOnce(&T) -> bool) -> Result<T, T> {
    if ok(&seen) { Ok(seen) } else { Err(seen) }
}

/// Text shown as it is in a timeout message (a log, with its line breaks), not as an escaped
/// string.
pub struct Text(pub String);

impl Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\n{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn returns_the_first_value_and_names_the_last_seen_on_timeout() {
        let mut n = 0;
        let got = eventually("n to reach 3", Duration::from_secs(5), async || {
            n += 1;
            when(n, |n| *n >= 3)
        })
        .await
        .unwrap();
        assert_eq!(got, 3);
        let err = eventually("never", Duration::from_millis(30), async || {
            Err::<(), _>("still no")
        })
        .await
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("waiting for never") && err.contains("still no"),
            "{err}"
        );
    }
}
