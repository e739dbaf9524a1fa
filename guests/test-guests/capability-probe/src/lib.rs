//! An event reconciler that exercises the host's capabilities (`kv`, `sql`, events) for the
//! host's tests.
//!
//! On the first reconcile of a term (tick 0) it runs the check named by the `verb` config key
//! once and logs exactly one summary line at info: `probe VERB ok` (sometimes followed by
//! `: ` and what it saw) or `probe VERB FAILED: ...` naming every sub-check that failed. Later
//! ticks do nothing. Each notification is logged at info as
//! `event channel=C payload=P epoch=E` (`E` from `lease::epoch()`).
//!
//! Verbs:
//! - `kv`: puts, gets, pages through a prefix, deletes, and checks the key and value limits
//!   (a 1025-byte or empty key is `invalid`, a value of 1 MiB + 1 byte is `too-large`, 1 MiB is
//!   accepted); leaves the store as it found it;
//! - `sql`: typed parameters and results, `execute`, an all-or-nothing `transaction`, a
//!   read-only `query`, and the statements the host refuses (transaction control, session
//!   `SET`), on a table `probe_items` it creates;
//! - `limits`: a result beyond `max_rows` (set to 10 by the test) must be `too-large`, and a
//!   statement beyond `statement_timeout` (set short by the test) must fail; logs the kinds;
//! - `not-granted`: with neither grant, `kv` and `sql` must both answer `not-granted`; logs both
//!   messages;
//! - `secrets`: logs everything a plugin can see (environment, arguments, files, the texts of
//!   database errors) so that the test can look for what must not be there; always `ok`;
//! - `slow-write`: leaves a slow write in flight on the sql grant's database. It creates a table
//!   `slow_writes (epoch bigint, written_at timestamptz DEFAULT clock_timestamp())` if missing,
//!   logs `probe slow-write started epoch=E sleep_ms=N`, then runs one `execute` of
//!   `INSERT INTO slow_writes (epoch) SELECT $1::bigint FROM pg_sleep($2::float8)`: the server
//!   sleeps `sleep_ms` (default 1500), then writes the term's epoch. The outcome is logged as
//!   usual (`probe slow-write ok: rows=1 epoch=E` or `FAILED`). A call dropped while the
//!   statement sleeps logs nothing more; whether the row then appears is what the test looks
//!   at. Keep `sleep_ms` under the grant's `statement_timeout` (default 2s), or the server
//!   cancels it;
//! - `idle` (default): nothing (for event tests).

use std::fmt::Debug;

use leasehold_guest::sql::{self, Statement, Value};
use leasehold_guest::{
    CapabilityError, Config, Context, Error, EventHandler, Outcome, Reconciler, info, kv, lease,
    params,
};

const VERBS: &[&str] = &[
    "kv",
    "sql",
    "limits",
    "not-granted",
    "secrets",
    "slow-write",
    "idle",
];

struct Probe {
    verb: String,
    /// `slow-write`: how long the server sleeps before the write.
    sleep_ms: u64,
}

impl Reconciler for Probe {
    fn init(config: Config) -> Result<Self, Error> {
        config.deny_unknown(&["verb", "sleep_ms"])?;
        Ok(Probe {
            verb: config.choice("verb", VERBS, "idle")?.to_string(),
            sleep_ms: config.parse_or("sleep_ms", 1500)?,
        })
    }

    fn reconcile(&mut self, ctx: Context) -> Result<Outcome, Error> {
        if ctx.is_first() {
            let mut checks = Checks::default();
            match self.verb.as_str() {
                "kv" => probe_kv(&mut checks),
                "sql" => probe_sql(&mut checks),
                "limits" => probe_limits(&mut checks),
                "not-granted" => probe_not_granted(&mut checks),
                "secrets" => probe_secrets(&mut checks),
                "slow-write" => probe_slow_write(&mut checks, ctx.epoch(), self.sleep_ms),
                _ => {}
            }
            info!("{}", checks.summary(&self.verb));
        }
        Ok(Outcome::default())
    }
}

impl EventHandler for Probe {
    fn handle_event(&mut self, channel: &str, payload: &str) -> Result<(), Error> {
        let epoch = lease::epoch().map_or_else(|| "none".to_string(), |e| e.to_string());
        info!("event channel={channel} payload={payload} epoch={epoch}");
        Ok(())
    }
}

