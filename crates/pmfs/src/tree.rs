//! The per-file radix tree (`docs/pmfs-format.md` §6): 4 KiB nodes of 512 block pointers,
//! height 0–4, leaves of 4 KiB or 2 MiB. Lookups and walks check every pointer they read.
//! Growing is planned in DRAM ([`plan_install`]): fresh nodes are written whole with
//! non-temporal stores, the existing tree changes only through slot stores and the root word,
//! which the caller logs. Cutting ([`cut`]) clears slots with unlogged 8-byte stores.

use crate::error::Corrupt;
use crate::inode::{root_word, split_root};
use crate::layout::{BLOCK, BLOCKS_PER_HUGE, FANOUT, HUGE_BLOCK, MAX_HEIGHT, Superblock};
use pmem::{Persist, WriteClass};
use std::collections::BTreeMap;

/// Checks a pointer read from the media: a node or 4 KiB leaf is a block of the data area, a
/// huge leaf a 2 MiB-aligned run inside it. The damage names what is wrong with it.
pub fn check_ptr(sb: &Superblock, ptr: u64, leaf: bool, huge: bool) -> Result<(), Corrupt> {
    let (len, size, what) = if leaf && huge {
        (HUGE_BLOCK, "2 MiB", "a 2 MiB leaf")
    } else if leaf {
        (BLOCK, "4 KiB", "a 4 KiB leaf")
    } else {
        (BLOCK, "4 KiB", "a tree node")
    };
    let wrong = if !ptr.is_multiple_of(len) {
        format!("is not aligned to {size}")
    } else if !sb.is_data_range(ptr, len) {
        format!(
            "is outside the data area [{:#x}, {:#x})",
            sb.data_offset,
            sb.data_end()
        )
    } else {
        return Ok(());
    };
    Err(Corrupt::new(format!(
        "block pointer {ptr:#x} to {what} {wrong}"
    )))
}

/// Leaves a tree of `height` can hold.
pub fn capacity(height: u32) -> u64 {
    FANOUT.pow(height)
}

/// The smallest height that holds leaf index `leaf`.
pub fn height_for(leaf: u64) -> u32 {
    let mut height = 0;
    while capacity(height) <= leaf {
        height += 1;
    }
    height
}

/// The leaf holding leaf index `leaf`, if mapped.
pub fn lookup<B: Persist>(
    pm: &B,
    sb: &Superblock,
    tree: u64,
    huge: bool,
    leaf: u64,
) -> Result<Option<u64>, Corrupt> {
    let (root, height) = split_root(tree);
    if root == 0 || leaf >= capacity(height) {
        return Ok(None);
    }
    let mut node = root;
    for level in (1..=height).rev() {
        let slot = (leaf / capacity(level - 1)) % FANOUT;
        let ptr = pm.read_u64(node + slot * 8);
        if ptr == 0 {
            return Ok(None);
        }
        check_ptr(sb, ptr, level == 1, huge)?;
        node = ptr;
    }
    Ok(Some(node))
}

/// What a tree holds, block by block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visit {
    /// An interior node.
    Node(u64),
    /// A leaf: its index in the file and its offset.
    Leaf(u64, u64),
}

/// Calls `f` for every node and leaf of the tree (nodes before their children).
pub fn walk<B: Persist>(
    pm: &B,
    sb: &Superblock,
    tree: u64,
    huge: bool,
    f: &mut dyn FnMut(Visit) -> Result<(), Corrupt>,
) -> Result<(), Corrupt> {
    let (root, height) = split_root(tree);
    if root == 0 {
        return Ok(());
    }
    walk_node(pm, sb, root, height, 0, huge, f)
}

