//! A real PostgreSQL for tests: `DATABASE_URL` when given, otherwise a private server started with
//! initdb + pg_ctl on a free port in a temporary directory (installing Debian's `postgresql`
//! package when no server binaries are found). One server per test process; a watchdog stops it
//! and removes its directory when the process exits, however it exits.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, bail};
use sqlx::Connection;

mod replication;

/// A PostgreSQL server the tests may create databases in.
#[derive(Debug)]
pub struct Postgres {
    /// URL of the maintenance database, used to create per-test databases.
    admin_url: String,
    /// Set when this process started the server.
    local: Option<LocalServer>,
}

#[derive(Debug)]
struct LocalServer {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    /// Run server commands as this user (initdb refuses root).
    run_as: Option<String>,
}

static SERVER: OnceLock<Postgres> = OnceLock::new();
static NEXT_DB: AtomicU32 = AtomicU32::new(0);

/// Fails a test that needs the server this harness starts itself (`why`: "stops and starts the
/// server", "creates cluster-wide roles") when `DATABASE_URL` names a server others may use. Such
/// a test carries `#[cfg_attr(given_server, ignore = "…")]` (see the crate docs), so `cargo test`
/// with `DATABASE_URL` set lists it as ignored; this catches it where it runs anyway (a binary
/// built without `DATABASE_URL` and run with it, or `--include-ignored`), as a failure rather
/// than a pass that tested nothing.
pub fn needs_own_server(why: &str) {
    assert!(
        std::env::var_os("DATABASE_URL").is_none(),
        "DATABASE_URL is set, and this test {why}: it cannot run there (`cargo test` with \
         DATABASE_URL set builds it ignored; this binary was built without it, or runs ignored \
         tests)"
    );
}

/// The shared server of this test process, started on first use.
pub fn server() -> &'static Postgres {
    SERVER.get_or_init(|| match Postgres::start() {
        Ok(pg) => pg,
        Err(e) => panic!("cannot provide a PostgreSQL server for the tests: {e:#}"),
    })
}

impl Postgres {
    fn start() -> anyhow::Result<Postgres> {
        if let Ok(url) = std::env::var("DATABASE_URL") {
            return Ok(Postgres {
                admin_url: url,
                local: None,
            });
        }
        Self::start_local(&[])
    }

    /// A server of the test's own, whatever `DATABASE_URL` says, whose processes run with `env`
    /// (e.g. libfaketime, to step the database's clock). Stopped when the test process exits.
    pub fn start_private(env: &[(&str, &str)]) -> anyhow::Result<Postgres> {
        Self::start_local(env)
    }

