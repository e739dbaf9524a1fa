//! Database passwords never leave the host, attacked from outside: real `leasehold` processes are
//! given URLs whose passwords hold every character that ends a URL's authority early (`/ ? # @ :`,
//! a space), keyword connection strings (`host=… password=…`) and URLs the driver cannot read,
//! and nothing they print — `run`'s log at `RUST_LOG=trace`, `migrate`, `leases list`, `leases
//! release`, `config check`, `/status` and the page, a plugin's `last_error` and its own log
//! lines — holds the password. A plugin whose grant names a variable with such a URL (another
//! service's, say) learns nothing of it either.
//!
//! A process the host runs under a lease, as the host's own user, reads neither the host's
//! environment (`/proc/HOST/environ`) nor the PostgreSQL client's credential variables, and a
//! password given on the command line, where every user reads it, is warned about.
//!
//! And the cancel at a term's end finds every session of a plugin's grant on PostgreSQL however
//! long the plugin's name, a remote PostgreSQL URL without `sslmode` is warned about, and a
//! service's health probe URL is shown without its password.

#![allow(clippy::unwrap_used, missing_docs)]

use std::process::Stdio;
use std::time::Duration;

use leasehold_tests::eventually::{eventually, when};
use leasehold_tests::host::{HostBuilder, add_plugin, binary};
use leasehold_tests::log::Logged;
use tokio::process::Command;

/// A marker in every password, unique to this process, so that a hit is a leak and nothing else.
fn marker() -> String {
    format!("s3cr3t{}", std::process::id())
}

/// Database URLs whose password holds the marker, on a closed port of 127.0.0.1 (refused at once
/// when they parse at all): in the userinfo, in the query (also under a key the driver does not
/// read, which it would log with its value), in a keyword string.
fn leaky_urls() -> Vec<String> {
    let m = marker();
    vec![
        format!("postgres://leasehold:pa/ss-{m}@127.0.0.1:1/db"),
        format!("postgres://leasehold:pa?ss-{m}@127.0.0.1:1/db"),
        format!("postgres://leasehold:pa#ss-{m}@127.0.0.1:1/db"),
        format!("postgres://leasehold:p@ss:w-{m}@127.0.0.1:1/db"),
        format!("postgres://leasehold:pa ss-{m}@127.0.0.1:1/db"),
        format!("postgresql://127.0.0.1:1/db?user=leasehold&password={m}"),
        format!("postgres://leasehold:{m}@127.0.0.1:1/db?sslmode={m}"),
        format!("postgres://leasehold@127.0.0.1:1/db?Password={m}"),
        format!("postgres://leasehold@127.0.0.1:1/db?sslmode=disable&passwd={m}"),
        format!("postgres://leasehold:{m}@[::1/db"),
        format!("host=127.0.0.1 port=1 user=leasehold password='a b {m}'"),
        format!("host=127.0.0.1 port=1 password={m}"),
        format!("mysql://root:{m}@127.0.0.1:1/db"),
    ]
}

/// Environment variables of a run.
type Env<'a> = &'a [(&'a str, &'a str)];

