//! Ferrite's conformance suites for transaction engines.
//!
//! - [`EngineScenario`]: any engine × any workload as a crash-simulator scenario. The model
//!   is the workload's logical content plus the heap's allocated-block count after each
//!   operation (taken from a crash-free run of the same engine), so a crash that leaks a block
//!   or loses one is caught even when the content looks right.
//! - [`kill`]: the same pairs run by a real child process that is sent `SIGKILL` at random
//!   times; the parent recovers the pool file and checks that no acknowledged operation was
//!   lost and nothing else appeared except the one in flight.
//!
//! Engines are named by a [`Factory`], so new engines (the MVCC engine) join every suite by
//! implementing it.

#![forbid(unsafe_code)]

pub mod catalogue;
pub mod corrupt;
pub mod kill;

pub use catalogue::{CaseVisitor, CrashCase, CrashEngine, CrashWorkload};
use crashsim::{Scenario, SimPm};
use mvcc::{Mvcc, MvccOptions};
use pmem::{CreateOptions, Persist, Pool};
use std::fmt;
use tx::{Engine, EngineOptions, LogMode, Redo, Replay, TxResult, Undo};
use workloads::Workload;

/// Layout name of conformance pools.
pub const LAYOUT: &str = "ferrite-conformance";

/// How to make and reopen one kind of engine on any backend.
pub trait Factory: Send + Sync {
    /// The engine over backend `P`.
    type Engine<P: Persist>: Engine;
    /// Short name.
    fn name(&self) -> String;
    /// Formats a fresh pool.
    fn create<P: Persist>(&self, pool: Pool<P>) -> TxResult<Self::Engine<P>>;
    /// Opens (recovers) a pool.
    fn open<P: Persist>(&self, pool: Pool<P>) -> TxResult<Self::Engine<P>>;
    /// Allocated heap blocks (the leak and double-allocation check).
    fn blocks<P: Persist>(&self, engine: &Self::Engine<P>) -> u64;
}

/// The undo engine with small lanes and chunks.
#[derive(Clone, Copy, Debug)]
pub struct UndoFactory(pub EngineOptions);

/// The redo engine with small lanes and chunks.
#[derive(Clone, Copy, Debug)]
pub struct RedoFactory(pub EngineOptions);

impl UndoFactory {
    /// Small geometry, log mode `mode`.
    pub fn small(mode: LogMode) -> Self {
        UndoFactory(EngineOptions::small().with_log_mode(mode))
    }
}

impl RedoFactory {
    /// Small geometry, log mode `mode`.
    pub fn small(mode: LogMode) -> Self {
        RedoFactory(EngineOptions::small().with_log_mode(mode))
    }
}

impl Factory for UndoFactory {
    type Engine<P: Persist> = Undo<P>;
    fn name(&self) -> String {
        format!("undo:{}", self.0.log_mode.name())
    }
    fn create<P: Persist>(&self, pool: Pool<P>) -> TxResult<Undo<P>> {
        Undo::create(pool, &self.0)
    }
    fn open<P: Persist>(&self, pool: Pool<P>) -> TxResult<Undo<P>> {
        Undo::open(pool, &self.0)
    }
    fn blocks<P: Persist>(&self, engine: &Undo<P>) -> u64 {
        engine.heap().usage().allocated_blocks
    }
}

impl Factory for RedoFactory {
    type Engine<P: Persist> = Redo<P>;
    fn name(&self) -> String {
        format!("redo:{}", self.0.log_mode.name())
    }
    fn create<P: Persist>(&self, pool: Pool<P>) -> TxResult<Redo<P>> {
        Redo::create(pool, &self.0)
    }
    fn open<P: Persist>(&self, pool: Pool<P>) -> TxResult<Redo<P>> {
        Redo::open(pool, &self.0)
    }
    fn blocks<P: Persist>(&self, engine: &Redo<P>) -> u64 {
        engine.heap().usage().allocated_blocks
    }
}

/// The MVCC engine with small logs and chunks; `R` re-executes the workload's logged
/// operations at recovery (use the workload's `ops()`, or `tx::NoReplay` for workloads that
/// declare no operations: their commits are logged as data).
#[derive(Clone, Debug)]
pub struct MvccFactory<R> {
    /// Engine options.
    pub options: MvccOptions,
    /// The operations handler given to every open.
    pub replay: R,
}

impl<R: Replay + Clone + 'static> MvccFactory<R> {
    /// Small geometry (checkpoints and write-backs every few operations).
    pub fn small(replay: R) -> Self {
        MvccFactory {
            options: MvccOptions::small(),
            replay,
        }
    }
}

