//! A persistent chained hash map (Silo's Hash micro-benchmark, TimeStone's hash table).
//!
//! Persistent layout (little-endian, byte offsets):
//!
//! ```text
//! header (56 B)                        node (16 + value_size B)
//!   0  magic        u64 "FRHASH02"       0  key    u64
//!   8  value_size   u64                  8  next   ptr (next node of the chain, or null)
//!  16  bucket_count u64 (power of 2)    16  value  [u8; value_size]
//!  24  buckets      ptr
//!  32  counter      ptr                bucket array (8 * bucket_count B, one allocation)
//!  40  ready        u64 (chunks ready)   8*i  head of chain i: ptr (or null)
//!  48  bitmap       ptr (or null)
//!                                      bitmap (8 * ceil(chunks / 64) B): bit c = chunk c ready
//! counter (64 B, a cache line of its own)
//!   0  count        u64
//! ```
//!
//! The node count, written by every insert and delete, lives in its own cache-line-sized
//! block, away from the header every operation reads: on a multi-version engine a header
//! that inserts write has a version chain almost always, and every lookup would walk it;
//! on any engine the line would bounce between writers and readers. Lookups never read
//! the count (a walk reads it only once it is longer than [`SHORT_WALK`] nodes, to tell a
//! cycle from a long chain). Version 1 images (`FRHASH01`, the count in the header) are
//! refused as a bad magic.
//!
//! The bucket array is divided in chunks of [`CHUNK_BUCKETS`] buckets (512 B). A small array
//! is zeroed when the map is created (`bitmap` null, every chunk ready). A large one is not:
//! zeroing megabytes in the creating transaction would overflow a redo log, so a chunk is
//! zeroed by the first insert into it, which sets its bit in the (zeroed, 64x smaller) bitmap
//! and counts it in `ready`. Buckets of chunks not ready are empty whatever they contain. Once
//! every chunk is ready the bitmap is never read again.
//!
//! Invariants: `ready` is the number of set bits of the bitmap (or the number of chunks when
//! it is null); every node of chain `i` (in a ready chunk) has a key whose bucket is `i`; keys
//! are unique; chains are acyclic and disjoint; `count` is the number of nodes. New nodes are
//! pushed at the head of their chain; deletes unlink and free the node.
//!
//! `scan` is unordered: it returns up to `count` entries with keys `>= start` in bucket order.

use crate::PersistentMap;
use crate::map::{MapWorkload, UpdateStyle};
use crate::{Params, dist::KeyDist};
use std::collections::{BTreeMap, HashSet};
use tx::{PPtr, Tx, TxError, TxResult};

/// The chained hash map (a marker type; a map is identified by its header pointer).
#[derive(Debug)]
pub struct HashMap;

/// Silo's Hash benchmark: uniform keys, updates are upserts.
pub fn silo_hash(params: Params) -> MapWorkload<HashMap> {
    MapWorkload::new(params, UpdateStyle::Upsert, KeyDist::Uniform)
}

const MAGIC: u64 = u64::from_le_bytes(*b"FRHASH02");

const H_MAGIC: usize = 0;
const H_VALUE_SIZE: usize = 8;
const H_BUCKET_COUNT: usize = 16;
const H_BUCKETS: usize = 24;
const H_COUNTER: usize = 32;
const H_READY: usize = 40;
const H_BITMAP: usize = 48;
const HEADER_SIZE: usize = 56;
/// The counter block: a whole cache line, so nothing else shares it.
const COUNTER_SIZE: u64 = 64;
/// Walks up to this long never read the count.
const SHORT_WALK: u64 = 32;

const N_KEY: usize = 0;
const N_NEXT: usize = 8;
const N_VALUE: usize = 16;

/// Bytes of the header block, for sizing a pool before setup (`bench::space`).
pub const HEADER_BYTES: u64 = HEADER_SIZE as u64;
/// Bytes of the counter block.
pub const COUNTER_BYTES: u64 = COUNTER_SIZE;
/// Bytes of a node before its value.
pub const NODE_BYTES_BEFORE_VALUE: u64 = N_VALUE as u64;

