//! The block allocator: free extents of the data area, in DRAM only. It is rebuilt at every
//! mount from the blocks the inode trees reference (`docs/pmfs-format.md` §10 step 5), so it
//! never needs a journal: a block reaches it only after the store that unlinks it is durable.

use std::collections::BTreeMap;

/// Free extents of a data area of `total` 4 KiB blocks, indexed from 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocator {
    /// start → length, disjoint and never adjacent (always coalesced).
    free: BTreeMap<u64, u64>,
    free_blocks: u64,
    total: u64,
    /// Blocks per huge block and the index of the first huge-aligned block.
    huge: u64,
    huge_phase: u64,
}

impl Allocator {
    /// An allocator over `total` blocks where `used(i)` says whether block `i` is taken.
    /// `huge_phase` is the first block index whose absolute offset is huge-aligned and `huge`
    /// the blocks per huge block.
    pub fn from_used(total: u64, huge: u64, huge_phase: u64, used: impl Fn(u64) -> bool) -> Self {
        let mut alloc = Allocator {
            free: BTreeMap::new(),
            free_blocks: 0,
            total,
            huge,
            huge_phase: huge_phase % huge,
        };
        let mut start = None;
        for block in 0..=total {
            let is_free = block < total && !used(block);
            match (is_free, start) {
                (true, None) => start = Some(block),
                (false, Some(s)) => {
                    alloc.free.insert(s, block - s);
                    alloc.free_blocks += block - s;
                    start = None;
                }
                _ => {}
            }
        }
        alloc
    }

    /// Free blocks.
    pub fn free_blocks(&self) -> u64 {
        self.free_blocks
    }

    /// Blocks in the data area.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Takes one block (the lowest free one: sequential writes get sequential blocks).
    pub fn alloc(&mut self) -> Option<u64> {
        let (&start, &len) = self.free.iter().next()?;
        self.free.remove(&start);
        if len > 1 {
            self.free.insert(start + 1, len - 1);
        }
        self.free_blocks -= 1;
        Some(start)
    }

    /// Takes `huge` contiguous blocks whose first one is huge-aligned.
    pub fn alloc_huge(&mut self) -> Option<u64> {
        let huge = self.huge;
        let found = self.free.iter().find_map(|(&start, &len)| {
            let first = aligned_at_or_after(start, self.huge_phase, huge);
            (first + huge <= start + len).then_some((start, len, first))
        });
        let (start, len, first) = found?;
        self.free.remove(&start);
        if first > start {
            self.free.insert(start, first - start);
        }
        let end = start + len;
        if first + huge < end {
            self.free.insert(first + huge, end - first - huge);
        }
        self.free_blocks -= huge;
        Some(first)
    }

    /// Returns `[start, start + len)` to the free set.
    ///
    /// # Panics
    /// If any of it is already free or outside the area: a bug (double free), since every
    /// block freed was found in a tree that mount checked for double references.
    pub fn free(&mut self, start: u64, len: u64) {
        assert!(
            len > 0 && start + len <= self.total,
            "free of {start}+{len} out of range"
        );
        let before = self.free.range(..=start).next_back().map(|(&s, &l)| (s, l));
        if let Some((s, l)) = before {
            assert!(s + l <= start, "double free of block {start}");
        }
        let after = self.free.range(start..).next().map(|(&s, &l)| (s, l));
        if let Some((s, _)) = after {
            assert!(start + len <= s, "double free of block {s}");
        }
        let (mut new_start, mut new_len) = (start, len);
        if let Some((s, l)) = before.filter(|&(s, l)| s + l == start) {
            self.free.remove(&s);
            new_start = s;
            new_len += l;
        }
        if let Some((s, l)) = after.filter(|&(s, _)| s == start + len) {
            self.free.remove(&s);
            new_len += l;
        }
        self.free.insert(new_start, new_len);
        self.free_blocks += len;
    }

    /// Whether block `block` is free.
    pub fn is_free(&self, block: u64) -> bool {
        self.free
            .range(..=block)
            .next_back()
            .is_some_and(|(&s, &l)| block < s + l)
    }

    /// The free extents, in order.
    pub fn extents(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.free.iter().map(|(&s, &l)| (s, l))
    }
}

fn aligned_at_or_after(block: u64, phase: u64, align: u64) -> u64 {
    let rem = (block + align - phase) % align;
    if rem == 0 { block } else { block + align - rem }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn builds_from_a_bitmap_and_coalesces() {
        let mut a = Allocator::from_used(10, 4, 0, |b| b == 3 || b == 4);
        assert_eq!(a.free_blocks(), 8);
        assert_eq!(a.extents().collect::<Vec<_>>(), vec![(0, 3), (5, 5)]);
        a.free(3, 2);
        assert_eq!(a.extents().collect::<Vec<_>>(), vec![(0, 10)]);
        assert_eq!(a.alloc(), Some(0));
        assert!(!a.is_free(0));
        assert!(a.is_free(1));
    }

    #[test]
    fn huge_allocations_are_aligned() {
        // Phase 2: blocks 2, 6, 10 ... are huge-aligned.
        let mut a = Allocator::from_used(16, 4, 2, |b| b == 3);
        assert_eq!(a.alloc_huge(), Some(6));
        assert_eq!(a.alloc_huge(), Some(10));
        assert_eq!(a.alloc_huge(), None);
        assert_eq!(a.free_blocks(), 16 - 1 - 8);
        a.free(6, 4);
        assert_eq!(a.alloc_huge(), Some(6));
    }

    #[test]
    #[should_panic(expected = "double free")]
    fn double_free_panics() {
        let mut a = Allocator::from_used(8, 4, 0, |_| false);
        a.free(2, 1);
    }

    proptest! {
        #[test]
        fn matches_a_bitmap_model(ops in proptest::collection::vec((any::<bool>(), 0u64..64), 1..200)) {
            let mut a = Allocator::from_used(64, 8, 3, |b| b % 5 == 0);
            let mut model: Vec<bool> = (0..64).map(|b| b % 5 == 0).collect();
            let mut taken: Vec<u64> = Vec::new();
            for (alloc, pick) in ops {
                if alloc {
                    match a.alloc() {
                        Some(b) => {
                            prop_assert!(!model[b as usize]);
                            prop_assert_eq!(Some(b), model.iter().position(|&u| !u).map(|p| p as u64));
                            model[b as usize] = true;
                            taken.push(b);
                        }
                        None => prop_assert!(model.iter().all(|&u| u)),
                    }
                } else if !taken.is_empty() {
                    let b = taken.swap_remove(pick as usize % taken.len());
                    a.free(b, 1);
                    model[b as usize] = false;
                }
                prop_assert_eq!(a.free_blocks(), model.iter().filter(|&&u| !u).count() as u64);
                for (b, &used) in model.iter().enumerate() {
                    prop_assert_eq!(a.is_free(b as u64), !used);
                }
            }
        }
    }
}
