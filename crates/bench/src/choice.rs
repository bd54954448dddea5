//! What can be benchmarked: engines and workloads by name, and the visitors that turn a
//! runtime choice into monomorphised code (the hot loop never goes through `dyn`).

use crate::ideal::Ideal;
use crate::raw::Durability;
use mvcc::{Mvcc, MvccOptions};
use pmdk::Pmdk;
use pmem::{CreateOptions, LatencyModel, Native, NativeOptions, Pool};
use std::fmt;
use std::path::Path;
use tx::{
    Engine, EngineOptions, LogMode, MemEngine, NoReplay, Op, OpId, Redo, Replay, Tx, TxResult, Undo,
};
use workloads::array::ArrayWorkload;
use workloads::bst::{Bst, timestone_bst};
use workloads::btree::{BTree, silo_btree};
use workloads::hash::{HashMap, silo_hash};
use workloads::list::{LoadOrder, SortedList, TimestoneMap, timestone_list};
use workloads::map::MapOps;
use workloads::queue::QueueWorkload;
use workloads::rbtree::{RbTree, silo_rbtree};
use workloads::tpcc::{TpccConfig, TpccNewOrder};
use workloads::ycsb::{Ycsb, YcsbMix};
use workloads::{Params, Workload};

/// Layout name of benchmark pools.
pub const LAYOUT: &str = "ferrite-bench";

/// An engine to benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum EngineChoice {
    /// Ferrite's undo engine.
    Undo(LogMode),
    /// Ferrite's redo engine.
    Redo(LogMode),
    /// PMDK libpmemobj (peer).
    Pmdk,
    /// The ideal redo reference (not crash-consistent).
    Ideal,
    /// Volatile, no persistence.
    Mem,
    /// Ferrite's MVCC engine (TimeStone: version chains, operation log, checkpoint log).
    Mvcc,
    /// The raw reference (no engine; Array and Hash only): `raw` persists, `raw:volatile`
    /// does not.
    Raw(Durability),
}

impl EngineChoice {
    /// Parses `undo`, `redo`, `undo:packed`, `redo:non-temporal`, `pmdk`, `ideal`, `mem`,
    /// `mvcc`, `raw`, `raw:volatile`. Only undo and redo take a log mode: any other engine
    /// with one (`ideal:packed`, `pmdk:cacheable`) is no engine, rather than that engine
    /// measured without the mode the name asked for.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "raw" => return Some(EngineChoice::Raw(Durability::Persistent)),
            "raw:volatile" => return Some(EngineChoice::Raw(Durability::Volatile)),
            "pmdk" => return Some(EngineChoice::Pmdk),
            "ideal" => return Some(EngineChoice::Ideal),
            "mem" => return Some(EngineChoice::Mem),
            "mvcc" => return Some(EngineChoice::Mvcc),
            _ => {}
        }
        let (name, mode) = match text.split_once(':') {
            Some((name, mode)) => (name, LogMode::parse(mode)?),
            None => (text, LogMode::Auto),
        };
        match name {
            "undo" => Some(EngineChoice::Undo(mode)),
            "redo" => Some(EngineChoice::Redo(mode)),
            _ => None,
        }
    }

    /// Every name `parse` accepts (without log-mode suffixes).
    pub const NAMES: [&'static str; 8] = [
        "undo",
        "redo",
        "pmdk",
        "ideal",
        "mem",
        "mvcc",
        "raw",
        "raw:volatile",
    ];
}

impl fmt::Display for EngineChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineChoice::Undo(LogMode::Auto) => write!(f, "undo"),
            EngineChoice::Redo(LogMode::Auto) => write!(f, "redo"),
            EngineChoice::Undo(mode) => write!(f, "undo:{}", mode.name()),
            EngineChoice::Redo(mode) => write!(f, "redo:{}", mode.name()),
            EngineChoice::Pmdk => write!(f, "pmdk"),
            EngineChoice::Ideal => write!(f, "ideal"),
            EngineChoice::Mem => write!(f, "mem"),
            EngineChoice::Mvcc => write!(f, "mvcc"),
            EngineChoice::Raw(Durability::Persistent) => write!(f, "raw"),
            EngineChoice::Raw(Durability::Volatile) => write!(f, "raw:volatile"),
        }
    }
}

