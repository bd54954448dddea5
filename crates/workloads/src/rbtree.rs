//! A persistent red-black tree (Silo's RB-tree micro-benchmark).
//!
//! Persistent layout (little-endian, byte offsets):
//!
//! ```text
//! header (32 B)                  node (40 + value_size B)
//!   0  magic      u64 "FRRBTRE1"   0  key    u64
//!   8  value_size u64              8  left   ptr (or null)
//!  16  root       ptr (or null)   16  right  ptr (or null)
//!  24  count      u64             24  parent ptr (null at the root)
//!                                 32  color  u64 (0 black, 1 red)
//!                                 40  value  [u8; value_size]
//! ```
//!
//! Invariants (checked by [`RbTree`]'s `check`): binary-search order with unique keys; every
//! child's `parent` is its parent, the root's is null; the root is black; no red node has a red
//! child; every path from a node to a null child has the same number of black nodes; `count` is
//! the number of nodes.
//!
//! Insert and delete follow the textbook algorithms (delete relinks the successor rather than
//! copying its value, so values never move). An operation stages node link changes in a small
//! DRAM table and writes each touched node once at the end, covering only the changed words
//! (left, right, parent and color are adjacent), so a rotation followed by recolouring costs one
//! write per node.

use crate::dist::KeyDist;
use crate::map::{MapWorkload, UpdateStyle};
use crate::{Params, PersistentMap};
use std::collections::{BTreeMap, HashSet};
use tx::{PPtr, Tx, TxError, TxResult};

/// The red-black tree (a marker type; a tree is identified by its header pointer).
#[derive(Debug)]
pub struct RbTree;

/// Silo's RB-tree benchmark: uniform keys, updates are upserts.
pub fn silo_rbtree(params: Params) -> MapWorkload<RbTree> {
    MapWorkload::new(params, UpdateStyle::Upsert, KeyDist::Uniform)
}

/// The same tree (same layout, same algorithms) written the way a straightforward C
/// implementation on libpmemobj writes it (PMDK's `rbtree_map`): a new node is allocated
/// zero-filled (`TX_ZNEW`) and its fields assigned, and every link and colour assignment
/// of the insert and delete fix-ups is stored to PM as it is made — so a rotation followed
/// by recolouring stores a word several times, and some stores repeat the value already
/// there. [`RbTree`] stages the same changes and writes each changed word once.
#[derive(Debug)]
pub struct InPlaceRbTree;

/// Silo's RB-tree benchmark on [`InPlaceRbTree`].
pub fn silo_rbtree_in_place(params: Params) -> MapWorkload<InPlaceRbTree> {
    MapWorkload::new(params, UpdateStyle::Upsert, KeyDist::Uniform)
}

const MAGIC: u64 = u64::from_le_bytes(*b"FRRBTRE1");

const H_MAGIC: usize = 0;
const H_VALUE_SIZE: usize = 8;
const H_ROOT: usize = 16;
const H_COUNT: usize = 24;
const HEADER_SIZE: usize = 32;

const N_KEY: usize = 0;
/// The four link words (left, right, parent, color) start here.
const N_LINKS: usize = 8;
const N_VALUE: usize = 40;

/// Bytes of the header block, for sizing a pool before setup (`bench::space`).
pub const HEADER_BYTES: u64 = HEADER_SIZE as u64;
/// Bytes of a node before its value.
pub const NODE_BYTES_BEFORE_VALUE: u64 = N_VALUE as u64;

/// Link word indexes.
const LEFT: usize = 0;
const RIGHT: usize = 1;
const PARENT: usize = 2;
const COLOR: usize = 3;

const BLACK: u64 = 0;
const RED: u64 = 1;

/// Deepest path accepted: a red-black tree of fewer than 2^64 nodes is at most 128 deep.
const MAX_DEPTH: usize = 128;
/// Largest value size accepted (guards allocations sized from PM content).
const MAX_VALUE_SIZE: u64 = 1 << 20;
/// Nodes an update usually touches (a search path plus a few for rotations).
const STAGED_CAPACITY: usize = 64;

enum Header {}
enum NodeObj {}
type NodePtr = PPtr<NodeObj>;

fn word(buf: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(bytes)
}

fn corrupt(what: impl std::fmt::Display) -> TxError {
    TxError::Corrupted(format!("rbtree: {what}"))
}

fn other(side: usize) -> usize {
    LEFT + RIGHT - side
}

/// A node's key and link words, read with one access and checked (pointers of this pool,
/// color 0 or 1).
#[derive(Clone, Copy)]
struct Links {
    key: u64,
    words: [u64; 4],
}

