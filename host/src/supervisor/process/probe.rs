//! The HTTP probe of a service's health (`health = "http://…"`): a `GET` of the app's own
//! address in the role `active` or `standby`, passed on any 2xx. The role is in the query
//! (`role=active`) and in `X-Leasehold-Role`, so an app can read whichever its framework makes
//! easy; the lease and, during a term, its epoch come as headers.

use crate::lease::Epoch;
use reqwest::header::HeaderName;
use tokio::time::Instant;
use url::Url;

/// The role asked about: `active` or `standby`.
const ROLE: HeaderName = HeaderName::from_static("x-leasehold-role");
/// The lease the service follows.
const LEASE: HeaderName = HeaderName::from_static("x-leasehold-lease");
/// The term's epoch, while this replica holds the lease.
const EPOCH: HeaderName = HeaderName::from_static("x-leasehold-epoch");

/// The most of a failed probe's error kept for the log: one readable line, however long the
/// error's chain of causes.
const MAX_REASON: usize = 300;

/// One service's probe: its URL, and one client kept across runs (its connection reused).
#[derive(Debug, Clone)]
pub(super) struct Probe {
    /// The URL as the config file gives it; the role is appended to its query on each run.
    url: Url,
    /// The client, or why it could not be built (each run then fails with it).
    client: Result<reqwest::Client, String>,
}

/// Why a probe failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Failed {
    /// How, in few words, for the card's exits and the metric's `ended` label: `http 503`,
    /// `timeout` or `error`.
    pub ended: String,
    /// What happened, for the log: one line, control characters escaped, bounded.
    pub why: String,
}

impl Probe {
    /// A probe of `url`.
    pub(super) fn new(url: Url) -> Self {
        let client = reqwest::Client::builder()
            // A local probe must reach the app itself: an `HTTP_PROXY` set for the host's
            // other traffic would send it elsewhere.
            .no_proxy()
            // A redirect is an answer of the app's, not health: followed, it could pass on
            // another server's 200.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| line(&crate::report::chain(&e)));
        Probe { url, client }
    }

    /// `GET`s the URL in `role` (`active` or `standby`) for `lease`, with the term's `epoch` if
    /// there is one; no answer by `until` is a failure.
    pub(super) async fn check(
        &self,
        role: &str,
        lease: &str,
        epoch: Option<Epoch>,
        until: Instant,
    ) -> Result<(), Failed> {
        let failed = |ended: &str, why: String| Failed {
            ended: ended.to_string(),
            why,
        };
        let client = self
            .client
            .as_ref()
            .map_err(|e| failed("error", format!("cannot build an HTTP client: {e}")))?;
        let mut url = self.url.clone();
        url.query_pairs_mut().append_pair("role", role);
        let mut request = client.get(url).header(ROLE, role).header(LEASE, lease);
        if let Some(epoch) = epoch {
            request = request.header(EPOCH, epoch.get());
        }
        let asked = Instant::now();
        match tokio::time::timeout_at(until, request.send()).await {
            Err(_) => Err(failed(
                "timeout",
                format!("no answer in {}", crate::report::duration(asked.elapsed())),
            )),
            Ok(Err(e)) => Err(failed("error", line(&crate::report::chain(&e)))),
            Ok(Ok(answer)) if answer.status().is_success() => Ok(()),
            Ok(Ok(answer)) => {
                let status = answer.status();
                Err(failed(
                    &format!("http {}", status.as_u16()),
                    line(&format!("answered {status}")),
                ))
            }
        }
    }
}

/// `text` on one line, control characters escaped, cut to [`MAX_REASON`] bytes.
fn line(text: &str) -> String {
    let text = crate::report::escape_controls(text).into_owned();
    crate::report::cut_at(text, MAX_REASON, "…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_or_multiline_reason_stays_one_bounded_line() {
        let long = format!("first\nsecond\u{1b}[31m {}", "é".repeat(400));
        let shown = line(&long);
        assert!(
            !shown.contains('\n') && !shown.contains('\u{1b}'),
            "{shown}"
        );
        assert!(shown.starts_with("first\\nsecond\\u{1b}[31m"), "{shown}");
        assert!(
            shown.len() <= MAX_REASON + '…'.len_utf8(),
            "{}",
            shown.len()
        );
        assert!(shown.ends_with('…'));
    }
}
