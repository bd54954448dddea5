//! A persistent B+tree (Silo's B+tree micro-benchmark, YCSB's ordered index).
//!
//! Persistent layout (little-endian, byte offsets); `K` = [`NODE_KEYS`] = 16:
//!
//! ```text
//! header (40 B)                 node, common part (144 B)
//!   0  magic      u64 "FRBTREE1"  0  kind   u32 (LEAF or INNER)
//!   8  value_size u64             4  n      u32 (keys in use, <= K)
//!  16  root       ptr             8  next   ptr (leaves: right sibling or null; inner: null)
//!  24  count      u64            16  keys   [u64; K] (the first n are meaningful)
//!  32  height     u64 (levels)  inner node (280 B):  144  children [ptr; K + 1] (first n + 1)
//!                               leaf (144 + K * value_size B):  144  values [[u8; value_size]; K]
//! ```
//!
//! Invariants (checked by [`BTree`]'s `check`): keys strictly increase within a node; inner
//! node keys separate their children (child `i` holds keys in `[keys[i-1], keys[i])`, within
//! the bounds inherited from above); every leaf is at depth `height - 1`; every non-root node
//! holds between [`MIN_KEYS`] and `K` keys, an inner root at least one, a leaf root any number;
//! the leaves, linked by `next`, are exactly the in-order leaves ending with null; `count` is
//! the number of keys in leaves. Deletes rebalance by borrowing from or merging with a sibling,
//! so the minimum occupancy holds after every operation.
//!
//! Access discipline: nodes are read whole (keys and children, one access) into DRAM images;
//! leaf values are read and written only where they move. Changes go to the images and mark
//! the words they touch; each node is then written once per operation, one access per run of
//! changed words. A removal that leaves a leaf underfull borrows or merges in the same step,
//! so no entry moves twice. Operations never read a byte twice nor write a byte twice (tested).

use crate::dist::KeyDist;
use crate::map::{MapWorkload, UpdateStyle};
use crate::{Params, PersistentMap};
use smallvec::SmallVec;
use std::collections::{BTreeMap, HashSet};
use std::ops::Range;
use tx::{PPtr, Tx, TxError, TxResult};

/// The B+tree (a marker type; a tree is identified by its header pointer).
#[derive(Debug)]
pub struct BTree;

/// Silo's B+tree benchmark: uniform keys, updates are upserts.
pub fn silo_btree(params: Params) -> MapWorkload<BTree> {
    MapWorkload::new(params, UpdateStyle::Upsert, KeyDist::Uniform)
}

/// The same tree (same layout and algorithms) with inserts written the way PMDK's
/// `btree_map` writes them: an insert moves every slot after its position, to the end of
/// the node (`memmove` of `ORDER - 2 - p` items, empty ones included), a split clears the
/// slots it moved out of the old node, and new nodes are allocated zero-filled (`TX_ZNEW`).
/// Removes are [`BTree`]'s.
#[derive(Debug)]
pub struct PmdkBTree;

const MAGIC: u64 = u64::from_le_bytes(*b"FRBTREE1");

const H_MAGIC: usize = 0;
const H_VALUE_SIZE: usize = 8;
const H_ROOT: usize = 16;
const H_COUNT: usize = 24;
const H_HEIGHT: usize = 32;
const HEADER_SIZE: usize = 40;

/// Keys per node (a 16-key inner node is 280 B, between four and five cache lines).
pub const NODE_KEYS: usize = 16;
/// Least keys of a non-root node.
pub const MIN_KEYS: usize = NODE_KEYS / 2;
/// Keys kept by the left leaf of a split (of `NODE_KEYS + 1`).
const LEAF_SPLIT: usize = (NODE_KEYS + 2) / 2;
/// Keys kept by the left inner node of a split; the next key moves up.
const INNER_SPLIT: usize = NODE_KEYS / 2;

/// Bytes of the header block, for sizing a pool before setup (`bench::space`).
pub const HEADER_BYTES: u64 = HEADER_SIZE as u64;
/// Bytes of a leaf before its `NODE_KEYS` values.
pub const LEAF_BYTES_BEFORE_VALUES: u64 = N_SLOTS as u64;
/// Bytes of an inner node.
pub const INNER_NODE_BYTES: u64 = INNER_SIZE as u64;
/// Keys the left leaf of a split keeps: a load in key order leaves every leaf but the last
/// with this many.
pub const LEAF_KEEPS: u64 = LEAF_SPLIT as u64;

const N_KIND: usize = 0;
const N_COUNT: usize = 4;
const N_NEXT: usize = 8;
const N_KEYS: usize = 16;
/// Children (inner nodes) or values (leaves).
const N_SLOTS: usize = N_KEYS + 8 * NODE_KEYS;
const INNER_SIZE: usize = N_SLOTS + 8 * (NODE_KEYS + 1);

const KIND_LEAF: u32 = u32::from_le_bytes(*b"LEAF");
const KIND_INNER: u32 = u32::from_le_bytes(*b"INNR");

/// Tallest tree accepted (16^24 keys); anything taller is corruption.
const MAX_HEIGHT: u64 = 24;
/// Largest value size accepted (guards allocations sized from PM content).
const MAX_VALUE_SIZE: u64 = 1 << 20;

enum Header {}
enum NodeObj {}
type NodePtr = PPtr<NodeObj>;

#[inline]
fn word(buf: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(bytes)
}

#[inline]
fn half_word(buf: &[u8], at: usize) -> u32 {
    let mut bytes = [0u8; 4];
    bytes.copy_from_slice(&buf[at..at + 4]);
    u32::from_le_bytes(bytes)
}

fn corrupt(what: impl std::fmt::Display) -> TxError {
    TxError::Corrupted(format!("btree: {what}"))
}

/// A node's image in DRAM (values of leaves stay in PM), with the words changed since it was
/// read. Changes are made to the image and marked; [`Node::flush`] writes the marked words, so
/// a node changed twice by one operation (a merge then a borrow) is written once.
#[derive(Clone)]
struct Node {
    ptr: NodePtr,
    leaf: bool,
    n: usize,
    next: NodePtr,
    keys: [u64; NODE_KEYS],
    children: [NodePtr; NODE_KEYS + 1],
    /// Bit `w`: word `w` of the node (bytes `8w..8w+8`) differs from PM.
    dirty: u64,
}

/// Word indexes in a node: kind and count share word 0.
const W_COUNT: usize = 0;
const W_NEXT: usize = N_NEXT / 8;
const W_KEYS: usize = N_KEYS / 8;
const W_SLOTS: usize = N_SLOTS / 8;
/// Dirty runs separated by at most this many clean words are written as one access.
const MERGE_GAP: usize = 2;

impl Node {
    fn new(ptr: NodePtr, leaf: bool) -> Node {
        Node {
            ptr,
            leaf,
            n: 0,
            next: PPtr::null(),
            keys: [0; NODE_KEYS],
            children: [PPtr::null(); NODE_KEYS + 1],
            dirty: 0,
        }
    }

