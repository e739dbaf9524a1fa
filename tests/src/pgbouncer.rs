//! A real PgBouncer in front of the harness's PostgreSQL ([`crate::pg`]): Debian's `pgbouncer`,
//! with a config file in a temporary directory, on a free loopback port, trusting every user the
//! server trusts. Run as the server's user when the tests run as root (PgBouncer refuses root).
//! Stopped when dropped, and by a watchdog when the test process exits, however it exits.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

use crate::pg::{is_root, run};

/// How PgBouncer hands server connections to clients (`pool_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolMode {
    /// A server connection per client connection, for as long as the client stays.
    Session,
    /// A server connection per transaction, back to the pool after each.
    Transaction,
}

impl PoolMode {
    fn setting(self) -> &'static str {
        match self {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
        }
    }
}

/// A running PgBouncer; stopped when dropped.
#[derive(Debug)]
pub struct PgBouncer {
    /// Where it listens.
    port: u16,
    /// Its config, log and pid file; removed by the watchdog.
    dir: PathBuf,
}

/// The PgBouncer binary, from Debian's package.
fn binary() -> anyhow::Result<PathBuf> {
    let packaged = PathBuf::from("/usr/sbin/pgbouncer");
    if packaged.is_file() {
        return Ok(packaged);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("pgbouncer"))
        .find(|p| p.is_file())
        .context("pgbouncer is not installed: run scripts/install-deps.sh (Debian's pgbouncer)")
}

impl PgBouncer {
    /// Starts one in `mode` in front of the server `server_url` names (any of its databases:
    /// clients name theirs).
    pub fn start(server_url: &str, mode: PoolMode) -> anyhow::Result<PgBouncer> {
        let bin = binary()?;
        let (host, port) = host_port(server_url)?;
        let run_as = is_root().then_some("postgres");
        let dir = tempfile::Builder::new()
            .prefix("leasehold-pgbouncer-")
            .tempdir()?
            .keep();
        std::fs::write(dir.join("users.txt"), "\"postgres\" \"\"\n")?;
        if let Some(user) = run_as {
            run(Command::new("chown").arg("-R").arg(user).arg(&dir))?;
        }
        spawn_watchdog(&dir)?;
        let mut last_err = None;
        for _ in 0..5 {
            let listen = crate::pg::free_port()?;
            let config = dir.join("pgbouncer.ini");
            std::fs::write(&config, config_text(&dir, &host, port, listen, mode))?;
            let mut cmd = match run_as {
                Some(user) => {
                    let mut c = Command::new("runuser");
                    c.args(["-u", user, "--"]).arg(&bin);
                    c
                }
                None => Command::new(&bin),
            };
            // Daemonised: it writes its pid file, which the watchdog and `Drop` stop it by.
            cmd.arg("-d").arg(&config);
            match run(&mut cmd).and_then(|()| wait_listening(listen, &dir)) {
                Ok(()) => return Ok(PgBouncer { port: listen, dir }),
                Err(e) => last_err = Some(e),
            }
        }
        let log = std::fs::read_to_string(dir.join("pgbouncer.log")).unwrap_or_default();
        bail!("pgbouncer did not start: {last_err:?}\n{log}")
    }

    /// `url` (a database of the server behind) as reached through this PgBouncer.
    pub fn url_for(&self, url: &str) -> anyhow::Result<String> {
        let mut through = url::Url::parse(url)?;
        through
            .set_port(Some(self.port))
            .map_err(|()| anyhow::anyhow!("{url} takes no port"))?;
        through
            .set_host(Some("127.0.0.1"))
            .context("setting the host")?;
        Ok(through.to_string())
    }

    /// Its log so far, for a failing test's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        stop(&self.dir);
    }
}

/// The config: every database of the server, trust for the one user the harness connects as,
/// the settings leasehold sends at connect ignored (PgBouncer refuses startup parameters it does
/// not track, and `options` carries them), and pools large enough for several hosts.
fn config_text(dir: &Path, host: &str, port: u16, listen: u16, mode: PoolMode) -> String {
    let dir = dir.display();
    format!(
        "[databases]\n\
         * = host={host} port={port}\n\
         [pgbouncer]\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {listen}\n\
         unix_socket_dir =\n\
         auth_type = trust\n\
         auth_file = {dir}/users.txt\n\
         pool_mode = {mode}\n\
         ignore_startup_parameters = extra_float_digits, options\n\
         default_pool_size = 40\n\
         max_client_conn = 400\n\
         logfile = {dir}/pgbouncer.log\n\
         pidfile = {dir}/pgbouncer.pid\n",
        mode = mode.setting()
    )
}

/// Host and port of a `postgres://` URL.
fn host_port(url: &str) -> anyhow::Result<(String, u16)> {
    let parsed = url::Url::parse(url)?;
    let host = parsed.host_str().context("no host")?.to_string();
    Ok((host, parsed.port().unwrap_or(5432)))
}

/// Waits (10 s at most) until something accepts on `port`.
fn wait_listening(port: u16, dir: &Path) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    stop(dir);
    bail!("pgbouncer is not listening on port {port} after 10 s")
}

/// SIGTERM to the PgBouncer whose pid file is in `dir` (its immediate shutdown).
fn stop(dir: &Path) {
    if let Ok(pid) = std::fs::read_to_string(dir.join("pgbouncer.pid")) {
        let _ = Command::new("kill")
            .arg(pid.trim())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Stops the PgBouncer of `dir` and removes the directory once this process is gone.
fn spawn_watchdog(dir: &Path) -> anyhow::Result<()> {
    let script = format!(
        "while kill -0 {parent} 2>/dev/null; do sleep 0.5; done; \
         [ -f {dir}/pgbouncer.pid ] && kill $(cat {dir}/pgbouncer.pid) 2>/dev/null; \
         sleep 0.5; rm -rf {dir}",
        parent = std::process::id(),
        dir = dir.display(),
    );
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting the PgBouncer watchdog")?;
    Ok(())
}
