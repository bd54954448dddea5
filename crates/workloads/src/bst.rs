//! TimeStone's BST benchmark: an unbalanced binary search tree of `u64` keys with
//! fixed-size values, a key and its value in every node.
//!
//! The tree is never rebalanced. Its expected depth is O(log n) (about 2 ln n on average
//! for a search) as long as keys arrive in random order: the TimeStone benchmark draws keys
//! uniformly, [`timestone_bst`] loads the initial keys in a shuffled order, and YCSB
//! scrambles its record keys. Loading sorted keys would degenerate the tree into a list.
//!
//! # Persistent layout (little-endian, byte offsets)
//!
//! Header (128 bytes: two 64-byte lines), linked from the root object:
//!
//! | offset | field        | type | meaning                                     |
//! |--------|--------------|------|---------------------------------------------|
//! | 0      | `magic`      | u64  | [`layout::MAGIC`] (`"FERBST02"`)            |
//! | 8      | `root`       | ptr  | root node, or null                          |
//! | 16     | `value_size` | u64  | bytes of every value (≤ [`MAX_VALUE_SIZE`]) |
//! | 24     | (reserved)   | 56 B | zero                                        |
//! | 80     | `count`      | u64  | number of nodes                             |
//! | 88     | (reserved)   | 40 B | zero                                        |
//!
//! Every operation reads the first 24 bytes; only inserts, deletes, `len` and the checker
//! read `count`. The count, written by every insert and delete, sits 80 bytes in, so it
//! never shares a 64-byte line with the fields every search reads, whatever the object's
//! alignment (every allocator gives at least 16; the heap gives a 128-byte object a 64-byte
//! aligned unit, the count then in the second line): on a multi-version engine the line
//! that searches read then keeps no version chain (it changes only when the root node is
//! replaced), and on any engine it does not bounce between writers and readers. Version 1
//! images (`FERBST01`: a 32-byte header with the count at offset 8) are refused with a
//! typed error naming the version.
//!
//! Node (24 + `value_size` bytes):
//!
//! | offset | field   | type               |
//! |--------|---------|--------------------|
//! | 0      | `key`   | u64                |
//! | 8      | `left`  | ptr (smaller keys) |
//! | 16     | `right` | ptr (larger keys)  |
//! | 24     | `value` | `value_size` bytes |
//!
//! Invariants: every key lies strictly inside the open interval its position implies (all
//! keys of a left subtree are smaller, of a right subtree larger), and exactly `count` nodes
//! are reachable from `root`. Every walk carries that interval, so a node reached again
//! through a corrupt cycle falls outside it and is reported instead of looping forever.

use crate::list::bytes::{corrupt, ptr_at, put_u64, u64_at};
use crate::list::{LoadOrder, MAX_VALUE_SIZE, TimestoneMap, checked_value_size};
use crate::{Params, PersistentMap};
use std::collections::BTreeMap;
use tx::{PPtr, Tx, TxError, TxResult};

/// Field offsets of the BST's persistent objects.
pub mod layout {
    /// Magic word of a BST header (layout version 2).
    pub const MAGIC: u64 = u64::from_le_bytes(*b"FERBST02");
    /// Magic word of a version 1 header (the count beside the root; refused).
    pub const MAGIC_V1: u64 = u64::from_le_bytes(*b"FERBST01");
    /// Header: magic word.
    pub const HEADER_MAGIC: u64 = 0;
    /// Header: root node.
    pub const HEADER_ROOT: u64 = 8;
    /// Header: value size in bytes.
    pub const HEADER_VALUE_SIZE: u64 = 16;
    /// Header: the bytes every operation reads (magic, root, value size).
    pub const HEADER_READ: u64 = 24;
    /// Header: number of nodes, a line away from the fields every operation reads.
    pub const HEADER_COUNT: u64 = 80;
    /// Header size.
    pub const HEADER_SIZE: u64 = 128;
    /// Node: key.
    pub const NODE_KEY: u64 = 0;
    /// Node: left child.
    pub const NODE_LEFT: u64 = 8;
    /// Node: right child.
    pub const NODE_RIGHT: u64 = 16;
    /// Node: value (the node's last field).
    pub const NODE_VALUE: u64 = 24;
}
use layout::*;

/// The unbalanced binary search tree (a marker type; a tree is identified by its header).
#[derive(Debug)]
pub struct Bst;

/// TimeStone's BST benchmark over [`Bst`], initial keys loaded in a shuffled order.
pub fn timestone_bst(params: Params) -> TimestoneMap<Bst> {
    TimestoneMap::new(params, LoadOrder::Shuffled)
}