/// A workload to benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum WorkloadChoice {
    /// Silo: swap two 64 B elements of a large array.
    Array,
    /// Silo: enqueue/dequeue.
    Queue,
    /// Silo: hash table insert/update.
    Hash,
    /// Silo: B+tree insert/update.
    BTree,
    /// Silo: red-black tree insert/update.
    RbTree,
    /// TimeStone: sorted linked list lookups and insert/delete.
    List,
    /// TimeStone: hash table lookups and insert/delete.
    TsHash,
    /// TimeStone: binary search tree lookups and insert/delete.
    Bst,
    /// YCSB core workload over the B+tree.
    Ycsb(YcsbMix),
    /// TPC-C New-Order.
    Tpcc,
}

impl WorkloadChoice {
    /// Every workload.
    pub const ALL: [WorkloadChoice; 16] = [
        WorkloadChoice::Array,
        WorkloadChoice::Queue,
        WorkloadChoice::Hash,
        WorkloadChoice::BTree,
        WorkloadChoice::RbTree,
        WorkloadChoice::List,
        WorkloadChoice::TsHash,
        WorkloadChoice::Bst,
        WorkloadChoice::Ycsb(YcsbMix::A),
        WorkloadChoice::Ycsb(YcsbMix::B),
        WorkloadChoice::Ycsb(YcsbMix::C),
        WorkloadChoice::Ycsb(YcsbMix::D),
        WorkloadChoice::Ycsb(YcsbMix::E),
        WorkloadChoice::Ycsb(YcsbMix::F),
        WorkloadChoice::Ycsb(YcsbMix::Silo),
        WorkloadChoice::Tpcc,
    ];

    /// Command-line name.
    pub fn name(self) -> String {
        match self {
            WorkloadChoice::Array => "array".into(),
            WorkloadChoice::Queue => "queue".into(),
            WorkloadChoice::Hash => "hash".into(),
            WorkloadChoice::BTree => "btree".into(),
            WorkloadChoice::RbTree => "rbtree".into(),
            WorkloadChoice::List => "list".into(),
            WorkloadChoice::TsHash => "ts-hash".into(),
            WorkloadChoice::Bst => "bst".into(),
            WorkloadChoice::Ycsb(mix) => format!("ycsb-{}", mix.label()),
            WorkloadChoice::Tpcc => "tpcc".into(),
        }
    }

    /// Parses a name as printed by [`WorkloadChoice::name`].
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.name() == text)
    }
}

/// Code that runs with a concrete engine type.
pub trait EngineVisitor {
    /// Result.
    type Output;
    /// Called with the opened engine.
    fn visit<E: Engine>(self, engine: &E) -> Self::Output;
}

/// Code that runs with a concrete workload type.
pub trait WorkloadVisitor {
    /// Result.
    type Output;
    /// Called with the built workload.
    fn visit<W: Workload>(self, workload: W) -> Self::Output;
}