impl Links {
    fn read<T: Tx>(tx: &mut T, node: NodePtr) -> TxResult<Links> {
        let mut buf = [0u8; N_VALUE];
        tx.read(node, 0, &mut buf)?;
        let mut words = [0u64; 4];
        for (i, w) in words.iter_mut().enumerate() {
            *w = word(&buf, N_LINKS + 8 * i);
        }
        for &link in &words[..COLOR] {
            let ptr = NodePtr::from_word(link);
            if !ptr.is_null() {
                tx.check(ptr)?;
            }
        }
        if words[COLOR] > RED {
            return Err(corrupt(format_args!(
                "node {node:?} has color {}",
                words[COLOR]
            )));
        }
        Ok(Links {
            key: word(&buf, N_KEY),
            words,
        })
    }

    fn ptr(&self, link: usize) -> NodePtr {
        PPtr::from_word(self.words[link])
    }

    fn red(&self) -> bool {
        self.words[COLOR] == RED
    }
}

/// The header fields, read with one access.
struct Tree {
    header: PPtr<Header>,
    value_size: usize,
    root: NodePtr,
    count: u64,
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
        if value_size > MAX_VALUE_SIZE {
            return Err(corrupt(format_args!("value size {value_size}")));
        }
        let root = PPtr::from_word(word(&buf, H_ROOT));
        if !root.is_null() {
            tx.check(root)?;
        }
        Ok(Tree {
            header,
            value_size: value_size as usize,
            root,
            count: word(&buf, H_COUNT),
        })
    }

    fn check_len(&self, len: usize) -> TxResult<()> {
        if len == self.value_size {
            Ok(())
        } else {
            Err(TxError::abort(format_args!(
                "rbtree: value of {len} bytes for a tree of {}-byte values",
                self.value_size
            )))
        }
    }

    /// The node holding `key`, if any (read-only descent).
    fn find<T: Tx>(&self, tx: &mut T, key: u64) -> TxResult<Option<NodePtr>> {
        let mut cur = self.root;
        for _ in 0..=MAX_DEPTH {
            if cur.is_null() {
                return Ok(None);
            }
            let links = Links::read(tx, cur)?;
            if key == links.key {
                return Ok(Some(cur));
            }
            cur = links.ptr(if key < links.key { LEFT } else { RIGHT });
        }
        Err(corrupt("path deeper than any red-black tree"))
    }
}

/// A node touched by an update: its links as read (if read) and as staged.
struct Staged {
    ptr: NodePtr,
    key: u64,
    /// Whether `old` holds the words in PM (false for a node only written blindly).
    known: bool,
    old: [u64; 4],
    new: [u64; 4],
    /// Link words set by this operation (bit per word).
    set: u8,
}

/// One update operation: staged link changes, written back by [`Update::finish`].
struct Update<'t, T: Tx> {
    tx: &'t mut T,
    tree: Tree,
    root: NodePtr,
    staged: Vec<Staged>,
    /// A node allocated by this operation, written whole at the end, with its value.
    fresh: Option<(NodePtr, Vec<u8>)>,
    /// Store every assignment as it is made ([`InPlaceRbTree`]) instead of staging.
    in_place: bool,
}

impl<'t, T: Tx> Update<'t, T> {
    fn new(tx: &'t mut T, tree: Tree) -> Self {
        let root = tree.root;
        Update {
            tx,
            tree,
            root,
            staged: Vec::with_capacity(STAGED_CAPACITY),
            fresh: None,
            in_place: false,
        }
    }

    /// An update that stores every assignment as it is made.
    fn in_place(tx: &'t mut T, tree: Tree) -> Self {
        Update {
            in_place: true,
            ..Update::new(tx, tree)
        }
    }

    fn position(&self, node: NodePtr) -> Option<usize> {
        self.staged.iter().rposition(|s| s.ptr == node)
    }

    /// The staged entry of `node`, reading it from PM on first use.
    fn known(&mut self, node: NodePtr) -> TxResult<&mut Staged> {
        let index = match self.position(node) {
            Some(index) if self.staged[index].known => index,
            Some(index) => {
                let links = Links::read(self.tx, node)?;
                let entry = &mut self.staged[index];
                for link in 0..4 {
                    if entry.set & (1 << link) == 0 {
                        entry.new[link] = links.words[link];
                    }
                }
                (entry.key, entry.old, entry.known) = (links.key, links.words, true);
                index
            }
            None => {
                let links = Links::read(self.tx, node)?;
                self.staged.push(Staged {
                    ptr: node,
                    key: links.key,
                    known: true,
                    old: links.words,
                    new: links.words,
                    set: 0,
                });
                self.staged.len() - 1
            }
        };
        Ok(&mut self.staged[index])
    }

