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
//! Header (32 bytes), linked from the root object:
//!
//! | offset | field        | type | meaning                                     |
//! |--------|--------------|------|---------------------------------------------|
//! | 0      | `magic`      | u64  | [`layout::MAGIC`] (`"FERBST01"`)            |
//! | 8      | `count`      | u64  | number of nodes                             |
//! | 16     | `root`       | ptr  | root node, or null                          |
//! | 24     | `value_size` | u64  | bytes of every value (≤ [`MAX_VALUE_SIZE`]) |
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
    /// Magic word of a BST header.
    pub const MAGIC: u64 = u64::from_le_bytes(*b"FERBST01");
    /// Header: magic word.
    pub const HEADER_MAGIC: u64 = 0;
    /// Header: number of nodes.
    pub const HEADER_COUNT: u64 = 8;
    /// Header: root node.
    pub const HEADER_ROOT: u64 = 16;
    /// Header: value size in bytes.
    pub const HEADER_VALUE_SIZE: u64 = 24;
    /// Header size.
    pub const HEADER_SIZE: u64 = 32;
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

/// The decoded header.
struct Header {
    count: u64,
    root: PPtr,
    value_size: u32,
}

impl Header {
    /// Reads and validates the header with one read.
    fn load<T: Tx>(tx: &mut T, tree: PPtr) -> TxResult<Header> {
        let mut buf = [0u8; HEADER_SIZE as usize];
        tx.read(tree, 0, &mut buf)?;
        if u64_at(&buf, HEADER_MAGIC) != MAGIC {
            return Err(corrupt("object is not a BST header"));
        }
        Ok(Header {
            count: u64_at(&buf, HEADER_COUNT),
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
        set_count(tx, tree, header.count.checked_add(1))?;
        Ok(true)
    }

    fn remove<T: Tx>(tx: &mut T, tree: PPtr, key: u64) -> TxResult<bool> {
        let header = Header::load(tx, tree)?;
        let found = search(tx, tree, header.root, key)?;
        let Some(node) = found.found else {
            return Ok(false);
        };
        unlink(tx, found.slot, node)?;
        set_count(tx, tree, header.count.checked_sub(1))?;
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
        Ok(Header::load(tx, tree)?.count)
    }

    fn check<T: Tx>(tx: &mut T, tree: PPtr) -> Result<BTreeMap<u64, Vec<u8>>, String> {
        check_tree(tx, tree).map_err(|e| format!("bst: {e}"))
    }
}

/// Visits every node (depth first, with its interval): ordering, node count, pointer tags;
/// returns the content.
fn check_tree<T: Tx>(tx: &mut T, tree: PPtr) -> TxResult<BTreeMap<u64, Vec<u8>>> {
    let header = Header::load(tx, tree)?;
    let node_size = NODE_VALUE as usize + header.value_size as usize;
    let mut content = BTreeMap::new();
    let mut stack = vec![(header.root, Bounds::default())];
    while let Some((at, bounds)) = stack.pop() {
        if at.is_null() {
            continue;
        }
        // The step bound: more nodes than `count` means a wrong count or shared subtrees.
        if content.len() as u64 >= header.count {
            return Err(corrupt(format!("more than count = {} nodes", header.count)));
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
    if content.len() as u64 != header.count {
        return Err(corrupt(format!(
            "{} nodes but count = {}",
            content.len(),
            header.count
        )));
    }
    Ok(content)
}
