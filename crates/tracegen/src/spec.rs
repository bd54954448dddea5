//! What to generate: Silo's workloads by name and the parameters of a trace.

use crate::recorder::ComputeModel;
use std::fmt;
use workloads::array::ElementFill;

/// The workloads of Silo's evaluation (HPCA'23 §VI-A).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum SiloWorkload {
    /// Swap two random 64 B elements of a large array.
    Array,
    /// B+tree upserts (insert or update) of uniform random keys, 64 B values out of the
    /// leaves (PMDK's `btree_map` layout).
    Btree,
    /// Chained hash table upserts of uniform random keys, 64 B values.
    Hash,
    /// FIFO queue: 50 % enqueue of a 64 B item, 50 % dequeue.
    Queue,
    /// Red-black tree upserts of uniform random keys, 64 B values.
    Rbtree,
    /// TPC-C New-Order transactions of [`TPCC_LINES`] order lines.
    Tpcc,
    /// YCSB over the B+tree (values out of the leaves): 20 % read, 80 % update, Zipfian
    /// keys.
    Ycsb,
}

impl SiloWorkload {
    /// Every workload, in the paper's order.
    pub const ALL: [SiloWorkload; 7] = [
        SiloWorkload::Array,
        SiloWorkload::Btree,
        SiloWorkload::Hash,
        SiloWorkload::Queue,
        SiloWorkload::Rbtree,
        SiloWorkload::Tpcc,
        SiloWorkload::Ycsb,
    ];

    /// Short name (`array`, `btree`, `hash`, `queue`, `rbtree`, `tpcc`, `ycsb`).
    pub fn name(self) -> &'static str {
        match self {
            SiloWorkload::Array => "array",
            SiloWorkload::Btree => "btree",
            SiloWorkload::Hash => "hash",
            SiloWorkload::Queue => "queue",
            SiloWorkload::Rbtree => "rbtree",
            SiloWorkload::Tpcc => "tpcc",
            SiloWorkload::Ycsb => "ycsb",
        }
    }

    /// Parses a name printed by [`SiloWorkload::name`].
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.name() == text)
    }

    /// Default size of one core's instance: array elements, initial keys of the maps,
    /// initial queue items, YCSB records, or TPC-C items (see [`TraceSpec::keys`]).
    ///
    /// Chosen so each core's data set exceeds the simulated 8 MB LLC (the 8 cores' together
    /// exceed it 8-fold again), except the queue, whose accesses touch only its two ends.
    pub fn default_keys(self) -> u64 {
        match self {
            SiloWorkload::Array => 1 << 20,
            SiloWorkload::Btree | SiloWorkload::Hash | SiloWorkload::Rbtree => 1 << 18,
            SiloWorkload::Ycsb => 1 << 18,
            SiloWorkload::Queue => 1 << 16,
            SiloWorkload::Tpcc => 100_000,
        }
    }
}

impl fmt::Display for SiloWorkload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Default simulated cores.
pub const DEFAULT_CORES: u32 = 8;
/// Default committed transactions per core.
pub const DEFAULT_TRANSACTIONS: u64 = 20_000;
/// Default seed (core `c` runs with `seed + c`).
pub const DEFAULT_SEED: u64 = 42;
/// Silo's element / value size.
pub const DEFAULT_VALUE_SIZE: u32 = 64;
/// TPC-C customers per district (the standard's 3000).
pub const TPCC_CUSTOMERS: u32 = 3000;
/// TPC-C order ring capacity per district.
pub const TPCC_ORDER_CAPACITY: u32 = 1024;
/// Order lines per New-Order: 1 to 7, the largest range whose New-Orders make 10–35 word
/// stores (7 fixed, 4 per line), the size the hardware-logging papers run (HOOP, ISCA'20:
/// 10–35 stores per transaction); TPC-C itself has 5–15.
pub const TPCC_LINES: std::ops::RangeInclusive<u32> = 1..=7;
/// Largest number of cores (addresses `core << 40` stay below 2^56).
pub const MAX_CORES: u32 = 1 << 16;
/// Largest value size accepted.
pub const MAX_VALUE_SIZE: u32 = 4096;
/// Largest memory one core's workload instance may reserve ([`TraceSpec::memory_bytes`]):
/// 16 GiB. Keys and transactions both grow it, so this bounds them together and a spec
/// that needs more is refused by [`TraceSpec::validate`] before anything is allocated.
pub const MAX_CORE_MEMORY: u64 = 16 << 30;

