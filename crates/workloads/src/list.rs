//! TimeStone's linked-list benchmark: a sorted singly linked list of `u64` keys with
//! fixed-size values, and the TimeStone workload constructors ([`timestone_list`],
//! [`TimestoneMap`]) shared with the BST benchmark.
//!
//! # Persistent layout (little-endian, byte offsets)
//!
//! Header (32 bytes), linked from the root object:
//!
//! | offset | field        | type | meaning                                   |
//! |--------|--------------|------|-------------------------------------------|
//! | 0      | `magic`      | u64  | [`layout::MAGIC`] (`"FERLIST1"`)          |
//! | 8      | `count`      | u64  | number of nodes                           |
//! | 16     | `head`       | ptr  | node with the smallest key, or null       |
//! | 24     | `value_size` | u64  | bytes of every value (≤ [`MAX_VALUE_SIZE`]) |
//!
//! Node (16 + `value_size` bytes):
//!
//! | offset | field   | type               |
//! |--------|---------|--------------------|
//! | 0      | `key`   | u64                |
//! | 8      | `next`  | ptr (next larger key, or null) |
//! | 16     | `value` | `value_size` bytes |
//!
//! Invariants: keys strictly increase along `next`, and exactly `count` nodes are reachable
//! from `head`. Every traversal (operations included) rejects a key that does not increase,
//! so a corrupt cycle is reported instead of looping forever.
//!
//! The `count` word is written by every insert and delete: it makes `len` O(1) (YCSB's
//! insert keys rely on it), at the price of a write-write hot spot for engines with internal
//! isolation.

use crate::dist::KeyDist;
use crate::map::{MapWorkload, UpdateStyle};
use crate::{OpKind, Params, PersistentMap, Workload, root_link, set_root_link};
use bytes::{corrupt, ptr_at, put_u64, u64_at};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use tx::{Engine, PPtr, Tx, TxError, TxResult};

/// Largest value size a list or BST accepts (bounds what a checker allocates).
pub const MAX_VALUE_SIZE: u32 = 1 << 20;

/// Field offsets of the list's persistent objects.
pub mod layout {
    /// Magic word of a list header.
    pub const MAGIC: u64 = u64::from_le_bytes(*b"FERLIST1");
    /// Header: magic word.
    pub const HEADER_MAGIC: u64 = 0;
    /// Header: number of nodes.
    pub const HEADER_COUNT: u64 = 8;
    /// Header: first node.
    pub const HEADER_HEAD: u64 = 16;
    /// Header: value size in bytes.
    pub const HEADER_VALUE_SIZE: u64 = 24;
    /// Header size.
    pub const HEADER_SIZE: u64 = 32;
    /// Node: key.
    pub const NODE_KEY: u64 = 0;
    /// Node: next node.
    pub const NODE_NEXT: u64 = 8;
    /// Node: value (the node's last field).
    pub const NODE_VALUE: u64 = 16;
}
use layout::*;

/// Little-endian field codecs over byte buffers read with one `tx.read`, shared by the
/// list, the BST and TPC-C.
pub(crate) mod bytes {
    use tx::{PPtr, Tx, TxError, TxResult};

    /// The `u64` at byte `at` of `buf` (the buffer is sized by the caller's layout).
    pub(crate) fn u64_at(buf: &[u8], at: u64) -> u64 {
        let mut word = [0u8; 8];
        word.copy_from_slice(&buf[at as usize..at as usize + 8]);
        u64::from_le_bytes(word)
    }

    /// The `u32` at byte `at` of `buf`.
    pub(crate) fn u32_at(buf: &[u8], at: u64) -> u32 {
        let mut word = [0u8; 4];
        word.copy_from_slice(&buf[at as usize..at as usize + 4]);
        u32::from_le_bytes(word)
    }

    /// Stores `value` at byte `at` of `buf`.
    pub(crate) fn put_u64(buf: &mut [u8], at: u64, value: u64) {
        buf[at as usize..at as usize + 8].copy_from_slice(&value.to_le_bytes());
    }

