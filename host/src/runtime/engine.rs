//! The process's one wasmtime `Engine`: async, epoch interruption, fuel (on by default), an explicit
//! stack limit, and the pooling allocator when the machine lets it reserve its address space.
//! A ticker thread advances the epoch; it holds only a weak reference, so it ends with the engine.

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
            // Plugins are not trusted to stop by themselves (DESIGN §2.4).
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

/// Starts the epoch ticker for `engine`; it stops by itself once the engine is dropped.
pub fn start_ticker(engine: &Engine, tick: Duration) -> std::io::Result<()> {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("leasehold-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(tick);
            }
        })
        .map(|_| ())
}
