//! The file system's DRAM state, kept behind its one lock: the journal handle, the block
//! allocator, free inode numbers, block counts, cached directory indexes, open handles,
//! kernel pins, and the state of live memory mappings.

use crate::alloc::Allocator;
use crate::dir::DirIndex;
use crate::journal::Journal;
use crate::layout::{BLOCK, Superblock};
use std::collections::{BTreeSet, HashMap};

/// Per-inode state of live memory mappings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mapped {
    /// Live mappings.
    pub(crate) count: u32,
    /// The smallest size since the first mapping: the handle's accesses stop there.
    pub(crate) floor: u64,
}

/// DRAM state, behind the file system's one lock.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) journal: Journal,
    pub(crate) alloc: Allocator,
    pub(crate) free_inodes: BTreeSet<u64>,
    /// 4 KiB blocks used per live inode.
    pub(crate) blocks: HashMap<u64, u64>,
    pub(crate) dirs: HashMap<u64, DirIndex>,
    /// Open handles per inode (the posix layer's descriptors, `open_inode`, mappings).
    pub(crate) open: HashMap<u64, u32>,
    pub(crate) creds: (u32, u32),
    /// Kernel references per inode number (FUSE lookup counts): a freed number that is
    /// still referenced is not reused until the kernel forgets it.
    pub(crate) pins: HashMap<u64, u64>,
    /// Live memory mappings per inode (`crate::mmap`).
    pub(crate) mapped: HashMap<u64, Mapped>,
    /// Blocks cut from a mapped file, handed to the allocator at its last unmap (a mapping
    /// never points into a block someone else may reuse).
    pub(crate) deferred: HashMap<u64, Vec<(u64, u64)>>,
}

impl Inner {
    /// Fresh state after mount: nothing open, pinned, cached or mapped.
    pub(crate) fn new(
        journal: Journal,
        alloc: Allocator,
        free_inodes: BTreeSet<u64>,
        blocks: HashMap<u64, u64>,
    ) -> Inner {
        Inner {
            journal,
            alloc,
            free_inodes,
            blocks,
            dirs: HashMap::new(),
            open: HashMap::new(),
            creds: (0, 0),
            pins: HashMap::new(),
            mapped: HashMap::new(),
            deferred: HashMap::new(),
        }
    }

    pub(crate) fn alloc_block(&mut self, sb: &Superblock) -> Option<u64> {
        self.alloc.alloc().map(|b| sb.data_offset + b * BLOCK)
    }

    pub(crate) fn alloc_leaf(&mut self, sb: &Superblock, huge: bool) -> Option<u64> {
        let block = if huge {
            self.alloc.alloc_huge()
        } else {
            self.alloc.alloc()
        };
        block.map(|b| sb.data_offset + b * BLOCK)
    }

    /// Returns `(offset, 4 KiB blocks)` runs to the allocator.
    pub(crate) fn free_runs(&mut self, sb: &Superblock, runs: &[(u64, u64)]) {
        for &(off, n) in runs {
            self.alloc.free((off - sb.data_offset) / BLOCK, n);
        }
    }

    pub(crate) fn add_blocks(&mut self, ino: u64, delta: i64) {
        let count = self.blocks.entry(ino).or_insert(0);
        *count = count
            .checked_add_signed(delta)
            .expect("block count underflow");
    }
}