/// The outcome of one verb: the sub-checks that failed and what was seen.
#[derive(Default)]
struct Checks {
    failed: Vec<String>,
    seen: Vec<String>,
}

impl Checks {
    fn fail(&mut self, what: impl Into<String>) {
        self.failed.push(what.into());
    }

    fn see(&mut self, what: impl Into<String>) {
        self.seen.push(what.into());
    }

    /// `got` must be `Ok`; its value, if so.
    fn ok<T: Debug>(&mut self, what: &str, got: Result<T, CapabilityError>) -> Option<T> {
        match got {
            Ok(v) => Some(v),
            Err(e) => {
                self.fail(format!("{what}: expected success, got {} ({e})", e.kind()));
                None
            }
        }
    }

    /// `got` must be `Ok(want)`.
    fn eq<T: Debug + PartialEq>(&mut self, what: &str, got: Result<T, CapabilityError>, want: T) {
        match got {
            Ok(v) if v == want => {}
            Ok(v) => self.fail(format!("{what}: expected {want:?}, got {v:?}")),
            Err(e) => self.fail(format!("{what}: expected {want:?}, got {} ({e})", e.kind())),
        }
    }

    /// `got` must be an error of `kind`; the error, if so.
    fn err<T: Debug>(
        &mut self,
        what: &str,
        got: Result<T, CapabilityError>,
        kind: &str,
    ) -> Option<CapabilityError> {
        match got {
            Err(e) if e.kind() == kind => Some(e),
            Err(e) => {
                self.fail(format!("{what}: expected {kind}, got {} ({e})", e.kind()));
                None
            }
            Ok(v) => {
                self.fail(format!("{what}: expected {kind}, got Ok({v:?})"));
                None
            }
        }
    }

    fn summary(&self, verb: &str) -> String {
        let seen = self.seen.join(" ");
        match (self.failed.is_empty(), seen.is_empty()) {
            (true, true) => format!("probe {verb} ok"),
            (true, false) => format!("probe {verb} ok: {seen}"),
            (false, true) => format!("probe {verb} FAILED: {}", self.failed.join("; ")),
            (false, false) => format!(
                "probe {verb} FAILED: {} (seen: {seen})",
                self.failed.join("; ")
            ),
        }
    }
}

fn probe_kv(c: &mut Checks) {
    for (key, value) in [("a/1", "one"), ("a/2", "two"), ("b/1", "x")] {
        c.ok(&format!("put {key:?}"), kv::put(key, value));
    }
    c.eq("get \"a/1\"", kv::get("a/1"), Some(b"one".to_vec()));

    match kv::list("a/", None, 1) {
        Err(e) => c.fail(format!("list(\"a/\", None, 1): {} ({e})", e.kind())),
        Ok(first) => {
            let keys: Vec<&str> = first.keys().collect();
            if keys != ["a/1"] || first.next.is_none() {
                c.fail(format!(
                    "list(\"a/\", None, 1): expected [\"a/1\"] and a next page, got {keys:?} next={:?}",
                    first.next
                ));
            } else if first.entries[0].1 != b"one" {
                c.fail(format!(
                    "list(\"a/\", None, 1): value of \"a/1\" is {:?}",
                    String::from_utf8_lossy(&first.entries[0].1)
                ));
            }
            let after = first.next.as_deref();
            match kv::list("a/", after, 1) {
                Err(e) => c.fail(format!("list(\"a/\", {after:?}, 1): {} ({e})", e.kind())),
                Ok(second) => {
                    let keys: Vec<&str> = second.keys().collect();
                    if keys != ["a/2"] || second.next.is_some() {
                        c.fail(format!(
                            "list(\"a/\", {after:?}, 1): expected [\"a/2\"] and no next page, got {keys:?} next={:?}",
                            second.next
                        ));
                    }
                }
            }
        }
    }

    c.eq("first delete \"a/1\"", kv::delete("a/1"), true);
    c.eq("second delete \"a/1\"", kv::delete("a/1"), false);
    c.eq("get \"a/1\" after delete", kv::get("a/1"), None);

    let long_key = "k".repeat(1025);
    c.err(
        "put with a 1025-byte key",
        kv::put(&long_key, "v"),
        "invalid",
    );
    c.err("get with a 1025-byte key", kv::get(&long_key), "invalid");
    c.err("put with an empty key", kv::put("", "v"), "invalid");
    c.err("get with an empty key", kv::get(""), "invalid");

    let too_big = vec![b'x'; (1 << 20) + 1];
    c.err(
        "put of 1 MiB + 1 byte",
        kv::put("big", &too_big),
        "too-large",
    );
    let mib = vec![b'y'; 1 << 20];
    if c.ok("put of 1 MiB", kv::put("big", &mib)).is_some() {
        match kv::get("big") {
            Ok(Some(v)) if v == mib => {}
            Ok(Some(v)) => c.fail(format!("get of the 1 MiB value: {} other bytes", v.len())),
            Ok(None) => c.fail("get of the 1 MiB value: absent"),
            Err(e) => c.fail(format!("get of the 1 MiB value: {} ({e})", e.kind())),
        }
    }

    // Leave the store as it was found.
    for key in ["a/2", "b/1", "big"] {
        c.ok(&format!("clean-up delete {key:?}"), kv::delete(key));
    }
}

