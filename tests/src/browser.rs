//! A real headless browser for tests of the pages a host serves: [`Browser::start`] runs
//! `chromedriver` on a free loopback port and opens a headless Chromium session through it
//! (Debian's `chromium` and `chromium-driver`, which `scripts/install-deps.sh` installs). A test
//! reads the DOM with [`Browser::text_content`] and [`Browser::attribute`], collects every
//! console error and uncaught exception of the page with [`Browser::console_errors`], and keeps
//! what a person would see with [`Browser::screenshot`]. Each browser has its own driver port
//! and profile directory, so a test may run several; dropping one kills its browser and driver.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, bail};
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder};
use rustix::process::{Pid, Signal, kill_process_group};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

use crate::eventually::{Text, eventually_every};
use crate::log::Log;

/// How long one WebDriver command may take: a browser that stopped answering fails the test
/// instead of hanging it.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// The window a person would see the page in, for screenshots: a laptop's, and small enough
/// that the README's picture of the page stays a modest PNG.
const WINDOW_SIZE: &str = "1100,900";

/// A headless Chromium session through a `chromedriver` of its own.
pub struct Browser {
    /// The WebDriver session; `None` once closed.
    client: Option<Client>,
    /// Its id, to close it from `drop`, where nothing can be awaited.
    session: String,
    /// The driver's loopback address.
    driver_addr: SocketAddr,
    /// The driver process, leader of a process group the browser's processes join; killed on
    /// drop with it.
    _driver: Child,
    /// That group, killed whole on drop.
    group: Pid,
    /// Kills the group if this process dies first; killed itself on drop.
    _watchdog: Child,
    /// The driver's stdout and stderr (and what the browser writes there), for messages.
    driver_log: Log,
    /// Every console error seen so far: the driver hands each log entry out once.
    errors: Mutex<Vec<String>>,
    /// The profile and config directories; dropped last, once no process writes to them.
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser")
            .field("session", &self.session)
            .field("driver_addr", &self.driver_addr)
            .finish_non_exhaustive()
    }
}

impl Browser {
    /// Starts `chromedriver` on a free loopback port, waits until it answers `/status`, and
    /// opens a headless Chromium session with a fresh profile that logs the page's console.
    pub async fn start() -> anyhow::Result<Browser> {
        // Given port 0, chromedriver binds a free IPv6 port and then the same number on IPv4,
        // which another process may hold already ("IPv4 port not available"): try again.
        let mut refused = None;
        for _ in 0..5 {
            match Browser::start_once().await {
                Err(e) if format!("{e:#}").contains("port not available") => refused = Some(e),
                started => return started,
            }
        }
        Err(refused.context("chromedriver was never started")?)
    }

