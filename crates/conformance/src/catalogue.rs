//! The engine × workload catalogue of the crash suites: which engines, which workloads at
//! crash-test sizes (a few keys, so every image is cheap to copy and recover), and how a
//! [`CrashCase`] becomes a monomorphised [`EngineScenario`]. The conformance tests and the
//! evaluation's crash section both take their scenarios from here.

use crate::{EngineScenario, Factory, MvccFactory, RedoFactory, UndoFactory};
use crashsim::{Config, Report, SimMode};
use tx::{LogMode, NoReplay, Replay};
use workloads::array::ArrayWorkload;
use workloads::bst::timestone_bst;
use workloads::btree::{BTree, silo_btree};
use workloads::hash::{HashMap, silo_hash};
use workloads::list::{LoadOrder, TimestoneMap, timestone_list};
use workloads::queue::QueueWorkload;
use workloads::rbtree::silo_rbtree;
use workloads::tpcc::{TpccConfig, TpccNewOrder};
use workloads::ycsb::{Ycsb, YcsbMix};
use workloads::{Params, Workload};

/// Simulated pool size of a crash scenario: every crash image is a copy of it, so small.
pub const POOL: u64 = 512 * 1024;

/// An engine the crash suites run, with small lanes, logs and chunks (so log wrap-around,
/// checkpoints and run creation happen within a few operations).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CrashEngine {
    /// The redo engine (`tx::Redo`).
    Redo,
    /// The undo engine (`tx::Undo`).
    Undo,
    /// The MVCC engine (TimeStone, ASPLOS 2020): the operations of the workloads that
    /// register them are logged and re-executed at recovery, the others' commits are logged
    /// as data.
    Mvcc,
}

impl CrashEngine {
    /// Every engine.
    pub const ALL: [CrashEngine; 3] = [CrashEngine::Redo, CrashEngine::Undo, CrashEngine::Mvcc];

    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            CrashEngine::Redo => "redo",
            CrashEngine::Undo => "undo",
            CrashEngine::Mvcc => "mvcc",
        }
    }
}

/// A workload of the catalogue, at crash-test sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CrashWorkload {
    /// Array of 16 elements of 64 bytes, every operation an update.
    Array,
    /// Persistent queue, half enqueues.
    Queue,
    /// Silo's hash table (upserts).
    Hash,
    /// Silo's B+tree (40 keys).
    BTree,
    /// Silo's red-black tree.
    RbTree,
    /// TimeStone's sorted list (operations registered).
    List,
    /// TimeStone's binary search tree (operations registered).
    Bst,
    /// TimeStone's hash map (operations registered).
    TimestoneHash,
    /// YCSB A on the B+tree (50 % updates).
    YcsbA,
    /// YCSB B (5 % updates).
    YcsbB,
    /// YCSB D (5 % inserts, reads of the latest).
    YcsbD,
    /// YCSB E (5 % inserts, short scans).
    YcsbE,
    /// YCSB F (read-modify-write).
    YcsbF,
    /// Silo's YCSB mix.
    YcsbSilo,
    /// TPC-C New-Order on one small warehouse.
    Tpcc,
}

impl CrashWorkload {
    /// Every workload.
    pub const ALL: [CrashWorkload; 15] = [
        CrashWorkload::Array,
        CrashWorkload::Queue,
        CrashWorkload::Hash,
        CrashWorkload::BTree,
        CrashWorkload::RbTree,
        CrashWorkload::List,
        CrashWorkload::Bst,
        CrashWorkload::TimestoneHash,
        CrashWorkload::YcsbA,
        CrashWorkload::YcsbF,
        CrashWorkload::YcsbSilo,
        CrashWorkload::YcsbB,
        CrashWorkload::YcsbD,
        CrashWorkload::YcsbE,
        CrashWorkload::Tpcc,
    ];

