//! The live status page: `/` draws what `/status` says, polled from the browser every 500 ms.
//!
//! - `index.html` (`/`): the skeleton, with the ids the script fills in;
//! - `page.css` (`/page.css`): the layout, light and dark, without web fonts;
//! - `page.js` (`/page.js`): the poll loop (which shows "reconnecting…" and backs off to 2 s
//!   while the host does not answer) and the drawing, by DOM calls and `textContent` only;
//! - [`routes`]: the three routes, each with [`CONTENT_SECURITY_POLICY`] and no caching.
//!
//! The files are compiled in, so the page needs no build step and nothing off this host: it works
//! air-gapped, on the first `make run`. It is read-only and shows nothing `/status` does not
//! (which redacts already). Lease names, holder ids and plugin errors reach the page only as text
//! nodes, and the policy refuses inline script and style, so none of them can inject markup.

use axum::Router;
use axum::http::{HeaderName, header};
use axum::routing::get;

/// The page's HTML.
pub(crate) const INDEX_HTML: &str = include_str!("page/index.html");
/// The page's style sheet.
pub(crate) const PAGE_CSS: &str = include_str!("page/page.css");
/// The page's script.
pub(crate) const PAGE_JS: &str = include_str!("page/page.js");

/// The policy every response of the page carries: script, style and fetches from this origin
/// only, none of them inline; no frames, forms or plugins.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
    style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
    form-action 'none'; frame-ancestors 'none'";

/// The headers of one of the page's files.
type Headers = [(HeaderName, &'static str); 5];

/// `content_type` with the page's policy and `no-cache`, so a new binary's page shows at once.
fn headers(content_type: &'static str) -> Headers {
    [
        (header::CONTENT_TYPE, content_type),
        (header::CACHE_CONTROL, "no-cache"),
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
    ]
}

/// `/`, `/page.css` and `/page.js`, for any router state: they read none.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/",
            get(|| async { (headers("text/html; charset=utf-8"), INDEX_HTML) }),
        )
        .route(
            "/page.css",
            get(|| async { (headers("text/css; charset=utf-8"), PAGE_CSS) }),
        )
        .route(
            "/page.js",
            get(|| async { (headers("text/javascript; charset=utf-8"), PAGE_JS) }),
        )
}