fn walk_node<B: Persist>(
    pm: &B,
    sb: &Superblock,
    ptr: u64,
    level: u32,
    first_leaf: u64,
    huge: bool,
    f: &mut dyn FnMut(Visit) -> Result<(), Corrupt>,
) -> Result<(), Corrupt> {
    if level == 0 {
        return f(Visit::Leaf(first_leaf, ptr));
    }
    f(Visit::Node(ptr))?;
    let slots = read_node(pm, ptr);
    let span = capacity(level - 1);
    for (slot, &child) in slots.iter().enumerate() {
        if child != 0 {
            check_ptr(sb, child, level == 1, huge)?;
            walk_node(
                pm,
                sb,
                child,
                level - 1,
                first_leaf + slot as u64 * span,
                huge,
                f,
            )?;
        }
    }
    Ok(())
}

/// Reads a node's 512 slots.
pub fn read_node<B: Persist>(pm: &B, node: u64) -> Vec<u64> {
    let mut bytes = vec![0u8; BLOCK as usize];
    pm.read(node, &mut bytes);
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

/// The 4 KiB blocks a tree occupies (nodes, and leaves in 4 KiB units), as
/// `(offset, blocks)` runs.
pub fn blocks<B: Persist>(
    pm: &B,
    sb: &Superblock,
    tree: u64,
    huge: bool,
) -> Result<Vec<(u64, u64)>, Corrupt> {
    let mut out = Vec::new();
    walk(pm, sb, tree, huge, &mut |v| {
        out.push(match v {
            Visit::Node(p) => (p, 1),
            Visit::Leaf(_, p) => (p, if huge { BLOCKS_PER_HUGE } else { 1 }),
        });
        Ok(())
    })?;
    Ok(out)
}

/// A planned change of a tree: fresh nodes to write whole, slot stores into existing nodes
/// (to log), the new root word, and the leaves it replaced.
#[derive(Debug, Default)]
pub struct Install {
    /// Fresh nodes (offset → slots), written with NT stores before the transaction's log fence.
    pub fresh: BTreeMap<u64, Vec<u64>>,
    /// Absolute slot address → new value, in existing nodes.
    pub slots: BTreeMap<u64, u64>,
    /// The root word after the change.
    pub root: u64,
    /// Leaves that were mapped before and are replaced (copy-on-write), to free after commit.
    pub replaced: Vec<u64>,
}

impl Install {
    /// The slot stores grouped into contiguous ranges `(addr, len)`, for logging.
    pub fn slot_ranges(&self) -> Vec<(u64, u64)> {
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for &addr in self.slots.keys() {
            match ranges.last_mut() {
                Some((start, len)) if *start + *len == addr => *len += 8,
                _ => ranges.push((addr, 8)),
            }
        }
        ranges
    }

    /// Writes the fresh nodes (not fenced: the transaction's log fence completes them).
    pub fn write_fresh<B: Persist>(&self, pm: &B) {
        for (&node, slots) in &self.fresh {
            let bytes: Vec<u8> = slots.iter().flat_map(|s| s.to_le_bytes()).collect();
            pm.write_nt(node, &bytes, WriteClass::Meta);
        }
    }
}

/// Plans mapping each `(leaf index, leaf offset)` into the tree `tree`. New interior nodes come
/// from `alloc_node` (offsets of 4 KiB blocks); on `None` the plan fails and returns the nodes
/// it took through `Err`.
pub fn plan_install<B: Persist>(
    pm: &B,
    sb: &Superblock,
    tree: u64,
    huge: bool,
    mappings: &[(u64, u64)],
    alloc_node: &mut dyn FnMut() -> Option<u64>,
) -> Result<Result<Install, Vec<u64>>, Corrupt> {
    let mut plan = Planner {
        pm,
        sb,
        huge,
        install: Install::default(),
        taken: Vec::new(),
    };
    let Some(max) = mappings.iter().map(|m| m.0).max() else {
        plan.install.root = tree;
        return Ok(Ok(plan.install));
    };
    let need = height_for(max);
    if need > MAX_HEIGHT {
        return Err(Corrupt::new(format!("leaf {max} beyond the tallest tree")));
    }
    let (mut root, mut height) = split_root(tree);
    if root != 0 {
        check_ptr(sb, root, height == 0, huge)?;
    }
    // Grow: a fresh root whose slot 0 is the old root, until the tree is tall enough.
    while root != 0 && height < need {
        let Some(node) = plan.new_node(alloc_node) else {
            return Ok(Err(plan.taken));
        };
        plan.install.fresh.get_mut(&node).expect("fresh")[0] = root;
        root = node;
        height += 1;
    }
    if root == 0 {
        height = need;
        if height > 0 {
            let Some(node) = plan.new_node(alloc_node) else {
                return Ok(Err(plan.taken));
            };
            root = node;
        }
    }
    for &(leaf, ptr) in mappings {
        if height == 0 {
            debug_assert_eq!(leaf, 0);
            if root != 0 && root != ptr {
                plan.install.replaced.push(root);
            }
            root = ptr;
            continue;
        }
        if !plan.map(root, height, leaf, ptr, alloc_node)? {
            return Ok(Err(plan.taken));
        }
    }
    plan.install.root = root_word(root, height);
    Ok(Ok(plan.install))
}

struct Planner<'a, B: Persist> {
    pm: &'a B,
    sb: &'a Superblock,
    huge: bool,
    install: Install,
    taken: Vec<u64>,
}