    fn key(&mut self, node: NodePtr) -> TxResult<u64> {
        Ok(self.known(node)?.key)
    }

    fn link(&mut self, node: NodePtr, link: usize) -> TxResult<NodePtr> {
        Ok(PPtr::from_word(self.known(node)?.new[link]))
    }

    /// Null children are black.
    fn is_red(&mut self, node: NodePtr) -> TxResult<bool> {
        Ok(!node.is_null() && self.known(node)?.new[COLOR] == RED)
    }

    /// Stages a link word; nodes not read yet are written blindly (no read needed).
    fn set(&mut self, node: NodePtr, link: usize, value: u64) -> TxResult<()> {
        if node.is_null() {
            return Err(corrupt("update of a null node"));
        }
        let index = match self.position(node) {
            Some(index) => index,
            None => {
                self.staged.push(Staged {
                    ptr: node,
                    key: 0,
                    known: false,
                    old: [0; 4],
                    new: [0; 4],
                    set: 0,
                });
                self.staged.len() - 1
            }
        };
        let entry = &mut self.staged[index];
        entry.new[link] = value;
        entry.set |= 1 << link;
        if self.in_place {
            self.tx
                .write_u64(node, (N_LINKS + 8 * link) as u64, value)?;
        }
        Ok(())
    }

    fn set_link(&mut self, node: NodePtr, link: usize, value: NodePtr) -> TxResult<()> {
        self.set(node, link, value.word())
    }

    fn set_red(&mut self, node: NodePtr, red: bool) -> TxResult<()> {
        self.set(node, COLOR, if red { RED } else { BLACK })
    }

    /// Makes `new` the child of `parent` where `old` was (or the root).
    fn replace_child(&mut self, parent: NodePtr, old: NodePtr, new: NodePtr) -> TxResult<()> {
        if parent.is_null() {
            self.root = new;
            return Ok(());
        }
        let side = self.side_of(parent, old)?;
        self.set_link(parent, side, new)
    }

    /// Which child of `parent` `child` is (`child` may be null if the other one is not).
    fn side_of(&mut self, parent: NodePtr, child: NodePtr) -> TxResult<usize> {
        if self.link(parent, LEFT)? == child {
            Ok(LEFT)
        } else if self.link(parent, RIGHT)? == child {
            Ok(RIGHT)
        } else {
            Err(corrupt(format_args!(
                "{child:?} is not a child of {parent:?}"
            )))
        }
    }

    /// Rotates `x` down towards `side`; its child on the other side takes its place.
    fn rotate(&mut self, x: NodePtr, side: usize) -> TxResult<()> {
        let y = self.link(x, other(side))?;
        if y.is_null() {
            return Err(corrupt(format_args!("rotation of {x:?} without a child")));
        }
        let middle = self.link(y, side)?;
        self.set_link(x, other(side), middle)?;
        if !middle.is_null() {
            self.set_link(middle, PARENT, x)?;
        }
        let parent = self.link(x, PARENT)?;
        self.set_link(y, PARENT, parent)?;
        self.replace_child(parent, x, y)?;
        self.set_link(y, side, x)?;
        self.set_link(x, PARENT, y)
    }

    /// The node holding `key`, if any.
    fn find(&mut self, key: u64) -> TxResult<Option<NodePtr>> {
        let mut cur = self.root;
        for _ in 0..=MAX_DEPTH {
            if cur.is_null() {
                return Ok(None);
            }
            let node_key = self.key(cur)?;
            if key == node_key {
                return Ok(Some(cur));
            }
            cur = self.link(cur, if key < node_key { LEFT } else { RIGHT })?;
        }
        Err(corrupt("path deeper than any red-black tree"))
    }