    fn start_local(env: &[(&str, &str)]) -> anyhow::Result<Postgres> {
        let bin = find_bin_dir().or_else(|_| {
            install_postgres()?;
            find_bin_dir()
        })?;
        let run_as = is_root().then(|| "postgres".to_string());
        let dir = tempfile::Builder::new()
            .prefix("leasehold-pg-")
            .tempdir()?
            .keep();
        let data = dir.join("data");
        if let Some(user) = &run_as {
            ensure_user(user)?;
            run(Command::new("chown").arg("-R").arg(user).arg(&dir))?;
        }
        let mut initdb = server_command(&run_as, &bin.join("initdb"));
        initdb
            .args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
                "-D",
            ])
            .arg(&data);
        run(&mut initdb).context("initdb")?;
        make_tls_certificate(&dir, run_as.as_deref());
        // The watchdog outlives nothing: it stops the server once this process is gone.
        spawn_watchdog(&run_as, &bin, &dir)?;
        let mut last_err = None;
        for _ in 0..5 {
            let port = free_port()?;
            let mut ctl = server_command(&run_as, &bin.join("pg_ctl"));
            ctl.arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(dir.join("server.log"))
                .arg("-w")
                .arg("-t")
                .arg("60");
            ctl.arg("-o")
                .arg(server_options(port, &dir, fsync_wanted()));
            ctl.arg("start").envs(env.iter().copied());
            match run(&mut ctl) {
                Ok(()) => {
                    let local = LocalServer {
                        bin,
                        data,
                        port,
                        run_as,
                    };
                    return Ok(Postgres {
                        admin_url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
                        local: Some(local),
                    });
                }
                Err(e) => last_err = Some(e),
            }
        }
        let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
        bail!("pg_ctl start failed: {last_err:?}\n{log}")
    }

    /// The CA certificate to verify the server with, when it runs with TLS.
    pub fn tls_root_cert(&self) -> Option<PathBuf> {
        let local = self.local.as_ref()?;
        let dir = local.data.parent()?;
        let ca = dir.join("ca.crt");
        (ca.is_file() && dir.join("server.crt").is_file()).then_some(ca)
    }

    /// The server's own log, when this process started the server (not for `DATABASE_URL`).
    pub fn log_file(&self) -> Option<PathBuf> {
        Some(self.local.as_ref()?.data.parent()?.join("server.log"))
    }

    /// Makes the server log every statement with its duration, stamped to the millisecond
    /// ([`crate::statement_log`]), from now on; or, with `on` false, log none of them again. The
    /// log slows every statement a little: a benchmark turns it on only to check its figures.
    pub async fn log_every_statement(&self, on: bool) -> anyhow::Result<()> {
        let mut conn = sqlx::PgConnection::connect(&self.admin_url).await?;
        // A constant of this crate, not outside text.
        let prefix = format!(
            "ALTER SYSTEM SET log_line_prefix = '{}'",
            crate::statement_log::LINE_PREFIX
        );
        let every = match on {
            true => "ALTER SYSTEM SET log_min_duration_statement = 0",
            false => "ALTER SYSTEM RESET log_min_duration_statement",
        };
        sqlx::query(every).execute(&mut conn).await?;
        sqlx::query(sqlx::AssertSqlSafe(prefix))
            .execute(&mut conn)
            .await?;
        sqlx::query("SELECT pg_reload_conf()")
            .execute(&mut conn)
            .await?;
        Ok(())
    }

    /// The maintenance database's URL.
    pub fn admin_url(&self) -> &str {
        &self.admin_url
    }

    /// A new empty database for one test, as a URL.
    pub async fn fresh_database(&self) -> anyhow::Result<String> {
        let name = format!(
            "lh_{}_{}",
            std::process::id(),
            NEXT_DB.fetch_add(1, Ordering::SeqCst)
        );
        let mut conn = sqlx::PgConnection::connect(&self.admin_url)
            .await
            .context("connecting to the test server")?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await?;
        conn.close().await?;
        Ok(database_url(&self.admin_url, &name))
    }

    /// A new database with the lease schema already migrated, as a host would leave it: for tests
    /// that put their own tables or triggers beside it before any host starts.
    pub async fn fresh_lease_database(&self) -> anyhow::Result<String> {
        let url = self.fresh_database().await?;
        let parsed = leasehold::lease::DatabaseUrl::parse(&url)?;
        let wait = std::time::Duration::from_secs(10);
        leasehold::lease::open_store(&parsed, wait, wait).await?;
        Ok(url)
    }

    /// A login role for a plugin's sql grant on the database at `url`, set up as the README's
    /// security model asks: it may use and create in schema `public` (for its own tables) and
    /// holds nothing on the `leasehold_*` tables. Returns its URL on that database. Roles are
    /// cluster-wide: the name carries the process id and a counter.
    pub async fn plugin_role(&self, url: &str, tag: &str) -> anyhow::Result<String> {
        let role = format!(
            "plugin_{tag}_{}_{}",
            std::process::id(),
            NEXT_DB.fetch_add(1, Ordering::SeqCst)
        );
        let mut conn = sqlx::PgConnection::connect(url)
            .await
            .context("connecting to the test database")?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE ROLE {role} LOGIN; GRANT USAGE, CREATE ON SCHEMA public TO {role};"
        )))
        .execute(&mut conn)
        .await?;
        conn.close().await?;
        Ok(with_user(url, &role))
    }

    /// Stops the server (fast shutdown); only for a server this process started.
    pub fn stop(&self) -> anyhow::Result<()> {
        let local = self
            .local
            .as_ref()
            .context("DATABASE_URL was given: the tests do not own that server")?;
        let mut ctl = server_command(&local.run_as, &local.bin.join("pg_ctl"));
        ctl.arg("-D")
            .arg(&local.data)
            .args(["-m", "fast", "-w", "stop"]);
        run(&mut ctl)
    }

    /// Starts the server again after [`Postgres::stop`], on the same port.
    pub fn restart(&self) -> anyhow::Result<()> {
        let local = self
            .local
            .as_ref()
            .context("DATABASE_URL was given: the tests do not own that server")?;
        let mut ctl = server_command(&local.run_as, &local.bin.join("pg_ctl"));
        let dir = local.data.parent().unwrap_or(Path::new("/tmp"));
        ctl.arg("-D")
            .arg(&local.data)
            .arg("-l")
            .arg(dir.join("server.log"))
            .args(["-w", "-o"]);
        ctl.arg(server_options(local.port, dir, fsync_wanted()));
        ctl.arg("start");
        run(&mut ctl)
    }
}