impl<B: Persist> Planner<'_, B> {
    fn new_node(&mut self, alloc_node: &mut dyn FnMut() -> Option<u64>) -> Option<u64> {
        let node = alloc_node()?;
        self.taken.push(node);
        self.install.fresh.insert(node, vec![0; FANOUT as usize]);
        Some(node)
    }

    fn get(&self, node: u64, slot: u64) -> u64 {
        match self.install.fresh.get(&node) {
            Some(slots) => slots[slot as usize],
            None => {
                let addr = node + slot * 8;
                match self.install.slots.get(&addr) {
                    Some(&v) => v,
                    None => self.pm.read_u64(addr),
                }
            }
        }
    }

    fn set(&mut self, node: u64, slot: u64, value: u64) {
        match self.install.fresh.get_mut(&node) {
            Some(slots) => slots[slot as usize] = value,
            None => {
                self.install.slots.insert(node + slot * 8, value);
            }
        }
    }

    /// Maps one leaf; `Ok(false)` when out of blocks for nodes.
    fn map(
        &mut self,
        root: u64,
        height: u32,
        leaf: u64,
        ptr: u64,
        alloc_node: &mut dyn FnMut() -> Option<u64>,
    ) -> Result<bool, Corrupt> {
        let mut node = root;
        for level in (1..=height).rev() {
            let slot = (leaf / capacity(level - 1)) % FANOUT;
            let child = self.get(node, slot);
            if level == 1 {
                if child != 0 && child != ptr {
                    check_ptr(self.sb, child, true, self.huge)?;
                    self.install.replaced.push(child);
                }
                self.set(node, slot, ptr);
                return Ok(true);
            }
            node = if child == 0 {
                let Some(fresh) = self.new_node(alloc_node) else {
                    return Ok(false);
                };
                self.set(node, slot, fresh);
                fresh
            } else {
                check_ptr(self.sb, child, false, self.huge)?;
                child
            };
        }
        unreachable!("height >= 1 reaches level 1")
    }
}

/// Clears every slot of the tree that only covers leaves at index `>= keep` (unlogged 8-byte
/// stores, each flushed), and returns the blocks that became unreachable as `(offset,
/// blocks)` runs. The caller fences, and clears the root word itself when `keep == 0`.
pub fn cut<B: Persist>(
    pm: &B,
    sb: &Superblock,
    tree: u64,
    huge: bool,
    keep: u64,
) -> Result<Vec<(u64, u64)>, Corrupt> {
    let (root, height) = split_root(tree);
    if root == 0 {
        return Ok(Vec::new());
    }
    if keep == 0 {
        return blocks(pm, sb, tree, huge);
    }
    if keep >= capacity(height) {
        return Ok(Vec::new());
    }
    let mut freed = Vec::new();
    cut_node(pm, sb, root, height, 0, huge, keep, &mut freed)?;
    Ok(freed)
}