/// Runs `leasehold ARGS` with `env` (and nothing of `PG*` from the test's own environment) to
/// completion, at most 30 s; returns its stdout and stderr together.
async fn run(args: &[&str], env: Env<'_>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(binary().unwrap());
    cmd.args(args)
        .current_dir(dir.path())
        .env_remove("LEASEHOLD_DATABASE_URL")
        .env_remove("PGSSLMODE")
        .env("RUST_BACKTRACE", "0")
        .env("RUST_LOG", "trace")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("leasehold {args:?} still running after 30 s"))
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Each command that takes a database URL, given each leaky URL by flag, by variable and in a
/// config file, fails (or, for `config check`, reports) without printing the password, at any
/// log level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_command_prints_a_password_whatever_it_holds_or_however_the_url_is_refused() {
    let m = marker();
    let config = tempfile::tempdir().unwrap();
    let mut leaks = Vec::new();
    for url in leaky_urls() {
        let file = config.path().join("leasehold.toml");
        std::fs::write(&file, format!("database_url = {url:?}\n")).unwrap();
        let file = file.to_str().unwrap();
        let by_env = [("LEASEHOLD_DATABASE_URL", url.as_str())];
        let cases: [(&[&str], Env); 8] = [
            (
                &["run", "--database-url", &url, "--http", "127.0.0.1:0"],
                &[],
            ),
            (&["run", "--http", "127.0.0.1:0"], &by_env),
            (&["run", "--config", file, "--http", "127.0.0.1:0"], &[]),
            (&["migrate", "--database-url", &url], &[]),
            (&["leases", "list"], &by_env),
            (&["leases", "release", "leader", "--force"], &by_env),
            (&["config", "check"], &by_env),
            (&["config", "check", file], &[]),
        ];
        for (args, env) in cases {
            let shown = run(args, env).await;
            assert!(!shown.is_empty(), "leasehold {args:?} said nothing");
            if let Some(line) = shown.lines().find(|l| l.contains(&m)) {
                let by = if env.is_empty() {
                    ""
                } else {
                    " (URL by variable)"
                };
                leaks.push(format!("leasehold {args:?}{by}: {line}"));
            }
        }
    }
    assert!(
        leaks.is_empty(),
        "{} of {} runs printed a password:\n{}",
        leaks.len(),
        leaky_urls().len() * 8,
        leaks.join("\n")
    );
    // A config file that is not TOML (the URL unquoted) is not quoted back.
    let file = config.path().join("broken.toml");
    std::fs::write(&file, format!("database_url = postgres://u:{m}@h/db\n")).unwrap();
    let file = file.to_str().unwrap();
    for args in [
        &["config", "check", file][..],
        &["run", "--config", file, "--http", "127.0.0.1:0"],
    ] {
        let shown = run(args, &[]).await;
        assert!(shown.contains("line 1, column"), "{shown}");
        assert!(
            !shown.contains(&m),
            "leasehold {args:?} quoted the file:\n{shown}"
        );
    }
    // A refused URL is named by where it came from.
    let keyword = format!("host=db.example password={m}");
    let shown = run(
        &["config", "check"],
        &[("LEASEHOLD_DATABASE_URL", &keyword)],
    )
    .await;
    assert!(
        shown.contains("the database URL in --database-url or LEASEHOLD_DATABASE_URL")
            && shown.contains("keyword connection string"),
        "{shown}"
    );
}

/// A plugin's grant that names a variable holding a URL the driver cannot read, a keyword
/// string, or a URL with a password on a closed port: the plugins that cannot load say which
/// variable is at fault in `/status` (and so on the page), the one that loads gets
/// `unavailable` from its calls, and neither the host's log at trace, `/status`, the page nor
/// the plugin's own log lines hold the password. A grant to a remote host without `sslmode` is
/// warned about when it opens, by host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_s_grant_never_shows_the_password_of_the_variable_it_names() {
    let m = marker();
    let data = tempfile::tempdir().unwrap();
    let plugins = tempfile::tempdir().unwrap();
    let grants = [
        ("bad-url", "BAD_DATABASE_URL"),
        ("keyword", "KEYWORD_DATABASE_URL"),
        ("bad-sslmode", "SSLMODE_DATABASE_URL"),
        ("unreachable", "GONE_DATABASE_URL"),
        ("remote", "REMOTE_DATABASE_URL"),
    ];
    for (name, env) in grants {
        let manifest = format!(
            "lease = \"leader\"\n[schedule]\ninterval = \"200ms\"\n[grants.sql]\ndatabase_url_env = \"{env}\"\n[config]\ncall = \"query\"\nstatements = \"SELECT 1\"\n"
        );
        add_plugin(plugins.path(), "hostile-sql", name, &manifest).unwrap();
    }
    let bad = format!("postgres://app:pa/ss-{m}@127.0.0.1:1/app");
    let keyword = format!("host=127.0.0.1 port=1 password='x {m}'");
    let sslmode = format!("postgres://app:{m}@127.0.0.1:1/app?sslmode={m}");
    let gone = format!("postgres://app:{m}@127.0.0.1:1/app");
    // Never reached: the grant's warning is what is looked at.
    let remote = format!("postgres://app:{m}@db.example.invalid/app");
    let host = HostBuilder::new("secrets")
        .database_url(&format!("sqlite:{}/leases.db", data.path().display()))
        .ttl(Duration::from_secs(2))
        .plugins(plugins.path())
        // Everything at trace but the compiler's own targets, which see no URL and would flood
        // the log while the components compile.
        .env(
            "RUST_LOG",
            "trace,cranelift_codegen=info,cranelift_frontend=info,regalloc2=info,wasmtime_cranelift=info",
        )
        .env("BAD_DATABASE_URL", &bad)
        .env("KEYWORD_DATABASE_URL", &keyword)
        .env("SSLMODE_DATABASE_URL", &sslmode)
        .env("GONE_DATABASE_URL", &gone)
        .env("REMOTE_DATABASE_URL", &remote)
        .spawn()
        .await
        .unwrap();
    host.wait_for_log("hostile query err=unavailable", Duration::from_secs(30))
        .await
        .unwrap();
    for (name, env) in &grants[..3] {
        let entry = eventually(
            "the plugin's last_error",
            Duration::from_secs(10),
            async || {
                when(host.plugin_status(name).await, |p| {
                    p.as_ref().is_some_and(|p| p.last_error.is_some())
                })
            },
        )
        .await
        .unwrap()
        .unwrap();
        let error = entry.last_error.unwrap();
        assert!(error.contains(env), "{name}: {error}");
        assert!(!error.contains(&m), "{name}: {error}");
    }
    let warned = host
        .wait_for_log(
            "reaches db.example.invalid without sslmode",
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert!(warned.contains("REMOTE_DATABASE_URL"), "{warned}");
    let (_, status) = host.get("/status").await.unwrap();
    let (_, page) = host.get("/").await.unwrap();
    // Several calls of the loaded plugin, each refused.
    eventually("three refused calls", Duration::from_secs(20), async || {
        when(host.log_text(), |l| {
            l.matches("hostile query err=unavailable").count() >= 3
        })
    })
    .await
    .unwrap();
    let log = host.log_text();
    for (what, shown) in [("/status", &status), ("the page", &page), ("the log", &log)] {
        assert!(!shown.contains(&m), "{what} holds a password:\n{shown}");
    }
}

