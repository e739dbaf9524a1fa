//! A reconciler that misbehaves on demand, for testing how the host contains a bad plugin.
//!
//! Config:
//! - `verb`: what to do (default `"ok"`):
//!   - `ok`: return `Ok` (on the manifest's schedule);
//!   - `loop`: spin forever without calling the host;
//!   - `alloc`: allocate (and write to) memory without bound;
//!   - `recurse`: recurse without bound until the stack overflows; with `frame = "large"`
//!     (default) each frame keeps a buffer on Rust's stack, which lives in linear memory, and
//!     the call ends with an out-of-bounds memory access; with `frame = "small"` frames hold
//!     only WebAssembly locals and the call ends when the engine's stack limit is reached;
//!   - `trap`: execute `unreachable`;
//!   - `panic`: `panic!("misbehave: deliberate panic")` (the message goes to stderr and the log);
//!   - `sleep`: block in `std::thread::sleep` for `ms` milliseconds (default 60000);
//!   - `log-flood`: write `lines` lines (default 1,000,000) through the host's log;
//!   - `print`: write `lines` lines (default 100,000, about 10 MB) to stdout and as many to
//!     stderr, and return `Err` naming the first write that failed (a host must take whatever
//!     a guest prints without failing its writes, as `println!` panics on a failed write);
//!   - `fail`: return `Err("deliberate failure")`;
//!   - `requeue`: return `Ok`, asking for the next call after `ms` milliseconds (default 1000);
//!   - `kv-flood`: put `lines` keys (default 1,000,000) of `bytes` bytes each (default 1024)
//!     into kv (needs `[grants] kv = true`) and return `Err` with the first refusal; `Ok` only
//!     if every put was kept;
//!   - `escape`: try to leave the sandbox — list `/`, read `/etc/passwd`, read the environment and
//!     the arguments — and return `Err` naming whatever worked;
//!   - `random-flood`: ask `wasi:random` for 4 KiB (which must work), then for `mib` MiB
//!     (default 64) in one call; returns `Err` if the host hands the large one over;
//!   - `handle-flood`: create `count` (default 1,000,000) host resources
//!     (`wasi:sockets/instance-network`, which needs no grant) and keep every handle; returns
//!     `Err` if the host lets them all be created;
//!   - `big-params`: send one `sql` query whose `copies` (default 8) text parameters all alias one
//!     string of `mib` MiB (default 60) in guest memory, so the guest pays for it once and the
//!     host for every copy; returns `Err` with the host's answer (needs `[grants.sql]`, and a
//!     `limits.memory` above `mib`);
//!   - `null-rows`: `sql` query 10,000 rows of 1,664 NULL columns (PostgreSQL's most), a result
//!     of a few bytes per value on the wire; returns `Err` with the host's answer (needs
//!     `[grants.sql]`);
//! - `when`: `"reconcile"` (default) or `"init"`: where the verb runs; in `reconcile` mode `init`
//!   returns `Ok` and vice versa;
//! - `from_tick`: in `reconcile` mode, behave (`ok`) on ticks before this one (default 0).

use std::hint::black_box;
use std::io::Write;
use std::time::Duration;

use leasehold_guest::{Config, Context, Error, Outcome, Reconciler, info, kv, lease};

mod attacks;

const VERBS: &[&str] = &[
    "ok",
    "loop",
    "alloc",
    "recurse",
    "trap",
    "panic",
    "sleep",
    "log-flood",
    "print",
    "fail",
    "escape",
    "requeue",
    "fail-long",
    "random-flood",
    "handle-flood",
    "big-params",
    "null-rows",
    "kv-flood",
];

struct Misbehave {
    verb: String,
    in_init: bool,
    from_tick: u64,
    /// Acts on every `every`-th tick only (tick 0, every, 2·every, …), and returns fine between:
    /// a plugin that fails every other call with `every = 2`.
    every: u64,
    ms: Option<u64>,
    lines: Option<u64>,
    small_frames: bool,
    mib: Option<u64>,
    count: Option<u64>,
    copies: Option<u64>,
    bytes: Option<usize>,
}

impl Reconciler for Misbehave {
    fn init(config: Config) -> Result<Self, Error> {
        config.deny_unknown(&[
            "verb",
            "when",
            "from_tick",
            "every",
            "ms",
            "lines",
            "frame",
            "mib",
            "count",
            "copies",
            "bytes",
        ])?;
        let plugin = Misbehave {
            verb: config.choice("verb", VERBS, "ok")?.to_string(),
            in_init: config.choice("when", &["reconcile", "init"], "reconcile")? == "init",
            from_tick: config.parse_or("from_tick", 0)?,
            every: config.parse_or("every", 1)?,
            ms: config.parse("ms")?,
            lines: config.parse("lines")?,
            small_frames: config.choice("frame", &["large", "small"], "large")? == "small",
            mib: config.parse("mib")?,
            count: config.parse("count")?,
            copies: config.parse("copies")?,
            bytes: config.parse("bytes")?,
        };
        info!(
            "misbehave: verb {:?} in {} on lease {:?} (epoch {:?})",
            plugin.verb,
            if plugin.in_init { "init" } else { "reconcile" },
            lease::name(),
            lease::epoch(),
        );
        if plugin.in_init {
            plugin.act()?;
        }
        Ok(plugin)
    }

    fn reconcile(&mut self, ctx: Context) -> Result<Outcome, Error> {
        let skipped = self.every > 1 && !ctx.tick().is_multiple_of(self.every);
        if self.in_init || ctx.tick() < self.from_tick || skipped {
            return Ok(Outcome::default());
        }
        Ok(self.act()?)
    }
}