    /// Inserts or overwrites; true if the key was new.
    fn insert(&mut self, key: u64, value: &[u8]) -> TxResult<bool> {
        let (mut parent, mut cur, mut side) = (PPtr::null(), self.root, LEFT);
        for _ in 0..=MAX_DEPTH {
            if cur.is_null() {
                break;
            }
            let node_key = self.key(cur)?;
            if key == node_key {
                self.tx.write(cur, N_VALUE as u64, value)?;
                return Ok(false);
            }
            side = if key < node_key { LEFT } else { RIGHT };
            (parent, cur) = (cur, self.link(cur, side)?);
        }
        if !cur.is_null() {
            return Err(corrupt("path deeper than any red-black tree"));
        }
        let size = (N_VALUE + value.len()) as u64;
        let node: NodePtr = if self.in_place {
            self.tx.alloc_zeroed(size)?
        } else {
            self.tx.alloc(size)?
        };
        let words = [0, 0, parent.word(), RED];
        self.staged.push(Staged {
            ptr: node,
            key,
            known: true,
            old: words,
            new: words,
            set: 0,
        });
        if self.in_place {
            write_fresh(self.tx, self.staged.last().expect("just staged"), value)?;
        } else {
            self.fresh = Some((node, value.to_vec()));
        }
        if parent.is_null() {
            self.root = node;
        } else {
            self.set_link(parent, side, node)?;
        }
        self.insert_fixup(node)?;
        Ok(true)
    }

    /// Restores the red-black properties after inserting red `z`.
    fn insert_fixup(&mut self, mut z: NodePtr) -> TxResult<()> {
        for _ in 0..MAX_DEPTH {
            let mut p = self.link(z, PARENT)?;
            if !self.is_red(p)? {
                return self.blacken_root();
            }
            let g = self.link(p, PARENT)?;
            if g.is_null() {
                return Err(corrupt("red root"));
            }
            let side = self.side_of(g, p)?;
            let uncle = self.link(g, other(side))?;
            if self.is_red(uncle)? {
                self.set_red(p, false)?;
                self.set_red(uncle, false)?;
                self.set_red(g, true)?;
                z = g;
                continue;
            }
            if self.link(p, other(side))? == z {
                self.rotate(p, side)?;
                p = z;
            }
            self.set_red(p, false)?;
            self.set_red(g, true)?;
            self.rotate(g, other(side))?;
            return self.blacken_root();
        }
        Err(corrupt("insert fix-up does not terminate"))
    }

    fn blacken_root(&mut self) -> TxResult<()> {
        let root = self.root;
        if self.is_red(root)? {
            self.set_red(root, false)?;
        }
        Ok(())
    }

    /// Replaces the subtree at `u` by the one at `v` (which may be null).
    fn transplant(&mut self, u: NodePtr, v: NodePtr) -> TxResult<()> {
        let parent = self.link(u, PARENT)?;
        self.replace_child(parent, u, v)?;
        if !v.is_null() {
            self.set_link(v, PARENT, parent)?;
        }
        Ok(())
    }

    /// Unlinks node `z`; returns whether a black node left its place (the fix-up's input), the
    /// node `x` in its place and `x`'s parent.
    fn unlink(&mut self, z: NodePtr) -> TxResult<(bool, NodePtr, NodePtr)> {
        let (left, right) = (self.link(z, LEFT)?, self.link(z, RIGHT)?);
        let z_black = !self.is_red(z)?;
        if left.is_null() || right.is_null() {
            let x = if left.is_null() { right } else { left };
            let parent = self.link(z, PARENT)?;
            self.transplant(z, x)?;
            return Ok((z_black, x, parent));
        }
        let y = self.minimum(right)?;
        let y_black = !self.is_red(y)?;
        let x = self.link(y, RIGHT)?;
        let x_parent = if self.link(y, PARENT)? == z {
            y
        } else {
            let y_parent = self.link(y, PARENT)?;
            self.transplant(y, x)?;
            self.set_link(y, RIGHT, right)?;
            self.set_link(right, PARENT, y)?;
            y_parent
        };
        self.transplant(z, y)?;
        self.set_link(y, LEFT, left)?;
        self.set_link(left, PARENT, y)?;
        self.set_red(y, !z_black)?;
        Ok((y_black, x, x_parent))
    }

    fn minimum(&mut self, mut node: NodePtr) -> TxResult<NodePtr> {
        for _ in 0..MAX_DEPTH {
            let left = self.link(node, LEFT)?;
            if left.is_null() {
                return Ok(node);
            }
            node = left;
        }
        Err(corrupt("path deeper than any red-black tree"))
    }