    /// Reads a node with one access (the common part for leaves, everything for inner nodes),
    /// checking its kind, its key count and the pointers in use.
    fn load<T: Tx>(tx: &mut T, ptr: NodePtr, leaf: bool) -> TxResult<Node> {
        let mut node = Node::new(ptr, leaf);
        node.reload(tx)?;
        Ok(node)
    }

    /// [`Node::load`] into this node (its `ptr` and `leaf` say which): a descent fills the
    /// nodes of its path in place instead of moving ~300-byte nodes around.
    fn reload<T: Tx>(&mut self, tx: &mut T) -> TxResult<()> {
        let (ptr, leaf, node) = (self.ptr, self.leaf, self);
        let mut buf = [0u8; INNER_SIZE];
        let len = if leaf { N_SLOTS } else { INNER_SIZE };
        tx.read(ptr, 0, &mut buf[..len])?;
        let kind = half_word(&buf, N_KIND);
        let n = half_word(&buf, N_COUNT) as usize;
        if kind != if leaf { KIND_LEAF } else { KIND_INNER } {
            return Err(corrupt(format_args!("node {ptr:?} has kind {kind:#x}")));
        }
        if n > NODE_KEYS {
            return Err(corrupt(format_args!("node {ptr:?} has {n} keys")));
        }
        node.dirty = 0;
        node.n = n;
        node.next = PPtr::from_word(word(&buf, N_NEXT));
        if !node.next.is_null() {
            tx.check(node.next)?;
        }
        // Unused slots are kept as read too, so the image matches PM word for word.
        let words = |at: usize| {
            buf[at..]
                .chunks_exact(8)
                .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
        };
        node.keys
            .iter_mut()
            .zip(words(N_KEYS))
            .for_each(|(key, w)| *key = w);
        if !leaf {
            node.children
                .iter_mut()
                .zip(words(N_SLOTS))
                .for_each(|(child, w)| *child = PPtr::from_word(w));
            for &child in &node.children[..=n] {
                tx.check(child)?;
            }
        }
        Ok(())
    }

    /// The node as stored, but for leaf values.
    fn image(&self) -> [u8; INNER_SIZE] {
        let kind = if self.leaf { KIND_LEAF } else { KIND_INNER };
        let mut buf = [0u8; INNER_SIZE];
        buf[N_KIND..N_KIND + 4].copy_from_slice(&kind.to_le_bytes());
        buf[N_COUNT..N_COUNT + 4].copy_from_slice(&(self.n as u32).to_le_bytes());
        buf[N_NEXT..N_NEXT + 8].copy_from_slice(&self.next.word().to_le_bytes());
        for (i, key) in self.keys.iter().enumerate() {
            buf[N_KEYS + 8 * i..N_KEYS + 8 * i + 8].copy_from_slice(&key.to_le_bytes());
        }
        if !self.leaf {
            for (i, child) in self.children.iter().enumerate() {
                let at = N_SLOTS + 8 * i;
                buf[at..at + 8].copy_from_slice(&child.word().to_le_bytes());
            }
        }
        buf
    }

    /// Index of the child whose subtree may hold `key`.
    fn child_index(&self, key: u64) -> usize {
        self.keys[..self.n].partition_point(|&sep| sep <= key)
    }

    fn mark(&mut self, words: Range<usize>) {
        for w in words {
            self.dirty |= 1 << w;
        }
    }

    fn mark_keys(&mut self, keys: Range<usize>) {
        self.mark(W_KEYS + keys.start..W_KEYS + keys.end);
    }

    fn mark_children(&mut self, children: Range<usize>) {
        self.mark(W_SLOTS + children.start..W_SLOTS + children.end);
    }

    fn mark_count(&mut self) {
        self.mark(W_COUNT..W_COUNT + 1);
    }

    fn mark_next(&mut self) {
        self.mark(W_NEXT..W_NEXT + 1);
    }

    /// Writes the changed words, one access per run (runs closer than [`MERGE_GAP`] clean
    /// words are joined: the words between are rewritten with the value they have).
    fn flush<T: Tx>(&mut self, tx: &mut T) -> TxResult<()> {
        if self.dirty == 0 {
            return Ok(());
        }
        let image = self.image();
        let mut dirty = self.dirty;
        while dirty != 0 {
            let start = dirty.trailing_zeros() as usize;
            let mut end = start + (dirty >> start).trailing_ones() as usize;
            while (dirty >> end) != 0 && ((dirty >> end).trailing_zeros() as usize) <= MERGE_GAP {
                end += (dirty >> end).trailing_zeros() as usize;
                end += (dirty >> end).trailing_ones() as usize;
            }
            tx.write(self.ptr, 8 * start as u64, &image[8 * start..8 * end])?;
            dirty &= !(((1u64 << (end - start)) - 1) << start);
        }
        self.dirty = 0;
        Ok(())
    }
}

/// The header fields, read with one access.
struct Tree {
    header: PPtr<Header>,
    value_size: usize,
    root: NodePtr,
    count: u64,
    height: u64,
    /// Inserts write as [`PmdkBTree`] does.
    pmdk: bool,
}

/// Values read or moved together: on the stack up to a full leaf of 64-byte values.
type Values = SmallVec<[u8; NODE_KEYS * 64]>;

/// The inner nodes from the root down, each with the index of the child taken, and the leaf.
struct Path {
    /// On the stack for trees up to 8 inner levels (16^9 keys), so a descent allocates
    /// nothing.
    inner: SmallVec<[(Node, usize); 8]>,
    leaf: Node,
}

impl Path {
    fn empty() -> Path {
        Path {
            inner: SmallVec::new(),
            leaf: Node::new(PPtr::null(), true),
        }
    }
}

impl Tree {
    fn open<T: Tx>(tx: &mut T, map: PPtr) -> TxResult<Tree> {
        let header = map.cast::<Header>();
        let mut buf = [0u8; HEADER_SIZE];
        tx.read(header, 0, &mut buf)?;
        if word(&buf, H_MAGIC) != MAGIC {
            return Err(corrupt("bad magic"));
        }
        let value_size = word(&buf, H_VALUE_SIZE);
        let height = word(&buf, H_HEIGHT);
        if value_size > MAX_VALUE_SIZE {
            return Err(corrupt(format_args!("value size {value_size}")));
        }
        if !(1..=MAX_HEIGHT).contains(&height) {
            return Err(corrupt(format_args!("height {height}")));
        }
        let root = PPtr::from_word(word(&buf, H_ROOT));
        tx.check(root)?;
        Ok(Tree {
            header,
            value_size: value_size as usize,
            root,
            count: word(&buf, H_COUNT),
            height,
            pmdk: false,
        })
    }

    /// [`Tree::open`] for [`PmdkBTree`]'s inserts.
    fn open_pmdk<T: Tx>(tx: &mut T, map: PPtr) -> TxResult<Tree> {
        Ok(Tree {
            pmdk: true,
            ..Tree::open(tx, map)?
        })
    }