    /// Stores `value` at byte `at` of `buf`.
    pub(crate) fn put_u32(buf: &mut [u8], at: u64, value: u32) {
        buf[at as usize..at as usize + 4].copy_from_slice(&value.to_le_bytes());
    }

    /// The pointer stored at byte `at` of `buf`, checked like `Tx::read_ptr` (null or a
    /// pointer of this pool).
    pub(crate) fn ptr_at<T: Tx, U>(tx: &T, buf: &[u8], at: u64) -> TxResult<PPtr<U>> {
        let ptr = PPtr::from_word(u64_at(buf, at));
        if !ptr.is_null() {
            tx.check(ptr)?;
        }
        Ok(ptr)
    }

    /// A structural-corruption error.
    pub(crate) fn corrupt(what: impl std::fmt::Display) -> TxError {
        TxError::Corrupted(what.to_string())
    }
}

/// The sorted linked list (a marker type; a list is identified by its header pointer).
#[derive(Debug)]
pub struct SortedList;

/// The decoded header.
struct Header {
    count: u64,
    head: PPtr,
    value_size: u32,
}

impl Header {
    /// Reads and validates the header with one read.
    fn load<T: Tx>(tx: &mut T, list: PPtr) -> TxResult<Header> {
        let mut buf = [0u8; HEADER_SIZE as usize];
        tx.read(list, 0, &mut buf)?;
        if u64_at(&buf, HEADER_MAGIC) != MAGIC {
            return Err(corrupt("object is not a sorted-list header"));
        }
        Ok(Header {
            count: u64_at(&buf, HEADER_COUNT),
            head: ptr_at(tx, &buf, HEADER_HEAD)?,
            value_size: checked_value_size(u64_at(&buf, HEADER_VALUE_SIZE))?,
        })
    }

    /// Rejects a value buffer of the wrong size (a caller bug, not corruption).
    fn expect_value_len(&self, len: usize) -> TxResult<()> {
        if len != self.value_size as usize {
            return Err(TxError::abort(format!(
                "value buffer of {len} bytes for a map of {}-byte values",
                self.value_size
            )));
        }
        Ok(())
    }
}

/// A stored value size, bounded by [`MAX_VALUE_SIZE`].
pub(crate) fn checked_value_size(raw: u64) -> TxResult<u32> {
    match u32::try_from(raw) {
        Ok(size) if size <= MAX_VALUE_SIZE => Ok(size),
        _ => Err(corrupt(format!("value size {raw} out of range"))),
    }
}

/// A node's key and successor (its first 16 bytes).
#[derive(Clone, Copy)]
struct Link {
    at: PPtr,
    key: u64,
    next: PPtr,
}

impl Link {
    fn load<T: Tx>(tx: &mut T, at: PPtr) -> TxResult<Link> {
        let mut buf = [0u8; NODE_VALUE as usize];
        tx.read(at, 0, &mut buf)?;
        Ok(Link {
            at,
            key: u64_at(&buf, NODE_KEY),
            next: ptr_at(tx, &buf, NODE_NEXT)?,
        })
    }
}

/// Where a key belongs: the last node with a smaller key (`None`: the head) and the first
/// node with a key at least as large.
struct Position {
    prev: Option<PPtr>,
    found: Option<Link>,
}

impl Position {
    /// The node holding exactly `key`, if any.
    fn exact(&self, key: u64) -> Option<Link> {
        self.found.filter(|node| node.key == key)
    }
}

/// Walks from `head` to the position of `key`, rejecting keys that do not increase.
fn locate<T: Tx>(tx: &mut T, head: PPtr, key: u64) -> TxResult<Position> {
    let mut prev = None;
    let mut last_key = None;
    let mut cur = head;
    while !cur.is_null() {
        let node = Link::load(tx, cur)?;
        ensure_increasing(last_key, node.key)?;
        if node.key >= key {
            return Ok(Position {
                prev,
                found: Some(node),
            });
        }
        last_key = Some(node.key);
        prev = Some(cur);
        cur = node.next;
    }
    Ok(Position { prev, found: None })
}