/// A PostgreSQL URL to a remote host that sets no `sslmode` would silently use `prefer` (no
/// certificate check, plaintext when the server offers no TLS): `config check` warns, naming the
/// host and not the password; with `sslmode`, on loopback or a Unix socket it says nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_check_warns_of_a_remote_postgres_url_without_sslmode() {
    let m = marker();
    let remote = format!("postgres://leasehold:{m}@db.example.com:5432/leases");
    let shown = run(&["config", "check"], &[("LEASEHOLD_DATABASE_URL", &remote)]).await;
    let warning = shown
        .lines()
        .find(|l| l.starts_with("# warning:"))
        .unwrap_or_else(|| panic!("no warning:\n{shown}"));
    assert!(
        warning.contains("db.example.com") && warning.contains("sslmode"),
        "{warning}"
    );
    assert!(!shown.contains(&m), "{shown}");
    for quiet in [
        format!("{remote}?sslmode=verify-full"),
        format!("postgres://leasehold:{m}@127.0.0.1:5432/leases"),
        format!("postgres://leasehold:{m}@localhost/leases"),
        "postgres:///leases?host=/var/run/postgresql".to_string(),
    ] {
        let shown = run(&["config", "check"], &[("LEASEHOLD_DATABASE_URL", &quiet)]).await;
        assert!(shown.contains(": ok;"), "{quiet}: {shown}");
        assert!(!shown.contains("warning"), "{quiet}: {shown}");
    }
    let chosen = run(
        &["config", "check"],
        &[
            ("LEASEHOLD_DATABASE_URL", &remote),
            ("PGSSLMODE", "require"),
        ],
    )
    .await;
    assert!(!chosen.contains("warning"), "{chosen}");
}

/// A `[[service]]` whose health probe URL carries a password (`http://user:PASSWORD@…`, which
/// the probe sends as basic auth): `config check` shows the URL with `***` in its place, as it
/// shows the database URL's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_check_shows_a_health_probe_url_without_its_password() {
    let m = marker();
    let config = tempfile::tempdir().unwrap();
    let file = config.path().join("leasehold.toml");
    std::fs::write(
        &file,
        format!(
            "database_url = \"sqlite:leases.db\"\nleases = [\"relay\"]\n\n[[service]]\nlease = \"relay\"\nhealth = \"http://probe:pa-{m}@127.0.0.1:18771/healthz?deep=1\"\n"
        ),
    )
    .unwrap();
    let shown = run(&["config", "check", file.to_str().unwrap()], &[]).await;
    assert!(
        shown.contains(r#"health = "http://probe:***@127.0.0.1:18771/healthz?deep=1""#),
        "{shown}"
    );
    assert!(!shown.contains(&m), "{shown}");
}

