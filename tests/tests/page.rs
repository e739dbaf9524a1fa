//! The status page at `/`, in a real headless Chromium: it loads without a console error, shows
//! who holds a lease at which epoch as `/status` says, follows a real handoff within 2 s (it
//! polls every 500 ms), and says it is reconnecting while its host is down and live again once a
//! host serves the same address. The page's contract: `#connection[data-state]` is `live` or
//! `reconnecting`; each lease is a `[data-lease=NAME]` element holding `[data-field=holder]`,
//! `[data-field=epoch]` and `[data-field=role]`; each plugin a `[data-plugin=NAME]` element.
//! First, the harness itself against pages of this test's own.

#![allow(clippy::unwrap_used, missing_docs)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use leasehold_tests::browser::Browser;
use leasehold_tests::eventually::{eventually, eventually_every, when};
use leasehold_tests::host::{HostBuilder, plugin_dir, wait_for_single_leader};
use serde::Deserialize;
use serde_json::json;

/// The bound on a handoff as the page shows it: the handoff itself (milliseconds), the page's
/// next poll (up to 500 ms) and slack for a loaded two-core machine.
const HANDOFF_ON_PAGE: Duration = Duration::from_secs(2);

const HELLO: &str = "lease = \"leader\"\n[schedule]\ninterval = \"500ms\"\n\
                     [config]\ngreeting = \"hello\"\n";