fn ensure_increasing(last: Option<u64>, key: u64) -> TxResult<()> {
    match last {
        Some(last) if key <= last => Err(corrupt(format!(
            "list key {key:#x} follows {last:#x} (out of order or a cycle)"
        ))),
        _ => Ok(()),
    }
}

/// The node after `node`, checked to have a larger key.
fn successor<T: Tx>(tx: &mut T, node: Link) -> TxResult<Option<Link>> {
    if node.next.is_null() {
        return Ok(None);
    }
    let next = Link::load(tx, node.next)?;
    ensure_increasing(Some(node.key), next.key)?;
    Ok(Some(next))
}

/// Points the head (when `prev` is `None`) or `prev.next` at `target`.
fn relink<T: Tx>(tx: &mut T, list: PPtr, prev: Option<PPtr>, target: PPtr) -> TxResult<()> {
    match prev {
        None => tx.write_ptr(list, HEADER_HEAD, target),
        Some(node) => tx.write_ptr(node, NODE_NEXT, target),
    }
}

/// Writes a new header count (the only header word operations change besides `head`).
fn set_count<T: Tx>(tx: &mut T, list: PPtr, count: Option<u64>) -> TxResult<()> {
    let count = count.ok_or_else(|| corrupt("list count out of range"))?;
    tx.write_u64(list, HEADER_COUNT, count)
}

impl PersistentMap for SortedList {
    const NAME: &'static str = "list";
    const ORDERED: bool = true;

    fn create<T: Tx>(tx: &mut T, _capacity: u64, value_size: u32) -> TxResult<PPtr> {
        if value_size > MAX_VALUE_SIZE {
            return Err(TxError::abort(format!("value size {value_size} too large")));
        }
        let list = tx.alloc(HEADER_SIZE)?;
        let mut buf = [0u8; HEADER_SIZE as usize];
        put_u64(&mut buf, HEADER_MAGIC, MAGIC);
        put_u64(&mut buf, HEADER_VALUE_SIZE, u64::from(value_size));
        tx.write(list, 0, &buf)?;
        Ok(list)
    }

    fn get<T: Tx>(tx: &mut T, list: PPtr, key: u64, value: &mut [u8]) -> TxResult<bool> {
        let header = Header::load(tx, list)?;
        header.expect_value_len(value.len())?;
        match locate(tx, header.head, key)?.exact(key) {
            Some(node) => tx.read(node.at, NODE_VALUE, value).map(|()| true),
            None => Ok(false),
        }
    }

    fn put<T: Tx>(tx: &mut T, list: PPtr, key: u64, value: &[u8]) -> TxResult<bool> {
        let header = Header::load(tx, list)?;
        header.expect_value_len(value.len())?;
        let position = locate(tx, header.head, key)?;
        if let Some(node) = position.exact(key) {
            tx.write(node.at, NODE_VALUE, value)?;
            return Ok(false);
        }
        // The new node is written whole, with one write, before it is linked.
        let next = position.found.map_or(PPtr::null(), |node| node.at);
        let mut buf = vec![0u8; NODE_VALUE as usize + value.len()];
        put_u64(&mut buf, NODE_KEY, key);
        put_u64(&mut buf, NODE_NEXT, next.word());
        buf[NODE_VALUE as usize..].copy_from_slice(value);
        let node = tx.alloc(buf.len() as u64)?;
        tx.write(node, 0, &buf)?;
        relink(tx, list, position.prev, node)?;
        set_count(tx, list, header.count.checked_add(1))?;
        Ok(true)
    }

