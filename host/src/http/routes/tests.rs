//! The page through the host's whole router on a loopback socket (its types and headers), and its
//! embedded files read as text: they load nothing from elsewhere, hold no inline script or style,
//! and never parse data as markup.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::http::page::{CONTENT_SECURITY_POLICY, INDEX_HTML, PAGE_CSS, PAGE_JS};
use crate::http::{AppState, Status, serve};
use crate::lease::memory::MemoryStore;
use crate::lease::{Driver, Timing};
use crate::supervisor::{PluginCard, PluginState, StatusBoard};

/// The host's router serving on a loopback port, until the token is cancelled. The driver never
/// runs: the page reads no state, and `/status` shows the lease unheld.
async fn serving() -> (String, CancellationToken) {
    let (_driver, leases) = Driver::new(
        Arc::new(MemoryStore::new()),
        crate::lease::seams::Seams::system().holder_id("page"),
        Timing::from_ttl(Duration::from_secs(3)),
        ["leader".to_string()],
        CancellationToken::new(),
    );
    let state = AppState::new(leases, None, Default::default());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    tokio::spawn(serve(listener, state, Default::default(), stop.clone()));
    (base, stop)
}

#[tokio::test]
async fn the_page_and_its_files_are_served_with_their_types_and_policy() {
    let (base, stop) = serving().await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    for (path, content_type, body) in [
        ("/", "text/html; charset=utf-8", INDEX_HTML),
        ("/page.css", "text/css; charset=utf-8", PAGE_CSS),
        ("/page.js", "text/javascript; charset=utf-8", PAGE_JS),
    ] {
        let response = client.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        assert_eq!(
            header("content-type").as_deref(),
            Some(content_type),
            "{path}"
        );
        assert_eq!(
            header("content-security-policy").as_deref(),
            Some(CONTENT_SECURITY_POLICY),
            "{path}"
        );
        assert_eq!(header("x-content-type-options").as_deref(), Some("nosniff"));
        assert_eq!(header("referrer-policy").as_deref(), Some("no-referrer"));
        assert_eq!(header("cache-control").as_deref(), Some("no-cache"));
        assert_eq!(response.text().await.unwrap(), body, "{path}");
    }
    // The page's own routes leave the rest of the surface as it was.
    let status: Status = client
        .get(format!("{base}/status"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(status.replica.starts_with("page-"), "{}", status.replica);
    assert_eq!(status.leases.len(), 1);
    stop.cancel();
}

#[test]
fn the_policy_allows_nothing_inline_and_nothing_from_elsewhere() {
    let directives: Vec<&str> = CONTENT_SECURITY_POLICY.split("; ").collect();
    assert_eq!(
        directives,
        [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "connect-src 'self'",
            "img-src 'self' data:",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    );
}

/// The values of every `name="…"` attribute in `html`.
fn attribute_values<'a>(html: &'a str, name: &str) -> Vec<&'a str> {
    let needle = format!(" {name}=\"");
    html.match_indices(&needle)
        .map(|(at, _)| {
            let rest = &html[at + needle.len()..];
            &rest[..rest.find('"').unwrap()]
        })
        .collect()
}

#[test]
fn the_page_references_only_its_own_files() {
    let mut references = attribute_values(INDEX_HTML, "src");
    references.extend(attribute_values(INDEX_HTML, "href"));
    assert!(references.contains(&"/page.css"), "{references:?}");
    assert!(references.contains(&"/page.js"), "{references:?}");
    for reference in &references {
        // `data:,` is the empty icon, so that browsers do not ask for /favicon.ico.
        let local = reference.starts_with('/') && !reference.starts_with("//");
        assert!(local || *reference == "data:,", "{reference}");
    }
    for (file, text) in [
        ("index.html", INDEX_HTML),
        ("page.css", PAGE_CSS),
        ("page.js", PAGE_JS),
    ] {
        let lower = text.to_ascii_lowercase();
        for remote in [
            "http://",
            "https://",
            "ws://",
            "wss://",
            "@import",
            "url(",
            "@font-face",
        ] {
            assert!(!lower.contains(remote), "{file} names {remote}");
        }
    }
    // The one thing the script asks the host for.
    for (at, _) in PAGE_JS.match_indices("fetch(") {
        assert!(
            PAGE_JS[at..].starts_with("fetch(\"/status\""),
            "{}",
            &PAGE_JS[at..]
        );
    }
}

#[test]
fn the_page_has_no_inline_script_or_style() {
    let html = INDEX_HTML.to_ascii_lowercase();
    assert!(!html.contains("<style"), "a <style> block");
    assert!(!html.contains("style="), "a style attribute");
    assert!(!html.contains("javascript:"), "a javascript: URL");
    let scripts: Vec<_> = html.match_indices("<script").collect();
    assert_eq!(scripts.len(), 1);
    for (at, _) in scripts {
        let tag = &html[at..];
        let end = tag.find('>').unwrap() + 1;
        assert!(tag[..end].contains(" src=\"/"), "{}", &tag[..end]);
        assert!(tag[end..].starts_with("</script>"), "a script with a body");
    }
    // No event handler attributes (`onclick=` …) in any tag.
    for tag in html.split('<').skip(1) {
        let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
        for word in tag.split_whitespace().skip(1) {
            assert!(
                !(word.starts_with("on") && word.contains('=')),
                "an event handler: <{tag}>"
            );
        }
    }
}

#[test]
fn the_script_never_parses_data_as_markup() {
    for sink in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "DOMParser",
        "createContextualFragment",
        "eval(",
        "Function(",
        // A style attribute is inline style, which the policy refuses; `.style.width` is not.
        "\"style\"",
        " style:",
        "cssText",
    ] {
        assert!(!PAGE_JS.contains(sink), "page.js uses {sink}");
    }
}