/// A clean page, and one with a console error and an uncaught exception. Neither asks for a
/// favicon, so a missing one logs nothing.
async fn serve_test_pages() -> SocketAddr {
    use axum::response::Html;
    use axum::routing::get;
    const HEAD: &str = "<!doctype html><html><head><link rel=\"icon\" href=\"data:,\"></head>";
    let clean = format!("{HEAD}<body><p id=\"greeting\">hello</p></body></html>");
    let broken = format!(
        "{HEAD}<body><p id=\"greeting\">broken</p><script>\
         console.error('deliberate console error');\
         setTimeout(() => {{ throw new Error('deliberate uncaught exception'); }}, 0);\
         </script></body></html>"
    );
    let router = axum::Router::new()
        .route("/clean", get(move || async move { Html(clean) }))
        .route("/broken", get(move || async move { Html(broken) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// Where a test leaves its screenshots, for a person to look at.
fn screenshot_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("page-{name}.png"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_browser_harness_reports_console_errors() {
    let site = serve_test_pages().await;
    let started = Instant::now();
    // Two at once, as a test may: each its own driver and profile.
    let (clean, broken) = tokio::join!(Browser::start(), Browser::start());
    let (clean, broken) = (clean.unwrap(), broken.unwrap());
    println!("two browser sessions in {:?}", started.elapsed());

    clean.goto(&format!("http://{site}/clean")).await.unwrap();
    broken.goto(&format!("http://{site}/broken")).await.unwrap();
    assert_eq!(
        clean.text_content("#greeting").await.unwrap().as_deref(),
        Some("hello")
    );
    assert_eq!(
        broken
            .attribute("#greeting", "id")
            .await
            .unwrap()
            .as_deref(),
        Some("greeting")
    );
    assert!(!clean.exists("#nothing-here").await.unwrap());
    assert_eq!(
        clean.evaluate("return 6 * 7;", vec![]).await.unwrap(),
        json!(42)
    );

    let errors = eventually(
        "both deliberate errors",
        Duration::from_secs(5),
        async || {
            when(broken.console_errors().await.unwrap(), |errors| {
                errors.len() == 2
            })
        },
    )
    .await
    .unwrap();
    assert!(
        errors[0].starts_with("console-api: ") && errors[0].contains("deliberate console error"),
        "{errors:#?}"
    );
    assert!(
        errors[1].starts_with("javascript: ")
            && errors[1].contains("Uncaught Error: deliberate uncaught exception"),
        "{errors:#?}"
    );
    // Read once from the driver, kept by the harness.
    assert_eq!(broken.console_errors().await.unwrap(), errors);
    assert_eq!(clean.console_errors().await.unwrap(), Vec::<String>::new());

    let shot = screenshot_path("harness");
    clean.screenshot(&shot).await.unwrap();
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    clean.close().await.unwrap();
    // The other one is dropped unclosed, as a failed test would leave it.
}

/// What the page shows of lease `leader` and of its connection, as text.
#[derive(Debug, Deserialize, PartialEq)]
struct Shown {
    connection: Option<String>,
    holder: Option<String>,
    epoch: Option<String>,
    role: Option<String>,
}

impl Shown {
    fn is(&self, connection: &str, holder: &str, epoch: u64) -> bool {
        self.connection.as_deref() == Some(connection)
            && self.holder.as_deref() == Some(holder)
            && self.epoch.as_deref() == Some(epoch.to_string().as_str())
    }
}

/// One read of the page: the connection state and the fields of lease `leader`, trimmed.
async fn shown(browser: &Browser) -> Shown {
    let script = "const lease = document.querySelector('[data-lease=\"leader\"]'); \
                  const field = f => { \
                    const e = lease && lease.querySelector(`[data-field=\"${f}\"]`); \
                    return e ? e.textContent.trim() : null; }; \
                  const c = document.querySelector('#connection'); \
                  return { connection: c ? c.getAttribute('data-state') : null, \
                           holder: field('holder'), epoch: field('epoch'), role: field('role') };";
    let value = browser.evaluate(script, vec![]).await.unwrap();
    serde_json::from_value(value).unwrap()
}

/// Polls the page every 10 ms up to `timeout` until what it shows satisfies `ok`.
async fn wait_for_page(
    browser: &Browser,
    what: &str,
    timeout: Duration,
    ok: impl Fn(&Shown) -> bool,
) -> Shown {
    eventually_every(
        format!("the page to show {what}"),
        timeout,
        Duration::from_millis(10),
        async || when(shown(browser).await, &ok),
    )
    .await
    .unwrap()
}

/// Asserts the page logged no console error, after two more polls of `/status` had the chance to.
async fn assert_no_console_errors(browser: &Browser) {
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let errors = browser.console_errors().await.unwrap();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_loads_without_console_errors_and_shows_the_holder_and_epoch() {
    let plugins = plugin_dir(&[("hello-reconciler", HELLO)]).unwrap();
    let db = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", db.path().join("leases.db").display());
    let host = HostBuilder::new("paged")
        .database_url(&url)
        .plugins(plugins.path())
        .spawn()
        .await
        .unwrap();
    wait_for_single_leader(&[&host], "leader", Duration::from_secs(15))
        .await
        .unwrap();
    let holder = host.status().await.unwrap().replica;

    let started = Instant::now();
    let browser = Browser::start().await.unwrap();
    println!("browser session in {:?}", started.elapsed());
    let opened = Instant::now();
    browser
        .goto(&format!("http://{}/", host.addr()))
        .await
        .unwrap();
    let page = wait_for_page(
        &browser,
        &format!("{holder} at epoch 1, live"),
        Duration::from_secs(10),
        |p| p.is("live", &holder, 1),
    )
    .await;
    println!(
        "page showing the holder {:?} after opening it",
        opened.elapsed()
    );
    assert_eq!(page.role.as_deref(), Some("leader"), "{page:?}");
    assert!(
        browser
            .exists("[data-plugin=\"hello-reconciler\"]")
            .await
            .unwrap(),
        "no element for the plugin"
    );
    browser
        .screenshot(&screenshot_path("loaded"))
        .await
        .unwrap();
    assert_no_console_errors(&browser).await;
    browser.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_the_new_holder_and_epoch_within_2_s_of_a_real_handoff() {
    let url = leasehold_tests::pg::server()
        .fresh_lease_database()
        .await
        .unwrap();
    let mut hosts = Vec::new();
    for name in ["first", "second"] {
        let host = HostBuilder::new(name)
            .database_url(&url)
            .spawn()
            .await
            .unwrap();
        hosts.push(host);
    }
    let leader = wait_for_single_leader(&hosts, "leader", Duration::from_secs(15))
        .await
        .unwrap();
    // Both release listeners subscribed: the handoff is the release's, not a later poll's.
    leasehold_tests::pg::wait_for_listeners(&url, 2, Duration::from_secs(20))
        .await
        .unwrap();
    let mut old = hosts.remove(leader);
    let standby = hosts.remove(0);
    let old_holder = old.status().await.unwrap().replica;
    let new_holder = standby.status().await.unwrap().replica;

    // The standby's page: it stays up through the handoff.
    let browser = Browser::start().await.unwrap();
    browser
        .goto(&format!("http://{}/", standby.addr()))
        .await
        .unwrap();
    let before = wait_for_page(
        &browser,
        &format!("{old_holder} at epoch 1, live"),
        Duration::from_secs(10),
        |p| p.is("live", &old_holder, 1),
    )
    .await;
    assert_eq!(before.role.as_deref(), Some("standby"), "{before:?}");

    // Timed while the old holder stops, so its exit does not count. The stop comes right after
    // a poll showed the old holder: the page's worst case, a whole poll period to the next.
    let handed_over = format!("{new_holder} at epoch 2");
    let stopped = Instant::now();
    let page_shows_it = async {
        wait_for_page(&browser, &handed_over, Duration::from_secs(10), |p| {
            p.is("live", &new_holder, 2)
        })
        .await;
        stopped.elapsed()
    };
    let (exit, took) = tokio::join!(old.stop(Duration::from_secs(10)), page_shows_it);
    assert!(exit.unwrap().success(), "the old holder's exit");
    println!("the page showed the new holder {took:?} after SIGTERM to the old one");
    assert!(
        took < HANDOFF_ON_PAGE,
        "the page showed the handoff after {took:?}, bound {HANDOFF_ON_PAGE:?}"
    );
    // This replica leads now; the page may show that one poll after the holder.
    wait_for_page(&browser, "role leader", Duration::from_secs(2), |p| {
        p.role.as_deref() == Some("leader")
    })
    .await;
    browser
        .screenshot(&screenshot_path("handoff"))
        .await
        .unwrap();
    assert_no_console_errors(&browser).await;
    browser.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_reconnects_after_the_host_restarts() {
    let db = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", db.path().join("leases.db").display());
    let mut first = HostBuilder::new("before")
        .database_url(&url)
        .spawn()
        .await
        .unwrap();
    wait_for_single_leader(&[&first], "leader", Duration::from_secs(15))
        .await
        .unwrap();
    let addr = first.addr();
    let old_holder = first.status().await.unwrap().replica;

    let browser = Browser::start().await.unwrap();
    browser.goto(&format!("http://{addr}/")).await.unwrap();
    wait_for_page(
        &browser,
        &format!("{old_holder} at epoch 1, live"),
        Duration::from_secs(10),
        |p| p.is("live", &old_holder, 1),
    )
    .await;

    let exit = first.stop(Duration::from_secs(10)).await.unwrap();
    assert!(exit.success(), "the first host's exit");
    wait_for_page(&browser, "reconnecting", Duration::from_secs(5), |p| {
        p.connection.as_deref() == Some("reconnecting")
    })
    .await;
    browser
        .screenshot(&screenshot_path("reconnecting"))
        .await
        .unwrap();

    // A new process on the same address, as after a restart; it takes the released lease.
    let second = HostBuilder::new("after")
        .database_url(&url)
        .args(&["--http", &addr.to_string()])
        .spawn()
        .await
        .unwrap();
    assert_eq!(second.addr(), addr);
    wait_for_single_leader(&[&second], "leader", Duration::from_secs(15))
        .await
        .unwrap();
    let new_holder = second.status().await.unwrap().replica;
    let page = wait_for_page(
        &browser,
        &format!("{new_holder} at epoch 2, live"),
        Duration::from_secs(10),
        |p| p.is("live", &new_holder, 2),
    )
    .await;
    assert_eq!(page.role.as_deref(), Some("leader"), "{page:?}");

    // While the host was down its polls failed, which the browser logs itself (source
    // `network`); anything else is an error of the page's own.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let errors = browser.console_errors().await.unwrap();
    let own: Vec<&String> = errors
        .iter()
        .filter(|e| !e.starts_with("network: "))
        .collect();
    assert!(own.is_empty(), "console errors: {errors:#?}");
    println!(
        "failed loads the browser logged while the host was down: {}",
        errors.len()
    );
    browser.close().await.unwrap();
}