    fn remove<T: Tx>(tx: &mut T, list: PPtr, key: u64) -> TxResult<bool> {
        let header = Header::load(tx, list)?;
        let position = locate(tx, header.head, key)?;
        let Some(node) = position.exact(key) else {
            return Ok(false);
        };
        relink(tx, list, position.prev, node.next)?;
        set_count(tx, list, header.count.checked_sub(1))?;
        tx.free(node.at)?;
        Ok(true)
    }

    fn scan<T: Tx>(
        tx: &mut T,
        list: PPtr,
        start: u64,
        count: usize,
    ) -> TxResult<Vec<(u64, Vec<u8>)>> {
        let header = Header::load(tx, list)?;
        let mut out = Vec::with_capacity(count.min(1024));
        let mut cur = if count == 0 {
            None
        } else {
            locate(tx, header.head, start)?.found
        };
        while let Some(node) = cur {
            let mut value = vec![0u8; header.value_size as usize];
            tx.read(node.at, NODE_VALUE, &mut value)?;
            out.push((node.key, value));
            cur = if out.len() < count {
                successor(tx, node)?
            } else {
                None
            };
        }
        Ok(out)
    }

    fn len<T: Tx>(tx: &mut T, list: PPtr) -> TxResult<u64> {
        Ok(Header::load(tx, list)?.count)
    }

    fn check<T: Tx>(tx: &mut T, list: PPtr) -> Result<BTreeMap<u64, Vec<u8>>, String> {
        check_list(tx, list).map_err(|e| format!("list: {e}"))
    }
}

/// Walks the whole list: order, node count, pointer tags; returns the content.
fn check_list<T: Tx>(tx: &mut T, list: PPtr) -> TxResult<BTreeMap<u64, Vec<u8>>> {
    let header = Header::load(tx, list)?;
    let node_size = NODE_VALUE as usize + header.value_size as usize;
    let mut content = BTreeMap::new();
    let mut last_key = None;
    let mut cur = header.head;
    while !cur.is_null() {
        // The step bound: more nodes than `count` means a wrong count or a cycle.
        if content.len() as u64 >= header.count {
            return Err(corrupt(format!("more than count = {} nodes", header.count)));
        }
        let mut buf = vec![0u8; node_size];
        tx.read(cur, 0, &mut buf)?;
        let key = u64_at(&buf, NODE_KEY);
        ensure_increasing(last_key, key)?;
        content.insert(key, buf[NODE_VALUE as usize..].to_vec());
        last_key = Some(key);
        cur = ptr_at(tx, &buf, NODE_NEXT)?;
    }
    if content.len() as u64 != header.count {
        return Err(corrupt(format!(
            "{} nodes but count = {}",
            content.len(),
            header.count
        )));
    }
    Ok(content)
}

/// Initial entries per setup transaction, at most (also bounded by [`LOAD_BYTES_PER_TX`]).
const LOAD_ENTRIES_PER_TX: usize = 64;
/// Value bytes per setup transaction, about (keeps setup within small log lanes).
const LOAD_BYTES_PER_TX: usize = 16 * 1024;

/// Entries of `value_size` bytes a setup transaction puts: about [`LOAD_BYTES_PER_TX`] of
/// values (a node's 64 bytes counted with each), at least one, at most
/// [`LOAD_ENTRIES_PER_TX`]. Large values go one or a few per transaction, so the setup's
/// log stays far below a lane whatever the value size.
pub(crate) fn entries_per_load_tx(value_size: usize) -> usize {
    (LOAD_BYTES_PER_TX / (value_size + 64)).clamp(1, LOAD_ENTRIES_PER_TX)
}

/// Puts `entries` into the map linked from the root, in the given order, a bounded batch per
/// transaction.
pub(crate) fn load_entries<M: PersistentMap, E: Engine>(
    engine: &E,
    entries: &[(u64, Vec<u8>)],
) -> TxResult<()> {
    let per_tx = entries_per_load_tx(entries.first().map_or(0, |(_, value)| value.len()));
    for batch in entries.chunks(per_tx) {
        engine.transaction(|tx| {
            let map = root_link(tx)?;
            for (key, value) in batch {
                M::put(tx, map, *key, value)?;
            }
            Ok::<_, TxError>(())
        })?;
    }
    Ok(())
}