/// Buckets per chunk (the unit of lazy zeroing and of bucket sweeps).
pub const CHUNK_BUCKETS: u64 = 64;
/// Bucket arrays up to this size are zeroed at creation; larger ones chunk by chunk, behind a
/// bitmap of their chunks.
pub const EAGER_ZERO_BYTES: u64 = 64 << 10;
/// Largest value size accepted (guards allocations sized from PM content).
const MAX_VALUE_SIZE: u64 = 1 << 20;
/// Largest bucket array (2^40 buckets): anything larger is corruption.
const MAX_BUCKETS: u64 = 1 << 40;

/// A new node's bytes, on the stack for values up to 240 B.
type NodeImage = smallvec::SmallVec<[u8; 256]>;

enum Header {}
enum Counter {}
enum Node {}
enum Buckets {}
enum Bitmap {}

fn word(buf: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(bytes)
}

fn corrupt(what: impl std::fmt::Display) -> TxError {
    TxError::Corrupted(format!("hash: {what}"))
}

/// Murmur3's 64-bit finaliser: spreads sequential keys over the buckets.
fn mix(mut key: u64) -> u64 {
    key ^= key >> 33;
    key = key.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    key ^= key >> 33;
    key = key.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    key ^ (key >> 33)
}

/// The header fields, read with one access.
struct Table {
    header: PPtr<Header>,
    value_size: usize,
    mask: u64,
    buckets: PPtr<Buckets>,
    counter: PPtr<Counter>,
    ready: u64,
    bitmap: PPtr<Bitmap>,
}

impl Table {
    fn open<T: Tx>(tx: &mut T, map: PPtr) -> TxResult<Table> {
        let header = map.cast::<Header>();
        let mut buf = [0u8; HEADER_SIZE];
        tx.read(header, 0, &mut buf)?;
        if word(&buf, H_MAGIC) != MAGIC {
            return Err(corrupt("bad magic"));
        }
        let value_size = word(&buf, H_VALUE_SIZE);
        let bucket_count = word(&buf, H_BUCKET_COUNT);
        if value_size > MAX_VALUE_SIZE {
            return Err(corrupt(format_args!("value size {value_size}")));
        }
        if !bucket_count.is_power_of_two() || bucket_count > MAX_BUCKETS {
            return Err(corrupt(format_args!("bucket count {bucket_count}")));
        }
        let buckets = PPtr::from_word(word(&buf, H_BUCKETS));
        tx.check(buckets)?;
        let counter = PPtr::from_word(word(&buf, H_COUNTER));
        tx.check(counter)?;
        let bitmap = PPtr::from_word(word(&buf, H_BITMAP));
        if !bitmap.is_null() {
            tx.check(bitmap)?;
        }
        let table = Table {
            header,
            value_size: value_size as usize,
            mask: bucket_count - 1,
            buckets,
            counter,
            ready: word(&buf, H_READY),
            bitmap,
        };
        if table.ready > table.chunks() || (bitmap.is_null() && !table.all_ready()) {
            return Err(corrupt(format_args!("{} chunks ready", table.ready)));
        }
        Ok(table)
    }

    fn bucket_of(&self, key: u64) -> u64 {
        mix(key) & self.mask
    }

    fn slot(bucket: u64) -> u64 {
        8 * bucket
    }

    fn chunk_buckets(&self) -> u64 {
        CHUNK_BUCKETS.min(self.mask + 1)
    }

    fn chunks(&self) -> u64 {
        (self.mask + 1) / self.chunk_buckets()
    }

    fn all_ready(&self) -> bool {
        self.ready == self.chunks()
    }

    /// `None` if chunk `chunk` holds real chain heads, else the bitmap word that says it does
    /// not (one bitmap read until every chunk is ready, none after).
    fn unready_bits<T: Tx>(&self, tx: &mut T, chunk: u64) -> TxResult<Option<u64>> {
        if self.all_ready() {
            return Ok(None);
        }
        let bits = tx.read_u64(self.bitmap, 8 * (chunk / 64))?;
        Ok((bits & (1 << (chunk % 64)) == 0).then_some(bits))
    }