    /// A node of `size` bytes for this operation (zero-filled for [`PmdkBTree`]).
    fn alloc_node<T: Tx>(&self, tx: &mut T, size: u64) -> TxResult<NodePtr> {
        new_node(tx, size, self.pmdk)
    }

    fn check_len(&self, len: usize) -> TxResult<()> {
        if len == self.value_size {
            Ok(())
        } else {
            Err(TxError::abort(format_args!(
                "btree: value of {len} bytes for a tree of {}-byte values",
                self.value_size
            )))
        }
    }

    /// Offset of value slot `i` of a leaf.
    fn value_at(&self, i: usize) -> u64 {
        (N_SLOTS + i * self.value_size) as u64
    }

    /// Writes consecutive values from slot `first` of `leaf` with one access (none if empty).
    fn write_values<T: Tx>(
        &self,
        tx: &mut T,
        leaf: NodePtr,
        first: usize,
        values: &[u8],
    ) -> TxResult<()> {
        if values.is_empty() {
            return Ok(());
        }
        tx.write(leaf, self.value_at(first), values)
    }

    fn leaf_size(&self) -> u64 {
        self.value_at(NODE_KEYS)
    }

    /// Reads values `range` of `leaf` with one access.
    fn read_values<T: Tx>(
        &self,
        tx: &mut T,
        leaf: NodePtr,
        range: Range<usize>,
    ) -> TxResult<Values> {
        let mut buf = Values::from_elem(0, range.len() * self.value_size);
        if !buf.is_empty() {
            tx.read(leaf, self.value_at(range.start), &mut buf)?;
        }
        Ok(buf)
    }

    /// The leaf that may hold `key`, without keeping the inner nodes passed (for reads).
    fn descend_to_leaf<T: Tx>(&self, tx: &mut T, key: u64) -> TxResult<Node> {
        let mut ptr = self.root;
        for _ in 1..self.height {
            let node = Node::load(tx, ptr, false)?;
            ptr = node.children[node.child_index(key)];
        }
        Node::load(tx, ptr, true)
    }

    fn descend<T: Tx>(&self, tx: &mut T, key: u64) -> TxResult<Path> {
        let mut path = Path::empty();
        self.descend_into(tx, key, &mut path)?;
        Ok(path)
    }

    /// The path to `key`'s leaf, read into `path` in place (a `Path` is a few KiB on the
    /// stack: moving one costs more than the descent's reads).
    fn descend_into<T: Tx>(&self, tx: &mut T, key: u64, path: &mut Path) -> TxResult<()> {
        path.inner.clear();
        let mut ptr = self.root;
        for _ in 1..self.height {
            path.inner.push((Node::new(ptr, false), 0));
            let (node, index) = path.inner.last_mut().expect("pushed above");
            node.reload(tx)?;
            *index = node.child_index(key);
            ptr = node.children[*index];
        }
        path.leaf = Node::new(ptr, true);
        path.leaf.reload(tx)
    }

    /// Writes the count and, when the root changed, root and height too (the three fields
    /// are adjacent: one access).
    fn commit_header<T: Tx>(
        &self,
        tx: &mut T,
        count: u64,
        shape: Option<(NodePtr, u64)>,
    ) -> TxResult<()> {
        let Some((root, height)) = shape else {
            return tx.write_u64(self.header, H_COUNT as u64, count);
        };
        let mut buf = [0u8; 24];
        buf[..8].copy_from_slice(&root.word().to_le_bytes());
        buf[8..16].copy_from_slice(&count.to_le_bytes());
        buf[16..].copy_from_slice(&height.to_le_bytes());
        tx.write(self.header, H_ROOT as u64, &buf)
    }
}

// ---------------------------------------------------------------------------------------------
// Insertion

impl Tree {
    /// Inserts `key` at `pos` of a leaf; returns the separator and new right sibling if the
    /// leaf split.
    fn leaf_insert<T: Tx>(
        &self,
        tx: &mut T,
        leaf: &mut Node,
        pos: usize,
        key: u64,
        value: &[u8],
    ) -> TxResult<Option<(u64, NodePtr)>> {
        let n = leaf.n;
        if n == NODE_KEYS {
            return self.split_leaf(tx, leaf, pos, key, value).map(Some);
        }
        // Shift entries pos.. right by one: the new value and the moved ones in one write.
        // PMDK's memmove moves every slot to the end of the node, empty ones too.
        let end = if self.pmdk { NODE_KEYS - 1 } else { n };
        let vs = self.value_size;
        let mut values = Values::from_elem(0, (end + 1 - pos) * vs);
        values[..vs].copy_from_slice(value);
        if end > pos {
            tx.read(leaf.ptr, self.value_at(pos), &mut values[vs..])?;
        }
        self.write_values(tx, leaf.ptr, pos, &values)?;
        leaf.keys.copy_within(pos..end, pos + 1);
        leaf.keys[pos] = key;
        leaf.n += 1;
        leaf.mark_keys(pos..end + 1);
        leaf.mark_count();
        leaf.flush(tx)?;
        Ok(None)
    }

    /// Splits a full leaf while inserting: the left keeps [`LEAF_SPLIT`] entries, a new right
    /// leaf takes the rest. Only the entries that move or shift are read and written.
    fn split_leaf<T: Tx>(
        &self,
        tx: &mut T,
        leaf: &mut Node,
        pos: usize,
        key: u64,
        value: &[u8],
    ) -> TxResult<(u64, NodePtr)> {
        let vs = self.value_size;
        let mut keys = [0u64; NODE_KEYS + 1];
        keys[..pos].copy_from_slice(&leaf.keys[..pos]);
        keys[pos] = key;
        keys[pos + 1..].copy_from_slice(&leaf.keys[pos..]);
        // Entries from..=NODE_KEYS of the combined sequence change place.
        let from = pos.min(LEAF_SPLIT);
        let old = self.read_values(tx, leaf.ptr, from..NODE_KEYS)?;
        let mut moved = Vec::with_capacity(old.len() + vs);
        moved.extend_from_slice(&old[..(pos - from) * vs]);
        moved.extend_from_slice(value);
        moved.extend_from_slice(&old[(pos - from) * vs..]);
        let (stay, go) = moved.split_at((LEAF_SPLIT - from) * vs);

        let mut right = Node::new(self.alloc_node(tx, self.leaf_size())?, true);
        right.n = NODE_KEYS + 1 - LEAF_SPLIT;
        right.next = leaf.next;
        right.keys[..right.n].copy_from_slice(&keys[LEAF_SPLIT..]);
        let mut image = right.image()[..N_SLOTS].to_vec();
        image.extend_from_slice(go);
        tx.write(right.ptr, 0, &image)?;

        leaf.keys[..LEAF_SPLIT].copy_from_slice(&keys[..LEAF_SPLIT]);
        leaf.n = LEAF_SPLIT;
        leaf.next = right.ptr;
        self.write_values(tx, leaf.ptr, from, stay)?;
        leaf.mark_keys(from..LEAF_SPLIT);
        if self.pmdk {
            // btree_map empties the slots it moved to the new node.
            leaf.keys[LEAF_SPLIT..].fill(0);
            leaf.mark_keys(LEAF_SPLIT..NODE_KEYS);
            let zeros = vec![0u8; (NODE_KEYS - LEAF_SPLIT) * vs];
            self.write_values(tx, leaf.ptr, LEAF_SPLIT, &zeros)?;
        }
        leaf.mark_count();
        leaf.mark_next();
        leaf.flush(tx)?;
        Ok((right.keys[0], right.ptr))
    }
}

