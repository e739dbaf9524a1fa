//! Unit-test a plugin natively, with `cargo test`, against fakes of the host.
//!
//! A [`Fake`] installs a fake host on the current thread until it is dropped: while it lives,
//! [`lease`](crate::lease), [`kv`](crate::kv), [`sql`](crate::sql) and [`log`](crate::log) answer
//! from it instead of failing. Each test builds its own (cargo runs tests on several threads,
//! and the state of one test never leaks into the next), then calls the plugin's trait methods
//! directly:
//!
//! ```
//! use leasehold_guest::testing::{self, Fake};
//! use leasehold_guest::log::Level;
//! use leasehold_guest::{info, kv, Config, Context, Error, Outcome, Reconciler};
//!
//! struct Counter;
//!
//! impl Reconciler for Counter {
//!     fn init(_config: Config) -> Result<Self, Error> {
//!         Ok(Counter)
//!     }
//!
//!     fn reconcile(&mut self, ctx: Context) -> Result<Outcome, Error> {
//!         let n: u64 = kv::get_string("n")?.unwrap_or_default().parse().unwrap_or(0);
//!         kv::put("n", (n + 1).to_string())?;
//!         info!("epoch {} counted {}", ctx.epoch(), n + 1);
//!         Ok(Outcome::default())
//!     }
//! }
//!
//! let fake = Fake::new().holding("leader", 7);
//! fake.kv_set("n", "41");
//! let mut counter = Counter::init(testing::config([("step", "1")]))?;
//! counter.reconcile(fake.context(0))?;
//! assert_eq!(fake.kv_get_string("n").as_deref(), Some("42"));
//! assert_eq!(fake.logs_at(Level::Info), ["epoch 7 counted 42"]);
//!
//! // A fenced write refused: the error reaches the host as the call's failure.
//! fake.lose_lease();
//! let e = counter.reconcile(fake.context(1)).unwrap_err();
//! assert!(e.is_lease_lost());
//! # Ok::<(), Error>(())
//! ```
//!
//! Without a `Fake`, the capabilities of a native build behave as documented in the crate root:
//! [`lease`](crate::lease) as a replica without the lease, [`kv`](crate::kv) and
//! [`sql`](crate::sql) calls fail with [`CapabilityError::Unavailable`], and log lines go to
//! stderr only.
//!
//! This module exists only outside WebAssembly builds: a plugin built for the host always talks
//! to the host.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::marker::PhantomData;
use std::time::{Duration, SystemTime};

use crate::kv::{MAX_KEY_BYTES, MAX_LIST_LIMIT, MAX_VALUE_BYTES, Page};
use crate::lease::Shard;
use crate::log::Level;
use crate::sql::{Rows, Statement, Value};
use crate::{CapabilityError, Config, Context};

thread_local! {
    /// The fake host of this thread, while a [`Fake`] is alive.
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

/// Runs `f` on this thread's fake host; `None` when no [`Fake`] is installed.
pub(crate) fn with_fake<R>(f: impl FnOnce(&mut State) -> R) -> Option<R> {
    // `try_with`: a log line from a thread-local destructor must not panic.
    STATE
        .try_with(|state| state.borrow_mut().as_mut().map(f))
        .ok()
        .flatten()
}

/// A config from key-value pairs, for calling a plugin's `init` in a test (the same as
/// [`Config::from_iter`]).
pub fn config<K: Into<String>, V: Into<String>>(pairs: impl IntoIterator<Item = (K, V)>) -> Config {
    pairs.into_iter().collect()
}

/// The lease as the fake host reports it: what the functions of [`lease`](crate::lease) return.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeLease {
    /// [`lease::name`](crate::lease::name); `"leader"` unless set.
    pub name: String,
    /// [`lease::holder`](crate::lease::holder); `"fake-holder"` unless set.
    pub holder: String,
    /// [`lease::epoch`](crate::lease::epoch); `None` (not held) unless set.
    pub epoch: Option<u64>,
    /// [`lease::acquired_at`](crate::lease::acquired_at).
    pub acquired_at: Option<SystemTime>,
    /// [`lease::time_left`](crate::lease::time_left).
    pub time_left: Option<Duration>,
    /// [`lease::shard`](crate::lease::shard).
    pub shard: Option<Shard>,
}