impl<R: Replay + Clone + 'static> Factory for MvccFactory<R> {
    type Engine<P: Persist> = Mvcc<P, R>;
    fn name(&self) -> String {
        format!("mvcc:{:?}", self.options.isolation).to_lowercase()
    }
    fn create<P: Persist>(&self, pool: Pool<P>) -> TxResult<Mvcc<P, R>> {
        Mvcc::create(pool, &self.options, self.replay.clone())
    }
    fn open<P: Persist>(&self, pool: Pool<P>) -> TxResult<Mvcc<P, R>> {
        Mvcc::open(pool, &self.options, self.replay.clone())
    }
    fn blocks<P: Persist>(&self, engine: &Mvcc<P, R>) -> u64 {
        engine.allocated_blocks()
    }
}

/// A workload's content plus the heap's allocated blocks.
#[derive(Clone, PartialEq)]
pub struct Observed<M> {
    /// The workload's logical content.
    pub content: M,
    /// Allocated heap blocks.
    pub blocks: u64,
}

impl<M: fmt::Debug> fmt::Debug for Observed<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{{blocks: {}, content: {:?}}}",
            self.blocks, self.content
        )
    }
}

/// Engine `F` running workload `W` as a crash-simulator scenario (single-threaded: thread 0,
/// operations 0, 1, 2, ...).
pub struct EngineScenario<F: Factory, W: Workload> {
    factory: F,
    workload: W,
    ops: usize,
    pool_size: u64,
    /// Heap blocks after setup and after each operation, from a crash-free run.
    blocks: Vec<u64>,
}

impl<F: Factory, W: Workload> fmt::Debug for EngineScenario<F, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "EngineScenario({}/{}, {} ops)",
            self.factory.name(),
            self.workload.name(),
            self.ops
        )
    }
}

impl<F: Factory, W: Workload> EngineScenario<F, W> {
    /// `ops` operations of `workload` on engine `factory` in a pool of `pool_size` bytes.
    /// Runs the workload once without crashes to learn the heap's block counts.
    pub fn new(factory: F, workload: W, ops: usize, pool_size: u64) -> Self {
        let mut scenario = EngineScenario {
            factory,
            workload,
            ops,
            pool_size,
            blocks: Vec::new(),
        };
        scenario.blocks = scenario.dry_run();
        scenario
    }

    fn fresh_engine(&self, pm: SimPm) -> F::Engine<SimPm> {
        let pool = Pool::format(pm, &CreateOptions::new(LAYOUT, self.pool_size))
            .expect("format the scenario pool");
        let engine = self.factory.create(pool).expect("create the engine");
        self.workload.setup(&engine).expect("workload setup");
        engine
    }

    fn dry_run(&self) -> Vec<u64> {
        let engine = self.fresh_engine(SimPm::new(self.pool_size, Default::default()));
        let mut blocks = vec![self.factory.blocks(&engine)];
        for op in 0..self.ops {
            self.workload
                .run_op(&engine, 0, op as u64)
                .expect("operation of the dry run");
            blocks.push(self.factory.blocks(&engine));
        }
        blocks
    }
}

impl<F: Factory, W: Workload> Scenario for EngineScenario<F, W> {
    type Model = Observed<W::Model>;
    type Live = F::Engine<SimPm>;

    fn name(&self) -> String {
        format!("{}/{}", self.factory.name(), self.workload.name())
    }

    fn pool_size(&self) -> u64 {
        self.pool_size
    }

    fn op_count(&self) -> usize {
        self.ops
    }

    fn initial_model(&self) -> Self::Model {
        Observed {
            content: self.workload.initial_model(),
            blocks: self.blocks[0],
        }
    }

    fn apply_to_model(&self, model: &mut Self::Model, op: usize) {
        self.workload
            .apply_to_model(&mut model.content, 0, op as u64);
        model.blocks = self.blocks[op + 1];
    }

    fn setup(&self, pm: SimPm) -> Self::Live {
        self.fresh_engine(pm)
    }

    fn run_op(&self, live: &mut Self::Live, op: usize) {
        self.workload.run_op(live, 0, op as u64).expect("operation");
    }

    fn recover(&self, pm: SimPm) -> Result<Self::Model, String> {
        let pool = Pool::attach(pm, LAYOUT).map_err(|e| e.to_string())?;
        let engine = self.factory.open(pool).map_err(|e| e.to_string())?;
        let content = self.workload.check(&engine)?;
        Ok(Observed {
            content,
            blocks: self.factory.blocks(&engine),
        })
    }
}
