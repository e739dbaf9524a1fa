//! What only the test suite reads (feature `testing`): the host's bounds, named once, so that a
//! test checks the figure the host enforces rather than a copy of it. Nothing here is part of the
//! host's interface; a build without the feature has none of it.

use std::time::Duration;

/// [`crate::output_rate`]'s rate: bytes a second a plugin or process may write to the log.
pub const RATE_BYTES_PER_SECOND: u64 = crate::output_rate::RATE_BYTES_PER_SECOND;

/// [`crate::output_rate`]'s burst: bytes written at once before the rate applies.
pub const BURST_BYTES: u64 = crate::output_rate::BURST_BYTES;

/// [`crate::output_rate`]'s interval between two reports of dropped output.
pub const REPORT_INTERVAL: Duration = crate::output_rate::REPORT_INTERVAL;

/// The HTTP port's bound on connections served at once.
pub const MAX_CONNECTIONS: usize = crate::http::guard::MAX_CONNECTIONS;

/// The HTTP port's bound on watch streams, before the open-file limit lowers it.
pub const MAX_WATCHERS: usize = crate::http::guard::MAX_WATCHERS;

/// How long a client may take to send a request's head.
pub const HEADER_READ_TIMEOUT: Duration = crate::http::guard::HEADER_READ_TIMEOUT;

/// How often the admin API logs one address's refusals after its first.
pub const REFUSALS_LOGGED_EVERY: Duration = crate::http::admin::REFUSALS_LOGGED_EVERY;

/// The most watch streams one address may hold when the process serves `max_watchers`.
pub fn watchers_per_address(max_watchers: usize) -> usize {
    crate::http::guard::watchers_per_address(max_watchers)
}