impl Default for FakeLease {
    fn default() -> Self {
        FakeLease {
            name: "leader".into(),
            holder: "fake-holder".into(),
            epoch: None,
            acquired_at: None,
            time_left: None,
            shard: None,
        }
    }
}

/// One line logged while a [`Fake`] was installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// Its level.
    pub level: Level,
    /// Its text.
    pub message: String,
}

/// Which function of [`sql`](crate::sql) a [`SqlCall`] was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqlOp {
    /// [`sql::query`](crate::sql::query).
    Query,
    /// [`sql::execute`](crate::sql::execute).
    Execute,
    /// [`sql::transaction`](crate::sql::transaction).
    Transaction,
}

/// One call to [`sql`](crate::sql) as the fake received it.
#[derive(Debug, Clone, PartialEq)]
pub struct SqlCall {
    /// Which function was called.
    pub op: SqlOp,
    /// Its statements with their parameters: one for a query or an execute.
    pub statements: Vec<Statement>,
}

impl SqlCall {
    /// The SQL of the first statement.
    pub fn sql(&self) -> &str {
        self.statements.first().map_or("", Statement::sql)
    }

    /// The parameters of the first statement.
    pub fn params(&self) -> &[Value] {
        self.statements.first().map_or(&[], Statement::params)
    }
}

/// A scripted answer of the fake [`sql`](crate::sql), queued with [`Fake::sql_answer`].
///
/// Converts from [`Rows`], `u64`, `Vec<u64>` and [`CapabilityError`] with `.into()`.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlAnswer {
    /// The rows of a [`sql::query`](crate::sql::query).
    Rows(Rows),
    /// The affected-row count of a [`sql::execute`](crate::sql::execute).
    Count(u64),
    /// The counts of a [`sql::transaction`](crate::sql::transaction), one per statement.
    Counts(Vec<u64>),
    /// A failure, for any of the three.
    Error(CapabilityError),
}

impl From<Rows> for SqlAnswer {
    fn from(rows: Rows) -> Self {
        SqlAnswer::Rows(rows)
    }
}

impl From<u64> for SqlAnswer {
    fn from(count: u64) -> Self {
        SqlAnswer::Count(count)
    }
}

impl From<Vec<u64>> for SqlAnswer {
    fn from(counts: Vec<u64>) -> Self {
        SqlAnswer::Counts(counts)
    }
}

impl From<CapabilityError> for SqlAnswer {
    fn from(error: CapabilityError) -> Self {
        SqlAnswer::Error(error)
    }
}

/// The fake host of one thread; see [`Fake`].
#[derive(Debug, Default)]
pub(crate) struct State {
    lease: FakeLease,
    /// Set by [`Fake::lose_lease`]: fenced writes answer `LeaseLost`.
    lease_lost: bool,
    kv_granted: bool,
    kv: BTreeMap<String, Vec<u8>>,
    kv_read_error: Option<CapabilityError>,
    kv_write_error: Option<CapabilityError>,
    sql_granted: bool,
    sql_answers: VecDeque<SqlAnswer>,
    sql_calls: Vec<SqlCall>,
    logs: Vec<LogLine>,
}

impl State {
    pub(crate) fn lease(&self) -> &FakeLease {
        &self.lease
    }

    pub(crate) fn log(&mut self, level: Level, message: &str) {
        self.logs.push(LogLine {
            level,
            message: message.to_string(),
        });
    }

    fn kv_read(&self) -> Result<(), CapabilityError> {
        if !self.kv_granted {
            return Err(not_granted("kv", "[grants] kv = true"));
        }
        self.kv_read_error.clone().map_or(Ok(()), Err)
    }