/// Whether the servers flush their commits: unless `LEASEHOLD_TEST_PG_FSYNC=off`.
fn fsync_wanted() -> bool {
    !std::env::var("LEASEHOLD_TEST_PG_FSYNC").is_ok_and(|v| v == "off")
}

/// Loopback only, sockets in the private directory, room for many test processes' pools; and
/// without fsync when `LEASEHOLD_TEST_PG_FSYNC=off` (what `make test` sets).
///
/// The whole suite writes gigabytes beside its servers (builds, links, images): there, one commit's
/// fsync took up to 240 ms, and a campaign or renewal behind it ran over a 1 s or 2 s ttl's store
/// timeout (200 and 400 ms). The tests are about the hosts, not the disk: a server they throw away
/// needs no flush to survive a power cut, and a server process killed or stopped keeps every commit
/// (the writes are in the kernel's cache); so `make test` turns fsync off. Benchmarks and a
/// developer's `cargo test` keep PostgreSQL's default, whose figures are a real server's.
fn server_options(port: u16, dir: &Path, fsync: bool) -> String {
    let mut options = format!(
        "-p {port} -k {} -c listen_addresses=127.0.0.1 -c max_connections=400",
        dir.display()
    );
    if !fsync {
        options.push_str(" -c fsync=off");
    }
    // TLS when a certificate could be made: clients choose with sslmode (default: prefer).
    let (cert, key) = (dir.join("server.crt"), dir.join("server.key"));
    if cert.is_file() && key.is_file() {
        options.push_str(&format!(
            " -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
            cert.display(),
            key.display()
        ));
    }
    options
}

/// A test CA (`ca.crt`) and a server certificate for 127.0.0.1 signed by it (`server.crt`,
/// `server.key`) in `dir`, so tests can connect with `sslmode=verify-full`. Without `openssl` the
/// server runs without TLS.
fn make_tls_certificate(dir: &Path, owner: Option<&str>) {
    let ext = dir.join("server.ext");
    let wrote = std::fs::write(
        &ext,
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    );
    let openssl = |args: &[&str]| {
        Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let made = wrote.is_ok()
        && openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=leasehold test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
        ])
        && openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ])
        && openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "server.crt",
        ]);
    if !made {
        let _ = std::fs::remove_file(dir.join("server.crt"));
        let _ = std::fs::remove_file(dir.join("server.key"));
        return;
    }
    // The server refuses a key that others can read.
    let _ = Command::new("chmod")
        .arg("600")
        .arg(dir.join("server.key"))
        .status();
    if let Some(user) = owner {
        let _ = Command::new("chown")
            .arg(user)
            .arg(dir.join("server.key"))
            .arg(dir.join("server.crt"))
            .status();
    }
}

