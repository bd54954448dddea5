//! Ferrite workloads, written against the transaction interface only (`tx::Engine`,
//! `tx::Tx`), so the same code runs on every engine, on PMDK, and on the trace recorder.
//!
//! Every workload is seeded and deterministic: operation `index` of thread `thread` is a pure
//! function of the parameters, the seed, `thread` and `index` (see [`op_rng`]), so crash tests
//! can rebuild the model of durable operations. Every workload has an invariant checker that
//! also reads back its logical content ([`Workload::check`]).

#![forbid(unsafe_code)]

pub mod array;
pub mod bst;
pub mod btree;
pub mod dist;
pub mod hash;
pub mod list;
pub mod locks;
pub mod map;
pub mod outofline;
pub mod queue;
pub mod rbtree;
pub mod tpcc;
pub mod validated;
pub mod ycsb;

use std::collections::BTreeMap;
use std::fmt::Debug;
use tx::{Engine, PPtr, Tx, TxResult};

/// Common workload parameters.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Params {
    /// Number of keys (or elements) loaded at setup.
    pub keys: u64,
    /// Value (or element) size in bytes.
    pub value_size: u32,
    /// Percentage of operations that modify the structure (0..=100), where the workload has
    /// a read/update mix.
    pub update_percent: u32,
    /// Worker threads the workload is prepared for (lock striping, per-thread partitions).
    pub threads: usize,
    /// Seed of every random choice.
    pub seed: u64,
    /// Take the workload's locks when it is prepared for one thread too. By default a
    /// one-thread workload takes none: it has nobody to isolate itself from. Code written
    /// for a concurrent service takes them whatever its thread count, and this measures an
    /// engine that leaves isolation to its caller under that cost.
    #[serde(default)]
    pub locks_at_one_thread: bool,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            keys: 10_000,
            value_size: 64,
            update_percent: 20,
            threads: 1,
            seed: 42,
            locks_at_one_thread: false,
        }
    }
}

/// What an operation did, for per-kind statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum OpKind {
    /// Read without modification.
    Read,
    /// Modified an existing element.
    Update,
    /// Added an element.
    Insert,
    /// Removed an element.
    Delete,
    /// Read a range.
    Scan,
    /// Read then wrote the same element.
    ReadModifyWrite,
    /// A multi-table business transaction (TPC-C).
    Business,
}

impl OpKind {
    /// Every kind, in the order of [`OpKind::index`].
    pub const ALL: [OpKind; 7] = [
        OpKind::Read,
        OpKind::Update,
        OpKind::Insert,
        OpKind::Delete,
        OpKind::Scan,
        OpKind::ReadModifyWrite,
        OpKind::Business,
    ];

    /// Position in [`OpKind::ALL`] (for per-kind counters kept in an array).
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// A benchmark and crash-test workload.
///
/// Each operation is exactly one transaction (or one read-only transaction), so it is atomic
/// and is the unit of the crash oracle.
pub trait Workload: Send + Sync {
    /// The logical content, compared by crash tests with the model.
    type Model: Clone + PartialEq + Debug + Send;

    /// Name for reports, e.g. `hash-20%`.
    fn name(&self) -> String;

    /// Builds the structure and loads the initial data (in as many transactions as needed;
    /// the structure's header is linked from the root object).
    fn setup<E: Engine>(&self, engine: &E) -> TxResult<()>;

    /// Runs operation `index` of thread `thread`: one transaction, deterministic in
    /// (seed, thread, index) and the current content. Takes the workload's own locks when
    /// the engine's isolation is external.
    fn run_op<E: Engine>(&self, engine: &E, thread: usize, index: u64) -> TxResult<OpKind>;

    /// Checks every structural invariant and returns the logical content.
    fn check<E: Engine>(&self, engine: &E) -> Result<Self::Model, String>;

    /// The model right after `setup`.
    fn initial_model(&self) -> Self::Model;