#[test]
fn every_element_the_script_looks_up_is_in_the_page() {
    let ids: Vec<&str> = PAGE_JS
        .match_indices("byId(\"")
        .map(|(at, needle)| {
            let rest = &PAGE_JS[at + needle.len()..];
            &rest[..rest.find('"').unwrap()]
        })
        .collect();
    assert!(ids.contains(&"connection"), "{ids:?}");
    for id in ids {
        assert!(INDEX_HTML.contains(&format!("id=\"{id}\"")), "#{id}");
    }
    // Before the first answer, the page says it is not live.
    assert!(INDEX_HTML.contains("id=\"connection\" data-state=\"reconnecting\""));
    assert!(PAGE_JS.contains("connection(\"live\""));
    assert!(PAGE_JS.contains("connection(\"reconnecting\""));
}

/// The fields `page.js` reads off a variable named `name` (`plugin.calls` → `calls`).
fn fields_read(name: &str) -> BTreeSet<&'static str> {
    let needle = format!("{name}.");
    PAGE_JS
        .match_indices(&needle)
        .filter(|(at, _)| {
            // `plugin.` itself, not the end of `s.plugin.` or of `myplugin.`.
            PAGE_JS[..*at]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        })
        .map(|(at, _)| {
            let rest = &PAGE_JS[at + needle.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

/// The keys of a JSON object.
fn keys(value: &serde_json::Value) -> BTreeSet<String> {
    value.as_object().unwrap().keys().cloned().collect()
}

#[tokio::test]
async fn the_script_reads_only_fields_that_status_has() {
    let (base, stop) = serving().await;
    let status: serde_json::Value = reqwest::get(format!("{base}/status"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    stop.cancel();
    let lease = keys(&status["leases"][0]);
    let read = fields_read("lease");
    assert!(
        read.contains("last_handoff") && read.contains("terms"),
        "{read:?}"
    );
    for field in read {
        assert!(
            lease.contains(field),
            "page.js reads lease.{field}; /status has {lease:?}"
        );
    }

    let board = StatusBoard::new(Default::default());
    board.put(PluginCard {
        name: "p".into(),
        lease: "leader".into(),
        world: None,
        state: PluginState::Idle,
        last_error: None,
        warning: None,
        fuel_last_call: None,
        last_call: None,
    });
    let plugin = keys(&serde_json::to_value(&board.snapshot()[0]).unwrap());
    let read = fields_read("plugin");
    assert!(read.contains("memory_high_water_bytes"), "{read:?}");
    for field in read {
        assert!(
            plugin.contains(field),
            "page.js reads plugin.{field}; /status has {plugin:?}"
        );
    }
}

#[test]
fn the_page_is_small() {
    let total = INDEX_HTML.len() + PAGE_CSS.len() + PAGE_JS.len();
    assert!(total < 40_000, "{total} bytes");
}