    /// The bucket of `key` and the head of its chain.
    fn bucket<T: Tx>(&self, tx: &mut T, key: u64) -> TxResult<Bucket> {
        let index = self.bucket_of(key);
        let unready_bits = self.unready_bits(tx, index / self.chunk_buckets())?;
        let head = match unready_bits {
            None => tx.read_ptr(self.buckets, Table::slot(index))?,
            Some(_) => PPtr::null(),
        };
        Ok(Bucket {
            index,
            head,
            unready_bits,
        })
    }

    /// Makes `node` the head of `bucket`, zeroing the bucket's chunk first if it is not ready
    /// (one write of the chunk with the head in it), and counts it.
    fn link_head<T: Tx>(&self, tx: &mut T, bucket: &Bucket, node: PPtr<Node>) -> TxResult<()> {
        let count = self.count(tx)? + 1;
        tx.write_u64(self.counter, 0, count)?;
        let Some(bits) = bucket.unready_bits else {
            return tx.write_ptr(self.buckets, Table::slot(bucket.index), node);
        };
        let chunk = bucket.index / self.chunk_buckets();
        let first = chunk * self.chunk_buckets();
        let mut heads = [0u8; 8 * CHUNK_BUCKETS as usize];
        let at = 8 * (bucket.index - first) as usize;
        heads[at..at + 8].copy_from_slice(&node.word().to_le_bytes());
        tx.write(
            self.buckets,
            Table::slot(first),
            &heads[..8 * self.chunk_buckets() as usize],
        )?;
        tx.write_u64(self.bitmap, 8 * (chunk / 64), bits | (1 << (chunk % 64)))?;
        tx.write_u64(self.header, H_READY as u64, self.ready + 1)
    }

    /// Reads the chain heads of the sweep's next chunk (none if it is not ready) into `heads`;
    /// false when every chunk has been swept. Each bitmap word is read once per sweep.
    fn chunk_heads<T: Tx>(
        &self,
        tx: &mut T,
        sweep: &mut Sweep,
        heads: &mut Vec<PPtr<Node>>,
    ) -> TxResult<bool> {
        heads.clear();
        let chunk = sweep.chunk;
        if chunk >= self.chunks() {
            return Ok(false);
        }
        sweep.chunk += 1;
        if !self.all_ready() {
            if chunk.is_multiple_of(64) {
                sweep.bits = tx.read_u64(self.bitmap, 8 * (chunk / 64))?;
            }
            if sweep.bits & (1 << (chunk % 64)) == 0 {
                return Ok(true);
            }
        }
        let n = self.chunk_buckets() as usize;
        let mut buf = [0u8; 8 * CHUNK_BUCKETS as usize];
        tx.read(
            self.buckets,
            Table::slot(chunk * n as u64),
            &mut buf[..8 * n],
        )?;
        for i in 0..n {
            let head = PPtr::from_word(word(&buf, 8 * i));
            if !head.is_null() {
                tx.check(head)?;
            }
            heads.push(head);
        }
        Ok(true)
    }

    fn check_len(&self, len: usize) -> TxResult<()> {
        if len == self.value_size {
            Ok(())
        } else {
            Err(TxError::abort(format_args!(
                "hash: value of {len} bytes for a map of {}-byte values",
                self.value_size
            )))
        }
    }

    /// The number of nodes.
    fn count<T: Tx>(&self, tx: &mut T) -> TxResult<u64> {
        tx.read_u64(self.counter, 0)
    }

    /// A walk longer than `count` nodes is a cycle or a lost count; the count is read once,
    /// when the walk passes [`SHORT_WALK`] nodes.
    fn step<T: Tx>(&self, tx: &mut T, walk: &mut Walk) -> TxResult<()> {
        walk.steps += 1;
        if walk.steps <= SHORT_WALK {
            return Ok(());
        }
        let count = match walk.count {
            Some(count) => count,
            None => *walk.count.insert(self.count(tx)?),
        };
        if walk.steps > count {
            return Err(corrupt("a chain is longer than the count"));
        }
        Ok(())
    }
}