fn insert(id: i64, note: &str) -> Statement {
    Statement::new(
        "INSERT INTO probe_items (id, note) VALUES ($1, $2)",
        params![id, note],
    )
}

/// Rows of `probe_items` (with `id`, if given).
fn count(id: Option<i64>) -> Result<i64, CapabilityError> {
    let rows = match id {
        None => sql::query("SELECT count(*) AS n FROM probe_items", params![])?,
        Some(id) => sql::query(
            "SELECT count(*) AS n FROM probe_items WHERE id = $1",
            params![id],
        )?,
    };
    match rows.first() {
        Some(row) => row.get("n"),
        None => Err(CapabilityError::Invalid("count(*) returned no row".into())),
    }
}

fn probe_sql(c: &mut Checks) {
    let typed = "SELECT $1::bigint + 1 AS n, $2::text AS t, NULL::int AS z, $3::bytea AS b, \
                 true AS flag, 1.5::float8 AS f, now() AS ts";
    if let Some(rows) = c.ok(
        "typed query",
        sql::query(typed, params![41, "hi", vec![1u8, 2, 3]]),
    ) {
        let want_columns = ["n", "t", "z", "b", "flag", "f", "ts"];
        if rows.columns() != want_columns {
            c.fail(format!(
                "typed query: columns {:?}, expected {want_columns:?}",
                rows.columns()
            ));
        }
        if rows.len() != 1 {
            c.fail(format!("typed query: {} rows, expected 1", rows.len()));
        }
        if let Some(row) = rows.first() {
            let expect = [
                ("n", Value::Int(42)),
                ("t", Value::Text("hi".into())),
                ("z", Value::Null),
                ("b", Value::Bytes(vec![1, 2, 3])),
                ("flag", Value::Bool(true)),
                ("f", Value::Float(1.5)),
            ];
            for (column, want) in expect {
                match row.value(column) {
                    Some(got) if *got == want => {}
                    got => c.fail(format!(
                        "typed query: {column} is {got:?}, expected {want:?}"
                    )),
                }
            }
            match row.value("ts") {
                Some(Value::Text(ts)) if ts.contains('T') => {}
                got => c.fail(format!(
                    "typed query: ts is {got:?}, expected RFC 3339 text"
                )),
            }
            // The SDK's typed reads of the same row.
            c.eq("typed query: get::<i64>(\"n\")", row.get::<i64>("n"), 42);
            c.eq(
                "typed query: get::<Option<i64>>(\"z\")",
                row.get::<Option<i64>>("z"),
                None,
            );
        }
    }

    c.ok(
        "create probe_items",
        sql::execute(
            "CREATE TABLE IF NOT EXISTS probe_items (id bigint PRIMARY KEY, note text)",
            params![],
        ),
    );
    c.ok(
        "empty probe_items",
        sql::execute("DELETE FROM probe_items", params![]),
    );

    c.err(
        "transaction with a duplicate key",
        sql::transaction(&[insert(1, "a"), insert(1, "dup")]),
        "database",
    );
    c.eq("rows kept by the failed transaction", count(None), 0);
    c.eq(
        "transaction of two inserts",
        sql::transaction(&[insert(1, "a"), insert(2, "b")]),
        vec![1, 1],
    );
    c.err(
        "DELETE through query (read-only)",
        sql::query("DELETE FROM probe_items", params![]),
        "database",
    );
    c.eq("rows after the refused DELETE", count(None), 2);

    for statement in [
        "COMMIT",
        "  /* sneaky */ rollback",
        "BEGIN",
        "SET statement_timeout = 0",
        "savepoint s",
    ] {
        c.err(
            &format!("execute {statement:?}"),
            sql::execute(statement, params![]),
            "invalid",
        );
    }
    c.err(
        "transaction with a COMMIT",
        sql::transaction(&[insert(3, "c"), Statement::new("COMMIT", params![])]),
        "invalid",
    );
    c.eq("row 3 after the refused transaction", count(Some(3)), 0);
    c.ok(
        "execute SET LOCAL",
        sql::execute("SET LOCAL statement_timeout = '1s'", params![]),
    );
}