/// A new node of `size` bytes (zero-filled, as `TX_ZNEW` allocates, when `zeroed`).
fn new_node<T: Tx>(tx: &mut T, size: u64, zeroed: bool) -> TxResult<NodePtr> {
    if zeroed {
        tx.alloc_zeroed(size)
    } else {
        tx.alloc(size)
    }
}

/// Inserts separator `sep` and its right child after child `index` of an inner node; returns
/// the key moving up and the new right sibling if the node split. `pmdk`: write as
/// [`PmdkBTree`] does.
fn inner_insert<T: Tx>(
    tx: &mut T,
    node: &mut Node,
    index: usize,
    (sep, right): (u64, NodePtr),
    pmdk: bool,
) -> TxResult<Option<(u64, NodePtr)>> {
    let n = node.n;
    if n == NODE_KEYS {
        return split_inner(tx, node, index, (sep, right), pmdk).map(Some);
    }
    // PMDK's memmove moves every slot to the end of the node.
    let end = if pmdk { NODE_KEYS - 1 } else { n };
    node.keys.copy_within(index..end, index + 1);
    node.keys[index] = sep;
    node.children.copy_within(index + 1..end + 1, index + 2);
    node.children[index + 1] = right;
    node.n += 1;
    node.mark_keys(index..end + 1);
    node.mark_children(index + 1..end + 2);
    node.mark_count();
    node.flush(tx)?;
    Ok(None)
}

/// Splits a full inner node while inserting: the left keeps [`INNER_SPLIT`] keys, the next
/// key moves up, a new right node takes the rest.
fn split_inner<T: Tx>(
    tx: &mut T,
    node: &mut Node,
    index: usize,
    (sep, child): (u64, NodePtr),
    pmdk: bool,
) -> TxResult<(u64, NodePtr)> {
    let mut keys = [0u64; NODE_KEYS + 1];
    keys[..index].copy_from_slice(&node.keys[..index]);
    keys[index] = sep;
    keys[index + 1..].copy_from_slice(&node.keys[index..]);
    let mut children = [PPtr::null(); NODE_KEYS + 2];
    children[..=index].copy_from_slice(&node.children[..=index]);
    children[index + 1] = child;
    children[index + 2..].copy_from_slice(&node.children[index + 1..]);

    let mut right = Node::new(new_node(tx, INNER_SIZE as u64, pmdk)?, false);
    right.n = NODE_KEYS - INNER_SPLIT;
    right.keys[..right.n].copy_from_slice(&keys[INNER_SPLIT + 1..]);
    right.children[..=right.n].copy_from_slice(&children[INNER_SPLIT + 1..]);
    tx.write(right.ptr, 0, &right.image())?;

    node.keys[..INNER_SPLIT].copy_from_slice(&keys[..INNER_SPLIT]);
    node.children[..=INNER_SPLIT].copy_from_slice(&children[..=INNER_SPLIT]);
    node.n = INNER_SPLIT;
    if index < INNER_SPLIT {
        node.mark_keys(index..INNER_SPLIT);
        node.mark_children(index + 1..INNER_SPLIT + 1);
    }
    if pmdk {
        // btree_map empties the slots it moved to the new node.
        node.keys[INNER_SPLIT..].fill(0);
        node.children[INNER_SPLIT + 1..].fill(PPtr::null());
        node.mark_keys(INNER_SPLIT..NODE_KEYS);
        node.mark_children(INNER_SPLIT + 1..NODE_KEYS + 1);
    }
    node.mark_count();
    node.flush(tx)?;
    Ok((keys[INNER_SPLIT], right.ptr))
}

/// A new root over the two halves of the old one (zero-filled first when `zeroed`).
fn grow<T: Tx>(
    tx: &mut T,
    left: NodePtr,
    (sep, right): (u64, NodePtr),
    zeroed: bool,
) -> TxResult<NodePtr> {
    let mut root = Node::new(new_node(tx, INNER_SIZE as u64, zeroed)?, false);
    root.n = 1;
    root.keys[0] = sep;
    root.children[..2].copy_from_slice(&[left, right]);
    tx.write(root.ptr, 0, &root.image()[..N_SLOTS + 16])?;
    Ok(root.ptr)
}

impl Tree {
    /// Inserts or overwrites; true if the key was new.
    fn put<T: Tx>(&self, tx: &mut T, key: u64, value: &[u8]) -> TxResult<bool> {
        self.check_len(value.len())?;
        let mut path = Path::empty();
        self.descend_into(tx, key, &mut path)?;
        let pos = match path.leaf.keys[..path.leaf.n].binary_search(&key) {
            Ok(pos) => {
                tx.write(path.leaf.ptr, self.value_at(pos), value)?;
                return Ok(false);
            }
            Err(pos) => pos,
        };
        let mut split = self.leaf_insert(tx, &mut path.leaf, pos, key, value)?;
        let mut shape = None;
        while let Some(entry) = split {
            split = match path.inner.pop() {
                Some((mut parent, index)) => {
                    inner_insert(tx, &mut parent, index, entry, self.pmdk)?
                }
                None => {
                    let root = grow(tx, self.root, entry, self.pmdk)?;
                    shape = Some((root, self.height + 1));
                    None
                }
            };
        }
        self.commit_header(tx, self.count + 1, shape)?;
        Ok(true)
    }
}

// ---------------------------------------------------------------------------------------------
// Deletion
//
// Every step flushes the nodes it is done with; the parent it changed stays dirty until the
// step above has also changed it (or decided not to), so each node is written once.

impl Tree {
    /// Removes entry `pos` of the path's leaf and restores minimum occupancy up the path;
    /// returns the new root if the root lost its last key.
    fn remove_at<T: Tx>(&self, tx: &mut T, path: Path, pos: usize) -> TxResult<Option<NodePtr>> {
        let Path {
            mut inner,
            mut leaf,
        } = path;
        let merged = match inner.last_mut() {
            Some((parent, index)) if leaf.n <= MIN_KEYS => {
                self.remove_underflowing(tx, parent, *index, &mut leaf, pos)?
            }
            // A root leaf may hold any number of keys.
            _ => {
                self.leaf_remove(tx, &mut leaf, pos)?;
                false
            }
        };
        if !merged {
            if let Some((parent, _)) = inner.last_mut() {
                parent.flush(tx)?;
            }
            return Ok(None);
        }
        // The parent lost an entry in a merge: fix it, and so on up.
        while let Some((mut node, _)) = inner.pop() {
            let Some((parent, index)) = inner.last_mut() else {
                if node.n > 0 {
                    node.flush(tx)?;
                    return Ok(None);
                }
                tx.free(node.ptr)?;
                return Ok(Some(node.children[0]));
            };
            if node.n >= MIN_KEYS {
                node.flush(tx)?;
                return Ok(None);
            }
            if !fix_inner(tx, parent, *index, &mut node)? {
                parent.flush(tx)?;
                return Ok(None);
            }
        }
        Ok(None)
    }