/// The parameters of one trace. Every field is recorded in the trace's metadata.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TraceSpec {
    /// The workload.
    pub workload: SiloWorkload,
    /// Simulated cores; each runs an independent instance of the workload.
    pub cores: u32,
    /// Committed (traced) transactions per core.
    pub transactions: u64,
    /// Instance size: array elements, initial map keys (updates upsert keys from twice that
    /// key space), initial queue items, YCSB records, TPC-C items (with one warehouse, 10
    /// districts, [`TPCC_CUSTOMERS`] customers per district).
    pub keys: u64,
    /// Element / value size in bytes (TPC-C ignores it).
    pub value_size: u32,
    /// Percentage of upserts in the B+tree, hash and RB-tree workloads (Silo: 100).
    pub update_percent: u32,
    /// Seed; core `c` runs with `seed + c`.
    pub seed: u64,
    /// Initial array contents (Array only).
    pub fill: ElementFill,
    /// The assumed computation between memory accesses.
    pub compute: ComputeModel,
    /// Committed operations per traced transaction (1: each operation is a transaction).
    /// Larger values group consecutive operations into one transaction, scaling its write
    /// set (Silo's large-transaction experiment, Fig. 14); `transactions` counts groups.
    #[serde(default = "one")]
    pub ops_per_transaction: u32,
    /// Which stores the workloads issue for the same operations (specs recorded before
    /// the field existed were write-minimal).
    #[serde(default)]
    pub discipline: StoreDiscipline,
}

/// The stores a workload's operation issues (see `docs/trace-format.md`, "Store
/// disciplines").
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum StoreDiscipline {
    /// The shared workloads as written: each operation stages its changes and writes each
    /// changed word once; allocation is volatile bookkeeping.
    #[default]
    WriteMinimal,
    /// What a straightforward C implementation on libpmemobj stores for the same operation:
    /// the allocator's metadata (a 16 B header before every object, a bit in its run's
    /// bitmap set on allocation and cleared on free), zero-filled new tree nodes
    /// (`TX_ZNEW`), and the red-black tree's link and colour assignments stored as they
    /// are made.
    Pmdk,
}

impl StoreDiscipline {
    /// Both, the paper-faithful one first.
    pub const ALL: [StoreDiscipline; 2] = [StoreDiscipline::Pmdk, StoreDiscipline::WriteMinimal];

    /// Its name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            StoreDiscipline::WriteMinimal => "write-minimal",
            StoreDiscipline::Pmdk => "pmdk",
        }
    }

    /// Parses [`StoreDiscipline::name`].
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.name() == text)
    }
}

fn one() -> u32 {
    1
}

impl TraceSpec {
    /// The default trace of `workload`: 8 cores, 20 000 transactions per core, the
    /// workload's default size, 64 B values, 100 % upserts, seed 42, the sparse array fill,
    /// the default compute model and PMDK-style stores.
    pub fn new(workload: SiloWorkload) -> Self {
        TraceSpec {
            workload,
            cores: DEFAULT_CORES,
            transactions: DEFAULT_TRANSACTIONS,
            keys: workload.default_keys(),
            value_size: DEFAULT_VALUE_SIZE,
            update_percent: 100,
            seed: DEFAULT_SEED,
            fill: ElementFill::Sparse,
            compute: ComputeModel::DEFAULT,
            ops_per_transaction: 1,
            discipline: StoreDiscipline::Pmdk,
        }
    }

