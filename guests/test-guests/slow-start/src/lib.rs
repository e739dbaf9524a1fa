//! A reconciler whose component *start function* never returns, for testing that the host bounds
//! instantiation like a call (call deadline, fuel and retire apply to start functions).
//!
//! The loop is a constructor: a function pointer in the `.init_array` section, which wasm-ld
//! gathers into `__wasm_call_ctors`. Who calls that decides when the loop runs:
//!
//! - by default nobody at instantiation: a `cdylib` for `wasm32-wasip2` built here exports no
//!   `_initialize`, and wit-bindgen's generated exports call `__wasm_call_ctors` once, on the
//!   first export call (`init`). The loop would then be an ordinary call, under its deadline;
//! - so this crate exports `_initialize` itself, as wasi-libc's reactor entry point
//!   (`crt1-reactor.o`) does: it calls `__wasm_call_ctors`. wit-component (inside
//!   `wasm-component-ld`, since wasm-tools#1747) recognises a core module's `_initialize` and
//!   instantiates, last in the component, a shim core module whose `start` function calls it.
//!   `wasm-tools print` of the built component shows it: `(alias core export $main
//!   "_initialize" (core func $start))` and `$start-shim-module` with `(start 0)`.
//!
//! So the loop runs while the host instantiates the component: neither `init` nor `reconcile`
//! is ever entered, and the guest never calls the host. It is plain computation, so only the
//! engine (epoch deadline, fuel) can stop it, and only if the host applies them to
//! instantiation.
//!
//! `init` and `reconcile` would log `slow-start: init reached` and `slow-start: reconcile
//! reached`; a test that sees either line has found a start function that did not run at
//! instantiation. No config keys.

use std::hint::black_box;

use leasehold_guest::{Config, Context, Error, Outcome, Reconciler, info};

struct SlowStart;

impl Reconciler for SlowStart {
    fn init(config: Config) -> Result<Self, Error> {
        config.deny_unknown(&[])?;
        info!("slow-start: init reached");
        Ok(SlowStart)
    }

    fn reconcile(&mut self, _ctx: Context) -> Result<Outcome, Error> {
        info!("slow-start: reconcile reached");
        Ok(Outcome::default())
    }
}

/// The constructor: counts forever.
extern "C" fn spin_forever() {
    let mut n: u64 = 0;
    loop {
        n = black_box(n.wrapping_add(1));
    }
}

/// Registers [`spin_forever`] as a constructor (`#[used]` keeps it through LTO).
#[used]
#[unsafe(link_section = ".init_array")]
static START_FUNCTION: extern "C" fn() = spin_forever;

unsafe extern "C" {
    /// Synthesised by wasm-ld: runs every `.init_array` entry.
    fn __wasm_call_ctors();
}

/// The reactor entry point, as wasi-libc's `crt1-reactor.o` defines it: runs the constructors.
#[unsafe(no_mangle)]
pub extern "C" fn _initialize() {
    // SAFETY: wasm-ld defines it with this signature whenever the module has constructors.
    unsafe { __wasm_call_ctors() }
}

leasehold_guest::export_reconciler!(SlowStart);