    /// Removes entry `pos` of a leaf that keeps enough entries, shifting the later ones left.
    fn leaf_remove<T: Tx>(&self, tx: &mut T, leaf: &mut Node, pos: usize) -> TxResult<()> {
        let n = leaf.n;
        let moved = self.read_values(tx, leaf.ptr, pos + 1..n)?;
        self.write_values(tx, leaf.ptr, pos, &moved)?;
        leaf.keys.copy_within(pos + 1..n, pos);
        leaf.n -= 1;
        leaf.mark_keys(pos..n - 1);
        leaf.mark_count();
        leaf.flush(tx)
    }

    /// Removes entry `pos` of a leaf at minimum occupancy (child `index` of `parent`) and, in
    /// the same step (so no entry is moved twice), borrows an entry from a sibling or merges
    /// with it; true if merged (the parent lost an entry). Leaves `parent` dirty.
    fn remove_underflowing<T: Tx>(
        &self,
        tx: &mut T,
        parent: &mut Node,
        index: usize,
        leaf: &mut Node,
        pos: usize,
    ) -> TxResult<bool> {
        if parent.n == 0 || index > parent.n {
            return Err(corrupt(format_args!(
                "inner node {:?} has no sibling for child {index}",
                parent.ptr
            )));
        }
        if index > 0 {
            let mut left = Node::load(tx, parent.children[index - 1], true)?;
            if left.n > MIN_KEYS {
                self.remove_borrowing_left(tx, parent, index, &mut left, leaf, pos)?;
                return Ok(false);
            }
            self.remove_merging_into_left(tx, parent, index, &mut left, leaf, pos)?;
        } else {
            let mut right = Node::load(tx, parent.children[1], true)?;
            if right.n > MIN_KEYS {
                self.remove_borrowing_right(tx, parent, leaf, &mut right, pos)?;
                return Ok(false);
            }
            self.remove_merging_right(tx, parent, leaf, &right, pos)?;
        }
        Ok(true)
    }

    /// Entries before `pos` shift right to make room at the front for `left`'s last entry;
    /// entries after `pos` stay where they are, and the leaf's count is unchanged.
    fn remove_borrowing_left<T: Tx>(
        &self,
        tx: &mut T,
        parent: &mut Node,
        index: usize,
        left: &mut Node,
        leaf: &mut Node,
        pos: usize,
    ) -> TxResult<()> {
        let ln = left.n;
        let mut values = self.read_values(tx, left.ptr, ln - 1..ln)?;
        values.extend_from_slice(&self.read_values(tx, leaf.ptr, 0..pos)?);
        self.write_values(tx, leaf.ptr, 0, &values)?;
        leaf.keys.copy_within(0..pos, 1);
        leaf.keys[0] = left.keys[ln - 1];
        leaf.mark_keys(0..pos + 1);
        leaf.flush(tx)?;
        left.n -= 1;
        left.mark_count();
        left.flush(tx)?;
        parent.keys[index - 1] = leaf.keys[0];
        parent.mark_keys(index - 1..index);
        Ok(())
    }

    /// Entries after `pos` shift left and `right`'s first entry is appended (the leaf's count
    /// is unchanged); `right`'s other entries shift left.
    fn remove_borrowing_right<T: Tx>(
        &self,
        tx: &mut T,
        parent: &mut Node,
        leaf: &mut Node,
        right: &mut Node,
        pos: usize,
    ) -> TxResult<()> {
        let (n, rn, vs) = (leaf.n, right.n, self.value_size);
        let from_right = self.read_values(tx, right.ptr, 0..rn)?;
        let mut values = self.read_values(tx, leaf.ptr, pos + 1..n)?;
        values.extend_from_slice(&from_right[..vs]);
        self.write_values(tx, leaf.ptr, pos, &values)?;
        leaf.keys.copy_within(pos + 1..n, pos);
        leaf.keys[n - 1] = right.keys[0];
        leaf.mark_keys(pos..n);
        leaf.flush(tx)?;
        self.write_values(tx, right.ptr, 0, &from_right[vs..])?;
        right.keys.copy_within(1..rn, 0);
        right.n -= 1;
        right.mark_keys(0..rn - 1);
        right.mark_count();
        right.flush(tx)?;
        parent.keys[0] = right.keys[0];
        parent.mark_keys(0..1);
        Ok(())
    }

    /// Appends `leaf` (child `index`) without entry `pos` to `left`, frees it and removes it
    /// from the parent.
    fn remove_merging_into_left<T: Tx>(
        &self,
        tx: &mut T,
        parent: &mut Node,
        index: usize,
        left: &mut Node,
        leaf: &Node,
        pos: usize,
    ) -> TxResult<()> {
        let (ln, n, vs) = (left.n, leaf.n, self.value_size);
        if ln + n - 1 > NODE_KEYS {
            return Err(corrupt(format_args!(
                "leaves of {ln} and {n} keys to merge"
            )));
        }
        let mut values = self.read_values(tx, leaf.ptr, 0..n)?;
        values.drain(pos * vs..(pos + 1) * vs);
        self.write_values(tx, left.ptr, ln, &values)?;
        left.keys[ln..ln + pos].copy_from_slice(&leaf.keys[..pos]);
        left.keys[ln + pos..ln + n - 1].copy_from_slice(&leaf.keys[pos + 1..n]);
        left.n = ln + n - 1;
        left.next = leaf.next;
        left.mark_keys(ln..left.n);
        left.mark_count();
        left.mark_next();
        left.flush(tx)?;
        tx.free(leaf.ptr)?;
        remove_entry(parent, index - 1);
        Ok(())
    }

    /// Drops entry `pos` of `leaf` (child 0) and appends all of `right`, which is freed and
    /// removed from the parent.
    fn remove_merging_right<T: Tx>(
        &self,
        tx: &mut T,
        parent: &mut Node,
        leaf: &mut Node,
        right: &Node,
        pos: usize,
    ) -> TxResult<()> {
        let (n, rn) = (leaf.n, right.n);
        if n - 1 + rn > NODE_KEYS {
            return Err(corrupt(format_args!(
                "leaves of {n} and {rn} keys to merge"
            )));
        }
        let mut values = self.read_values(tx, leaf.ptr, pos + 1..n)?;
        values.extend_from_slice(&self.read_values(tx, right.ptr, 0..rn)?);
        self.write_values(tx, leaf.ptr, pos, &values)?;
        leaf.keys.copy_within(pos + 1..n, pos);
        leaf.keys[n - 1..n - 1 + rn].copy_from_slice(&right.keys[..rn]);
        leaf.n = n - 1 + rn;
        leaf.next = right.next;
        leaf.mark_keys(pos..leaf.n);
        leaf.mark_count();
        leaf.mark_next();
        leaf.flush(tx)?;
        tx.free(right.ptr)?;
        remove_entry(parent, 0);
        Ok(())
    }
}