    /// The checks of a write, in the host's order: grant, key, size, injected failure, fence.
    fn kv_write(&self, key: &str, value_len: usize) -> Result<(), CapabilityError> {
        if !self.kv_granted {
            return Err(not_granted("kv", "[grants] kv = true"));
        }
        check_key(key)?;
        if value_len > MAX_VALUE_BYTES {
            return Err(CapabilityError::TooLarge(format!(
                "kv value of {value_len} bytes: the limit is {MAX_VALUE_BYTES}"
            )));
        }
        if let Some(e) = &self.kv_write_error {
            return Err(e.clone());
        }
        if self.lease_lost {
            return Err(CapabilityError::LeaseLost);
        }
        Ok(())
    }

    pub(crate) fn kv_get(&self, key: &str) -> Result<Option<Vec<u8>>, CapabilityError> {
        self.kv_read()?;
        check_key(key)?;
        Ok(self.kv.get(key).cloned())
    }

    pub(crate) fn kv_put(&mut self, key: &str, value: &[u8]) -> Result<(), CapabilityError> {
        self.kv_write(key, value.len())?;
        self.kv.insert(key.to_string(), value.to_vec());
        Ok(())
    }

    pub(crate) fn kv_delete(&mut self, key: &str) -> Result<bool, CapabilityError> {
        self.kv_write(key, 0)?;
        Ok(self.kv.remove(key).is_some())
    }