    /// Applies operation `index` of thread `thread` to the model.
    fn apply_to_model(&self, model: &mut Self::Model, thread: usize, index: u64);
}

/// The random source of one operation: a pure function of (seed, thread, index).
pub fn op_rng(seed: u64, thread: usize, index: u64) -> OpRng {
    OpRng::new(seed, thread, index)
}

/// SplitMix64's increment, the golden ratio in 64 bits (Steele, Lea and Flood, "Fast
/// splittable pseudorandom number generators", OOPSLA 2014).
const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function: a bijective 64-bit mix (David Stafford's "Mix13").
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The generator of one operation: SplitMix64 started at a hash of (seed, thread, index).
///
/// Starting it costs two mixes and each draw one, so an operation pays a few nanoseconds for
/// its randomness instead of seeding a stream cipher. Streams of different operations are
/// the same counter sequence at unrelated 64-bit offsets; an operation draws a handful of
/// values, so they never meet in practice. The output is fixed by this code alone (no
/// dependency can change it), so seeds keep reproducing the same operations.
#[derive(Clone, Debug)]
pub struct OpRng {
    state: u64,
}

impl OpRng {
    /// The generator of operation `index` of `thread` under `seed`.
    pub fn new(seed: u64, thread: usize, index: u64) -> Self {
        let operation = ((thread as u64) << 40) ^ index;
        OpRng {
            state: mix64(seed ^ mix64(operation.wrapping_mul(GOLDEN_GAMMA))),
        }
    }
}

impl rand::RngCore for OpRng {
    #[inline]
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        mix64(self.state)
    }

    #[inline]
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn fill_bytes(&mut self, dst: &mut [u8]) {
        rand::rand_core::impls::fill_bytes_via_next(self, dst);
    }
}

/// A persistent map from `u64` keys to fixed-size values, written against [`Tx`].
///
/// Implementors are marker types; the map itself is identified by its header pointer.
/// Values have the size fixed when the map was created.
pub trait PersistentMap: Send + Sync + 'static {
    /// Short name (`hash`, `btree`, ...).
    const NAME: &'static str;
    /// Whether `scan` returns keys in order.
    const ORDERED: bool;

    /// Creates an empty map sized for about `capacity` keys, with `value_size`-byte values.
    fn create<T: Tx>(tx: &mut T, capacity: u64, value_size: u32) -> TxResult<PPtr>;
    /// Copies the value of `key` into `value` (which has the map's value size); false if absent.
    fn get<T: Tx>(tx: &mut T, map: PPtr, key: u64, value: &mut [u8]) -> TxResult<bool>;
    /// Inserts or replaces; returns true if the key was new.
    fn put<T: Tx>(tx: &mut T, map: PPtr, key: u64, value: &[u8]) -> TxResult<bool>;
    /// Removes; returns true if the key was present.
    fn remove<T: Tx>(tx: &mut T, map: PPtr, key: u64) -> TxResult<bool>;
    /// Up to `count` entries with keys `>= start` (in key order for ordered maps; unordered
    /// maps may return any `count` entries with keys `>= start`).
    fn scan<T: Tx>(
        tx: &mut T,
        map: PPtr,
        start: u64,
        count: usize,
    ) -> TxResult<Vec<(u64, Vec<u8>)>>;
    /// Number of keys.
    fn len<T: Tx>(tx: &mut T, map: PPtr) -> TxResult<u64>;
    /// Checks every invariant of the structure and returns its content.
    fn check<T: Tx>(tx: &mut T, map: PPtr) -> Result<BTreeMap<u64, Vec<u8>>, String>;
}

/// Reads the pointer stored in the root object's first word (where workloads link their
/// structure), inside a transaction.
pub fn root_link<T: Tx>(tx: &mut T) -> TxResult<PPtr> {
    let root = tx.root::<()>();
    tx.read_ptr(root, 0)
}

/// Stores `ptr` in the root object's first word.
pub fn set_root_link<T: Tx>(tx: &mut T, ptr: PPtr) -> TxResult<()> {
    let root = tx.root::<()>();
    tx.write_ptr(root, 0, ptr)
}

/// A value of `size` bytes derived from `(key, version)`, so models and structures agree
/// on content without storing it twice.
pub fn value_for(key: u64, version: u64, size: u32) -> Vec<u8> {
    let mut bytes = vec![0u8; size as usize];
    fill_value(key, version, &mut bytes);
    bytes
}

/// A value's bytes: on the stack up to 256 B, so operations allocate nothing for them.
pub type ValueBuf = smallvec::SmallVec<[u8; 256]>;

/// [`value_for`] into a stack buffer. Callers on the hot path fill a buffer of their own
/// with [`fill_value`] instead: returning the buffer moves its 256 inline bytes.
pub fn value_buf(key: u64, version: u64, size: u32) -> ValueBuf {
    let mut bytes = ValueBuf::from_elem(0, size as usize);
    fill_value(key, version, &mut bytes);
    bytes
}

/// Fills `dst` with the value of `(key, version)` of `dst.len()` bytes.
pub fn fill_value(key: u64, version: u64, dst: &mut [u8]) {
    // Never start from 0: xorshift would stay at 0 and key 0's first value would be all
    // zeros, indistinguishable from memory that was never written.
    let mut state =
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ version.wrapping_mul(0xC2B2_AE3D_27D4_EB4F)) | 1;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state.to_le_bytes()
    };
    // Whole words as fixed-size copies (a slice of variable length is a call to `memcpy`
    // per word), then the tail from the next word.
    let mut words = dst.chunks_exact_mut(8);
    for word in &mut words {
        word.copy_from_slice(&next());
    }
    let tail = words.into_remainder();
    if !tail.is_empty() {
        let len = tail.len();
        tail.copy_from_slice(&next()[..len]);
    }
}