/// Nodes visited by a walk, and the count once it was read.
#[derive(Default)]
struct Walk {
    steps: u64,
    count: Option<u64>,
}

/// Position of a sweep over the bucket array, in chunk order from chunk 0.
#[derive(Default)]
struct Sweep {
    chunk: u64,
    /// The bitmap word of the current group of 64 chunks.
    bits: u64,
}

/// A key's bucket: its index, the head of its chain (null if the chunk is not ready), and the
/// chunk's bitmap word if it is not ready.
struct Bucket {
    index: u64,
    head: PPtr<Node>,
    unready_bits: Option<u64>,
}

/// Reads a node's key and next pointer with one access.
fn read_link<T: Tx>(tx: &mut T, node: PPtr<Node>) -> TxResult<(u64, PPtr<Node>)> {
    let mut buf = [0u8; 16];
    tx.read(node, 0, &mut buf)?;
    let next = PPtr::from_word(word(&buf, N_NEXT));
    if !next.is_null() {
        tx.check(next)?;
    }
    Ok((word(&buf, N_KEY), next))
}

/// Where a key's node is: its predecessor in the chain (none: the bucket points at it), the
/// node and its successor.
struct Found {
    prev: Option<PPtr<Node>>,
    node: PPtr<Node>,
    next: PPtr<Node>,
}

fn find<T: Tx>(tx: &mut T, table: &Table, head: PPtr<Node>, key: u64) -> TxResult<Option<Found>> {
    let (mut prev, mut cur, mut walk) = (None, head, Walk::default());
    while !cur.is_null() {
        table.step(tx, &mut walk)?;
        let (node_key, next) = read_link(tx, cur)?;
        if node_key == key {
            return Ok(Some(Found {
                prev,
                node: cur,
                next,
            }));
        }
        (prev, cur) = (Some(cur), next);
    }
    Ok(None)
}

impl PersistentMap for HashMap {
    const NAME: &'static str = "hash";
    const ORDERED: bool = false;

    fn create<T: Tx>(tx: &mut T, capacity: u64, value_size: u32) -> TxResult<PPtr> {
        // A table past MAX_BUCKETS needs a bucket array of more than 8 TiB: no pool has the
        // room, which is what the caller must hear (not an abort naming an internal bound).
        let bucket_count = capacity
            .max(1)
            .checked_next_power_of_two()
            .filter(|&n| n <= MAX_BUCKETS)
            .ok_or(TxError::OutOfSpace {
                size: capacity.saturating_mul(8),
            })?;
        if u64::from(value_size) > MAX_VALUE_SIZE {
            return Err(TxError::abort(format_args!(
                "hash: value size {value_size}"
            )));
        }
        let chunks = bucket_count / CHUNK_BUCKETS.min(bucket_count);
        let (buckets, bitmap, ready): (PPtr<Buckets>, PPtr<Bitmap>, u64) =
            if 8 * bucket_count <= EAGER_ZERO_BYTES {
                (tx.alloc_zeroed(8 * bucket_count)?, PPtr::null(), chunks)
            } else {
                let bitmap = tx.alloc_zeroed(8 * chunks.div_ceil(64))?;
                (tx.alloc(8 * bucket_count)?, bitmap, 0)
            };
        let counter: PPtr<Counter> = tx.alloc_zeroed(COUNTER_SIZE)?;
        let header: PPtr<Header> = tx.alloc(HEADER_SIZE as u64)?;
        let mut buf = [0u8; HEADER_SIZE];
        for (at, value) in [
            (H_MAGIC, MAGIC),
            (H_VALUE_SIZE, u64::from(value_size)),
            (H_BUCKET_COUNT, bucket_count),
            (H_BUCKETS, buckets.word()),
            (H_COUNTER, counter.word()),
            (H_READY, ready),
            (H_BITMAP, bitmap.word()),
        ] {
            buf[at..at + 8].copy_from_slice(&value.to_le_bytes());
        }
        tx.write(header, 0, &buf)?;
        Ok(header.cast())
    }