    pub(crate) fn kv_list(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Page, CapabilityError> {
        self.kv_read()?;
        let limit = limit.clamp(1, MAX_LIST_LIMIT) as usize;
        let mut matching = self
            .kv
            .iter()
            .filter(|(k, _)| k.starts_with(prefix) && after.is_none_or(|a| k.as_str() > a));
        let entries: Vec<(String, Vec<u8>)> = matching
            .by_ref()
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let next = match matching.next() {
            Some(_) => entries.last().map(|(k, _)| k.clone()),
            None => None,
        };
        Ok(Page { entries, next })
    }

    /// Records the call, then answers it: not granted, lease lost (fenced writes), the next
    /// scripted answer, or the default (no rows, zero counts).
    pub(crate) fn sql(&mut self, op: SqlOp, statements: &[Statement]) -> SqlAnswer {
        self.sql_calls.push(SqlCall {
            op,
            statements: statements.to_vec(),
        });
        if !self.sql_granted {
            return SqlAnswer::Error(not_granted("sql", "[grants.sql]"));
        }
        if self.lease_lost && op != SqlOp::Query {
            return SqlAnswer::Error(CapabilityError::LeaseLost);
        }
        let answer = self.sql_answers.pop_front().unwrap_or(match op {
            SqlOp::Query => SqlAnswer::Rows(Rows::default()),
            SqlOp::Execute => SqlAnswer::Count(0),
            SqlOp::Transaction => SqlAnswer::Counts(vec![0; statements.len()]),
        });
        let fits = matches!(
            (op, &answer),
            (_, SqlAnswer::Error(_))
                | (SqlOp::Query, SqlAnswer::Rows(_))
                | (SqlOp::Execute, SqlAnswer::Count(_))
                | (SqlOp::Transaction, SqlAnswer::Counts(_))
        );
        // A test that scripted the wrong kind of answer is wrong: say so at once.
        assert!(
            fits,
            "testing::Fake: the next scripted sql answer is {answer:?}, which cannot answer a \
             {op:?} of {:?}",
            statements.first().map(Statement::sql).unwrap_or_default()
        );
        answer
    }
}

/// The host's refusal when the manifest lacks a grant.
fn not_granted(capability: &str, key: &str) -> CapabilityError {
    CapabilityError::NotGranted(format!(
        "{capability} is not granted: add {key} to the plugin's manifest"
    ))
}

/// The host's checks of a kv key.
fn check_key(key: &str) -> Result<(), CapabilityError> {
    if key.is_empty() {
        Err(CapabilityError::Invalid("kv key is empty".into()))
    } else if key.len() > MAX_KEY_BYTES {
        Err(CapabilityError::Invalid(format!(
            "kv key of {} bytes: the limit is {MAX_KEY_BYTES}",
            key.len()
        )))
    } else if key.contains('\0') {
        Err(CapabilityError::Invalid(
            "kv key contains a NUL character".into(),
        ))
    } else {
        Ok(())
    }
}

/// A fake host for the current thread, installed by [`Fake::new`] and removed when dropped.
///
/// It starts as a replica that does not hold its lease (named `"leader"`, holder
/// `"fake-holder"`), with `kv` and `sql` granted, an empty kv store, no scripted sql answers and
/// no log lines. Set up the lease with the builder methods ([`holding`](Fake::holding),
/// [`time_left`](Fake::time_left), ...); everything else (kv contents, injected failures, sql
/// answers, and reading back what the plugin did) goes through `&self` methods, at any point of
/// the test.
///
/// - **lease**: the functions of [`lease`](crate::lease) return the [`FakeLease`]; it does not
///   count down or expire by itself. [`Fake::lose_lease`] makes fenced writes fail.
/// - **kv**: an in-memory store with the host's key and value checks and byte-ordered, paged
///   listings (quotas are not enforced). Writes are refused with [`Fake::fail_kv_writes`]'s
///   error, or with `LeaseLost` after [`Fake::lose_lease`].
/// - **sql**: no database: every call is recorded ([`Fake::sql_calls`]) and answered with the
///   next answer queued by [`Fake::sql_answer`], or else with no rows / zero counts. After
///   [`Fake::lose_lease`], `execute` and `transaction` answer `LeaseLost` (as when the grant
///   reaches the lease database).
/// - **log**: lines are kept ([`Fake::logs`]) and still printed to stderr, which `cargo test`
///   shows for failing tests.
///
/// One `Fake` per thread at a time: creating a second while the first lives panics.
#[derive(Debug)]
pub struct Fake {
    /// The state is per thread: keep the guard on its thread.
    _not_send: PhantomData<*const ()>,
}

impl Fake {
    /// Installs a fake host on this thread.
    ///
    /// # Panics
    ///
    /// If this thread already has one.
    #[allow(clippy::new_without_default)] // installing global state is not a default value
    pub fn new() -> Fake {
        STATE.with(|state| {
            let mut state = state.borrow_mut();
            assert!(
                state.is_none(),
                "a testing::Fake is already installed on this thread: drop it first"
            );
            *state = Some(State {
                kv_granted: true,
                sql_granted: true,
                ..State::default()
            });
        });
        Fake {
            _not_send: PhantomData,
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        with_fake(f).expect("the testing::Fake of this thread is installed while it lives")
    }

    /// This replica holds the lease `lease` at `epoch`; acquired now, with 10 s left, unless
    /// set otherwise.
    pub fn holding(self, lease: impl Into<String>, epoch: u64) -> Fake {
        self.update_lease(|l| {
            l.name = lease.into();
            l.epoch = Some(epoch);
            l.acquired_at.get_or_insert_with(SystemTime::now);
            l.time_left.get_or_insert(Duration::from_secs(10));
        });
        self
    }

    /// This replica's holder id, what [`lease::holder`](crate::lease::holder) returns.
    pub fn holder(self, holder: impl Into<String>) -> Fake {
        self.update_lease(|l| l.holder = holder.into());
        self
    }

    /// When the lease was acquired.
    pub fn acquired_at(self, at: SystemTime) -> Fake {
        self.update_lease(|l| l.acquired_at = Some(at));
        self
    }

    /// How long the lease has left.
    pub fn time_left(self, left: Duration) -> Fake {
        self.update_lease(|l| l.time_left = Some(left));
        self
    }

    /// The plugin runs for shard `index` of `count` of the lease group `group` (set its lease,
    /// `group/index` in a host, with [`holding`](Fake::holding)).
    pub fn shard(self, group: impl Into<String>, index: u32, count: u32) -> Fake {
        self.update_lease(|l| {
            l.shard = Some(Shard {
                group: group.into(),
                index,
                count,
            })
        });
        self
    }

    /// The manifest does not grant kv: every kv call answers
    /// [`CapabilityError::NotGranted`].
    pub fn without_kv(self) -> Fake {
        self.with(|s| s.kv_granted = false);
        self
    }

    /// The manifest does not grant sql: every sql call answers
    /// [`CapabilityError::NotGranted`] (and is still recorded).
    pub fn without_sql(self) -> Fake {
        self.with(|s| s.sql_granted = false);
        self
    }

    /// The lease as the fake reports it now.
    pub fn lease(&self) -> FakeLease {
        self.with(|s| s.lease.clone())
    }

    /// Changes the lease, e.g. `fake.update_lease(|l| l.time_left = Some(Duration::ZERO))`.
    pub fn update_lease(&self, change: impl FnOnce(&mut FakeLease)) {
        // Changed outside the borrow, so that `change` may call the SDK.
        let mut lease = self.lease();
        change(&mut lease);
        self.with(|s| s.lease = lease);
    }

    /// Another replica has taken the lease, and this one does not know yet: the lease functions
    /// answer as before, but every fenced write (kv `put` and `delete`, sql `execute` and
    /// `transaction`) now fails with [`CapabilityError::LeaseLost`] and changes nothing.
    pub fn lose_lease(&self) {
        self.with(|s| s.lease_lost = true);
    }

    /// A [`Context`] for a `reconcile` call at `tick`, with the fake lease's name and epoch.
    ///
    /// # Panics
    ///
    /// If the fake does not hold a lease (see [`holding`](Fake::holding)): a host only calls
    /// `reconcile` on the holder. Build other contexts with [`Context::new`].
    pub fn context(&self, tick: u64) -> Context {
        let lease = self.lease();
        let epoch = lease.epoch.expect(
            "Fake::context needs a held lease: Fake::new().holding(name, epoch), or Context::new",
        );
        Context::new(lease.name, epoch, tick)
    }

    /// Sets `key` to `value` in the fake kv store, bypassing every check (to seed it).
    pub fn kv_set(&self, key: impl Into<String>, value: impl AsRef<[u8]>) {
        self.with(|s| s.kv.insert(key.into(), value.as_ref().to_vec()));
    }

    /// The value of `key` in the fake kv store.
    pub fn kv_get(&self, key: &str) -> Option<Vec<u8>> {
        self.with(|s| s.kv.get(key).cloned())
    }

    /// The value of `key` in the fake kv store as text (invalid UTF-8 replaced by `�`).
    pub fn kv_get_string(&self, key: &str) -> Option<String> {
        self.kv_get(key)
            .map(|v| String::from_utf8_lossy(&v).into_owned())
    }

    /// Every entry of the fake kv store, in key order.
    pub fn kv_entries(&self) -> BTreeMap<String, Vec<u8>> {
        self.with(|s| s.kv.clone())
    }

    /// From now on every kv write (`put`, `delete`) with a valid key and value fails with
    /// `error` and changes nothing, e.g. [`CapabilityError::LeaseLost`] or
    /// [`CapabilityError::TooLarge`] for a full quota; `None` lets writes through again.
    pub fn fail_kv_writes(&self, error: impl Into<Option<CapabilityError>>) {
        let error = error.into();
        self.with(|s| s.kv_write_error = error);
    }

    /// From now on every kv read (`get`, `list`) fails with `error`, e.g.
    /// [`CapabilityError::Unavailable`]; `None` lets reads through again.
    pub fn fail_kv_reads(&self, error: impl Into<Option<CapabilityError>>) {
        let error = error.into();
        self.with(|s| s.kv_read_error = error);
    }

    /// Queues the answer to the next sql call that has none yet: [`Rows`] for a `query`, a
    /// count for an `execute`, a `Vec` of counts for a `transaction`, or a [`CapabilityError`]
    /// for any of them. A call answered with the wrong kind panics.
    ///
    /// ```
    /// use leasehold_guest::sql::{self, Rows, Value};
    /// use leasehold_guest::testing::{Fake, SqlOp};
    /// use leasehold_guest::{params, CapabilityError};
    ///
    /// let fake = Fake::new();
    /// fake.sql_answer(Rows::new(vec!["n".into()], vec![vec![Value::Int(3)]]));
    /// fake.sql_answer(CapabilityError::Database("deadlock detected (SQLSTATE 40P01)".into()));
    ///
    /// let rows = sql::query("SELECT n FROM t WHERE id = $1", params![7]).unwrap();
    /// assert_eq!(rows.first().unwrap().get::<i64>("n").unwrap(), 3);
    /// assert_eq!(sql::execute("DELETE FROM t", params![]).unwrap_err().kind(), "database");
    /// assert_eq!(sql::execute("DELETE FROM t", params![]).unwrap(), 0); // nothing queued
    ///
    /// let calls = fake.sql_calls();
    /// assert_eq!(calls[0].op, SqlOp::Query);
    /// assert_eq!(calls[0].params(), &[Value::Int(7)]);
    /// assert_eq!(calls[2].sql(), "DELETE FROM t");
    /// ```
    pub fn sql_answer(&self, answer: impl Into<SqlAnswer>) {
        let answer = answer.into();
        self.with(|s| s.sql_answers.push_back(answer));
    }

    /// Every sql call so far, in order.
    pub fn sql_calls(&self) -> Vec<SqlCall> {
        self.with(|s| s.sql_calls.clone())
    }

    /// Every line logged so far, in order.
    pub fn logs(&self) -> Vec<LogLine> {
        self.with(|s| s.logs.clone())
    }

    /// The texts of the lines logged so far at `level`, in order.
    pub fn logs_at(&self, level: Level) -> Vec<String> {
        self.with(|s| {
            s.logs
                .iter()
                .filter(|l| l.level == level)
                .map(|l| l.message.clone())
                .collect()
        })
    }

    /// Every line logged so far, forgetting them (to look at one call at a time).
    pub fn take_logs(&self) -> Vec<LogLine> {
        self.with(|s| std::mem::take(&mut s.logs))
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        // `try_with`: the thread may be shutting down.
        let _ = STATE.try_with(|state| state.borrow_mut().take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql;
    use crate::{kv, lease, params};
    use std::time::UNIX_EPOCH;

    #[test]
    fn lease_answers_from_the_fake() {
        let at = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let fake = Fake::new()
            .holding("orders/3", 7)
            .holder("replica-a")
            .acquired_at(at)
            .time_left(Duration::from_millis(2500))
            .shard("orders", 3, 8);
        assert_eq!(lease::name(), "orders/3");
        assert_eq!(lease::holder(), "replica-a");
        assert_eq!(lease::epoch(), Some(7));
        assert!(lease::is_held());
        assert_eq!(lease::acquired_at(), Some(at));
        assert_eq!(lease::time_left(), Some(Duration::from_millis(2500)));
        assert_eq!(
            lease::shard(),
            Some(Shard {
                group: "orders".into(),
                index: 3,
                count: 8
            })
        );
        assert_eq!(fake.context(4), Context::new("orders/3", 7, 4));

        fake.update_lease(|l| {
            l.epoch = None;
            l.time_left = None;
        });
        assert!(!lease::is_held());
        assert_eq!(lease::time_left(), None);
    }

    #[test]
    fn a_new_fake_holds_nothing_and_holding_has_defaults() {
        let fake = Fake::new();
        assert_eq!(lease::name(), "leader");
        assert_eq!(lease::holder(), "fake-holder");
        assert_eq!(lease::epoch(), None);
        assert_eq!(lease::acquired_at(), None);
        assert_eq!(lease::time_left(), None);
        assert_eq!(lease::shard(), None);
        drop(fake);
        let _fake = Fake::new().holding("leader", 1);
        assert_eq!(lease::time_left(), Some(Duration::from_secs(10)));
        assert!(lease::acquired_at().is_some());
    }

    #[test]
    #[should_panic(expected = "already installed")]
    fn one_fake_per_thread() {
        let _a = Fake::new();
        let _b = Fake::new();
    }

    #[test]
    #[should_panic(expected = "needs a held lease")]
    fn context_needs_a_held_lease() {
        Fake::new().context(0);
    }

    #[test]
    fn dropping_the_fake_restores_the_off_target_behaviour() {
        {
            let fake = Fake::new().holding("leader", 3);
            kv::put("k", "v").unwrap();
            assert_eq!(fake.kv_get_string("k").as_deref(), Some("v"));
        }
        assert_eq!(lease::epoch(), None);
        assert_eq!(lease::name(), "");
        assert_eq!(kv::get("k").unwrap_err().kind(), "unavailable");
        let fake = Fake::new();
        assert_eq!(kv::get("k"), Ok(None), "a new fake starts empty");
        assert!(fake.kv_entries().is_empty());
    }

    #[test]
    fn kv_store_and_listing() {
        let fake = Fake::new().holding("leader", 1);
        for key in ["a/2", "a/10", "b", "a/1"] {
            kv::put(key, key.to_uppercase()).unwrap();
        }
        fake.kv_set("bin", [0xffu8, 0]);
        assert_eq!(kv::get_string("a/1"), Ok(Some("A/1".into())));
        assert_eq!(kv::get("zzz"), Ok(None));
        assert_eq!(kv::get_string("bin").unwrap_err().kind(), "invalid");
        assert_eq!(fake.kv_get("bin"), Some(vec![0xff, 0]));

        let first = kv::list("a/", None, 2).unwrap();
        assert_eq!(first.keys().collect::<Vec<_>>(), ["a/1", "a/10"]);
        assert_eq!(first.next.as_deref(), Some("a/10"));
        let second = kv::list("a/", first.next.as_deref(), 2).unwrap();
        assert_eq!(second.keys().collect::<Vec<_>>(), ["a/2"]);
        assert!(second.is_last());
        let all: Vec<String> = kv::list_all("").map(|e| e.unwrap().0).collect();
        assert_eq!(all, ["a/1", "a/10", "a/2", "b", "bin"]);

        assert_eq!(kv::delete("b"), Ok(true));
        assert_eq!(kv::delete("b"), Ok(false));
        assert_eq!(
            fake.kv_entries().keys().collect::<Vec<_>>(),
            ["a/1", "a/10", "a/2", "bin"]
        );

        assert_eq!(kv::put("", "v").unwrap_err().kind(), "invalid");
        assert_eq!(kv::get(&"k".repeat(1025)).unwrap_err().kind(), "invalid");
        let big = vec![0u8; MAX_VALUE_BYTES + 1];
        assert_eq!(kv::put("big", &big).unwrap_err().kind(), "too-large");
        kv::put("big", &big[1..]).unwrap();
    }

    #[test]
    fn kv_failures_on_demand() {
        let fake = Fake::new().holding("leader", 1);
        kv::put("k", "1").unwrap();
        fake.fail_kv_writes(CapabilityError::LeaseLost);
        assert_eq!(kv::put("k", "2"), Err(CapabilityError::LeaseLost));
        assert_eq!(kv::delete("k"), Err(CapabilityError::LeaseLost));
        assert_eq!(
            kv::get_string("k"),
            Ok(Some("1".into())),
            "reads still work"
        );
        fake.fail_kv_writes(None);
        kv::put("k", "3").unwrap();

        fake.fail_kv_reads(CapabilityError::Unavailable("timeout".into()));
        assert_eq!(kv::get("k").unwrap_err().kind(), "unavailable");
        assert_eq!(kv::list("", None, 10).unwrap_err().kind(), "unavailable");
        let mut all = kv::list_all("");
        assert!(all.next().unwrap().is_err());
        assert!(all.next().is_none());
        fake.fail_kv_reads(None);

        fake.lose_lease();
        assert!(kv::put("k", "4").unwrap_err().is_lease_lost());
        assert_eq!(fake.kv_get_string("k").as_deref(), Some("3"));
        assert_eq!(lease::epoch(), Some(1), "this replica does not know yet");
    }

    #[test]
    fn grants_can_be_withheld() {
        let fake = Fake::new().without_kv().without_sql();
        let e = kv::get("k").unwrap_err();
        assert_eq!(
            e,
            CapabilityError::NotGranted(
                "kv is not granted: add [grants] kv = true to the plugin's manifest".into()
            )
        );
        assert_eq!(kv::put("k", "v").unwrap_err().kind(), "not-granted");
        let e = sql::query("SELECT 1", params![]).unwrap_err();
        assert_eq!(e.kind(), "not-granted");
        assert!(e.to_string().contains("[grants.sql]"), "{e}");
        assert_eq!(fake.sql_calls().len(), 1);
    }

    #[test]
    fn sql_records_and_answers() {
        let fake = Fake::new().holding("leader", 1);
        assert_eq!(sql::query("SELECT 1", params![]), Ok(Rows::default()));
        assert_eq!(sql::execute("UPDATE t SET a = $1", params![5]), Ok(0));
        let statements = [
            Statement::new("INSERT INTO t VALUES ($1)", params![1]),
            Statement::new("DELETE FROM t WHERE a = $1", params!["x"]),
        ];
        assert_eq!(sql::transaction(&statements), Ok(vec![0, 0]));

        fake.sql_answer(3);
        fake.sql_answer(vec![1, 2]);
        fake.sql_answer(CapabilityError::Unavailable("timeout".into()));
        assert_eq!(sql::execute("UPDATE t SET a = 1", params![]), Ok(3));
        assert_eq!(sql::transaction(&statements), Ok(vec![1, 2]));
        assert_eq!(
            sql::query("SELECT 2", params![]).unwrap_err().kind(),
            "unavailable"
        );

        fake.lose_lease();
        let rows = Rows::new(vec!["n".into()], vec![vec![Value::Int(1)]]);
        fake.sql_answer(rows.clone());
        assert_eq!(
            sql::execute("UPDATE t SET a = 1", params![]),
            Err(CapabilityError::LeaseLost)
        );
        assert_eq!(
            sql::transaction(&statements),
            Err(CapabilityError::LeaseLost)
        );
        // Refused writes leave the queue alone: the query gets the rows.
        assert_eq!(sql::query("SELECT 3", params![]), Ok(rows));

        let calls = fake.sql_calls();
        let ops: Vec<SqlOp> = calls.iter().map(|c| c.op).collect();
        use SqlOp::*;
        assert_eq!(
            ops,
            [
                Query,
                Execute,
                Transaction,
                Execute,
                Transaction,
                Query,
                Execute,
                Transaction,
                Query
            ]
        );
        assert_eq!(calls[1].sql(), "UPDATE t SET a = $1");
        assert_eq!(calls[1].params(), &[Value::Int(5)]);
        assert_eq!(calls[2].statements, statements);
    }

    #[test]
    #[should_panic(expected = "cannot answer a Query")]
    fn a_mismatched_answer_panics() {
        let fake = Fake::new();
        fake.sql_answer(1);
        let _ = sql::query("SELECT 1", params![]);
    }

    #[test]
    fn logs_are_captured_per_fake() {
        let fake = Fake::new();
        crate::info!("one {}", 1);
        crate::log::warn("two");
        assert_eq!(fake.logs_at(Level::Info), ["one 1"]);
        assert_eq!(
            fake.take_logs(),
            [
                LogLine {
                    level: Level::Info,
                    message: "one 1".into()
                },
                LogLine {
                    level: Level::Warn,
                    message: "two".into()
                },
            ]
        );
        assert!(fake.logs().is_empty());
    }

    #[test]
    fn config_helper() {
        let c = config([("a", "1"), ("b", "x")]);
        assert_eq!(c.get("a"), Some("1"));
        assert_eq!(c.len(), 2);
        let pairs: Vec<(String, String)> = vec![("k".into(), "v".into())];
        assert_eq!(config(pairs).get("k"), Some("v"));
    }
}