/// The decoded fields every operation reads (not the count: see [`load_count`]).
struct Header {
    root: PPtr,
    value_size: u32,
}

impl Header {
    /// Reads and validates the header's first line (magic, root, value size) with one read.
    fn load<T: Tx>(tx: &mut T, tree: PPtr) -> TxResult<Header> {
        let mut buf = [0u8; HEADER_READ as usize];
        tx.read(tree, 0, &mut buf)?;
        check_magic(u64_at(&buf, HEADER_MAGIC))?;
        Ok(Header {
            root: ptr_at(tx, &buf, HEADER_ROOT)?,
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

/// Accepts the current layout's magic (inlined into every operation: one comparison).
#[inline(always)]
fn check_magic(magic: u64) -> TxResult<()> {
    if magic == MAGIC {
        Ok(())
    } else {
        Err(bad_magic(magic))
    }
}

/// The error for a header without the current magic: names an older layout's version.
#[cold]
#[inline(never)]
fn bad_magic(magic: u64) -> TxError {
    match magic {
        MAGIC_V1 => corrupt(
            "BST of layout version 1 (FERBST01, the count beside the root): \
             this build reads version 2 (FERBST02); recreate the map",
        ),
        _ => corrupt("object is not a BST header"),
    }
}

/// Reads the node count (its own line: only inserts, deletes, `len` and the checker).
fn load_count<T: Tx>(tx: &mut T, tree: PPtr) -> TxResult<u64> {
    tx.read_u64(tree, HEADER_COUNT)
}

/// The open key interval a node's position allows (`None`: unbounded).
#[derive(Clone, Copy, Default)]
struct Bounds {
    above: Option<u64>,
    below: Option<u64>,
}

impl Bounds {
    fn admit(self, key: u64) -> TxResult<()> {
        let low_ok = self.above.is_none_or(|low| key > low);
        let high_ok = self.below.is_none_or(|high| key < high);
        if low_ok && high_ok {
            Ok(())
        } else {
            Err(corrupt(format!(
                "BST key {key:#x} outside its interval (misordered or a cycle)"
            )))
        }
    }

    /// The interval of the left subtree of a node with `key`.
    fn left_of(self, key: u64) -> Bounds {
        Bounds {
            below: Some(key),
            ..self
        }
    }

    /// The interval of the right subtree of a node with `key`.
    fn right_of(self, key: u64) -> Bounds {
        Bounds {
            above: Some(key),
            ..self
        }
    }
}

/// A node's key and children (its first 24 bytes).
#[derive(Clone, Copy)]
struct Node {
    at: PPtr,
    key: u64,
    left: PPtr,
    right: PPtr,
}

impl Node {
    /// Reads the node at `at` and checks its key against `bounds`.
    fn load<T: Tx>(tx: &mut T, at: PPtr, bounds: Bounds) -> TxResult<Node> {
        let mut buf = [0u8; NODE_VALUE as usize];
        tx.read(at, 0, &mut buf)?;
        let key = u64_at(&buf, NODE_KEY);
        bounds.admit(key)?;
        Ok(Node {
            at,
            key,
            left: ptr_at(tx, &buf, NODE_LEFT)?,
            right: ptr_at(tx, &buf, NODE_RIGHT)?,
        })
    }
}

/// The pointer word that links a subtree: the header's root or a child field of a node.
#[derive(Clone, Copy)]
struct Slot {
    obj: PPtr,
    field: u64,
}

impl Slot {
    fn set<T: Tx>(self, tx: &mut T, target: PPtr) -> TxResult<()> {
        tx.write_ptr(self.obj, self.field, target)
    }
}

/// Where a search for a key ended: the slot that links (or would link) the key's node.
struct Search {
    slot: Slot,
    found: Option<Node>,
}

/// Descends from the root towards `key`.
fn search<T: Tx>(tx: &mut T, tree: PPtr, root: PPtr, key: u64) -> TxResult<Search> {
    let mut slot = Slot {
        obj: tree,
        field: HEADER_ROOT,
    };
    let mut bounds = Bounds::default();
    let mut cur = root;
    while !cur.is_null() {
        let node = Node::load(tx, cur, bounds)?;
        if key == node.key {
            return Ok(Search {
                slot,
                found: Some(node),
            });
        }
        (slot, bounds, cur) = if key < node.key {
            (
                Slot {
                    obj: cur,
                    field: NODE_LEFT,
                },
                bounds.left_of(node.key),
                node.left,
            )
        } else {
            (
                Slot {
                    obj: cur,
                    field: NODE_RIGHT,
                },
                bounds.right_of(node.key),
                node.right,
            )
        };
    }
    Ok(Search { slot, found: None })
}

/// Writes a new header count.
fn set_count<T: Tx>(tx: &mut T, tree: PPtr, count: Option<u64>) -> TxResult<()> {
    let count = count.ok_or_else(|| corrupt("BST count out of range"))?;
    tx.write_u64(tree, HEADER_COUNT, count)
}

/// Unlinks `node` (found through `slot`) from the tree; the caller frees it.
fn unlink<T: Tx>(tx: &mut T, slot: Slot, node: Node) -> TxResult<()> {
    if node.left.is_null() {
        return slot.set(tx, node.right);
    }
    if node.right.is_null() {
        return slot.set(tx, node.left);
    }
    // Two children: the successor (leftmost node of the right subtree) takes the node's
    // place by relinking, which writes 2-4 pointer words instead of copying a value.
    let (parent, successor) = leftmost(tx, node)?;
    if parent.at == node.at {
        tx.write_ptr(successor.at, NODE_LEFT, node.left)?;
    } else {
        tx.write_ptr(parent.at, NODE_LEFT, successor.right)?;
        let mut children = [0u8; 16];
        put_u64(&mut children, 0, node.left.word());
        put_u64(&mut children, 8, node.right.word());
        tx.write(successor.at, NODE_LEFT, &children)?;
    }
    slot.set(tx, successor.at)
}

/// The leftmost node of `node`'s right subtree and its parent (which may be `node`).
fn leftmost<T: Tx>(tx: &mut T, node: Node) -> TxResult<(Node, Node)> {
    // Keys on the way must decrease and stay above `node.key`: a cycle cannot pass that.
    let mut bounds = Bounds::default().right_of(node.key);
    let mut parent = node;
    let mut cur = Node::load(tx, node.right, bounds)?;
    while !cur.left.is_null() {
        bounds = bounds.left_of(cur.key);
        parent = cur;
        cur = Node::load(tx, cur.left, bounds)?;
    }
    Ok((parent, cur))
}

/// A node on the scan stack, with the interval of its right subtree.
struct Pending {
    node: Node,
    right_bounds: Bounds,
}

/// Pushes the nodes with keys `>= start` along the leftward descent from `cur`.
fn descend<T: Tx>(
    tx: &mut T,
    stack: &mut Vec<Pending>,
    mut cur: PPtr,
    mut bounds: Bounds,
    start: u64,
) -> TxResult<()> {
    while !cur.is_null() {
        let node = Node::load(tx, cur, bounds)?;
        if node.key >= start {
            stack.push(Pending {
                node,
                right_bounds: bounds.right_of(node.key),
            });
            bounds = bounds.left_of(node.key);
            cur = node.left;
        } else {
            bounds = bounds.right_of(node.key);
            cur = node.right;
        }
    }
    Ok(())
}

impl PersistentMap for Bst {
    const NAME: &'static str = "bst";
    const ORDERED: bool = true;

    fn create<T: Tx>(tx: &mut T, _capacity: u64, value_size: u32) -> TxResult<PPtr> {
        if value_size > MAX_VALUE_SIZE {
            return Err(TxError::abort(format!("value size {value_size} too large")));
        }
        let tree = tx.alloc(HEADER_SIZE)?;
        let mut buf = [0u8; HEADER_SIZE as usize];
        put_u64(&mut buf, HEADER_MAGIC, MAGIC);
        put_u64(&mut buf, HEADER_VALUE_SIZE, u64::from(value_size));
        tx.write(tree, 0, &buf)?;
        Ok(tree)
    }

    fn get<T: Tx>(tx: &mut T, tree: PPtr, key: u64, value: &mut [u8]) -> TxResult<bool> {
        let header = Header::load(tx, tree)?;
        header.expect_value_len(value.len())?;
        match search(tx, tree, header.root, key)?.found {
            Some(node) => tx.read(node.at, NODE_VALUE, value).map(|()| true),
            None => Ok(false),
        }
    }

    fn put<T: Tx>(tx: &mut T, tree: PPtr, key: u64, value: &[u8]) -> TxResult<bool> {
        let header = Header::load(tx, tree)?;
        header.expect_value_len(value.len())?;
        let found = search(tx, tree, header.root, key)?;
        if let Some(node) = found.found {
            tx.write(node.at, NODE_VALUE, value)?;
            return Ok(false);
        }
        // A new leaf, written whole with one write (null children), then linked.
        let mut buf = vec![0u8; NODE_VALUE as usize + value.len()];
        put_u64(&mut buf, NODE_KEY, key);
        buf[NODE_VALUE as usize..].copy_from_slice(value);
        let node = tx.alloc(buf.len() as u64)?;
        tx.write(node, 0, &buf)?;
        found.slot.set(tx, node)?;
        let count = load_count(tx, tree)?;
        set_count(tx, tree, count.checked_add(1))?;
        Ok(true)
    }

    fn remove<T: Tx>(tx: &mut T, tree: PPtr, key: u64) -> TxResult<bool> {
        let header = Header::load(tx, tree)?;
        let found = search(tx, tree, header.root, key)?;
        let Some(node) = found.found else {
            return Ok(false);
        };
        unlink(tx, found.slot, node)?;
        let count = load_count(tx, tree)?;
        set_count(tx, tree, count.checked_sub(1))?;
        tx.free(node.at)?;
        Ok(true)
    }

    fn scan<T: Tx>(
        tx: &mut T,
        tree: PPtr,
        start: u64,
        count: usize,
    ) -> TxResult<Vec<(u64, Vec<u8>)>> {
        let header = Header::load(tx, tree)?;
        let mut out = Vec::with_capacity(count.min(1024));
        let mut stack = Vec::new();
        if count > 0 {
            descend(tx, &mut stack, header.root, Bounds::default(), start)?;
        }
        while let Some(next) = stack.pop() {
            let mut value = vec![0u8; header.value_size as usize];
            tx.read(next.node.at, NODE_VALUE, &mut value)?;
            out.push((next.node.key, value));
            if out.len() == count {
                break;
            }
            descend(tx, &mut stack, next.node.right, next.right_bounds, start)?;
        }
        Ok(out)
    }

    fn len<T: Tx>(tx: &mut T, tree: PPtr) -> TxResult<u64> {
        Header::load(tx, tree)?;
        load_count(tx, tree)
    }

    fn check<T: Tx>(tx: &mut T, tree: PPtr) -> Result<BTreeMap<u64, Vec<u8>>, String> {
        check_tree(tx, tree).map_err(|e| format!("bst: {e}"))
    }
}

/// Visits every node (depth first, with its interval): ordering, node count, pointer tags;
/// returns the content.
fn check_tree<T: Tx>(tx: &mut T, tree: PPtr) -> TxResult<BTreeMap<u64, Vec<u8>>> {
    let header = Header::load(tx, tree)?;
    let count = check_reserved_and_count(tx, tree)?;
    let node_size = NODE_VALUE as usize + header.value_size as usize;
    let mut content = BTreeMap::new();
    let mut stack = vec![(header.root, Bounds::default())];
    while let Some((at, bounds)) = stack.pop() {
        if at.is_null() {
            continue;
        }
        // The step bound: more nodes than `count` means a wrong count or shared subtrees.
        if content.len() as u64 >= count {
            return Err(corrupt(format!("more than count = {count} nodes")));
        }
        let mut buf = vec![0u8; node_size];
        tx.read(at, 0, &mut buf)?;
        let key = u64_at(&buf, NODE_KEY);
        bounds.admit(key)?;
        if content
            .insert(key, buf[NODE_VALUE as usize..].to_vec())
            .is_some()
        {
            return Err(corrupt(format!("BST key {key:#x} reached twice")));
        }
        stack.push((ptr_at(tx, &buf, NODE_LEFT)?, bounds.left_of(key)));
        stack.push((ptr_at(tx, &buf, NODE_RIGHT)?, bounds.right_of(key)));
    }
    if content.len() as u64 != count {
        return Err(corrupt(format!(
            "{} nodes but count = {count}",
            content.len()
        )));
    }
    Ok(content)
}

/// Reads the whole header: the reserved bytes must be zero; returns the count.
fn check_reserved_and_count<T: Tx>(tx: &mut T, tree: PPtr) -> TxResult<u64> {
    let mut buf = [0u8; HEADER_SIZE as usize];
    tx.read(tree, 0, &mut buf)?;
    let count_end = HEADER_COUNT as usize + 8;
    let reserved = [
        HEADER_READ as usize..HEADER_COUNT as usize,
        count_end..HEADER_SIZE as usize,
    ];
    if reserved
        .into_iter()
        .any(|range| buf[range].iter().any(|&b| b != 0))
    {
        return Err(corrupt("BST header: reserved bytes not zero"));
    }
    Ok(u64_at(&buf, HEADER_COUNT))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tx::{Engine, MemEngine};

    fn build(engine: &MemEngine, keys: &[u64]) -> PPtr {
        engine
            .transaction(|tx| {
                let tree = Bst::create(tx, 0, 8)?;
                for &key in keys {
                    Bst::put(tx, tree, key, &key.to_le_bytes())?;
                }
                Ok::<_, TxError>(tree)
            })
            .expect("build")
    }

    fn overwrite(engine: &MemEngine, tree: PPtr, field: u64, value: u64) {
        engine
            .transaction(|tx| tx.write_u64(tree, field, value))
            .expect("overwrite");
    }

    fn check(engine: &MemEngine, tree: PPtr) -> Result<BTreeMap<u64, Vec<u8>>, String> {
        engine
            .read_only(|tx| Ok::<_, TxError>(Bst::check(tx, tree)))
            .expect("check transaction")
    }

    #[test]
    fn the_count_is_on_a_line_apart_from_what_every_operation_reads() {
        let engine = MemEngine::new(1 << 20);
        let tree = build(&engine, &[5, 3, 8]);
        let start = tree.offset();
        assert_eq!(
            start % 64,
            0,
            "the heap gives the header a line-aligned unit"
        );
        let read_lines = start / 64..=(start + HEADER_READ - 1) / 64;
        let count_line = (start + HEADER_COUNT) / 64;
        assert!(!read_lines.contains(&count_line));
        // Whatever the object's 16-byte alignment, the two never share a 64-byte line.
        for misalignment in (0..64).step_by(16) {
            let last_read = (misalignment + HEADER_READ - 1) / 64;
            let count = misalignment + HEADER_COUNT;
            assert_ne!(last_read, count / 64, "at {misalignment} past a line");
            assert_eq!(count / 64, (count + 7) / 64, "the count within one line");
        }
        let len = engine.read_only(|tx| Bst::len(tx, tree)).expect("len");
        assert_eq!(len, 3);
        let read = engine.read_only(|tx| tx.read_u64(tree, HEADER_COUNT));
        assert_eq!(read.expect("count"), 3);
    }

    #[test]
    fn a_version_1_tree_is_refused_with_its_version() {
        let engine = MemEngine::new(1 << 20);
        let tree = build(&engine, &[5, 3, 8]);
        overwrite(&engine, tree, HEADER_MAGIC, MAGIC_V1);
        let mut value = [0u8; 8];
        let get = engine.read_only(|tx| Bst::get(tx, tree, 5, &mut value));
        assert!(
            matches!(&get, Err(TxError::Corrupted(why)) if why.contains("layout version 1")),
            "{get:?}"
        );
        let put = engine.transaction(|tx| Bst::put(tx, tree, 9, &[0u8; 8]));
        assert!(matches!(put, Err(TxError::Corrupted(_))), "{put:?}");
        let err = check(&engine, tree).expect_err("a version 1 header");
        assert!(err.contains("layout version 1"), "{err}");
        overwrite(&engine, tree, HEADER_MAGIC, 7);
        let err = check(&engine, tree).expect_err("not a header");
        assert!(err.contains("not a BST header"), "{err}");
    }

    #[test]
    fn the_checker_rejects_reserved_bytes_that_are_not_zero() {
        for field in [
            HEADER_READ,
            HEADER_COUNT - 8,
            HEADER_COUNT + 8,
            HEADER_SIZE - 8,
        ] {
            let engine = MemEngine::new(1 << 20);
            let tree = build(&engine, &[5, 3, 8]);
            assert_eq!(check(&engine, tree).expect("valid").len(), 3);
            overwrite(&engine, tree, field, 1 << 40);
            let err = check(&engine, tree).expect_err("reserved bytes set");
            assert!(err.contains("reserved"), "offset {field}: {err}");
        }
    }

    #[test]
    fn inserts_and_deletes_keep_the_count() {
        let engine = MemEngine::new(1 << 20);
        let tree = build(&engine, &[50, 30, 70, 20, 40]);
        let removed = engine.transaction(|tx| Bst::remove(tx, tree, 30));
        assert!(removed.expect("remove"));
        let again = engine.transaction(|tx| Bst::put(tx, tree, 70, &[1u8; 8]));
        assert!(!again.expect("update"), "an update adds no node");
        let len = engine.read_only(|tx| Bst::len(tx, tree)).expect("len");
        assert_eq!(len, 4);
        assert_eq!(check(&engine, tree).expect("valid").len(), 4);
    }
}