/// Removes key `sep` and child `sep + 1` of an inner node (in its image).
fn remove_entry(node: &mut Node, sep: usize) {
    let n = node.n;
    node.keys.copy_within(sep + 1..n, sep);
    node.children.copy_within(sep + 2..n + 1, sep + 1);
    node.n -= 1;
    node.mark_keys(sep..n - 1);
    node.mark_children(sep + 1..n);
    node.mark_count();
}

/// Fixes an underfull inner node (child `index` of `parent`) by rotating an entry through the
/// parent from a sibling, or merging with it; true if merged (the parent lost an entry).
/// Flushes the node (unless freed) and the sibling; leaves `parent` dirty.
fn fix_inner<T: Tx>(
    tx: &mut T,
    parent: &mut Node,
    index: usize,
    node: &mut Node,
) -> TxResult<bool> {
    if parent.n == 0 || index > parent.n {
        return Err(corrupt(format_args!(
            "inner node {:?} has no sibling for child {index}",
            parent.ptr
        )));
    }
    if index > 0 {
        let mut left = Node::load(tx, parent.children[index - 1], false)?;
        if left.n > MIN_KEYS {
            rotate_right(parent, index, &mut left, node);
            left.flush(tx)?;
            node.flush(tx)?;
            return Ok(false);
        }
        merge_inner(parent, index - 1, &mut left, node)?;
        left.flush(tx)?;
        tx.free(node.ptr)?;
    } else {
        let mut right = Node::load(tx, parent.children[1], false)?;
        if right.n > MIN_KEYS {
            rotate_left(parent, node, &mut right);
            right.flush(tx)?;
            node.flush(tx)?;
            return Ok(false);
        }
        merge_inner(parent, 0, node, &right)?;
        node.flush(tx)?;
        tx.free(right.ptr)?;
    }
    Ok(true)
}

/// Moves the separator before child `index` down to the front of `node` and the last key of
/// `left` up in its place; `left`'s last child moves to `node`.
fn rotate_right(parent: &mut Node, index: usize, left: &mut Node, node: &mut Node) {
    let (ln, n) = (left.n, node.n);
    node.keys.copy_within(0..n, 1);
    node.keys[0] = parent.keys[index - 1];
    node.children.copy_within(0..n + 1, 1);
    node.children[0] = left.children[ln];
    node.n += 1;
    node.mark_keys(0..n + 1);
    node.mark_children(0..n + 2);
    node.mark_count();
    parent.keys[index - 1] = left.keys[ln - 1];
    parent.mark_keys(index - 1..index);
    left.n -= 1;
    left.mark_count();
}

/// Moves the first separator of `parent` down to the end of `node` (child 0) and the first key
/// of `right` up in its place; `right`'s first child moves to `node`.
fn rotate_left(parent: &mut Node, node: &mut Node, right: &mut Node) {
    let (n, rn) = (node.n, right.n);
    node.keys[n] = parent.keys[0];
    node.children[n + 1] = right.children[0];
    node.n += 1;
    node.mark_keys(n..n + 1);
    node.mark_children(n + 1..n + 2);
    node.mark_count();
    parent.keys[0] = right.keys[0];
    parent.mark_keys(0..1);
    right.keys.copy_within(1..rn, 0);
    right.children.copy_within(1..rn + 1, 0);
    right.n -= 1;
    right.mark_keys(0..rn - 1);
    right.mark_children(0..rn);
    right.mark_count();
}