/// A plugin whose name takes all 64 characters the naming rule allows runs an hour-long
/// `pg_sleep` through its grant; when its term ends (the host is stopped), the statements are
/// ended on the server before the lease is released: no session of the grant is left in
/// `pg_stat_activity` once the process has exited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_named_plugin_s_statement_is_cancelled_on_the_server_when_its_term_ends() {
    let name = format!(
        "a-plugin-whose-name-takes-every-character-the-rule-allows-{}",
        "x".repeat(6)
    );
    assert_eq!(name.len(), 64);
    let server = leasehold_tests::pg::server();
    let url = server.fresh_lease_database().await.unwrap();
    let role_url = server.plugin_role(&url, "longname").await.unwrap();
    let role = leasehold_tests::pg::user_of(&role_url).to_string();
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let plugins = tempfile::tempdir().unwrap();
    add_plugin(
        plugins.path(),
        "hostile-sql",
        &name,
        "lease = \"leader\"\n[schedule]\ninterval = \"100ms\"\n[limits]\ncall_timeout = \"1h\"\n[grants.sql]\ndatabase_url_env = \"APP_DATABASE_URL\"\nstatement_timeout = \"1h\"\n[config]\ncall = \"query\"\nstatements = \"SELECT pg_sleep(3600)\"\n",
    )
    .unwrap();
    let mut host = HostBuilder::new("longname")
        .database_url(&url)
        .ttl(Duration::from_secs(2))
        .plugins(plugins.path())
        .env("APP_DATABASE_URL", &role_url)
        .spawn()
        .await
        .unwrap();
    let sleeping = async |pool: &sqlx::PgPool| -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = $1 AND query LIKE 'SELECT pg_sleep(3600)%'",
        )
        .bind(&role)
        .fetch_one(pool)
        .await
        .unwrap()
    };
    eventually(
        "the plugin's pg_sleep on the server",
        Duration::from_secs(30),
        async || when(sleeping(&pool).await, |n| *n > 0),
    )
    .await
    .unwrap();
    let running = sleeping(&pool).await;
    let stopping = std::time::Instant::now();
    let status = host.stop(Duration::from_secs(30)).await.unwrap();
    println!(
        "{running} pg_sleep session(s) of the plugin before SIGTERM; the host exited {:?} after it",
        stopping.elapsed()
    );
    assert!(status.success(), "{status:?}\n{}", host.log_text());
    let left = sleeping(&pool).await;
    assert_eq!(
        left,
        0,
        "{left} of the plugin's statements still run on the server after its term ended:\n{}",
        host.log_text()
    );
    let log = host.log_text();
    let cancelled = log
        .lines()
        .find(|l| l.contains("statement cancelled on the server: the call was dropped"))
        .unwrap_or_else(|| panic!("no cancel logged:\n{log}"));
    println!("{cancelled}");
    assert!(
        !cancelled.contains("sessions=0"),
        "the cancel found no session: {cancelled}"
    );
    // Whose sessions they were, for a DBA who sees only the application_name.
    let opened = log
        .lines()
        .find(|l| l.contains("sql grant opened"))
        .unwrap_or_else(|| panic!("the grant's application_name is not logged:\n{log}"));
    assert!(
        opened.contains(&name) && opened.contains("application_name=leasehold:"),
        "{opened}"
    );
}

/// The uid and gid to run a host as so that its child runs as the same user without root's
/// `CAP_SYS_PTRACE` (which reads any process's environment): `nobody` when the tests run as
/// root, and the tests' own user otherwise.
fn same_user_without_root() -> Option<(u32, u32)> {
    rustix::process::geteuid()
        .is_root()
        .then_some((65534, 65534))
}

/// A child under `leasehold exec`, of the host's user, looks for the host's secrets: its own
/// environment holds none of the PostgreSQL client's credential variables (the others pass), the
/// host's `/proc/PID/environ` (where they are, with every `LEASEHOLD_*` setting) is refused, and
/// what every user may read of the host, its arguments, still is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_under_exec_reads_neither_the_host_s_environment_nor_its_postgres_password() {
    let m = marker();
    let dir = tempfile::tempdir().unwrap();
    let user = same_user_without_root();
    if let Some((uid, gid)) = user {
        std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
    }
    // The keeper is the child's parent, the host the keeper's: `pid (comm) state ppid …`.
    let script = r#"host=$(cut -d' ' -f4 /proc/$PPID/stat)
echo "host-pid=$host"
for v in PGPASSWORD PGPASSFILE PGSERVICEFILE PGSSLKEY PGSSLCERT PGHOST LEASEHOLD_DATABASE_URL; do
  echo "own $v: $(env | grep -c "^$v=")"