impl Misbehave {
    fn act(&self) -> Result<Outcome, String> {
        match self.verb.as_str() {
            "ok" => Ok(Outcome::default()),
            "loop" => spin(),
            "alloc" => alloc_forever(),
            "recurse" => {
                let depth = if self.small_frames {
                    recurse_small(black_box(0))
                } else {
                    recurse(black_box(0))
                };
                Err(format!(
                    "recursion ended at depth {depth}, which it never should"
                ))
            }
            "trap" => trap(),
            "panic" => panic!("misbehave: deliberate panic"),
            "sleep" => {
                std::thread::sleep(Duration::from_millis(self.ms.unwrap_or(60_000)));
                Ok(Outcome::default())
            }
            "log-flood" => {
                for i in 0..self.lines.unwrap_or(1_000_000) {
                    info!("misbehave: log flood line {i}");
                }
                Ok(Outcome::default())
            }
            "print" => {
                print_flood(self.lines.unwrap_or(100_000))?;
                Ok(Outcome::default())
            }
            "fail" => Err("deliberate failure".to_string()),
            // An error as long as `lines` lines, each forging a host log line.
            "fail-long" => Err((0..self.lines.unwrap_or(20_000))
                .map(|i| format!("forged {i}\n2026-01-01T00:00:00.000000Z  INFO leasehold::lease::driver: lease released lease=leader epoch=99"))
                .collect::<Vec<_>>()
                .join("\n")),
            "requeue" => Ok(Outcome::requeue_after(Duration::from_millis(
                self.ms.unwrap_or(1000),
            ))),
            "escape" => escape(),
            "random-flood" => attacks::random_flood(self.mib.unwrap_or(64)),
            "handle-flood" => attacks::handle_flood(self.count.unwrap_or(1_000_000)),
            "big-params" => attacks::big_params(self.mib.unwrap_or(60), self.copies.unwrap_or(8)),
            "null-rows" => attacks::null_rows(),
            "kv-flood" => kv_flood(self.lines.unwrap_or(1_000_000), self.bytes.unwrap_or(1024)),
            other => Err(format!("unknown verb {other:?}")),
        }
    }
}

/// Puts `keys` keys of `bytes` bytes each until one is refused; the refusal is the error.
fn kv_flood(keys: u64, bytes: usize) -> Result<Outcome, String> {
    let value = vec![0x5Au8; bytes];
    for i in 0..keys {
        if let Err(e) = kv::put(&format!("flood/{i:08}"), &value) {
            return Err(format!("kv-flood: put {i} refused: {e}"));
        }
    }
    Ok(Outcome::default())
}

/// Tries every way out of the sandbox a plugin should not have; `Ok` only if all of them fail.
fn escape() -> Result<Outcome, String> {
    let mut escaped = Vec::new();
    if std::fs::read_dir("/").is_ok() {
        escaped.push("listed /");
    }
    if std::fs::read("/etc/passwd").is_ok() {
        escaped.push("read /etc/passwd");
    }
    if std::env::vars().next().is_some() {
        escaped.push("saw environment variables");
    }
    if std::env::args().next().is_some() {
        escaped.push("saw arguments");
    }
    // No socket probe: guests built on Debian's (preview1) wasi-libc cannot link socket calls.
    if escaped.is_empty() {
        info!("misbehave: sandbox held: no files, environment or arguments");
        Ok(Outcome::default())
    } else {
        Err(format!("escaped the sandbox: {}", escaped.join(", ")))
    }
}

/// Spins forever without calling the host: only an interruption from outside can stop it.
fn spin() -> ! {
    let mut n: u64 = 0;
    loop {
        n = black_box(n.wrapping_add(1));
    }
}

/// Allocates 1 MiB blocks, writing to every page of each, and keeps them all.
fn alloc_forever() -> ! {
    let mut kept: Vec<Vec<u8>> = Vec::new();
    loop {
        let block = vec![0xA5u8; 1 << 20];
        kept.push(black_box(block));
    }
}

/// Recurses until the stack overflows; each frame keeps a buffer alive so it cannot be folded.
#[allow(unconditional_recursion)] // on purpose: this is the `recurse` verb
fn recurse(depth: u64) -> u64 {
    let frame = black_box([depth; 32]);
    let deeper = recurse(black_box(depth + 1));
    deeper.wrapping_add(frame[(depth % 32) as usize])
}

/// Recurses until the engine's stack limit: nothing here lives in linear memory, and the
/// `black_box` around the result keeps the call from being turned into a loop.
#[allow(unconditional_recursion)] // on purpose: this is the `recurse` verb
fn recurse_small(depth: u64) -> u64 {
    black_box(recurse_small(black_box(depth.wrapping_add(1)))) ^ depth
}

#[cfg(target_arch = "wasm32")]
fn trap() -> ! {
    core::arch::wasm32::unreachable()
}

#[cfg(not(target_arch = "wasm32"))]
fn trap() -> ! {
    std::process::abort()
}

/// Writes `lines` lines of about 100 bytes to stdout and to stderr; the first failed write
/// ends it, named in the error.
fn print_flood(lines: u64) -> Result<(), String> {
    let filler = "x".repeat(80);
    let failed =
        |stream: &str, i: u64, e: std::io::Error| format!("{stream} write {i} failed: {e}");
    let mut out = std::io::stdout().lock();
    for i in 0..lines {
        writeln!(out, "misbehave stdout {i:08} {filler}").map_err(|e| failed("stdout", i, e))?;
    }
    out.flush().map_err(|e| failed("stdout", lines, e))?;
    let mut err = std::io::stderr().lock();
    for i in 0..lines {
        writeln!(err, "misbehave stderr {i:08} {filler}").map_err(|e| failed("stderr", i, e))?;
    }
    Ok(())
}

leasehold_guest::export_reconciler!(Misbehave);