    async fn start_once() -> anyhow::Result<Browser> {
        let dir = tempfile::Builder::new()
            .prefix("leasehold-browser-")
            .tempdir()?;
        let profile = dir.path().join("profile");
        let mut driver = Command::new("chromedriver")
            // It picks a free port itself and names it on stdout: no race for a port.
            .arg("--port=0")
            // Chromium keeps its crash database under $XDG_CONFIG_HOME, not in the profile:
            // this keeps it out of the user's home.
            .env("XDG_CONFIG_HOME", dir.path().join("config"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // The browser's processes join the driver's group, and outlive the driver when it
            // is killed alone: drop kills the group.
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => {
                    anyhow::anyhow!("chromedriver is not installed: run scripts/install-deps.sh")
                }
                _ => anyhow::Error::new(e).context("starting chromedriver"),
            })?;
        let (group, watchdog) = crate::reaper::watch_group(&driver, "chromedriver", dir.path())?;
        let driver_log = Log::new("chromedriver");
        let (port_tx, port_rx) = oneshot::channel();
        let stdout = driver.stdout.take().context("no stdout")?;
        let stderr = driver.stderr.take().context("no stderr")?;
        tokio::spawn(read_lines(stdout, driver_log.clone(), Some(port_tx)));
        tokio::spawn(read_lines(stderr, driver_log.clone(), None));
        let port = match tokio::time::timeout(Duration::from_secs(20), port_rx).await {
            Ok(Ok(port)) => port,
            _ => bail!(
                "chromedriver did not name its port; output:\n{}",
                driver_log.text()
            ),
        };
        let driver_addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut browser = Browser {
            client: None,
            session: String::new(),
            driver_addr,
            _driver: driver,
            group,
            _watchdog: watchdog,
            driver_log,
            errors: Mutex::default(),
            _dir: dir,
        };
        browser.wait_for_driver().await?;

        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--no-first-run",
                    // Without these Chromium reaches out to the network as it starts.
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--disable-dev-shm-usage",
                    format!("--user-data-dir={}", profile.display()),
                    format!("--window-size={WINDOW_SIZE}"),
                    // Even with them it still asks update, time and account servers: no name
                    // resolves but the loopback's, so none of it leaves the machine.
                    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
                ],
                // A blank first tab: the new tab page would load the default search engine's
                // start page, and the first command waits for that navigation to give up.
                "prefs": {
                    "session": { "restore_on_startup": 4, "startup_urls": ["about:blank"] },
                },
            },
            // The page's console and uncaught exceptions, read back with `se/log`.
            "goog:loggingPrefs": { "browser": "ALL" },
            "timeouts": { "pageLoad": 30_000, "script": 10_000 },
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!("a JSON object")
        };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let url = format!("http://{driver_addr}");
        let client = tokio::time::timeout(
            Duration::from_secs(60),
            ClientBuilder::new(connector)
                .capabilities(capabilities)
                .connect(&url),
        )
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "no browser session within 60 s; chromedriver:\n{}",
                browser.driver_log.text()
            )
        })?
        .with_context(|| {
            format!(
                "opening a browser session; chromedriver:\n{}",
                browser.driver_log.text()
            )
        })?;
        browser.session = bounded(client.session_id())
            .await?
            .context("the new session has no id")?;
        browser.client = Some(client);
        Ok(browser)
    }

    /// Polls the driver's `/status` until it reports itself ready.
    async fn wait_for_driver(&self) -> anyhow::Result<()> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()?;
        let url = format!("http://{}/status", self.driver_addr);
        eventually_every(
            "chromedriver to answer /status",
            Duration::from_secs(20),
            Duration::from_millis(20),
            async || {
                let ready = async {
                    let status: Value = http.get(&url).send().await?.json().await?;
                    anyhow::Ok(status["value"]["ready"] == Value::Bool(true))
                };
                match ready.await {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(Text("not ready".into())),
                    Err(e) => Err(Text(format!("{e:#}\n{}", self.driver_log.text()))),
                }
            },
        )
        .await
    }

    /// The WebDriver session, for what this harness has no method for.
    pub fn client(&self) -> &Client {
        self.client
            .as_ref()
            .expect("the session is open until close")
    }

    /// Opens `url` and waits until it has loaded.
    pub async fn goto(&self, url: &str) -> anyhow::Result<()> {
        bounded(self.client().goto(url))
            .await
            .with_context(|| format!("opening {url}"))
    }

    /// Runs `script` (a function body: `arguments[i]` are `args`) in the page, and returns what
    /// it returns.
    pub async fn evaluate(&self, script: &str, args: Vec<Value>) -> anyhow::Result<Value> {
        bounded(self.client().execute(script, args)).await
    }

    /// The `textContent` of the first element matching the CSS selector `css`, or `None` when
    /// none does.
    pub async fn text_content(&self, css: &str) -> anyhow::Result<Option<String>> {
        let value = self
            .evaluate(
                "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
                vec![json!(css)],
            )
            .await?;
        Ok(value.as_str().map(str::to_string))
    }

    /// Attribute `name` of the first element matching the CSS selector `css`, or `None` when
    /// no element matches or it has no such attribute.
    pub async fn attribute(&self, css: &str, name: &str) -> anyhow::Result<Option<String>> {
        let value = self
            .evaluate(
                "const e = document.querySelector(arguments[0]); \
                 return e ? e.getAttribute(arguments[1]) : null;",
                vec![json!(css), json!(name)],
            )
            .await?;
        Ok(value.as_str().map(str::to_string))
    }

    /// Whether an element matches the CSS selector `css`.
    pub async fn exists(&self, css: &str) -> anyhow::Result<bool> {
        let value = self
            .evaluate(
                "return document.querySelector(arguments[0]) !== null;",
                vec![json!(css)],
            )
            .await?;
        Ok(value == Value::Bool(true))
    }

    /// Every console error and uncaught exception of the pages opened so far (the browser
    /// log's `SEVERE` entries), oldest first, each as `SOURCE: MESSAGE`: `console-api` for
    /// `console.error`, `javascript` for an uncaught exception, `network` for a failed load.
    pub async fn console_errors(&self) -> anyhow::Result<Vec<String>> {
        let entries = bounded(self.client().issue_cmd(BrowserLog)).await?;
        let entries = entries
            .as_array()
            .with_context(|| format!("a browser log that is not a list: {entries}"))?;
        let mut errors = self.errors.lock().unwrap();
        for entry in entries {
            if entry["level"] == "SEVERE" {
                let source = entry["source"].as_str().unwrap_or("?");
                let message = entry["message"].as_str().unwrap_or_default();
                errors.push(format!("{source}: {message}"));
            }
        }
        Ok(errors.clone())
    }

    /// Saves what the window shows as a PNG at `path`.
    pub async fn screenshot(&self, path: &Path) -> anyhow::Result<()> {
        let png = bounded(self.client().screenshot()).await?;
        std::fs::write(path, png).with_context(|| format!("writing {}", path.display()))
    }

    /// Closes the session (the driver quits the browser), then kills the driver.
    pub async fn close(mut self) -> anyhow::Result<()> {
        if let Some(client) = self.client.take() {
            bounded(client.close()).await?;
        }
        Ok(())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Not closed (a failed test): close the session by hand, as nothing can be awaited here,
        // so the driver quits the browser; then the group, for whatever is left.
        if self.client.take().is_some() {
            let _ = delete_session(self.driver_addr, &self.session);
        }
        let _ = kill_process_group(self.group, Signal::KILL);
    }
}