/// `base` with its database name replaced by `name`.
/// The user a URL such as [`Postgres::plugin_role`]'s logs in as (empty when it names none).
pub fn user_of(url: &str) -> &str {
    let start = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[start..];
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    authority
        .rfind('@')
        .map_or("", |at| authority[..at].split(':').next().unwrap_or(""))
}

/// `url` with `user` (and no password) in place of its user.
pub fn with_user(url: &str, user: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let authority_end = url[start..].find('/').map_or(url.len(), |i| start + i);
    let host = match url[start..authority_end].rfind('@') {
        Some(at) => start + at + 1,
        None => start,
    };
    format!("{}{user}@{}", &url[..start], &url[host..])
}

fn database_url(base: &str, name: &str) -> String {
    let (head, query) = base
        .split_once('?')
        .map_or((base, None), |(h, q)| (h, Some(q)));
    let authority_end = head.find("://").map_or(0, |i| i + 3);
    let head = match head[authority_end..].find('/') {
        Some(slash) => &head[..authority_end + slash],
        None => head,
    };
    match query {
        Some(q) => format!("{head}/{name}?{q}"),
        None => format!("{head}/{name}"),
    }
}

fn find_bin_dir() -> anyhow::Result<PathBuf> {
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|dir| dir.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    // Newest major version first.
    candidates.sort_by_key(|p| {
        std::cmp::Reverse(
            p.parent()
                .and_then(|v| v.file_name())
                .and_then(|v| v.to_str())
                .and_then(|v| v.parse::<u32>().ok()),
        )
    });
    if let Ok(path) = std::env::var("PATH") {
        candidates.extend(std::env::split_paths(&path));
    }
    candidates
        .into_iter()
        .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
        .context(
            "no PostgreSQL server binaries (initdb, pg_ctl) in /usr/lib/postgresql/*/bin or PATH",
        )
}

