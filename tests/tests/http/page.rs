//! The status page at `/`, in a real headless Chromium: it loads without a console error, shows
//! who holds a lease at which epoch as `/status` says, follows a real handoff within 2 s (it
//! polls every 500 ms) with its cause and the lease's terms, shows a takeover after a holder was
//! killed as one, and says it is reconnecting while its host is down and live again once a
//! host serves the same address. The page's contract: `#connection[data-state]` is `live` or
//! `reconnecting`; each lease is a `[data-lease=NAME]` element holding `[data-field=holder]`,
//! `[data-field=epoch]`, `[data-field=role]`, `[data-field=last-handoff]` (with `data-reason`,
//! `data-from`, `data-to` and `data-to-epoch`) and one `[data-term=EPOCH]` row per recent term
//! (with `data-holder` and `data-end`: `open`, `released`, `expired` or `forced`); each plugin
//! a `[data-plugin=NAME]` element, each process a `[data-process="NAME LEASE"]` one. First, the
//! harness itself against pages of this test's own.
//!
//! With `LEASEHOLD_PAGE_SCREENSHOT=FILE` the handoff test also saves its page there, after the
//! handoff with the plugin running: the README's picture (`make screenshot`).

#![allow(clippy::unwrap_used, missing_docs)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use leasehold_tests::browser::Browser;
use leasehold_tests::eventually::{eventually, eventually_every, when};
use leasehold_tests::host::{Host, HostBuilder, plugin_dir, wait_for_single_leader};
use leasehold_tests::status::StatusExt;
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

/// One term as the page lists it.
#[derive(Debug, Deserialize, PartialEq)]
struct TermShown {
    epoch: u64,
    holder: String,
    end: String,
}

/// What the page shows of lease `leader`'s history: its last handoff (`reason` is `none`
/// when it shows none), its terms in the list and in the timeline.
#[derive(Debug, Deserialize)]
struct History {
    reason: Option<String>,
    from: Option<String>,
    to: Option<String>,
    to_epoch: Option<String>,
    text: Option<String>,
    terms: Vec<TermShown>,
    segments: Vec<TermShown>,
}

impl History {
    /// Whether it shows the handoff `from` → `to` at `to_epoch` for `reason`, the term before it
    /// ended for that reason and the new one open, in the list and in the timeline.
    fn shows(&self, reason: &str, from: &str, to: &str, to_epoch: u64) -> bool {
        let term = |epoch, holder: &str, end: &str| TermShown {
            epoch,
            holder: holder.to_string(),
            end: end.to_string(),
        };
        let new = term(to_epoch, to, "open");
        let old = term(to_epoch - 1, from, reason);
        self.reason.as_deref() == Some(reason)
            && self.from.as_deref() == Some(from)
            && self.to.as_deref() == Some(to)
            && self.to_epoch.as_deref() == Some(to_epoch.to_string().as_str())
            && self.terms.first() == Some(&new)
            && self.terms.get(1) == Some(&old)
            && self.segments.contains(&new)
            && self.segments.contains(&old)
    }
}

/// One read of lease `leader`'s history on the page.
async fn history(browser: &Browser) -> Option<History> {
    let script = r#"
        const lease = document.querySelector('[data-lease="leader"]');
        if (!lease) return null;
        const h = lease.querySelector('[data-field="last-handoff"]');
        const terms = (css, key) => [...lease.querySelectorAll(css)].map(e => ({
            epoch: Number(e.getAttribute(key)),
            holder: e.getAttribute('data-holder'),
            end: e.getAttribute('data-end'),
        }));
        return {
            reason: h.getAttribute('data-reason'),
            from: h.getAttribute('data-from'),
            to: h.getAttribute('data-to'),
            to_epoch: h.getAttribute('data-to-epoch'),
            text: h.textContent,
            terms: terms('[data-term]', 'data-term'),
            segments: terms('[data-segment]', 'data-segment'),
        };"#;
    let value = browser.evaluate(script, vec![]).await.unwrap();
    serde_json::from_value(value).unwrap()
}

/// Polls the page every 10 ms up to `timeout` until it shows the handoff `from` → `to` at
/// `to_epoch` for `reason`.
async fn wait_for_history(
    browser: &Browser,
    (reason, from, to, to_epoch): (&str, &str, &str, u64),
    timeout: Duration,
) -> History {
    eventually_every(
        format!("the page to show the handoff {from} -> {to} at epoch {to_epoch}, {reason}"),
        timeout,
        Duration::from_millis(10),
        async || {
            when(history(browser).await, |h| {
                h.as_ref()
                    .is_some_and(|h| h.shows(reason, from, to, to_epoch))
            })
        },
    )
    .await
    .unwrap()
    .unwrap()
}