/// What a call came back with, for the summary: `ok` or the error's kind.
fn kind_of<T>(result: &Result<T, CapabilityError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(e) => e.kind(),
    }
}

fn probe_limits(c: &mut Checks) {
    let rows = sql::query("SELECT g FROM generate_series(1, 20) g", params![]);
    let sleep = sql::query("SELECT pg_sleep(5)", params![]);
    c.see(format!("rows={} sleep={}", kind_of(&rows), kind_of(&sleep)));
    match &rows {
        Err(CapabilityError::TooLarge(m)) => c.see(format!("(rows: {m})")),
        Err(e) => c.fail(format!(
            "20 rows over max_rows: expected too-large, got {} ({e})",
            e.kind()
        )),
        Ok(r) => c.fail(format!(
            "20 rows over max_rows: expected too-large, got {} rows",
            r.len()
        )),
    }
    match &sleep {
        Err(e) => c.see(format!("(sleep: {e})")),
        Ok(_) => c.fail("pg_sleep(5) over statement_timeout: expected an error, got Ok"),
    }
}

fn probe_not_granted(c: &mut Checks) {
    let kv_error = c.err("kv::get(\"x\")", kv::get("x"), "not-granted");
    let sql_error = c.err(
        "sql::query(\"SELECT 1\")",
        sql::query("SELECT 1", params![]),
        "not-granted",
    );
    if let (Some(CapabilityError::NotGranted(k)), Some(CapabilityError::NotGranted(s))) =
        (kv_error, sql_error)
    {
        c.see(format!("kv: {k}; sql: {s}"));
    }
}

fn probe_secrets(c: &mut Checks) {
    let env: Vec<String> = std::env::vars_os()
        .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
        .collect();
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let root = match std::fs::read_dir("/") {
        Ok(entries) => {
            let names: Vec<String> = entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            format!("listed[{}]", names.join(", "))
        }
        Err(e) => format!("denied({e})"),
    };
    let environ = match std::fs::read_to_string("/proc/self/environ") {
        Ok(text) => format!("read({})", text.replace('\0', " ")),
        Err(e) => format!("denied({e})"),
    };
    let sql_error = |statement: &str| match sql::query(statement, params![]) {
        Ok(rows) => format!("no error ({} rows)", rows.len()),
        Err(e) => e.to_string(),
    };
    let missing_table = sql_error("SELECT * FROM no_such_table_xyz");
    let division = sql_error("SELECT 1/0");
    c.see(format!(
        "env=[{}] args=[{}] fs=read_dir(/):{root} /proc/self/environ:{environ} sqlerr=[{missing_table}] [{division}]",
        env.join(", "),
        args.join(", "),
    ));
}

/// One write that the server holds back for `sleep_ms` (see the crate docs).
fn probe_slow_write(c: &mut Checks, epoch: u64, sleep_ms: u64) {
    let created = c.ok(
        "create slow_writes",
        sql::execute(
            "CREATE TABLE IF NOT EXISTS slow_writes (\
                 epoch bigint NOT NULL, \
                 written_at timestamptz NOT NULL DEFAULT clock_timestamp())",
            params![],
        ),
    );
    if created.is_none() {
        return;
    }
    info!("probe slow-write started epoch={epoch} sleep_ms={sleep_ms}");
    let epoch = i64::try_from(epoch).unwrap_or(i64::MAX);
    let seconds = sleep_ms as f64 / 1000.0;
    let written = sql::execute(
        "INSERT INTO slow_writes (epoch) SELECT $1::bigint FROM pg_sleep($2::float8)",
        params![epoch, seconds],
    );
    if let Some(rows) = c.ok("insert after pg_sleep", written) {
        c.see(format!("rows={rows} epoch={epoch}"));
    }
}

leasehold_guest::export_event_reconciler!(Probe);