/// Why an engine could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The pool file could not be created.
    #[error(transparent)]
    Pool(#[from] pmem::PoolError),
    /// The engine could not format it.
    #[error(transparent)]
    Tx(#[from] tx::TxError),
    /// The PMDK peer is unavailable.
    #[error(transparent)]
    Pmdk(#[from] pmdk::PmdkError),
    /// `FERRITE_PERSIST_MODE` or `FERRITE_FLUSH` is set to a value they do not take (its
    /// own message, and the error itself as the source, so a caller can tell it apart).
    #[error("{0}")]
    Env(#[from] pmem::EnvOverrideError),
    /// The choice is a reference measured without an engine (see `crate::raw`).
    #[error("{0} is not an engine (it runs through bench::raw)")]
    NotAnEngine(EngineChoice),
}

/// Creates a fresh pool of `size` bytes at `path`, opens `choice` on it and runs `visitor`.
/// The pool file is removed afterwards. The MVCC engine logs every commit as data (see
/// [`with_engine_ops`]).
pub fn with_engine<V: EngineVisitor>(
    choice: EngineChoice,
    path: &Path,
    size: u64,
    visitor: V,
) -> Result<V::Output, OpenError> {
    with_engine_ops(
        choice,
        path,
        size,
        LatencyModel::NONE,
        BenchOps::NONE,
        visitor,
    )
}

/// [`with_engine`], with emulated PM latency charged by Ferrite's pools (PMDK's and the
/// volatile engine's are not charged), and with the handler of the workload's registered
/// operations, which the MVCC engine then logs as operations (the other engines ignore it).
pub fn with_engine_ops<V: EngineVisitor>(
    choice: EngineChoice,
    path: &Path,
    size: u64,
    latency: LatencyModel,
    ops: BenchOps,
    visitor: V,
) -> Result<V::Output, OpenError> {
    let _cleanup = crate::scratch::ScratchFile::new(path.to_owned());
    let native = |path: &Path| -> Result<Pool<Native>, OpenError> {
        let mut options = CreateOptions::new(LAYOUT, size);
        options.native = native_options(latency)?;
        Ok(Pool::create(path, &options)?)
    };
    let engine_options = |mode| EngineOptions::default().with_log_mode(mode);
    Ok(match choice {
        EngineChoice::Undo(mode) => {
            visitor.visit(&Undo::create(native(path)?, &engine_options(mode))?)
        }
        EngineChoice::Redo(mode) => {
            visitor.visit(&Redo::create(native(path)?, &engine_options(mode))?)
        }
        EngineChoice::Ideal => visitor.visit(&Ideal::new(native(path)?)?),
        EngineChoice::Pmdk => visitor.visit(&Pmdk::create(path, size)?),
        EngineChoice::Mem => visitor.visit(&mem_engine(size)?),
        EngineChoice::Mvcc => visitor.visit(&Mvcc::create(native(path)?, &mvcc_options(), ops)?),
        EngineChoice::Raw(_) => return Err(OpenError::NotAnEngine(choice)),
    })
}

/// The volatile engine of `size` bytes; a size that leaves it no heap, or that the host
/// cannot reserve, is out of space (`MemEngine::new` would panic on either).
fn mem_engine(size: u64) -> Result<MemEngine, OpenError> {
    // `tx::mem` keeps a header page and the root below its heap.
    const RESERVED: u64 = 8 << 10;
    if size <= RESERVED {
        return Err(OpenError::Tx(tx::TxError::OutOfSpace {
            size: RESERVED + 1,
        }));
    }
    MemEngine::try_new(size).map_err(|_| OpenError::Tx(tx::TxError::OutOfSpace { size }))
}

/// The native backend's options of a benchmark pool: the environment's overrides
/// (`FERRITE_PERSIST_MODE`, `FERRITE_FLUSH`) and `latency`.
pub fn native_options(latency: LatencyModel) -> Result<NativeOptions, OpenError> {
    Ok(NativeOptions {
        latency,
        ..NativeOptions::default().try_with_env_overrides()?
    })
}

/// The MVCC engine's options for a benchmark: the defaults, with the version log's size
/// and the cooling threshold overridable for sweeps (`FERRITE_MVCC_TLOG_VERSIONS`,
/// `FERRITE_MVCC_COOL_HEADERS`: versions per lane, headers in use above which checkpoints
/// cool), the background reclaimer off with `FERRITE_MVCC_BACKGROUND=0`, and the
/// read-mostly write-back off with `FERRITE_MVCC_READ_MOSTLY_WRITEBACK=0`.
pub fn mvcc_options() -> MvccOptions {
    let knob = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u32>().ok());
    let defaults = MvccOptions::default();
    MvccOptions {
        tlog_versions: knob("FERRITE_MVCC_TLOG_VERSIONS").unwrap_or(defaults.tlog_versions),
        cool_headers: knob("FERRITE_MVCC_COOL_HEADERS").unwrap_or(defaults.cool_headers),
        background: knob("FERRITE_MVCC_BACKGROUND").map_or(defaults.background, |on| on != 0),
        read_mostly_writeback: knob("FERRITE_MVCC_READ_MOSTLY_WRITEBACK")
            .map_or(defaults.read_mostly_writeback, |on| on != 0),
        ..defaults
    }
}

/// The registered operations of a benchmark workload, for the MVCC engine: the map
/// workloads' inserts, deletes and puts (other workloads declare none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BenchOps {
    workload: Option<WorkloadChoice>,
    value_size: u32,
}

impl BenchOps {
    /// No registered operation.
    pub const NONE: BenchOps = BenchOps {
        workload: None,
        value_size: 0,
    };

    /// The operations of `workload` with `params`.
    pub fn of(workload: WorkloadChoice, params: &Params) -> Self {
        BenchOps {
            workload: Some(workload),
            value_size: params.value_size,
        }
    }
}

impl Replay for BenchOps {
    fn handles(&self, id: OpId) -> bool {
        use WorkloadChoice as W;
        let maps = matches!(
            self.workload,
            Some(W::Hash | W::BTree | W::RbTree | W::List | W::TsHash | W::Bst)
        );
        maps && MapOps::<HashMap>::new(self.value_size).handles(id)
    }

    fn replay<T: Tx>(&self, tx: &mut T, op: Op<'_>) -> TxResult<()> {
        use WorkloadChoice as W;
        let size = self.value_size;
        match self.workload {
            Some(W::Hash | W::TsHash) => MapOps::<HashMap>::new(size).replay(tx, op),
            Some(W::BTree) => MapOps::<BTree>::new(size).replay(tx, op),
            Some(W::RbTree) => MapOps::<RbTree>::new(size).replay(tx, op),
            Some(W::List) => MapOps::<SortedList>::new(size).replay(tx, op),
            Some(W::Bst) => MapOps::<Bst>::new(size).replay(tx, op),
            _ => NoReplay.replay(tx, op),
        }
    }
}

/// Builds workload `choice` with `params` and runs `visitor` on it.
pub fn with_workload<V: WorkloadVisitor>(
    choice: WorkloadChoice,
    params: &Params,
    visitor: V,
) -> Result<V::Output, String> {
    let params = params.clone();
    Ok(match choice {
        WorkloadChoice::Array => visitor.visit(ArrayWorkload::new(params)),
        WorkloadChoice::Queue => visitor.visit(QueueWorkload::new(params)),
        WorkloadChoice::Hash => visitor.visit(silo_hash(params)),
        WorkloadChoice::BTree => visitor.visit(silo_btree(params)),
        WorkloadChoice::RbTree => visitor.visit(silo_rbtree(params)),
        WorkloadChoice::List => visitor.visit(timestone_list(params)),
        WorkloadChoice::TsHash => visitor
            .visit(TimestoneMap::<HashMap>::new(params, LoadOrder::Shuffled).labelled("ts-hash")),
        WorkloadChoice::Bst => visitor.visit(timestone_bst(params)),
        WorkloadChoice::Ycsb(mix) => visitor.visit(Ycsb::<BTree>::new(params, mix)),
        WorkloadChoice::Tpcc => visitor.visit(TpccNewOrder::new(TpccConfig::from_params(&params))?),
    })
}

/// Keeps the `Bst` import meaningful for readers: TimeStone's BST runs over it.
pub type TimestoneBst = TimestoneMap<Bst>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_undo_and_redo_take_a_log_mode() {
        for name in EngineChoice::NAMES {
            let choice = EngineChoice::parse(name).expect(name);
            assert_eq!(choice.to_string(), name, "{name} reads back as printed");
        }
        for mode in LogMode::ALL {
            for engine in ["undo", "redo"] {
                let text = format!("{engine}:{}", mode.name());
                let choice = EngineChoice::parse(&text).expect("a logging engine's mode");
                let expected = if mode == LogMode::Auto {
                    engine.to_owned()
                } else {
                    text.clone()
                };
                assert_eq!(choice.to_string(), expected);
            }
            for engine in ["pmdk", "ideal", "mem", "mvcc", "raw"] {
                let text = format!("{engine}:{}", mode.name());
                assert_eq!(EngineChoice::parse(&text), None, "{text} is no engine");
            }
        }
        for bad in ["redo:", "undo:fast", "raw:persistent", "ideal:", ""] {
            assert_eq!(EngineChoice::parse(bad), None, "{bad:?}");
        }
    }
}