done
if tr '\0' '\n' < /proc/$host/environ > environ.txt 2>/dev/null; then
  echo "host environ: read, $(grep -c '^PGPASSWORD=' environ.txt) PGPASSWORD"
else
  echo "host environ: refused"
fi
tr '\0' ' ' < /proc/$host/cmdline | grep -q ' exec ' && echo "host cmdline: read"
exec sleep 600"#;
    let url = format!("sqlite:{}", dir.path().join("leases.db").display());
    let mut builder = HostBuilder::new("child")
        .lease("nightly")
        .current_dir(dir.path())
        .env("HOME", dir.path().to_str().unwrap())
        .env("LEASEHOLD_DATABASE_URL", &url)
        .env("PGPASSWORD", &m)
        .env("PGPASSFILE", &format!("/nonexistent/{m}"))
        .env("PGSERVICEFILE", &format!("/nonexistent/{m}"))
        .env("PGSSLKEY", &format!("/nonexistent/{m}.key"))
        .env("PGSSLCERT", &format!("/nonexistent/{m}.crt"))
        .env("PGHOST", "db.example")
        .exec(&["sh", "-c", script]);
    if let Some((uid, gid)) = user {
        builder = builder.user(uid, gid);
    }
    let host = builder.spawn_leading("nightly").await.unwrap();
    host.wait_for_log("host environ:", Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", host.log_text()));
    host.wait_for_log("host cmdline:", Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", host.log_text()));
    let log = host.log_text();
    let seen: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("host-pid=") || l.contains(" own ") || l.contains("host "))
        .collect();
    println!(
        "the child as uid {:?}:\n{}",
        user.map(|u| u.0),
        seen.join("\n")
    );
    assert!(
        log.contains(&format!("host-pid={}", host.pid())),
        "the child did not find its host:\n{log}"
    );
    for hidden in [
        "PGPASSWORD",
        "PGPASSFILE",
        "PGSERVICEFILE",
        "PGSSLKEY",
        "PGSSLCERT",
        "LEASEHOLD_DATABASE_URL",
    ] {
        assert!(
            log.contains(&format!("own {hidden}: 0")),
            "{hidden}:\n{log}"
        );
    }
    assert!(log.contains("own PGHOST: 1"), "{log}");
    assert!(log.contains("host environ: refused"), "{log}");
    assert!(log.contains("host cmdline: read"), "{log}");
    assert!(!log.contains(&m), "the password reached the log:\n{log}");
}

/// A URL with a password given with `--database-url`, where every user of the machine reads it
/// (`ps`), is warned about, naming the variable and the config key to use instead, and without
/// the password; the same URL in `LEASEHOLD_DATABASE_URL`, or a URL without a password on the
/// command line, is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_on_the_command_line_is_warned_about_and_one_in_the_variable_is_not() {
    let m = marker();
    let url = format!("postgres://leasehold:{m}@127.0.0.1:1/db");
    let warning = "holds a password, which every user of this machine can read";
    let flag = format!("--database-url={url}");
    let warned: [&[&str]; 4] = [
        &["run", "--database-url", &url, "--http", "127.0.0.1:0"],
        &[
            "exec",
            &flag,
            "--http",
            "127.0.0.1:0",
            "--lease",
            "a",
            "--",
            "true",
        ],
        &["migrate", "--database-url", &url],
        &["leases", "list", "--database-url", &url],
    ];
    for args in warned {
        let shown = run(args, &[]).await;
        let line = shown
            .lines()
            .find(|l| l.contains(warning))
            .unwrap_or_else(|| panic!("leasehold {args:?}: no warning:\n{shown}"));
        assert!(
            line.contains("LEASEHOLD_DATABASE_URL") && line.contains("database_url"),
            "{line}"
        );
        assert!(!shown.contains(&m), "{shown}");
    }
    let by_env = [("LEASEHOLD_DATABASE_URL", url.as_str())];
    let quiet: [(&[&str], Env); 2] = [
        (&["run", "--http", "127.0.0.1:0"], &by_env),
        (
            &[
                "leases",
                "list",
                "--database-url",
                "postgres://leasehold@127.0.0.1:1/db",
            ],
            &[],
        ),
    ];
    for (args, env) in quiet {
        let shown = run(args, env).await;
        assert!(!shown.contains(warning), "leasehold {args:?}:\n{shown}");
    }
}