/// The order in which a TimeStone benchmark loads its initial keys (the content is the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadOrder {
    /// Largest key first: every insert into a sorted list lands at the head, so loading is
    /// linear instead of quadratic.
    Descending,
    /// A seeded random permutation: an unbalanced BST built from it has expected depth
    /// O(log n), where ascending keys would degenerate it into a list.
    Shuffled,
}

/// TimeStone's set benchmarks (list, hash, BST): [`MapWorkload`] with
/// [`UpdateStyle::InsertDelete`] and [`KeyDist::Uniform`] over a key range twice the initial
/// size, `params.update_percent` updates (2, 20 or 80 in the paper).
///
/// Everything but `setup` is delegated to the `MapWorkload`; `setup` loads the same initial
/// content (`MapWorkload::initial_model`) in a [`LoadOrder`] that suits the structure.
#[derive(Debug)]
pub struct TimestoneMap<M: PersistentMap> {
    inner: MapWorkload<M>,
    params: Params,
    order: LoadOrder,
    /// The name's stem in reports (the structure's name unless another workload has it).
    label: &'static str,
}

impl<M: PersistentMap> TimestoneMap<M> {
    /// The benchmark over `M` with `params`, loaded in `order`.
    pub fn new(params: Params, order: LoadOrder) -> Self {
        let inner = MapWorkload::new(params.clone(), UpdateStyle::InsertDelete, KeyDist::Uniform);
        TimestoneMap {
            inner,
            params,
            order,
            label: M::NAME,
        }
    }

    /// The same benchmark, reported as `<label>-<updates>%`: TimeStone's hash table needs its
    /// own name beside the Silo hash workload over the same structure.
    pub fn labelled(self, label: &'static str) -> Self {
        TimestoneMap { label, ..self }
    }

    /// The handler that re-executes this workload's logged operations.
    pub fn ops(&self) -> crate::map::MapOps<M> {
        self.inner.ops()
    }

    fn initial_entries(&self) -> Vec<(u64, Vec<u8>)> {
        let mut entries: Vec<_> = self.inner.initial_model().into_iter().collect();
        match self.order {
            LoadOrder::Descending => entries.reverse(),
            LoadOrder::Shuffled => {
                entries.shuffle(&mut ChaCha8Rng::seed_from_u64(self.params.seed));
            }
        }
        entries
    }
}

/// TimeStone's linked-list benchmark over [`SortedList`].
pub fn timestone_list(params: Params) -> TimestoneMap<SortedList> {
    TimestoneMap::new(params, LoadOrder::Descending)
}

impl<M: PersistentMap> Workload for TimestoneMap<M> {
    type Model = BTreeMap<u64, Vec<u8>>;

    fn name(&self) -> String {
        format!("{}-{}%", self.label, self.params.update_percent)
    }

    fn setup<E: Engine>(&self, engine: &E) -> TxResult<()> {
        // Same capacity as `MapWorkload::setup`: the key range is twice the initial keys.
        let capacity = self.params.keys.saturating_mul(2);
        engine.transaction(|tx| {
            let map = M::create(tx, capacity, self.params.value_size)?;
            set_root_link(tx, map)
        })?;
        load_entries::<M, E>(engine, &self.initial_entries())
    }

    fn run_op<E: Engine>(&self, engine: &E, thread: usize, index: u64) -> TxResult<OpKind> {
        self.inner.run_op(engine, thread, index)
    }

    fn check<E: Engine>(&self, engine: &E) -> Result<Self::Model, String> {
        self.inner.check(engine)
    }

    fn initial_model(&self) -> Self::Model {
        self.inner.initial_model()
    }

    fn apply_to_model(&self, model: &mut Self::Model, thread: usize, index: u64) {
        self.inner.apply_to_model(model, thread, index);
    }
}