/// `DELETE /session/{id}`, blocking and bounded.
fn delete_session(driver: SocketAddr, session: &str) -> std::io::Result<()> {
    let timeout = Duration::from_secs(5);
    let mut stream = TcpStream::connect_timeout(&driver, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(
        stream,
        "DELETE /session/{session} HTTP/1.1\r\nHost: {driver}\r\nContent-Length: 0\r\n\
         Connection: close\r\n\r\n"
    )?;
    // The answer comes once the browser has quit. The driver keeps the connection open
    // whatever the request says, so read up to the answer's length, not to the end.
    let mut answer = Vec::new();
    let mut chunk = [0; 1024];
    while !is_complete(&answer) {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&chunk[..n]);
    }
    Ok(())
}

/// Whether `answer` holds a whole HTTP response: its head, and as much body as its
/// `Content-Length` says.
fn is_complete(answer: &[u8]) -> bool {
    let text = String::from_utf8_lossy(answer);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    let length = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())?
    });
    length.is_none_or(|length| body.len() >= length)
}

/// Chromedriver's browser log: `POST /session/{id}/se/log` with `{"type": "browser"}`, which
/// fantoccini has no method for. Each call returns the entries logged since the last one.
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/se/log",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (http::Method, Option<String>) {
        (
            http::Method::POST,
            Some(json!({"type": "browser"}).to_string()),
        )
    }
}

/// `command`, failed after [`COMMAND_TIMEOUT`].
async fn bounded<T, E>(command: impl Future<Output = Result<T, E>>) -> anyhow::Result<T>
where
    E: std::error::Error + Send + Sync + 'static,
{
    match tokio::time::timeout(COMMAND_TIMEOUT, command).await {
        Ok(result) => Ok(result?),
        Err(_) => bail!("the browser did not answer within {COMMAND_TIMEOUT:?}"),
    }
}

/// Collects the driver's output into `log` line by line, and sends the port of its "started
/// successfully on port N" line.
async fn read_lines(
    output: impl AsyncRead + Unpin,
    log: Log,
    mut port: Option<oneshot::Sender<u16>>,
) {
    let mut lines = BufReader::new(output).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let started = line
            .split("started successfully on port ")
            .nth(1)
            .and_then(|rest| rest.trim_end_matches('.').trim().parse().ok());
        log.push(line);
        if let Some(found) = started
            && let Some(tx) = port.take()
        {
            let _ = tx.send(found);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_complete_once_its_body_has_the_length_its_head_gives() {
        let answer =
            b"HTTP/1.1 200 OK\r\nContent-Length:14\r\nContent-Type:application/json\r\n\r\n";
        assert!(!is_complete(&answer[..20]));
        assert!(!is_complete(answer));
        assert!(!is_complete(&[&answer[..], b"{\"value\":"].concat()));
        assert!(is_complete(&[&answer[..], b"{\"value\":null}"].concat()));
        assert!(is_complete(b"HTTP/1.1 204 No Content\r\n\r\n"));
    }
}