/// How long before `host`'s `/status` was read its lease `leader` changed hands, by the
/// store's clock (the database's, or the machine's for SQLite): read right after the page showed
/// the change, how late the page was.
async fn handoff_age(host: &Host) -> Duration {
    let status = host.status().await.unwrap();
    let handoff = status
        .lease("leader")
        .unwrap()
        .last_handoff
        .clone()
        .unwrap();
    Duration::from_millis(u64::try_from(handoff.at_ms_ago).unwrap())
}

/// Two hosts started by `build` under `names`, and a browser on the page of the one that did not
/// take the lease, once it shows the other holding it at epoch 1.
struct TwoHosts {
    /// The host that took the lease first.
    holder: Host,
    /// The other, whose page the browser shows.
    standby: Host,
    /// Their replica ids.
    ids: (String, String),
    /// The browser on `standby`'s page.
    browser: Browser,
    /// What the page showed first.
    first: Shown,
}

async fn two_hosts(names: [&str; 2], build: impl Fn(HostBuilder) -> HostBuilder) -> TwoHosts {
    let mut hosts = Vec::new();
    for name in names {
        hosts.push(build(HostBuilder::new(name)).spawn().await.unwrap());
    }
    let leader = wait_for_single_leader(&hosts, "leader", Duration::from_secs(15))
        .await
        .unwrap();
    let holder = hosts.remove(leader);
    let standby = hosts.remove(0);
    let ids = (
        holder.status().await.unwrap().replica,
        standby.status().await.unwrap().replica,
    );
    let browser = Browser::start().await.unwrap();
    browser
        .goto(&format!("http://{}/", standby.addr()))
        .await
        .unwrap();
    let first = wait_for_page(
        &browser,
        &format!("{} at epoch 1, live", ids.0),
        Duration::from_secs(10),
        |p| p.is("live", &ids.0, 1),
    )
    .await;
    TwoHosts {
        holder,
        standby,
        ids,
        browser,
        first,
    }
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
        .spawn_leading("leader")
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
async fn the_page_shows_the_new_holder_epoch_and_why_within_2_s_of_a_real_handoff() {
    let url = leasehold_tests::pg::server()
        .fresh_lease_database()
        .await
        .unwrap();
    // A plugin on both, so the page has a card to show running on the new holder. The page is
    // the standby's: it stays up through the handoff.
    let plugins = plugin_dir(&[("hello-reconciler", HELLO)]).unwrap();
    let TwoHosts {
        holder: mut old,
        standby,
        ids: (old_holder, new_holder),
        browser,
        first: before,
    } = two_hosts(["first", "second"], |b| {
        b.database_url(&url).plugins(plugins.path())
    })
    .await;
    // Both release listeners subscribed: the handoff is the release's, not a later poll's.
    leasehold_tests::pg::wait_for_listeners(&url, 2, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(before.role.as_deref(), Some("standby"), "{before:?}");
    let first = history(&browser).await.unwrap();
    assert_eq!(first.reason.as_deref(), Some("none"), "{first:?}");
    assert_eq!(
        first.terms,
        [TermShown {
            epoch: 1,
            holder: old_holder.clone(),
            end: "open".into()
        }],
        "{first:?}"
    );

    // Timed while the old holder stops, so its exit does not count. The stop comes right after
    // a poll showed the old holder: the page's worst case, a whole poll period to the next.
    let handed_over = format!("{new_holder} at epoch 2");
    let stopped = Instant::now();
    let page_shows_it = async {
        wait_for_page(&browser, &handed_over, Duration::from_secs(10), |p| {
            p.is("live", &new_holder, 2)
        })
        .await;
        let holder = stopped.elapsed();
        let why = ("released", old_holder.as_str(), new_holder.as_str(), 2);
        let shown = wait_for_history(&browser, why, Duration::from_secs(10)).await;
        let took_why = stopped.elapsed();
        (holder, took_why, handoff_age(&standby).await, shown)
    };
    let (exit, (took, took_why, lag, shown)) =
        tokio::join!(old.stop(Duration::from_secs(10)), page_shows_it);
    assert!(exit.unwrap().success(), "the old holder's exit");
    println!(
        "the page showed the new holder {took:?} and the handoff with its cause {took_why:?} \
         after SIGTERM to the old holder, {lag:?} after the handoff by the store's clock"
    );
    assert!(
        took < HANDOFF_ON_PAGE,
        "the page showed the handoff after {took:?}, bound {HANDOFF_ON_PAGE:?}"
    );
    assert!(
        took_why < HANDOFF_ON_PAGE,
        "the page showed why after {took_why:?}, bound {HANDOFF_ON_PAGE:?}"
    );
    let text = shown.text.unwrap_or_default();
    assert!(text.contains("released by its holder"), "{text}");
    // This replica leads now; the page may show that one poll after the holder.
    wait_for_page(&browser, "role leader", Duration::from_secs(2), |p| {
        p.role.as_deref() == Some("leader")
    })
    .await;
    // The plugin runs here now, with a few calls to show.
    let field = |n: &str| format!("[data-plugin=\"hello-reconciler\"] [data-field=\"{n}\"]");
    eventually_every(
        "the plugin running here with calls",
        Duration::from_secs(10),
        Duration::from_millis(50),
        async || {
            let state = browser
                .attribute("[data-plugin=\"hello-reconciler\"]", "data-state")
                .await
                .unwrap();
            let shown = browser.text_content(&field("calls")).await.unwrap();
            let count: u64 = shown
                .unwrap_or_default()
                .replace(',', "")
                .parse()
                .unwrap_or(0);
            when((state, count), |(state, count)| {
                state.as_deref() == Some("running") && *count >= 3
            })
        },
    )
    .await
    .unwrap();
    // What a call costs, in human units: a reconcile of this example takes well under a second.
    let took_ms = browser.text_content(&field("last-call")).await.unwrap();
    assert!(
        took_ms.as_deref().is_some_and(|t| t.ends_with(" ms")),
        "{took_ms:?}"
    );
    let memory = browser
        .text_content(&field("memory-high-water"))
        .await
        .unwrap();
    assert!(
        memory.as_deref().is_some_and(|m| m.ends_with("iB")),
        "{memory:?}"
    );
    browser
        .screenshot(&screenshot_path("handoff"))
        .await
        .unwrap();
    if let Some(path) = std::env::var_os("LEASEHOLD_PAGE_SCREENSHOT") {
        browser
            .screenshot(std::path::Path::new(&path))
            .await
            .unwrap();
        println!("the page saved to {}", path.to_string_lossy());
    }
    assert_no_console_errors(&browser).await;
    browser.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_survivors_page_shows_a_killed_holders_lease_taken_over_after_expiry() {
    let db = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", db.path().join("leases.db").display());
    let ttl = Duration::from_secs(2);
    let TwoHosts {
        holder: mut old,
        standby: survivor,
        ids: (old_holder, new_holder),
        browser,
        ..
    } = two_hosts(["doomed", "survivor"], |b| b.database_url(&url).ttl(ttl)).await;

    // No release: the lease changes hands only once its ttl has run out on the database clock
    // and the survivor's next campaign finds it so.
    let killed = Instant::now();
    old.kill().await.unwrap();
    let why = ("expired", old_holder.as_str(), new_holder.as_str(), 2);
    let shown = wait_for_history(&browser, why, 3 * ttl + Duration::from_secs(5)).await;
    let took = killed.elapsed();
    let lag = handoff_age(&survivor).await;
    println!(
        "the page showed the takeover {took:?} after SIGKILL to the holder (ttl {ttl:?}), \
         {lag:?} after the takeover by the store's clock"
    );
    assert!(
        took >= ttl / 2,
        "taken over {took:?} after the kill, ttl {ttl:?}"
    );
    let text = shown.text.unwrap_or_default();
    assert!(text.contains("stopped renewing"), "{text}");
    let page = wait_for_page(
        &browser,
        &format!("{new_holder} at epoch 2"),
        Duration::from_secs(2),
        |p| p.is("live", &new_holder, 2),
    )
    .await;
    assert_eq!(page.role.as_deref(), Some("leader"), "{page:?}");
    browser
        .screenshot(&screenshot_path("takeover"))
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
        .spawn_leading("leader")
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_under_a_lease_shows_as_a_card_with_its_state_and_pid() {
    let db = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", db.path().join("leases.db").display());
    let host = HostBuilder::new("paged")
        .database_url(&url)
        .lease("nightly")
        .exec(&["sleep", "600"])
        .spawn_leading("nightly")
        .await
        .unwrap();
    let pid = eventually(
        "the process's pid in /status",
        Duration::from_secs(10),
        async || {
            let status = host.status().await.unwrap();
            when(
                status.processes.first().and_then(|p| p.pid),
                Option::is_some,
            )
        },
    )
    .await
    .unwrap()
    .unwrap();
    let browser = Browser::start().await.unwrap();
    browser
        .goto(&format!("http://{}/", host.addr()))
        .await
        .unwrap();
    let card = "[data-process=\"sleep nightly\"]";
    let field = |n: &str| format!("{card} [data-field=\"{n}\"]");
    eventually_every(
        "the process's card running with its pid",
        Duration::from_secs(10),
        Duration::from_millis(50),
        async || {
            let state = browser.attribute(card, "data-state").await.unwrap();
            let shown = browser.text_content(&field("pid")).await.unwrap();
            when((state, shown), |(state, shown)| {
                state.as_deref() == Some("running") && shown.as_deref() == Some(&pid.to_string())
            })
        },
    )
    .await
    .unwrap();
    assert_eq!(
        browser
            .text_content(&field("starts"))
            .await
            .unwrap()
            .as_deref(),
        Some("1")
    );
    assert_no_console_errors(&browser).await;
    browser.close().await.unwrap();
}
