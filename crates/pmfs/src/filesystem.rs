//! The mounted file system: the pool, the geometry, the options, the DRAM state behind one
//! lock, and the inode-level entry points that are neither namespace (`ns.rs`), data
//! (`data.rs`) nor attributes (`attr.rs`): inode validation, open handles, `statfs`.
//!
//! One mutex serialises every operation (PMFS serialises metadata through its journal lock
//! too); reads take it as well, so a read never sees a half-applied write.

use crate::attr::{Attr, JournalStats, StatFs};
use crate::batch::{Batch, commit};
use crate::error::Errno;
use crate::inode::Inode;
use crate::layout::{BLOCK, Superblock};
use crate::options::MountOptions;
use crate::state::Inner;
use parking_lot::{Mutex, MutexGuard};
use pmem::{Persist, Pool};

/// A mounted file system on a pool over backend `B`.
#[derive(Debug)]
pub struct Fs<B: Persist> {
    pub(crate) pool: Pool<B>,
    pub(crate) sb: Superblock,
    pub(crate) options: MountOptions,
    pub(crate) inner: Mutex<Inner>,
    /// What this mount found damaged and repaired.
    pub(crate) repairs: Vec<crate::recovery::Repair>,
    /// Clock readings since mount (for [`Clock::Stepping`]).
    pub(crate) readings: std::sync::atomic::AtomicU64,
}

impl<B: Persist> Fs<B> {
    pub(crate) fn pm(&self) -> &B {
        self.pool.pm()
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock()
    }

    pub(crate) fn now(&self) -> u64 {
        let readings = self
            .readings
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.options.clock.at(readings)
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<B> {
        &self.pool
    }

    /// The superblock (geometry).
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// What this mount found damaged and repaired (empty for a healthy file system).
    pub fn repairs(&self) -> &[crate::recovery::Repair] {
        &self.repairs
    }

    /// The mount options.
    pub fn options(&self) -> &MountOptions {
        &self.options
    }

    /// Unmounts: releases the pool, marked clean.
    pub fn unmount(self) -> Result<(), pmem::PoolError> {
        self.pool.close()
    }

    /// Gives up the pool without marking it clean (as a crash would).
    pub fn abandon(self) {
        self.pool.abandon();
    }

    /// Gives the pool back without marking it clean (as a crash would), for a remount on
    /// the same backend.
    pub fn into_pool(self) -> Pool<B> {
        self.pool.mark_unclean_on_drop();
        self.pool
    }

    /// Reads and checks a live inode. A number out of range or a free inode is `ENOENT`.
    pub(crate) fn inode(&self, ino: u64) -> Result<Inode, Errno> {
        if ino == 0 || ino >= self.sb.inode_count {
            return Err(Errno::ENOENT);
        }
        let inode = Inode::read(self.pm(), &self.sb, ino)?;
        if !inode.is_live() {
            return Err(Errno::ENOENT);
        }
        inode.validate(&self.sb, ino)?;
        Ok(inode)
    }

    pub(crate) fn commit(&self, inner: &mut Inner, batch: Batch) -> Result<(), Errno> {
        commit(self.pm(), &mut inner.journal, batch)
    }

    /// Space and inode counts.
    pub fn statfs(&self) -> StatFs {
        let inner = self.lock();
        StatFs {
            blocks: self.sb.data_blocks,
            free_blocks: inner.alloc.free_blocks(),
            inodes: self.sb.inode_count - 1,
            free_inodes: inner.free_inodes.len() as u64,
            block_size: BLOCK as u32,
            name_max: crate::layout::NAME_MAX as u32,
        }
    }

    /// Journal usage since mount.
    pub fn journal_stats(&self) -> JournalStats {
        let (last_entries, entries, commits) = self.lock().journal.counters();
        JournalStats {
            last_entries,
            entries,
            commits,
        }
    }

    /// Counts a handle on `ino` (an unlinked file stays until its last handle goes).
    pub fn open_inode(&self, ino: u64) -> Result<Attr, Errno> {
        let mut inner = self.lock();
        let inode = self.inode(ino)?;
        *inner.open.entry(ino).or_insert(0) += 1;
        Ok(self.attr(&inner, ino, &inode))
    }

    /// Drops a handle on `ino`; the last one frees an unlinked file.
    pub fn release_inode(&self, ino: u64) -> Result<(), Errno> {
        let mut inner = self.lock();
        self.release_locked(&mut inner, ino)
    }

    pub(crate) fn release_locked(&self, inner: &mut Inner, ino: u64) -> Result<(), Errno> {
        let count = inner.open.get_mut(&ino).ok_or(Errno::EBADF)?;
        *count -= 1;
        if *count > 0 {
            return Ok(());
        }
        inner.open.remove(&ino);
        let inode = Inode::read(self.pm(), &self.sb, ino)?;
        if !inode.is_live() {
            // Freed while a handle was open (the namespace operations keep an open inode on
            // the truncate list instead; this guards the inode number all the same): the
            // number is free only now.
            if !inner.pins.contains_key(&ino) {
                inner.free_inodes.insert(ino);
            }
            return Ok(());
        }
        inode.validate(&self.sb, ino)?;
        if inode.nlink == 0 {
            self.free_orphan(inner, ino, &inode)?;
            self.pm().durability_point();
        }
        Ok(())
    }
}