    /// Restores the red-black properties after a black node left the place of `x` (child of
    /// `parent`; `x` may be null).
    fn delete_fixup(&mut self, mut x: NodePtr, mut parent: NodePtr) -> TxResult<()> {
        for _ in 0..MAX_DEPTH {
            if x == self.root || self.is_red(x)? {
                if !x.is_null() {
                    self.set_red(x, false)?;
                }
                return Ok(());
            }
            if parent.is_null() {
                return Err(corrupt("non-root node without parent"));
            }
            let side = self.side_of(parent, x)?;
            let mut w = self.sibling(parent, side)?;
            if self.is_red(w)? {
                self.set_red(w, false)?;
                self.set_red(parent, true)?;
                self.rotate(parent, side)?;
                w = self.sibling(parent, side)?;
            }
            let near = self.link(w, side)?;
            let mut far = self.link(w, other(side))?;
            if !self.is_red(near)? && !self.is_red(far)? {
                self.set_red(w, true)?;
                x = parent;
                parent = self.link(x, PARENT)?;
                continue;
            }
            if !self.is_red(far)? {
                self.set_red(near, false)?;
                self.set_red(w, true)?;
                self.rotate(w, other(side))?;
                w = self.sibling(parent, side)?;
                far = self.link(w, other(side))?;
            }
            let parent_red = self.is_red(parent)?;
            self.set_red(w, parent_red)?;
            self.set_red(parent, false)?;
            self.set_red(far, false)?;
            return self.rotate(parent, side);
        }
        Err(corrupt("delete fix-up does not terminate"))
    }

    /// The child of `parent` opposite `side`, which must exist in a valid tree.
    fn sibling(&mut self, parent: NodePtr, side: usize) -> TxResult<NodePtr> {
        let w = self.link(parent, other(side))?;
        if w.is_null() {
            return Err(corrupt(format_args!(
                "black-height deficit under {parent:?}"
            )));
        }
        Ok(w)
    }

    /// Writes every staged change (one access per touched node, over the changed words),
    /// the fresh node whole, and the header's root and count.
    fn finish(self, count: u64) -> TxResult<()> {
        let Update {
            tx,
            tree,
            root,
            staged,
            fresh,
            in_place: update_in_place,
        } = self;
        // In place, every assignment is already stored.
        let staged = if update_in_place {
            &[][..]
        } else {
            &staged[..]
        };
        for entry in staged {
            match &fresh {
                Some((node, value)) if *node == entry.ptr => write_fresh(tx, entry, value)?,
                _ => write_changes(tx, entry)?,
            }
        }
        if root == tree.root {
            return tx.write_u64(tree.header, H_COUNT as u64, count);
        }
        let mut buf = [0u8; 16];
        buf[..8].copy_from_slice(&root.word().to_le_bytes());
        buf[8..].copy_from_slice(&count.to_le_bytes());
        tx.write(tree.header, H_ROOT as u64, &buf)
    }
}

fn write_fresh<T: Tx>(tx: &mut T, entry: &Staged, value: &[u8]) -> TxResult<()> {
    let mut image = Vec::with_capacity(N_VALUE + value.len());
    image.extend_from_slice(&entry.key.to_le_bytes());
    for w in entry.new {
        image.extend_from_slice(&w.to_le_bytes());
    }
    image.extend_from_slice(value);
    tx.write(entry.ptr, 0, &image)
}

/// Writes the changed link words of a node: one span from the first to the last change if the
/// old words are known (unchanged words in between are rewritten with their value), else each
/// run of consecutive set words.
fn write_changes<T: Tx>(tx: &mut T, entry: &Staged) -> TxResult<()> {
    let changed = (0..4)
        .filter(|&i| entry.set & (1 << i) != 0 && (!entry.known || entry.new[i] != entry.old[i]))
        .fold(0u8, |mask, i| mask | (1 << i));
    let mut i = 0;
    while i < 4 {
        if changed & (1 << i) == 0 {
            i += 1;
            continue;
        }
        let end = if entry.known {
            8 - changed.leading_zeros() as usize
        } else {
            (i..4).find(|&j| changed & (1 << j) == 0).unwrap_or(4)
        };
        let mut buf = [0u8; 32];
        for (j, w) in entry.new[i..end].iter().enumerate() {
            buf[8 * j..8 * j + 8].copy_from_slice(&w.to_le_bytes());
        }
        tx.write(entry.ptr, (N_LINKS + 8 * i) as u64, &buf[..8 * (end - i)])?;
        i = end;
    }
    Ok(())
}

impl PersistentMap for RbTree {
    const NAME: &'static str = "rbtree";
    const ORDERED: bool = true;

    fn create<T: Tx>(tx: &mut T, _capacity: u64, value_size: u32) -> TxResult<PPtr> {
        if u64::from(value_size) > MAX_VALUE_SIZE {
            return Err(TxError::abort(format_args!(
                "rbtree: value size {value_size}"
            )));
        }
        let header: PPtr<Header> = tx.alloc(HEADER_SIZE as u64)?;
        let mut buf = [0u8; HEADER_SIZE];
        buf[H_MAGIC..H_MAGIC + 8].copy_from_slice(&MAGIC.to_le_bytes());
        buf[H_VALUE_SIZE..H_VALUE_SIZE + 8].copy_from_slice(&u64::from(value_size).to_le_bytes());
        tx.write(header, 0, &buf)?;
        Ok(header.cast())
    }