    /// The same spec with store discipline `discipline`.
    pub fn with_discipline(mut self, discipline: StoreDiscipline) -> Self {
        self.discipline = discipline;
        self
    }

    /// The same spec with `ops` operations per traced transaction.
    pub fn with_ops_per_transaction(mut self, ops: u32) -> Self {
        self.ops_per_transaction = ops;
        self
    }

    /// Committed operations per core (`transactions × ops_per_transaction`).
    pub fn operations(&self) -> u64 {
        self.transactions
            .saturating_mul(u64::from(self.ops_per_transaction.max(1)))
    }

    /// The same spec with `cores` cores.
    pub fn with_cores(mut self, cores: u32) -> Self {
        self.cores = cores;
        self
    }

    /// The same spec with `transactions` per core.
    pub fn with_transactions(mut self, transactions: u64) -> Self {
        self.transactions = transactions;
        self
    }

    /// The same spec with instance size `keys`.
    pub fn with_keys(mut self, keys: u64) -> Self {
        self.keys = keys;
        self
    }

    /// The same spec with seed `seed`.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The same spec with array fill `fill`.
    pub fn with_fill(mut self, fill: ElementFill) -> Self {
        self.fill = fill;
        self
    }

    /// The same spec with compute model `compute`.
    pub fn with_compute(mut self, compute: ComputeModel) -> Self {
        self.compute = compute;
        self
    }

    /// Checks every parameter's range.
    pub fn validate(&self) -> Result<(), String> {
        let checks = [
            (
                (1..=MAX_CORES).contains(&self.cores),
                "cores must be in 1..=65536",
            ),
            (self.transactions >= 1, "transactions must be at least 1"),
            (
                (1..=1 << 16).contains(&self.ops_per_transaction),
                "ops_per_transaction must be in 1..=65536",
            ),
            (
                (2..=1 << 28).contains(&self.keys),
                "keys must be in 2..=2^28",
            ),
            (
                (1..=MAX_VALUE_SIZE).contains(&self.value_size),
                "value_size must be in 1..=4096",
            ),
            (
                self.update_percent <= 100,
                "update_percent must be at most 100",
            ),
            (
                self.workload != SiloWorkload::Tpcc || self.keys <= 1_000_000,
                "TPC-C items (keys) must be at most 1 000 000",
            ),
        ];
        match checks.iter().find(|(ok, _)| !ok) {
            Some((_, why)) => Err((*why).to_string()),
            None => self.validate_memory(),
        }
    }

    /// Refuses a spec whose instance would need more than [`MAX_CORE_MEMORY`] per core.
    fn validate_memory(&self) -> Result<(), String> {
        let needed = self.memory_needed();
        if needed <= MAX_CORE_MEMORY {
            return Ok(());
        }
        Err(format!(
            "keys {} and transactions {} need {} MiB of memory per core, over the limit of {} MiB",
            self.keys,
            self.transactions,
            needed >> 20,
            MAX_CORE_MEMORY >> 20
        ))
    }

    /// Bytes of the inner `MemEngine` of one core: room for the instance, the growth of
    /// `transactions` operations and the allocator's slack. Only touched pages cost memory.
    /// At most [`MAX_CORE_MEMORY`] (a larger spec does not validate).
    pub fn memory_bytes(&self) -> u64 {
        self.memory_needed().min(MAX_CORE_MEMORY)
    }

    /// [`Self::memory_bytes`] before the limit (saturating).
    fn memory_needed(&self) -> u64 {
        let record = u64::from(self.value_size) + 256;
        let instance = self.keys.saturating_mul(record).saturating_mul(3);
        let growth = self.operations().saturating_mul(record + 1024);
        (64u64 << 20)
            .saturating_add(instance)
            .saturating_add(growth)
    }

    /// Core `core`'s seed.
    pub fn core_seed(&self, core: u32) -> u64 {
        self.seed.wrapping_add(u64::from(core))
    }
}