fn install_postgres() -> anyhow::Result<()> {
    if !is_root() {
        bail!(
            "PostgreSQL server binaries are missing; install Debian's `postgresql` package or set DATABASE_URL"
        );
    }
    eprintln!("installing Debian's postgresql package for the tests");
    run(Command::new("apt-get").arg("update").arg("-q"))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-q", "postgresql"])
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

/// Whether this process runs as root (server commands then run as `postgres`).
pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

fn ensure_user(user: &str) -> anyhow::Result<()> {
    if Command::new("id")
        .arg(user)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?
        .success()
    {
        return Ok(());
    }
    run(Command::new("useradd").args(["--system", "--no-create-home", user]))
}

fn server_command(run_as: &Option<String>, program: &Path) -> Command {
    match run_as {
        Some(user) => {
            let mut c = Command::new("runuser");
            c.args(["-u", user, "--"]).arg(program);
            c
        }
        None => Command::new(program),
    }
}

fn spawn_watchdog(run_as: &Option<String>, bin: &Path, dir: &Path) -> anyhow::Result<()> {
    let stop = match run_as {
        Some(user) => format!("runuser -u {user} -- {}/pg_ctl", bin.display()),
        None => format!("{}/pg_ctl", bin.display()),
    };
    let script = format!(
        "while kill -0 {parent} 2>/dev/null; do sleep 0.5; done; \
         {stop} -D {dir}/data -m immediate stop >/dev/null 2>&1; rm -rf {dir}",
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
        .context("starting the PostgreSQL watchdog")?;
    Ok(())
}

/// A loopback port nothing listens on right now, for a server the caller starts later.
///
/// It is taken below the kernel's ephemeral range: a port from `bind(0)` is one that every
/// outgoing connection of every process (the suite runs test binaries side by side) may take as
/// its local port before the server binds it. Below that range only another caller of this
/// function can, and each process starts at its own place in the range. Without a range to read,
/// or with one that starts too low, the kernel picks.
pub fn free_port() -> anyhow::Result<u16> {
    const LOWEST: u32 = 10_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_from = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .filter(|&from| from > LOWEST + 1_000 && from <= 65_536);
    if let Some(from) = ephemeral_from {
        let span = from - LOWEST;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let start = std::process::id().wrapping_mul(7_919).wrapping_add(nanos);
        for _ in 0..64 {
            let port = LOWEST
                + start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed).wrapping_mul(97)) % span;
            let port = u16::try_from(port).context("a port below 65536")?;
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return Ok(port);
            }
        }
    }
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Runs `cmd` to its end; an error carries its status and output.
pub(crate) fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Waits until at least `n` sessions of the database at `url` have run `LISTEN` (a release
/// listener subscribes in the background; a notification sent before would be lost).
pub async fn wait_for_listeners(
    url: &str,
    n: i64,
    timeout: std::time::Duration,
) -> anyhow::Result<()> {
    let mut conn = sqlx::PgConnection::connect(url).await?;
    crate::eventually::eventually(
        format!("{n} listeners to subscribe (sessions listening)"),
        timeout,
        async || {
            let listening: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE datname = current_database() AND query LIKE 'LISTEN%'",
            )
            .fetch_one(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
            crate::eventually::when(listening, |l| *l >= n).map_err(|l| l.to_string())
        },
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn replaces_the_database_name() {
        assert_eq!(
            super::database_url("postgres://u@h:1/postgres", "x"),
            "postgres://u@h:1/x"
        );
        assert_eq!(
            super::database_url("postgres://u@h:1/postgres?sslmode=disable", "x"),
            "postgres://u@h:1/x?sslmode=disable"
        );
        assert_eq!(
            super::database_url("postgres://u@h:1", "x"),
            "postgres://u@h:1/x"
        );
    }

    #[test]
    fn a_server_flushes_its_commits_unless_told_not_to() {
        let dir = std::path::Path::new("/tmp/x");
        assert!(!super::server_options(5432, dir, true).contains("fsync"));
        assert!(super::server_options(5432, dir, false).contains(" -c fsync=off"));
    }

    #[test]
    fn replaces_the_user() {
        assert_eq!(
            super::with_user("postgres://u:pw@h:1/db?x=1", "r"),
            "postgres://r@h:1/db?x=1"
        );
        assert_eq!(
            super::with_user("postgres://h:1/db", "r"),
            "postgres://r@h:1/db"
        );
    }
}

/// How [`lock_lease_row`] locks the row: as a plugin's fenced write does (`FOR SHARE`), or as an
/// operator's session might (`FOR NO KEY UPDATE`, `FOR UPDATE`).
#[derive(Debug, Clone, Copy)]
pub enum RowLock {
    /// `FOR SHARE`.
    Share,
    /// `FOR NO KEY UPDATE`.
    NoKeyUpdate,
    /// `FOR UPDATE`.
    Update,
}

/// Another session holding lease `name`'s row locked in `mode` until the returned transaction
/// commits, rolls back or is dropped.
pub async fn lock_lease_row(
    url: &str,
    name: &str,
    mode: RowLock,
) -> anyhow::Result<sqlx::Transaction<'static, sqlx::Postgres>> {
    let clause = match mode {
        RowLock::Share => "FOR SHARE",
        RowLock::NoKeyUpdate => "FOR NO KEY UPDATE",
        RowLock::Update => "FOR UPDATE",
    };
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await?;
    let mut tx = pool.begin().await?;
    let locked = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT 1 FROM leasehold_leases WHERE name = $1 {clause}"
    )))
    .bind(name)
    .execute(&mut *tx)
    .await?;
    anyhow::ensure!(
        locked.rows_affected() == 1,
        "no lease row named {name:?} to lock"
    );
    Ok(tx)
}