    /// One of each kind of structure: array, queue, hash table, two trees, list, BST, a YCSB
    /// mix and TPC-C.
    pub const REPRESENTATIVE: [CrashWorkload; 9] = [
        CrashWorkload::Array,
        CrashWorkload::Queue,
        CrashWorkload::Hash,
        CrashWorkload::BTree,
        CrashWorkload::RbTree,
        CrashWorkload::List,
        CrashWorkload::Bst,
        CrashWorkload::YcsbA,
        CrashWorkload::Tpcc,
    ];

    /// A hash table, a tree and YCSB: the structures most often changed.
    pub const QUICK: [CrashWorkload; 3] = [
        CrashWorkload::Hash,
        CrashWorkload::BTree,
        CrashWorkload::YcsbA,
    ];

    /// Operations that give the workload's scenario enough crash points: the YCSB mixes
    /// that write in 5 % of their operations run more of them.
    pub const fn ops(self) -> usize {
        match self {
            CrashWorkload::YcsbB | CrashWorkload::YcsbD | CrashWorkload::YcsbE => 60,
            _ => 8,
        }
    }
}

/// One engine × workload scenario under one persistence domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct CrashCase {
    /// The engine.
    pub engine: CrashEngine,
    /// The log writer of `redo` and `undo` (the MVCC engine has its own).
    pub log_mode: LogMode,
    /// The workload.
    pub workload: CrashWorkload,
    /// The simulated platform.
    pub mode: SimMode,
    /// Operations after setup.
    pub ops: usize,
}

impl CrashCase {
    /// `engine` on `workload` under ADR, log mode `Auto`, the workload's own operation count.
    pub fn new(engine: CrashEngine, workload: CrashWorkload) -> Self {
        CrashCase {
            engine,
            log_mode: LogMode::Auto,
            workload,
            mode: SimMode::Adr,
            ops: workload.ops(),
        }
    }

    /// The same case under `mode`.
    pub fn under(self, mode: SimMode) -> Self {
        CrashCase { mode, ..self }
    }

    /// The same case with log mode `log_mode`.
    pub fn with_log_mode(self, log_mode: LogMode) -> Self {
        CrashCase { log_mode, ..self }
    }

    /// The same case with `ops` operations.
    pub fn with_ops(self, ops: usize) -> Self {
        CrashCase { ops, ..self }
    }

    /// Runs the scenario through the crash simulator with `Config::thorough` (a crash
    /// before every fence, structured and random images chosen with `seed`, crashes during
    /// recovery).
    pub fn check(&self, seed: u64) -> Report {
        self.visit(Check {
            config: Config::thorough(self.mode, seed),
            ops: self.ops,
        })
    }

    /// The scenario's name, as the harness reports it (`redo:auto/hash-80%`).
    pub fn name(&self) -> String {
        self.visit(Name)
    }

    /// Hands the case's factory and workload, monomorphised, to `visitor`.
    pub fn visit<V: CaseVisitor>(&self, visitor: V) -> V::Output {
        match self.workload {
            CrashWorkload::Array => {
                let sizes = Params {
                    keys: 16,
                    value_size: 64,
                    ..params(100)
                };
                self.on_engine(ArrayWorkload::new(sizes), NoReplay, visitor)
            }
            CrashWorkload::Queue => {
                self.on_engine(QueueWorkload::new(params(50)), NoReplay, visitor)
            }
            CrashWorkload::Hash => self.on_engine(silo_hash(params(80)), NoReplay, visitor),
            CrashWorkload::BTree => {
                let sizes = Params {
                    keys: 40,
                    ..params(80)
                };
                self.on_engine(silo_btree(sizes), NoReplay, visitor)
            }
            CrashWorkload::RbTree => self.on_engine(silo_rbtree(params(80)), NoReplay, visitor),
            CrashWorkload::List => {
                let workload = timestone_list(params(80));
                let ops = workload.ops();
                self.on_engine(workload, ops, visitor)
            }
            CrashWorkload::Bst => {
                let workload = timestone_bst(params(80));
                let ops = workload.ops();
                self.on_engine(workload, ops, visitor)
            }
            CrashWorkload::TimestoneHash => {
                let workload = TimestoneMap::<HashMap>::new(params(80), LoadOrder::Shuffled);
                let ops = workload.ops();
                self.on_engine(workload, ops, visitor)
            }
            CrashWorkload::YcsbA => self.on_engine(ycsb(YcsbMix::A), NoReplay, visitor),
            CrashWorkload::YcsbB => self.on_engine(ycsb(YcsbMix::B), NoReplay, visitor),
            CrashWorkload::YcsbD => self.on_engine(ycsb(YcsbMix::D), NoReplay, visitor),
            CrashWorkload::YcsbE => self.on_engine(ycsb(YcsbMix::E), NoReplay, visitor),
            CrashWorkload::YcsbF => self.on_engine(ycsb(YcsbMix::F), NoReplay, visitor),
            CrashWorkload::YcsbSilo => self.on_engine(ycsb(YcsbMix::Silo), NoReplay, visitor),
            CrashWorkload::Tpcc => {
                let workload = TpccNewOrder::new(tiny_tpcc())
                    .expect("the crash-test TPC-C configuration is valid (unit-tested)");
                self.on_engine(workload, NoReplay, visitor)
            }
        }
    }