    fn get<T: Tx>(tx: &mut T, map: PPtr, key: u64, value: &mut [u8]) -> TxResult<bool> {
        let table = Table::open(tx, map)?;
        table.check_len(value.len())?;
        let bucket = table.bucket(tx, key)?;
        match find(tx, &table, bucket.head, key)? {
            Some(found) => {
                tx.read(found.node, N_VALUE as u64, value)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put<T: Tx>(tx: &mut T, map: PPtr, key: u64, value: &[u8]) -> TxResult<bool> {
        let table = Table::open(tx, map)?;
        table.check_len(value.len())?;
        let bucket = table.bucket(tx, key)?;
        if let Some(found) = find(tx, &table, bucket.head, key)? {
            tx.write(found.node, N_VALUE as u64, value)?;
            return Ok(false);
        }
        // The new node is written whole (it is fresh), then linked at the chain's head.
        let node: PPtr<Node> = tx.alloc((N_VALUE + value.len()) as u64)?;
        let mut image = NodeImage::from_elem(0, N_VALUE + value.len());
        image[N_KEY..N_KEY + 8].copy_from_slice(&key.to_le_bytes());
        image[N_NEXT..N_NEXT + 8].copy_from_slice(&bucket.head.word().to_le_bytes());
        image[N_VALUE..].copy_from_slice(value);
        tx.write(node, 0, &image)?;
        table.link_head(tx, &bucket, node)?;
        Ok(true)
    }

    fn remove<T: Tx>(tx: &mut T, map: PPtr, key: u64) -> TxResult<bool> {
        let table = Table::open(tx, map)?;
        let bucket = table.bucket(tx, key)?;
        let Some(found) = find(tx, &table, bucket.head, key)? else {
            return Ok(false);
        };
        match found.prev {
            Some(prev) => tx.write_ptr(prev, N_NEXT as u64, found.next)?,
            None => tx.write_ptr(table.buckets, Table::slot(bucket.index), found.next)?,
        }
        tx.free(found.node)?;
        let count = table.count(tx)?;
        tx.write_u64(table.counter, 0, count.saturating_sub(1))?;
        Ok(true)
    }

    fn scan<T: Tx>(
        tx: &mut T,
        map: PPtr,
        start: u64,
        count: usize,
    ) -> TxResult<Vec<(u64, Vec<u8>)>> {
        let table = Table::open(tx, map)?;
        let mut out = Vec::new();
        let mut node = vec![0u8; N_VALUE + table.value_size];
        let (mut walk, mut heads) = (Walk::default(), Vec::new());
        let mut sweep = Sweep::default();
        while out.len() < count && table.chunk_heads(tx, &mut sweep, &mut heads)? {
            for &head in &heads {
                let mut cur = head;
                while !cur.is_null() && out.len() < count {
                    table.step(tx, &mut walk)?;
                    tx.read(cur, 0, &mut node)?;
                    let key = word(&node, N_KEY);
                    if key >= start {
                        out.push((key, node[N_VALUE..].to_vec()));
                    }
                    cur = PPtr::from_word(word(&node, N_NEXT));
                    if !cur.is_null() {
                        tx.check(cur)?;
                    }
                }
            }
        }
        Ok(out)
    }

    fn len<T: Tx>(tx: &mut T, map: PPtr) -> TxResult<u64> {
        Table::open(tx, map)?.count(tx)
    }

    fn check<T: Tx>(tx: &mut T, map: PPtr) -> Result<BTreeMap<u64, Vec<u8>>, String> {
        let table = Table::open(tx, map).map_err(|e| e.to_string())?;
        check_bitmap(tx, &table)?;
        let mut checker = Checker {
            table: &table,
            visited: HashSet::new(),
            content: BTreeMap::new(),
            node: vec![0u8; N_VALUE + table.value_size],
        };
        let mut heads = Vec::new();
        let mut sweep = Sweep::default();
        while table
            .chunk_heads(tx, &mut sweep, &mut heads)
            .map_err(|e| e.to_string())?
        {
            let first = (sweep.chunk - 1) * table.chunk_buckets();
            for (i, &head) in heads.iter().enumerate() {
                checker.chain(tx, first + i as u64, head)?;
            }
        }
        let count = table.count(tx).map_err(|e| e.to_string())?;
        if checker.content.len() as u64 != count {
            return Err(format!(
                "hash: count is {count} but the chains hold {} nodes",
                checker.content.len()
            ));
        }
        Ok(checker.content)
    }
}

/// The bitmap has `ready` bits set, none beyond the last chunk.
fn check_bitmap<T: Tx>(tx: &mut T, table: &Table) -> Result<(), String> {
    if table.bitmap.is_null() {
        return Ok(()); // `open` checked that every chunk is ready
    }
    let chunks = table.chunks();
    let mut set = 0u64;
    for index in 0..chunks.div_ceil(64) {
        let bits = tx
            .read_u64(table.bitmap, 8 * index)
            .map_err(|e| e.to_string())?;
        let valid = (chunks - 64 * index).min(64);
        if valid < 64 && bits >> valid != 0 {
            return Err(format!(
                "hash: bitmap marks chunks beyond the last ({chunks})"
            ));
        }
        set += u64::from(bits.count_ones());
    }
    if set != table.ready {
        return Err(format!(
            "hash: {set} chunks marked ready, {} counted",
            table.ready
        ));
    }
    Ok(())
}

/// State of the invariant checker.
struct Checker<'a> {
    table: &'a Table,
    visited: HashSet<u64>,
    content: BTreeMap<u64, Vec<u8>>,
    node: Vec<u8>,
}

impl Checker<'_> {
    /// Walks chain `bucket`: nodes unvisited (no cycles, no sharing), keys hashing here,
    /// keys unique.
    fn chain<T: Tx>(&mut self, tx: &mut T, bucket: u64, head: PPtr<Node>) -> Result<(), String> {
        let mut cur = head;
        while !cur.is_null() {
            if !self.visited.insert(cur.offset()) {
                return Err(format!("hash: node {cur:?} is reached twice"));
            }
            tx.read(cur, 0, &mut self.node).map_err(|e| e.to_string())?;
            let key = word(&self.node, N_KEY);
            if self.table.bucket_of(key) != bucket {
                return Err(format!("hash: key {key} is in bucket {bucket}"));
            }
            let value = self.node[N_VALUE..].to_vec();
            if self.content.insert(key, value).is_some() {
                return Err(format!("hash: key {key} is stored twice"));
            }
            cur = PPtr::from_word(word(&self.node, N_NEXT));
            if !cur.is_null() {
                tx.check(cur).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tx::{Engine, MemEngine};

    fn build(engine: &MemEngine, capacity: u64, keys: u64) -> PPtr {
        engine
            .transaction(|tx| {
                let map = HashMap::create(tx, capacity, 8)?;
                for key in 0..keys {
                    HashMap::put(tx, map, key, &key.to_le_bytes())?;
                }
                Ok::<_, TxError>(map)
            })
            .expect("build")
    }

    fn check(engine: &MemEngine, map: PPtr) -> Result<BTreeMap<u64, Vec<u8>>, String> {
        engine
            .transaction(|tx| Ok::<_, TxError>(HashMap::check(tx, map)))
            .expect("check transaction")
    }

    fn table<R>(
        engine: &MemEngine,
        map: PPtr,
        f: impl Fn(&mut tx::mem::MemTx<'_>, &Table) -> TxResult<R>,
    ) -> R {
        engine
            .transaction(|tx| {
                let table = Table::open(tx, map)?;
                f(tx, &table)
            })
            .expect("inspect")
    }

    /// The head of a chain of at least two nodes, and its bucket.
    fn long_chain(engine: &MemEngine, map: PPtr) -> (u64, PPtr<Node>) {
        table(engine, map, |tx, table| {
            for key in 0..64 {
                let bucket = table.bucket(tx, key)?;
                if !read_link(tx, bucket.head)?.1.is_null() {
                    return Ok((bucket.index, bucket.head));
                }
            }
            Err(TxError::abort("no chain of two nodes"))
        })
    }

    fn overwrite<O>(engine: &MemEngine, obj: PPtr<O>, field: usize, value: u64) {
        engine
            .transaction(|tx| tx.write_u64(obj, field as u64, value))
            .expect("corrupt");
    }

    #[test]
    fn checker_catches_a_key_in_the_wrong_bucket() {
        let engine = MemEngine::new(1 << 20);
        let map = build(&engine, 8, 20);
        assert!(check(&engine, map).is_ok());
        let (bucket, node) = long_chain(&engine, map);
        let stray = (0..).find(|&k| mix(k) & 7 != bucket).expect("key");
        overwrite(&engine, node, N_KEY, stray);
        assert!(check(&engine, map).is_err());
    }

    #[test]
    fn checker_catches_bad_pointers_cycles_and_counts() {
        let engine = MemEngine::new(1 << 20);
        let map = build(&engine, 8, 20);
        let (_, node) = long_chain(&engine, map);
        overwrite(&engine, node, N_NEXT, 0xdead_beef);
        assert!(check(&engine, map).is_err());
        overwrite(&engine, node, N_NEXT, node.word());
        assert!(check(&engine, map).is_err());
        overwrite(&engine, node, N_NEXT, 0);
        assert!(check(&engine, map).is_err(), "count no longer matches");
        overwrite(&engine, map, H_BUCKET_COUNT, 12);
        assert!(check(&engine, map).is_err());
    }

    #[test]
    fn the_count_has_its_own_line_and_version_1_images_are_refused() {
        let engine = MemEngine::new(1 << 20);
        let map = build(&engine, 8, 20);
        let (header, counter) = table(&engine, map, |_, t| Ok((t.header, t.counter)));
        assert_eq!(counter.offset() % 64, 0, "the counter starts a cache line");
        assert!(counter.offset() / 64 != header.offset() / 64);
        assert_eq!(
            engine.transaction(|tx| HashMap::len(tx, map)).expect("len"),
            20
        );
        overwrite(&engine, map, H_MAGIC, u64::from_le_bytes(*b"FRHASH01"));
        let opened = engine.transaction(|tx| HashMap::len(tx, map));
        assert!(
            matches!(&opened, Err(TxError::Corrupted(why)) if why.contains("bad magic")),
            "{opened:?}"
        );
    }

    #[test]
    fn a_table_larger_than_any_pool_is_out_of_space() {
        let engine = MemEngine::new(1 << 20);
        let created = engine.transaction(|tx| HashMap::create(tx, 2 * MAX_BUCKETS, 8));
        assert!(
            matches!(created, Err(TxError::OutOfSpace { size }) if size == 16 * MAX_BUCKETS),
            "{created:?}"
        );
    }

    #[test]
    fn large_tables_zero_chunks_lazily_and_the_checker_audits_the_bitmap() {
        let engine = MemEngine::new(8 << 20);
        let capacity = 4 * EAGER_ZERO_BYTES;
        let map = build(&engine, capacity, 100);
        let (ready, bitmap) = table(&engine, map, |_, t| Ok((t.ready, t.bitmap)));
        assert!(!bitmap.is_null() && ready > 0 && ready <= 100);
        let content = check(&engine, map).expect("valid");
        assert_eq!(content.len(), 100);
        overwrite(&engine, map, H_READY, ready - 1);
        assert!(check(&engine, map).is_err());
        overwrite(&engine, map, H_READY, ready);
        overwrite(&engine, bitmap, 0, u64::MAX);
        assert!(check(&engine, map).is_err());
    }
}