/// Appends separator `sep` of the parent and all of `right` to `left` and removes `right`
/// from the parent (the caller frees it).
fn merge_inner(parent: &mut Node, sep: usize, left: &mut Node, right: &Node) -> TxResult<()> {
    let (ln, rn) = (left.n, right.n);
    if ln + 1 + rn > NODE_KEYS {
        return Err(corrupt(format_args!(
            "inner nodes of {ln} and {rn} keys to merge"
        )));
    }
    left.keys[ln] = parent.keys[sep];
    left.keys[ln + 1..ln + 1 + rn].copy_from_slice(&right.keys[..rn]);
    left.children[ln + 1..ln + 2 + rn].copy_from_slice(&right.children[..=rn]);
    left.n = ln + 1 + rn;
    left.mark_keys(ln..left.n);
    left.mark_children(ln + 1..left.n + 1);
    left.mark_count();
    remove_entry(parent, sep);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The map interface

impl PersistentMap for BTree {
    const NAME: &'static str = "btree";
    const ORDERED: bool = true;

    fn create<T: Tx>(tx: &mut T, _capacity: u64, value_size: u32) -> TxResult<PPtr> {
        if u64::from(value_size) > MAX_VALUE_SIZE {
            return Err(TxError::abort(format_args!(
                "btree: value size {value_size}"
            )));
        }
        let size = N_SLOTS as u64 + NODE_KEYS as u64 * u64::from(value_size);
        let leaf = Node::new(tx.alloc(size)?, true);
        tx.write(leaf.ptr, 0, &leaf.image()[..N_KEYS])?;
        let header: PPtr<Header> = tx.alloc(HEADER_SIZE as u64)?;
        let mut buf = [0u8; HEADER_SIZE];
        for (at, value) in [
            (H_MAGIC, MAGIC),
            (H_VALUE_SIZE, u64::from(value_size)),
            (H_ROOT, leaf.ptr.word()),
            (H_COUNT, 0),
            (H_HEIGHT, 1),
        ] {
            buf[at..at + 8].copy_from_slice(&value.to_le_bytes());
        }
        tx.write(header, 0, &buf)?;
        Ok(header.cast())
    }

    fn get<T: Tx>(tx: &mut T, map: PPtr, key: u64, value: &mut [u8]) -> TxResult<bool> {
        let tree = Tree::open(tx, map)?;
        tree.check_len(value.len())?;
        let leaf = tree.descend_to_leaf(tx, key)?;
        match leaf.keys[..leaf.n].binary_search(&key) {
            Ok(pos) => {
                tx.read(leaf.ptr, tree.value_at(pos), value)?;
                Ok(true)
            }
            Err(_) => Ok(false),
        }
    }

    fn put<T: Tx>(tx: &mut T, map: PPtr, key: u64, value: &[u8]) -> TxResult<bool> {
        Tree::open(tx, map)?.put(tx, key, value)
    }

    fn remove<T: Tx>(tx: &mut T, map: PPtr, key: u64) -> TxResult<bool> {
        let tree = Tree::open(tx, map)?;
        let path = tree.descend(tx, key)?;
        let Ok(pos) = path.leaf.keys[..path.leaf.n].binary_search(&key) else {
            return Ok(false);
        };
        let shape = tree
            .remove_at(tx, path, pos)?
            .map(|root| (root, tree.height - 1));
        tree.commit_header(tx, tree.count.saturating_sub(1), shape)?;
        Ok(true)
    }

    fn scan<T: Tx>(
        tx: &mut T,
        map: PPtr,
        start: u64,
        count: usize,
    ) -> TxResult<Vec<(u64, Vec<u8>)>> {
        let tree = Tree::open(tx, map)?;
        let mut out = Vec::new();
        if count == 0 {
            return Ok(out);
        }
        let mut leaf = tree.descend_to_leaf(tx, start)?;
        let mut first = true;
        loop {
            let from = leaf.keys[..leaf.n].partition_point(|&k| k < start);
            let take = (leaf.n - from).min(count - out.len());
            // Every leaf after the first holds keys >= start, so each step makes progress
            // (which also bounds the walk on a corrupt, cyclic leaf chain).
            if take == 0 && !first {
                return Err(corrupt(format_args!(
                    "leaf {:?} adds nothing to a scan",
                    leaf.ptr
                )));
            }
            let values = tree.read_values(tx, leaf.ptr, from..from + take)?;
            let vs = tree.value_size;
            for (i, &key) in leaf.keys[from..from + take].iter().enumerate() {
                out.push((key, values[i * vs..(i + 1) * vs].to_vec()));
            }
            if out.len() == count || leaf.next.is_null() {
                return Ok(out);
            }
            leaf = Node::load(tx, leaf.next, true)?;
            first = false;
        }
    }

    fn len<T: Tx>(tx: &mut T, map: PPtr) -> TxResult<u64> {
        Ok(Tree::open(tx, map)?.count)
    }

    fn check<T: Tx>(tx: &mut T, map: PPtr) -> Result<BTreeMap<u64, Vec<u8>>, String> {
        let tree = Tree::open(tx, map).map_err(|e| e.to_string())?;
        let mut checker = Checker {
            tree: &tree,
            visited: HashSet::new(),
            leaves: Vec::new(),
            content: BTreeMap::new(),
        };
        checker.visit(tx, tree.root, tree.height, 0, None)?;
        checker.check_leaf_chain()?;
        if checker.content.len() as u64 != tree.count {
            return Err(format!(
                "btree: count is {} but the leaves hold {} keys",
                tree.count,
                checker.content.len()
            ));
        }
        Ok(checker.content)
    }
}

impl PersistentMap for PmdkBTree {
    const NAME: &'static str = "btree-pmdk";
    const ORDERED: bool = true;

    fn create<T: Tx>(tx: &mut T, capacity: u64, value_size: u32) -> TxResult<PPtr> {
        BTree::create(tx, capacity, value_size)
    }

    fn get<T: Tx>(tx: &mut T, map: PPtr, key: u64, value: &mut [u8]) -> TxResult<bool> {
        BTree::get(tx, map, key, value)
    }

    fn put<T: Tx>(tx: &mut T, map: PPtr, key: u64, value: &[u8]) -> TxResult<bool> {
        Tree::open_pmdk(tx, map)?.put(tx, key, value)
    }

    fn remove<T: Tx>(tx: &mut T, map: PPtr, key: u64) -> TxResult<bool> {
        BTree::remove(tx, map, key)
    }

    fn scan<T: Tx>(
        tx: &mut T,
        map: PPtr,
        start: u64,
        count: usize,
    ) -> TxResult<Vec<(u64, Vec<u8>)>> {
        BTree::scan(tx, map, start, count)
    }

    fn len<T: Tx>(tx: &mut T, map: PPtr) -> TxResult<u64> {
        BTree::len(tx, map)
    }

    fn check<T: Tx>(tx: &mut T, map: PPtr) -> Result<BTreeMap<u64, Vec<u8>>, String> {
        BTree::check(tx, map)
    }
}

// ---------------------------------------------------------------------------------------------
// Invariant checker

struct Checker<'a> {
    tree: &'a Tree,
    /// Nodes seen: a node reached twice means shared subtrees or a cycle.
    visited: HashSet<u64>,
    /// Leaves in order, each with its `next`.
    leaves: Vec<(NodePtr, NodePtr)>,
    content: BTreeMap<u64, Vec<u8>>,
}