    /// The case's engine as a factory; `replay` re-executes the workload's logged operations
    /// in the MVCC engine.
    fn on_engine<W: Workload, R: Replay + Clone + 'static, V: CaseVisitor>(
        &self,
        workload: W,
        replay: R,
        visitor: V,
    ) -> V::Output {
        match self.engine {
            CrashEngine::Redo => visitor.visit(RedoFactory::small(self.log_mode), workload),
            CrashEngine::Undo => visitor.visit(UndoFactory::small(self.log_mode), workload),
            CrashEngine::Mvcc => visitor.visit(MvccFactory::small(replay), workload),
        }
    }
}

/// Code that needs a case's factory and workload as types.
pub trait CaseVisitor {
    /// What the visit returns.
    type Output;
    /// Called once with the case's factory and workload.
    fn visit<F: Factory, W: Workload>(self, factory: F, workload: W) -> Self::Output;
}

struct Check {
    config: Config,
    ops: usize,
}

impl CaseVisitor for Check {
    type Output = Report;
    fn visit<F: Factory, W: Workload>(self, factory: F, workload: W) -> Report {
        let scenario = EngineScenario::new(factory, workload, self.ops, POOL);
        crashsim::check(&scenario, &self.config)
    }
}

struct Name;

impl CaseVisitor for Name {
    type Output = String;
    fn visit<F: Factory, W: Workload>(self, factory: F, workload: W) -> String {
        format!("{}/{}", factory.name(), workload.name())
    }
}

/// Crash-test sizes: a dozen keys of 16 bytes, one thread.
fn params(update_percent: u32) -> Params {
    Params {
        keys: 12,
        value_size: 16,
        update_percent,
        threads: 1,
        seed: 5,
        locks_at_one_thread: false,
    }
}

fn ycsb(mix: YcsbMix) -> Ycsb<BTree> {
    Ycsb::<BTree>::new(params(0), mix).with_max_scan(4)
}

/// One warehouse of two districts, four customers and 40 items.
fn tiny_tpcc() -> TpccConfig {
    TpccConfig {
        warehouses: 1,
        districts: 2,
        customers: 4,
        items: 40,
        order_capacity: 6,
        seed: 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crash_test_tpcc_configuration_is_valid() {
        assert!(TpccNewOrder::new(tiny_tpcc()).is_ok());
    }

    #[test]
    fn the_workload_lists_are_subsets_of_the_catalogue() {
        for list in [
            &CrashWorkload::REPRESENTATIVE[..],
            &CrashWorkload::QUICK[..],
        ] {
            assert!(list.iter().all(|w| CrashWorkload::ALL.contains(w)));
        }
    }

    #[test]
    fn names_follow_the_harness() {
        let case = CrashCase::new(CrashEngine::Redo, CrashWorkload::Hash);
        assert_eq!(case.name(), "redo:auto/hash-80%");
        let case = CrashCase::new(CrashEngine::Mvcc, CrashWorkload::List);
        assert!(case.name().starts_with("mvcc:"), "{}", case.name());
    }
}