    fn get<T: Tx>(tx: &mut T, map: PPtr, key: u64, value: &mut [u8]) -> TxResult<bool> {
        let tree = Tree::open(tx, map)?;
        tree.check_len(value.len())?;
        match tree.find(tx, key)? {
            Some(node) => {
                tx.read(node, N_VALUE as u64, value)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put<T: Tx>(tx: &mut T, map: PPtr, key: u64, value: &[u8]) -> TxResult<bool> {
        let tree = Tree::open(tx, map)?;
        tree.check_len(value.len())?;
        let count = tree.count;
        let mut update = Update::new(tx, tree);
        if !update.insert(key, value)? {
            return Ok(false);
        }
        update.finish(count + 1)?;
        Ok(true)
    }

    fn remove<T: Tx>(tx: &mut T, map: PPtr, key: u64) -> TxResult<bool> {
        let tree = Tree::open(tx, map)?;
        let count = tree.count;
        let mut update = Update::new(tx, tree);
        let Some(z) = update.find(key)? else {
            return Ok(false);
        };
        let (black_removed, x, parent) = update.unlink(z)?;
        if black_removed {
            update.delete_fixup(x, parent)?;
        }
        // `z` is unlinked: drop anything staged for it rather than write a freed node.
        update.staged.retain(|s| s.ptr != z);
        update.tx.free(z)?;
        update.finish(count.saturating_sub(1))?;
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
        // In-order walk with an explicit stack of nodes whose key is >= start, smallest on top.
        let mut stack: Vec<(NodePtr, Links)> = Vec::new();
        push_left_spine(tx, &mut stack, tree.root, start)?;
        while out.len() < count {
            let Some((node, links)) = stack.pop() else {
                break;
            };
            let mut value = vec![0u8; tree.value_size];
            tx.read(node, N_VALUE as u64, &mut value)?;
            out.push((links.key, value));
            push_left_spine(tx, &mut stack, links.ptr(RIGHT), start)?;
        }
        Ok(out)
    }

    fn len<T: Tx>(tx: &mut T, map: PPtr) -> TxResult<u64> {
        Ok(Tree::open(tx, map)?.count)
    }

    fn check<T: Tx>(tx: &mut T, map: PPtr) -> Result<BTreeMap<u64, Vec<u8>>, String> {
        let tree = Tree::open(tx, map).map_err(|e| e.to_string())?;
        let mut checker = Checker {
            value_size: tree.value_size,
            visited: HashSet::new(),
            content: BTreeMap::new(),
        };
        // A red parent above the root makes a red root a violation.
        let above_root = Above {
            parent: PPtr::null(),
            red: true,
            lo: None,
            hi: None,
            depth: 0,
        };
        checker.visit(tx, tree.root, above_root)?;
        if checker.content.len() as u64 != tree.count {
            return Err(format!(
                "rbtree: count is {} but the tree holds {} nodes",
                tree.count,
                checker.content.len()
            ));
        }
        Ok(checker.content)
    }
}

impl PersistentMap for InPlaceRbTree {
    const NAME: &'static str = "rbtree-in-place";
    const ORDERED: bool = true;

    fn create<T: Tx>(tx: &mut T, capacity: u64, value_size: u32) -> TxResult<PPtr> {
        RbTree::create(tx, capacity, value_size)
    }

    fn get<T: Tx>(tx: &mut T, map: PPtr, key: u64, value: &mut [u8]) -> TxResult<bool> {
        RbTree::get(tx, map, key, value)
    }

    fn put<T: Tx>(tx: &mut T, map: PPtr, key: u64, value: &[u8]) -> TxResult<bool> {
        let tree = Tree::open(tx, map)?;
        tree.check_len(value.len())?;
        let count = tree.count;
        let mut update = Update::in_place(tx, tree);
        if !update.insert(key, value)? {
            return Ok(false);
        }
        update.finish(count + 1)?;
        Ok(true)
    }

    fn remove<T: Tx>(tx: &mut T, map: PPtr, key: u64) -> TxResult<bool> {
        let tree = Tree::open(tx, map)?;
        let count = tree.count;
        let mut update = Update::in_place(tx, tree);
        let Some(z) = update.find(key)? else {
            return Ok(false);
        };
        let (black_removed, x, parent) = update.unlink(z)?;
        if black_removed {
            update.delete_fixup(x, parent)?;
        }
        update.tx.free(z)?;
        update.finish(count.saturating_sub(1))?;
        Ok(true)
    }

    fn scan<T: Tx>(
        tx: &mut T,
        map: PPtr,
        start: u64,
        count: usize,
    ) -> TxResult<Vec<(u64, Vec<u8>)>> {
        RbTree::scan(tx, map, start, count)
    }

    fn len<T: Tx>(tx: &mut T, map: PPtr) -> TxResult<u64> {
        RbTree::len(tx, map)
    }

    fn check<T: Tx>(tx: &mut T, map: PPtr) -> Result<BTreeMap<u64, Vec<u8>>, String> {
        RbTree::check(tx, map)
    }
}

/// Pushes the nodes on the way from `node` to the smallest key `>= start` of its subtree that
/// have keys `>= start` (each is the next in order after those above it on the stack).
fn push_left_spine<T: Tx>(
    tx: &mut T,
    stack: &mut Vec<(NodePtr, Links)>,
    mut node: NodePtr,
    start: u64,
) -> TxResult<()> {
    for _ in 0..=MAX_DEPTH {
        if node.is_null() {
            return Ok(());
        }
        if stack.len() > MAX_DEPTH {
            break;
        }
        let links = Links::read(tx, node)?;
        if links.key >= start {
            stack.push((node, links));
            node = links.ptr(LEFT);
        } else {
            node = links.ptr(RIGHT);
        }
    }
    Err(corrupt("path deeper than any red-black tree"))
}

/// What the checker knows about a node from above: its parent (and the parent's color), the
/// exclusive bounds of its keys and its depth.
#[derive(Clone, Copy)]
struct Above {
    parent: NodePtr,
    red: bool,
    lo: Option<u64>,
    hi: Option<u64>,
    depth: usize,
}

struct Checker {
    value_size: usize,
    /// Nodes seen: a node reached twice means a shared subtree or a cycle.
    visited: HashSet<u64>,
    content: BTreeMap<u64, Vec<u8>>,
}

impl Checker {
    /// Checks the subtree at `node` and returns its black height (null children count 1).
    fn visit<T: Tx>(&mut self, tx: &mut T, node: NodePtr, above: Above) -> Result<u32, String> {
        if node.is_null() {
            return Ok(1);
        }
        let Above {
            parent,
            lo,
            hi,
            depth,
            ..
        } = above;
        if depth > MAX_DEPTH {
            return Err("rbtree: path deeper than any red-black tree".into());
        }
        if !self.visited.insert(node.offset()) {
            return Err(format!("rbtree: node {node:?} is reached twice"));
        }
        let links = Links::read(tx, node).map_err(|e| e.to_string())?;
        let key = links.key;
        if lo.is_some_and(|lo| key <= lo) || hi.is_some_and(|hi| key >= hi) {
            return Err(format!("rbtree: key {key} is outside ({lo:?}, {hi:?})"));
        }
        if links.ptr(PARENT) != parent {
            return Err(format!(
                "rbtree: node {node:?} has parent {:?}, not {parent:?}",
                links.ptr(PARENT)
            ));
        }
        if above.red && links.red() {
            return Err(format!(
                "rbtree: red node {node:?} under a red parent or at the root"
            ));
        }
        let mut value = vec![0u8; self.value_size];
        tx.read(node, N_VALUE as u64, &mut value)
            .map_err(|e| e.to_string())?;
        self.content.insert(key, value);
        let mut heights = [0u32; 2];
        for (side, height) in [LEFT, RIGHT].into_iter().zip(&mut heights) {
            let (lo, hi) = if side == LEFT {
                (lo, Some(key))
            } else {
                (Some(key), hi)
            };
            let below = Above {
                parent: node,
                red: links.red(),
                lo,
                hi,
                depth: depth + 1,
            };
            *height = self.visit(tx, links.ptr(side), below)?;
        }
        if heights[0] != heights[1] {
            return Err(format!(
                "rbtree: black heights {} and {} under {node:?}",
                heights[0], heights[1]
            ));
        }
        Ok(heights[0] + u32::from(!links.red()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tx::mem::MemTx;
    use tx::{Engine, MemEngine};

    #[test]
    fn the_in_place_variant_builds_the_same_trees() {
        use crate::Workload;
        let params = Params {
            keys: 200,
            value_size: 16,
            update_percent: 100,
            threads: 1,
            seed: 3,
            locks_at_one_thread: false,
        };
        let (staged, in_place) = (silo_rbtree(params.clone()), silo_rbtree_in_place(params));
        let (a, b) = (MemEngine::new(4 << 20), MemEngine::new(4 << 20));
        staged.setup(&a).expect("setup");
        in_place.setup(&b).expect("setup");
        let mut model = staged.initial_model();
        for index in 0..1_500 {
            staged.run_op(&a, 0, index).expect("op");
            in_place.run_op(&b, 0, index).expect("op");
            staged.apply_to_model(&mut model, 0, index);
        }
        assert_eq!(staged.check(&a).expect("staged tree"), model);
        assert_eq!(in_place.check(&b).expect("in-place tree"), model);
        // Deletes through the in-place variant keep the invariants too.
        let map = b.read_only(|tx| crate::root_link(tx)).expect("linked");
        b.transaction(|tx| {
            for key in (0..400).step_by(3) {
                InPlaceRbTree::remove(tx, map, key)?;
            }
            Ok::<_, TxError>(())
        })
        .expect("removes");
        let left = b
            .read_only(|tx| Ok::<_, TxError>(InPlaceRbTree::check(tx, map)))
            .expect("read");
        assert!(
            left.expect("valid tree")
                .keys()
                .all(|k| k % 3 != 0 || *k >= 400)
        );
    }

    fn build(keys: u64) -> (MemEngine, PPtr) {
        let engine = MemEngine::new(1 << 20);
        let map = engine
            .transaction(|tx| {
                let map = RbTree::create(tx, keys, 8)?;
                for key in 0..keys {
                    RbTree::put(tx, map, 10 * key, &key.to_le_bytes())?;
                }
                Ok::<_, TxError>(map)
            })
            .expect("build");
        (engine, map)
    }

    fn check(engine: &MemEngine, map: PPtr) -> Result<BTreeMap<u64, Vec<u8>>, String> {
        engine
            .transaction(|tx| Ok::<_, TxError>(RbTree::check(tx, map)))
            .expect("check transaction")
    }

    /// Corrupts a tree of 100 keys with `f` (given the tree and a red node with its links) and
    /// expects the checker to notice.
    fn expect_corruption(f: impl Fn(&mut MemTx<'_>, &Tree, NodePtr, &Links) -> TxResult<()>) {
        let (engine, map) = build(100);
        assert_eq!(check(&engine, map).expect("valid").len(), 100);
        engine
            .transaction(|tx| {
                let tree = Tree::open(tx, map)?;
                let red = find_red(tx, tree.root)?.expect("a red node");
                let links = Links::read(tx, red)?;
                f(tx, &tree, red, &links)
            })
            .expect("corrupt");
        assert!(check(&engine, map).is_err(), "corruption not detected");
    }

    fn find_red(tx: &mut MemTx<'_>, node: NodePtr) -> TxResult<Option<NodePtr>> {
        if node.is_null() {
            return Ok(None);
        }
        let links = Links::read(tx, node)?;
        if links.red() {
            return Ok(Some(node));
        }
        match find_red(tx, links.ptr(LEFT))? {
            Some(red) => Ok(Some(red)),
            None => find_red(tx, links.ptr(RIGHT)),
        }
    }

    fn field(link: usize) -> u64 {
        (N_LINKS + 8 * link) as u64
    }

    #[test]
    fn checker_catches_a_red_red_violation() {
        expect_corruption(|tx, _, _, links| tx.write_u64(links.ptr(PARENT), field(COLOR), RED));
    }

    #[test]
    fn checker_catches_unequal_black_heights_and_a_red_root() {
        expect_corruption(|tx, _, red, _| tx.write_u64(red, field(COLOR), BLACK));
        expect_corruption(|tx, tree, _, _| tx.write_u64(tree.root, field(COLOR), RED));
    }

    #[test]
    fn checker_catches_keys_out_of_order() {
        expect_corruption(|tx, tree, _, _| tx.write_u64(tree.root, N_KEY as u64, u64::MAX));
    }

    #[test]
    fn checker_catches_bad_pointers_parents_colors_and_cycles() {
        expect_corruption(|tx, _, red, _| tx.write_u64(red, field(LEFT), 0xdead_0000_0040));
        expect_corruption(|tx, _, red, links| tx.write_ptr(red, field(PARENT), links.ptr(LEFT)));
        expect_corruption(|tx, _, red, _| tx.write_u64(red, field(COLOR), 7));
        expect_corruption(|tx, tree, red, _| tx.write_ptr(red, field(LEFT), tree.root));
        expect_corruption(|tx, tree, _, _| tx.write_u64(tree.header, H_COUNT as u64, 3));
    }
}