#[allow(clippy::too_many_arguments)]
fn cut_node<B: Persist>(
    pm: &B,
    sb: &Superblock,
    node: u64,
    level: u32,
    first_leaf: u64,
    huge: bool,
    keep: u64,
    freed: &mut Vec<(u64, u64)>,
) -> Result<(), Corrupt> {
    let span = capacity(level - 1);
    let slots = read_node(pm, node);
    for (slot, &child) in slots.iter().enumerate() {
        let start = first_leaf + slot as u64 * span;
        if child == 0 || start + span <= keep {
            continue;
        }
        check_ptr(sb, child, level == 1, huge)?;
        if start >= keep {
            let subtree = if level == 1 {
                root_word(child & !(BLOCK - 1), 0)
            } else {
                root_word(child, level - 1)
            };
            freed.extend(blocks(pm, sb, subtree, huge)?);
            let addr = node + slot as u64 * 8;
            pm.write_u64(addr, 0, WriteClass::Meta);
            pm.flush(addr, 8);
        } else {
            cut_node(pm, sb, child, level - 1, start, huge, keep, freed)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{LAYOUT, MkfsOptions, ROOT_SIZE};
    use crashsim::{SimConfig, SimPm};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const POOL: u64 = 8 << 20;

    #[test]
    fn a_bad_block_pointer_says_what_is_wrong_with_it() {
        let (_, sb) = setup();
        let message = |ptr, leaf, huge| check_ptr(&sb, ptr, leaf, huge).map_err(|c| c.0);
        let area = format!("[{:#x}, {:#x})", sb.data_offset, sb.data_end());
        assert_eq!(
            message(0x1000, true, false),
            Err(format!(
                "block pointer 0x1000 to a 4 KiB leaf is outside the data area {area}"
            ))
        );
        let past = sb.data_end();
        let text = message(past, false, false).expect_err("past the data area");
        assert!(
            text.ends_with(&format!("outside the data area {area}")),
            "{text}"
        );
        assert_eq!(
            message(sb.data_offset + 8, false, false),
            Err(format!(
                "block pointer {:#x} to a tree node is not aligned to 4 KiB",
                sb.data_offset + 8
            ))
        );
        let huge = sb.data_offset.next_multiple_of(HUGE_BLOCK) + BLOCK;
        let text = message(huge, true, true).expect_err("misaligned huge leaf");
        assert!(
            text.ends_with("to a 2 MiB leaf is not aligned to 2 MiB"),
            "{text}"
        );
        assert_eq!(message(sb.data_offset, true, false), Ok(()));
    }

    fn setup() -> (SimPm, Superblock) {
        let pm = SimPm::new(POOL, SimConfig::default());
        let header = pmem::Header::new(LAYOUT, POOL, ROOT_SIZE).expect("header");
        let options = MkfsOptions {
            inodes: Some(64),
            journal_entries: 64,
            ..MkfsOptions::default()
        };
        (pm, Superblock::plan(&header, &options, 0).expect("plan"))
    }

    /// Installs mappings directly (no journal), as a transaction would after commit.
    fn install(
        pm: &SimPm,
        sb: &Superblock,
        tree: u64,
        maps: &[(u64, u64)],
        next: &mut u64,
    ) -> Install {
        let mut alloc = || {
            let b = *next;
            *next += BLOCK;
            Some(b)
        };
        let plan = plan_install(pm, sb, tree, false, maps, &mut alloc)
            .expect("valid")
            .expect("space");
        plan.write_fresh(pm);
        for (&addr, &v) in &plan.slots {
            pm.write_u64(addr, v, WriteClass::Meta);
        }
        plan
    }

    #[test]
    fn heights() {
        assert_eq!(height_for(0), 0);
        assert_eq!(height_for(1), 1);
        assert_eq!(height_for(511), 1);
        assert_eq!(height_for(512), 2);
        assert_eq!(height_for(512 * 512), 3);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Random installs and cuts against a map model: lookups agree, the walk finds
        /// exactly the mapped leaves, and every node is reachable.
        #[test]
        fn tree_matches_a_map(
            steps in proptest::collection::vec(
                (any::<bool>(), prop_oneof![0u64..4, 0u64..600, 0u64..300_000]), 1..24)
        ) {
            let (pm, sb) = setup();
            // Leaves live in the upper half of the data area, nodes in the lower half.
            let mut next_node = sb.data_offset;
            let mut next_leaf = sb.data_offset + (sb.data_blocks / 2) * BLOCK;
            let mut tree = 0u64;
            let mut model: BTreeMap<u64, u64> = BTreeMap::new();
            for (is_cut, leaf) in steps {
                if is_cut {
                    let freed = cut(&pm, &sb, tree, false, leaf).expect("cut");
                    if leaf == 0 {
                        tree = 0;
                    }
                    let gone: Vec<u64> = model.range(leaf..).map(|(_, &p)| p).collect();
                    for p in &gone {
                        prop_assert!(freed.contains(&(*p, 1)), "leaf {p:#x} not freed");
                    }
                    model.retain(|&l, _| l < leaf);
                } else {
                    let ptr = next_leaf;
                    next_leaf += BLOCK;
                    let plan = install(&pm, &sb, tree, &[(leaf, ptr)], &mut next_node);
                    tree = plan.root;
                    model.insert(leaf, ptr);
                }
                for (&l, &p) in &model {
                    prop_assert_eq!(lookup(&pm, &sb, tree, false, l).expect("ok"), Some(p));
                }
                let mut leaves = BTreeMap::new();
                walk(&pm, &sb, tree, false, &mut |v| {
                    if let Visit::Leaf(l, p) = v { leaves.insert(l, p); }
                    Ok(())
                }).expect("walk");
                prop_assert_eq!(&leaves, &model);
            }
        }
    }

    #[test]
    fn install_grows_and_reports_replaced_leaves() {
        let (pm, sb) = setup();
        let mut next = sb.data_offset;
        let leaf_a = sb.data_offset + 100 * BLOCK;
        let plan = install(&pm, &sb, 0, &[(0, leaf_a)], &mut next);
        assert_eq!(plan.root, leaf_a, "height 0: the root is the leaf");
        let leaf_b = leaf_a + BLOCK;
        let plan = install(&pm, &sb, plan.root, &[(1000, leaf_b)], &mut next);
        assert_eq!(split_root(plan.root).1, 2);
        assert_eq!(
            plan.fresh.len(),
            3,
            "two growth levels and one level-1 node"
        );
        assert!(
            plan.slots.is_empty(),
            "the old tree was a leaf: nothing in place"
        );
        let tree = plan.root;
        assert_eq!(lookup(&pm, &sb, tree, false, 0).expect("ok"), Some(leaf_a));
        let leaf_c = leaf_b + BLOCK;
        let plan = install(&pm, &sb, tree, &[(0, leaf_c)], &mut next);
        assert_eq!(plan.replaced, vec![leaf_a]);
        assert_eq!(plan.slots.len(), 1);
        assert_eq!(plan.slot_ranges().len(), 1);
    }

    #[test]
    fn damaged_pointers_are_errors_not_panics() {
        let (pm, sb) = setup();
        let mut next = sb.data_offset;
        let leaf = sb.data_offset + 100 * BLOCK;
        let tree = install(&pm, &sb, 0, &[(3, leaf)], &mut next).root;
        let (root, _) = split_root(tree);
        pm.write_u64(root + 3 * 8, 12345, WriteClass::Meta);
        assert!(lookup(&pm, &sb, tree, false, 3).is_err());
        assert!(blocks(&pm, &sb, tree, false).is_err());
        assert!(cut(&pm, &sb, tree, false, 1).is_err());
    }
}