impl Checker<'_> {
    /// Checks the subtree at `ptr`, `level` levels above the leaves counting itself, whose keys
    /// must lie in `[lo, hi)` (`None`: unbounded).
    fn visit<T: Tx>(
        &mut self,
        tx: &mut T,
        ptr: NodePtr,
        level: u64,
        lo: u64,
        hi: Option<u64>,
    ) -> Result<(), String> {
        if !self.visited.insert(ptr.offset()) {
            return Err(format!("btree: node {ptr:?} is reached twice"));
        }
        let leaf = level == 1;
        let node = Node::load(tx, ptr, leaf).map_err(|e| e.to_string())?;
        let min = match (level == self.tree.height, leaf) {
            (false, _) => MIN_KEYS,
            (true, true) => 0,
            (true, false) => 1,
        };
        if node.n < min {
            return Err(format!(
                "btree: node {ptr:?} has {} keys, fewer than {min}",
                node.n
            ));
        }
        let keys = &node.keys[..node.n];
        if keys.windows(2).any(|w| w[0] >= w[1]) {
            return Err(format!(
                "btree: keys of node {ptr:?} are not increasing: {keys:?}"
            ));
        }
        let out_of_range = |k: &u64| *k < lo || hi.is_some_and(|hi| *k >= hi);
        if let Some(key) = keys.iter().find(|k| out_of_range(k)) {
            return Err(format!(
                "btree: key {key} of node {ptr:?} is outside [{lo}, {hi:?})"
            ));
        }
        if leaf {
            return self.leaf(tx, &node);
        }
        if !node.next.is_null() {
            return Err(format!("btree: inner node {ptr:?} has a next pointer"));
        }
        for (i, &child) in node.children[..=node.n].iter().enumerate() {
            let child_lo = if i == 0 { lo } else { keys[i - 1] };
            let child_hi = if i == node.n { hi } else { Some(keys[i]) };
            self.visit(tx, child, level - 1, child_lo, child_hi)?;
        }
        Ok(())
    }

    fn leaf<T: Tx>(&mut self, tx: &mut T, node: &Node) -> Result<(), String> {
        let vs = self.tree.value_size;
        let values = self
            .tree
            .read_values(tx, node.ptr, 0..node.n)
            .map_err(|e| e.to_string())?;
        for (i, &key) in node.keys[..node.n].iter().enumerate() {
            self.content
                .insert(key, values[i * vs..(i + 1) * vs].to_vec());
        }
        self.leaves.push((node.ptr, node.next));
        Ok(())
    }

    /// The leaf chain links exactly the leaves in order.
    fn check_leaf_chain(&self) -> Result<(), String> {
        for pair in self.leaves.windows(2) {
            let ((leaf, next), (following, _)) = (pair[0], pair[1]);
            if next != following {
                return Err(format!(
                    "btree: leaf {leaf:?} links to {next:?}, not {following:?}"
                ));
            }
        }
        match self.leaves.last() {
            Some((leaf, next)) if !next.is_null() => {
                Err(format!("btree: last leaf {leaf:?} links to {next:?}"))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tx::mem::MemTx;
    use tx::{Engine, MemEngine};

    const VALUE_SIZE: u32 = 8;

    #[test]
    fn pmdk_style_inserts_build_the_same_tree_with_empty_tails() {
        let engine = MemEngine::new(8 << 20);
        let (plain, pmdk) = engine
            .transaction(|tx| {
                let plain = BTree::create(tx, 0, VALUE_SIZE)?;
                let pmdk = PmdkBTree::create(tx, 0, VALUE_SIZE)?;
                // A scrambled order of 3,000 keys: splits at every level.
                for i in 0..3_000u64 {
                    let key = i.wrapping_mul(0x9E37_79B9) % 100_003;
                    BTree::put(tx, plain, key, &key.to_le_bytes())?;
                    PmdkBTree::put(tx, pmdk, key, &key.to_le_bytes())?;
                }
                Ok::<_, TxError>((plain, pmdk))
            })
            .expect("inserts");
        let content = |map| engine.read_only(|tx| Ok::<_, TxError>(BTree::check(tx, map)));
        let pmdk_content = content(pmdk).expect("read").expect("valid tree");
        assert_eq!(
            content(plain).expect("read").expect("valid tree"),
            pmdk_content
        );
        assert_eq!(pmdk_content.len(), 3_000);
        // Every node's slots past its keys are empty, as btree_map leaves them.
        engine
            .read_only(|tx| {
                let tree = Tree::open(tx, pmdk)?;
                let mut nodes = vec![(tree.root, tree.height)];
                while let Some((ptr, level)) = nodes.pop() {
                    let node = Node::load(tx, ptr, level == 1)?;
                    assert!(node.keys[node.n..].iter().all(|&k| k == 0), "{ptr:?}");
                    if level > 1 {
                        assert!(node.children[node.n + 1..].iter().all(|c| c.is_null()));
                        nodes.extend(node.children[..=node.n].iter().map(|&c| (c, level - 1)));
                    }
                }
                Ok::<_, TxError>(())
            })
            .expect("walk");
    }

    /// A tree of `keys` keys (0, 10, 20, ...) and its engine.
    fn build(keys: u64) -> (MemEngine, PPtr) {
        let engine = MemEngine::new(4 << 20);
        let map = engine
            .transaction(|tx| {
                let map = BTree::create(tx, keys, VALUE_SIZE)?;
                for key in 0..keys {
                    BTree::put(tx, map, 10 * key, &key.to_le_bytes())?;
                }
                Ok::<_, TxError>(map)
            })
            .expect("build");
        (engine, map)
    }

    fn check(engine: &MemEngine, map: PPtr) -> Result<BTreeMap<u64, Vec<u8>>, String> {
        engine
            .transaction(|tx| Ok::<_, TxError>(BTree::check(tx, map)))
            .expect("check transaction")
    }

    /// Runs `f` on the tree's header, root and leftmost leaf, in a transaction that commits.
    fn with_nodes(
        engine: &MemEngine,
        map: PPtr,
        f: impl Fn(&mut MemTx<'_>, &Tree, &Node, &Node) -> TxResult<()>,
    ) {
        engine
            .transaction(|tx| {
                let tree = Tree::open(tx, map)?;
                assert!(tree.height >= 2, "the tests need an inner root");
                let root = Node::load(tx, tree.root, false)?;
                let leaf = tree.descend(tx, 0)?.leaf;
                f(tx, &tree, &root, &leaf)
            })
            .expect("corrupt");
    }

    fn expect_corruption(f: impl Fn(&mut MemTx<'_>, &Tree, &Node, &Node) -> TxResult<()>) {
        let (engine, map) = build(300);
        assert_eq!(check(&engine, map).expect("valid").len(), 300);
        with_nodes(&engine, map, f);
        let verdict = check(&engine, map);
        assert!(verdict.is_err(), "corruption not detected");
    }

    #[test]
    fn checker_catches_keys_out_of_order() {
        expect_corruption(|tx, _, _, leaf| tx.write_u64(leaf.ptr, N_KEYS as u64, leaf.keys[1] + 1));
    }

    #[test]
    fn checker_catches_a_separator_inconsistent_with_its_subtree() {
        expect_corruption(|tx, _, root, _| tx.write_u64(root.ptr, N_KEYS as u64, root.keys[0] + 5));
    }

    #[test]
    fn checker_catches_bad_child_pointers_and_cycles() {
        expect_corruption(|tx, _, root, _| tx.write_u64(root.ptr, N_SLOTS as u64, 0xdead_beef));
        expect_corruption(|tx, _, root, _| tx.write_u64(root.ptr, N_SLOTS as u64 + 8, 0));
        expect_corruption(|tx, _, root, _| tx.write_ptr(root.ptr, N_SLOTS as u64, root.ptr));
        expect_corruption(|tx, _, root, _| {
            tx.write_ptr(root.ptr, N_SLOTS as u64, root.children[1])
        });
    }

    #[test]
    fn checker_catches_a_broken_leaf_chain() {
        expect_corruption(|tx, _, _, leaf| tx.write_u64(leaf.ptr, N_NEXT as u64, 0));
        expect_corruption(|tx, _, _, leaf| tx.write_ptr(leaf.ptr, N_NEXT as u64, leaf.ptr));
    }

    #[test]
    fn checker_catches_underfull_nodes_bad_kinds_and_counts() {
        expect_corruption(|tx, _, _, leaf| tx.write(leaf.ptr, N_COUNT as u64, &1u32.to_le_bytes()));
        expect_corruption(|tx, _, _, leaf| {
            tx.write(leaf.ptr, N_COUNT as u64, &99u32.to_le_bytes())
        });
        expect_corruption(|tx, _, root, _| {
            tx.write(root.ptr, N_KIND as u64, &KIND_LEAF.to_le_bytes())
        });
        expect_corruption(|tx, tree, _, _| {
            tx.write_u64(tree.header, H_COUNT as u64, tree.count + 1)
        });
        expect_corruption(|tx, tree, _, _| {
            tx.write_u64(tree.header, H_HEIGHT as u64, tree.height + 1)
        });
    }

    #[test]
    fn emptying_a_tall_tree_collapses_it_to_an_empty_leaf() {
        let (engine, map) = build(2000);
        engine
            .transaction(|tx| {
                assert!(Tree::open(tx, map)?.height >= 3);
                for key in (0..2000).rev() {
                    assert!(BTree::remove(tx, map, 10 * key)?);
                }
                let tree = Tree::open(tx, map)?;
                assert_eq!((tree.height, tree.count), (1, 0));
                Ok::<_, TxError>(())
            })
            .expect("drain");
        assert!(check(&engine, map).expect("valid").is_empty());
    }
}
