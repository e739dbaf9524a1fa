//! The process's one wasmtime `Engine`: async, epoch interruption, fuel (on by default), an explicit
//! stack limit, and the pooling allocator when the machine lets it reserve its address space.
//! A ticker thread advances the epoch; it holds only a weak reference, so it ends with the engine.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use wasmtime::{Config, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig};

/// How the engine is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineOptions {
    /// Meter fuel: each call gets a budget (costs ~18% in tight loops).
    pub fuel: bool,
    /// Epoch tick: the granularity of call deadlines and of the yields that make calls cancellable.
    pub tick: Duration,
    /// The guest's native stack limit.
    pub max_wasm_stack: usize,
    /// Instances the pooling allocator reserves room for (one per running plugin).
    pub pool_instances: u32,
    /// The largest linear memory the pool reserves per instance.
    pub pool_memory_bytes: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            // Plugins are not trusted to stop by themselves (docs/ARCHITECTURE.md §7.5).
            fuel: true,
            // 1 ms: a stop that does not bump the epoch itself waits at most this long.
            tick: Duration::from_millis(1),
            // 512 KiB: deep enough for real recursion, shallow enough that a runaway guest traps
            // quickly (the host thread's own stack is far larger).
            max_wasm_stack: 512 * 1024,
            pool_instances: 256,
            pool_memory_bytes: 256 << 20,
        }
    }
}

/// Which instance allocator the engine ended up with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allocator {
    /// Pre-reserved slots: instantiation in tens of microseconds.
    Pooling,
    /// mmap per instance: the fallback when the pool's reservation is refused.
    OnDemand,
}

fn config(options: &EngineOptions, strategy: InstanceAllocationStrategy) -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.consume_fuel(options.fuel);
    config.max_wasm_stack(options.max_wasm_stack);
    config.cranelift_opt_level(OptLevel::Speed);
    // A trap's backtrace costs tens of microseconds to capture; a guest's panic message already
    // reaches the log through its stderr.
    config.wasm_backtrace_max_frames(None);
    config.allocation_strategy(strategy);
    config
}

/// Builds the engine, trying the pooling allocator first.
pub fn build(options: &EngineOptions) -> wasmtime::Result<(Engine, Allocator)> {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(options.pool_instances);
    pool.total_core_instances(options.pool_instances * 4);
    pool.total_memories(options.pool_instances * 4);
    pool.total_tables(options.pool_instances * 4);
    pool.max_memory_size(options.pool_memory_bytes);
    match Engine::new(&config(options, InstanceAllocationStrategy::Pooling(pool))) {
        Ok(engine) => Ok((engine, Allocator::Pooling)),
        Err(e) => {
            tracing::warn!(error = %e, "pooling allocator unavailable; instantiating on demand");
            let engine = Engine::new(&config(options, InstanceAllocationStrategy::OnDemand))?;
            Ok((engine, Allocator::OnDemand))
        }
    }
}

/// The guest calls in progress, shared by the stores and the epoch ticker: the ticker runs only
/// while there is one. Ticking every millisecond with no guest code to interrupt woke the process
/// a thousand times a second for nothing, the bulk of an idle host's CPU.
#[derive(Debug, Clone, Default)]
pub(crate) struct Ticking(Arc<(Mutex<usize>, Condvar)>);

/// One guest call in progress; the ticker may stop once every guard is dropped.
#[derive(Debug)]
pub(crate) struct CallInProgress(Ticking);

impl Ticking {
    /// Counts a call as in progress until the guard is dropped, waking the ticker.
    pub fn enter(&self) -> CallInProgress {
        let (count, wake) = &*self.0;
        *lock(count) += 1;
        wake.notify_all();
        CallInProgress(self.clone())
    }

    /// Blocks while no call is in progress, at most `timeout`; whether one is.
    fn wait_for_call(&self, timeout: Duration) -> bool {
        let (count, wake) = &*self.0;
        let guard = lock(count);
        let (guard, _) = wake
            .wait_timeout_while(guard, timeout, |n| *n == 0)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *guard > 0
    }
}

impl Drop for CallInProgress {
    fn drop(&mut self) {
        *lock(&(self.0).0.0) -= 1;
    }
}

/// The count stays meaningful if a holder panicked: it is one integer, updated in one step.
fn lock(count: &Mutex<usize>) -> std::sync::MutexGuard<'_, usize> {
    count
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Starts the epoch ticker for `engine`: it bumps the epoch every `tick` while a guest call is in
/// progress (see [`Ticking`]), and stops by itself once the engine is dropped.
pub(crate) fn start_ticker(engine: &Engine, tick: Duration) -> std::io::Result<Ticking> {
    // While idle, the ticker looks this often whether its engine is gone.
    const IDLE_CHECK: Duration = Duration::from_secs(1);
    let weak = engine.weak();
    let ticking = Ticking::default();
    let calls = ticking.clone();
    std::thread::Builder::new()
        .name("leasehold-epoch".into())
        .spawn(move || {
            loop {
                let busy = calls.wait_for_call(IDLE_CHECK);
                let Some(engine) = weak.upgrade() else {
                    return;
                };
                if busy {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(tick);
                }
            }
        })
        .map(|_| ticking)
}
