//! Memory-mapped file access straight onto PM, with an explicit persist call: the user-space
//! analogue of PMFS' XIP/DAX `mmap` (`docs/pmfs-mmap.md`).
//!
//! [`Fs::map`] pins a byte range of a regular file to the PM blocks that hold it and returns
//! a [`FileMap`]: the range as a list of [`Extent`]s (pool offsets; contiguous blocks are
//! merged, so each 2 MiB leaf of a huge file is one extent), loads and stores through the
//! handle, and [`FileMap::persist`] (flush the covered lines, fence: after it returns the
//! bytes are durable). On the native backend, [`FileMap::raw_extents`] gives raw pointers into
//! the mapping for code that stores directly, as a DAX user would.
//!
//! Rules that keep this sound and coherent:
//! - Holes in the range are filled (zero blocks linked by one transaction) when mapping, so
//!   every byte of the range has a block. The range must lie inside the file (`ENXIO`).
//! - A mapping holds an open handle on the inode: unlinking the file keeps its blocks until
//!   the last unmap (and the last close), as for any open file.
//! - While a file is mapped, `write` overwrites it in place in both data modes, so the
//!   mapping sees every write.
//! - A truncate that cuts blocks of a mapped file does not free them before the last unmap:
//!   a pointer from [`FileMap::raw_extents`] never aliases a block given to another file.
//!   Accesses through the handle past the smallest size the file had since it was mapped
//!   fail with `EFAULT` (where the kernel would raise `SIGBUS`).
//!
//! Crash model: stores through [`FileMap::write`] go through the seam (`Persist::write`,
//! write-back stores, no fence), so the crash simulator sees them exactly as it sees any
//! store: before `persist` each 8-byte word may or may not have reached PM; after it, all
//! have. Stores made through raw pointers bypass the seam and are outside the simulated
//! model; they follow the same protocol (the flush instructions of `persist` write back
//! whatever the lines hold, whoever stored it), which the simulator checks through `write`.

use crate::Mutant;
use crate::batch::Batch;
use crate::error::Errno;
use crate::filesystem::Fs;
use crate::inode::{FileType, field};
use crate::layout::BLOCK;
use crate::state::{Inner, Mapped};
use crate::tree;
use pmem::{Native, Persist, WriteClass};
use std::sync::atomic::{AtomicBool, Ordering};

/// A contiguous piece of a mapped range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Offset in the file.
    pub file_off: u64,
    /// Absolute offset in the pool.
    pub pool_off: u64,
    /// Bytes.
    pub len: u64,
}

/// A contiguous piece of a mapped range as a raw pointer into the native mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawExtent {
    /// Offset in the file.
    pub file_off: u64,
    /// The first byte, inside the pool's mapping.
    pub ptr: *mut u8,
    /// Bytes.
    pub len: usize,
}

/// A mapped byte range of a file. Dropping it unmaps.
#[derive(Debug)]
pub struct FileMap<'a, B: Persist> {
    fs: &'a Fs<B>,
    ino: u64,
    off: u64,
    len: u64,
    writable: bool,
    extents: Vec<Extent>,
    /// Stored through since the last persist (the times are updated at persist).
    dirty: AtomicBool,
}

impl<B: Persist> Fs<B> {
    /// Maps `[off, off + len)` of regular file `ino`; `off` must be 4 KiB-aligned.
    pub fn map(
        &self,
        ino: u64,
        off: u64,
        len: u64,
        writable: bool,
    ) -> Result<FileMap<'_, B>, Errno> {
        let mut inner = self.lock();
        let blocks = inner.blocks.get(&ino).copied();
        let extents = self.map_locked(&mut inner, ino, off, len)?;
        if inner.blocks.get(&ino).copied() != blocks {
            // Holes were filled: that transaction is durable now.
            self.pm().durability_point();
        }
        let size = self.inode(ino)?.size;
        *inner.open.entry(ino).or_insert(0) += 1;
        let mapped = inner.mapped.entry(ino).or_insert(Mapped {
            count: 0,
            floor: size,
        });
        mapped.count += 1;
        Ok(FileMap {
            fs: self,
            ino,
            off,
            len,
            writable,
            extents,
            dirty: AtomicBool::new(false),
        })
    }

    fn map_locked(
        &self,
        inner: &mut Inner,
        ino: u64,
        off: u64,
        len: u64,
    ) -> Result<Vec<Extent>, Errno> {
        let mut inode = self.inode(ino)?;
        if inode.kind() != Some(FileType::Regular) {
            return Err(Errno::ENODEV);
        }
        if len == 0 || !off.is_multiple_of(BLOCK) {
            return Err(Errno::EINVAL);
        }
        if off.checked_add(len).is_none_or(|end| end > inode.size) {
            return Err(Errno::ENXIO);
        }
        let (leaf, huge) = (inode.leaf_size(), inode.is_huge());
        let leaves = off / leaf..(off + len).div_ceil(leaf);
        let (pm, sb) = (self.pm(), &self.sb);
        let mut holes = Vec::new();
        for idx in leaves.clone() {
            if tree::lookup(pm, sb, inode.tree, huge, idx)?.is_none() {
                let Some(block) = inner.alloc_leaf(sb, huge) else {
                    self.give_back(inner, &holes, huge);
                    return Err(Errno::ENOSPC);
                };
                self.zero_leaf(block, leaf);
                holes.push((idx, block));
            }
        }
        if !holes.is_empty() {
            if let Err(e) = self.link_leaves(inner, ino, &mut inode, &holes, Batch::default()) {
                self.give_back(inner, &holes, huge);
                return Err(e);
            }
            let per_leaf = leaf / BLOCK;
            inner.add_blocks(ino, (holes.len() as u64 * per_leaf) as i64);
        }
        let mut extents: Vec<Extent> = Vec::new();
        for idx in leaves {
            let block = tree::lookup(pm, sb, inode.tree, huge, idx)?.ok_or(Errno::EIO)?;
            let (lo, hi) = (off.max(idx * leaf), (off + len).min((idx + 1) * leaf));
            let piece = Extent {
                file_off: lo,
                pool_off: block + lo - idx * leaf,
                len: hi - lo,
            };
            match extents.last_mut() {
                Some(last) if last.pool_off + last.len == piece.pool_off => last.len += piece.len,
                _ => extents.push(piece),
            }
        }
        Ok(extents)
    }

    fn zero_leaf(&self, block: u64, leaf: u64) {
        const ZEROS: [u8; BLOCK as usize] = [0; BLOCK as usize];
        for at in (block..block + leaf).step_by(BLOCK as usize) {
            self.store_data(at, &ZEROS);
        }
    }

    fn give_back(&self, inner: &mut Inner, leaves: &[(u64, u64)], huge: bool) {
        let per_leaf = if huge {
            crate::layout::BLOCKS_PER_HUGE
        } else {
            1
        };
        let runs: Vec<(u64, u64)> = leaves.iter().map(|&(_, b)| (b, per_leaf)).collect();
        inner.free_runs(&self.sb, &runs);
    }

    fn unmap(&self, ino: u64) {
        let mut inner = self.lock();
        if let Some(mapped) = inner.mapped.get_mut(&ino) {
            mapped.count -= 1;
            if mapped.count == 0 {
                inner.mapped.remove(&ino);
                if let Some(runs) = inner.deferred.remove(&ino) {
                    inner.free_runs(&self.sb, &runs);
                }
            }
        }
        // The handle taken by `map`; an error here (a damaged inode) leaves nothing to undo.
        let _ = self.release_locked(&mut inner, ino);
    }
}

impl<B: Persist> FileMap<'_, B> {
    /// The mapped inode.
    pub fn ino(&self) -> u64 {
        self.ino
    }

    /// Offset of the mapped range in the file.
    pub fn offset(&self) -> u64 {
        self.off
    }

    /// Length of the mapped range.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the mapped range is empty (never: mapping refuses it).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The range, as contiguous PM extents in file order.
    pub fn extents(&self) -> &[Extent] {
        &self.extents
    }

    /// The pieces of `[at, at + len)` (offsets relative to the mapping) as
    /// `(pool offset, offset in the caller's buffer, bytes)`, after checking the range
    /// against the mapping and the file's size.
    fn pieces(&self, at: u64, len: u64) -> Result<Vec<(u64, usize, usize)>, Errno> {
        let end = at.checked_add(len).ok_or(Errno::EFAULT)?;
        if end > self.len {
            return Err(Errno::EFAULT);
        }
        let limit = {
            let inner = self.fs.lock();
            let size = self.fs.inode(self.ino)?.size;
            inner
                .mapped
                .get(&self.ino)
                .map_or(size, |m| m.floor.min(size))
        };
        if self.off + end > limit {
            return Err(Errno::EFAULT);
        }
        let (lo, hi) = (self.off + at, self.off + end);
        Ok(self
            .extents
            .iter()
            .filter(|e| e.file_off < hi && e.file_off + e.len > lo)
            .map(|e| {
                let from = lo.max(e.file_off);
                let to = hi.min(e.file_off + e.len);
                let pool = e.pool_off + (from - e.file_off);
                ((pool), (from - lo) as usize, (to - from) as usize)
            })
            .collect())
    }

    /// Loads `buf.len()` bytes at `at` (relative to the mapping).
    pub fn read(&self, at: u64, buf: &mut [u8]) -> Result<(), Errno> {
        for (pool, from, n) in self.pieces(at, buf.len() as u64)? {
            self.fs.pm().read(pool, &mut buf[from..from + n]);
        }
        Ok(())
    }

    /// Stores `data` at `at` (relative to the mapping) with ordinary write-back stores, as a
    /// store through a mapped pointer would: nothing is durable before [`FileMap::persist`].
    pub fn write(&self, at: u64, data: &[u8]) -> Result<(), Errno> {
        if !self.writable {
            return Err(Errno::EACCES);
        }
        for (pool, from, n) in self.pieces(at, data.len() as u64)? {
            self.fs
                .pm()
                .write(pool, &data[from..from + n], WriteClass::User);
        }
        self.dirty.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Makes `[at, at + len)` (relative to the mapping) durable: writes back its lines and
    /// fences. If anything was stored since the last persist, the file's `mtime` and `ctime`
    /// are then set (as the overwrite path does: two 8-byte stores, persisted).
    pub fn persist(&self, at: u64, len: u64) -> Result<(), Errno> {
        let pm = self.fs.pm();
        if len > 0 {
            for (pool, _, n) in self.pieces(at, len)? {
                if self.fs.options.mutant != Mutant::MapNoFlush {
                    pm.flush(pool, n as u64);
                }
            }
        }
        pm.fence();
        if self.dirty.swap(false, Ordering::Relaxed) {
            let _inner = self.fs.lock();
            let now = self.fs.now();
            let at = self.fs.sb.inode_offset(self.ino);
            pm.write_u64(at + field::CTIME, now, WriteClass::Meta);
            pm.write_u64(at + field::MTIME, now, WriteClass::Meta);
            pm.persist(at + field::MTIME, 16);
        }
        pm.durability_point();
        Ok(())
    }

    /// Makes the whole mapped range durable.
    pub fn persist_all(&self) -> Result<(), Errno> {
        self.persist(0, self.len)
    }
}

impl FileMap<'_, Native> {
    /// The range as raw pointers into the native mapping, for direct loads and stores.
    ///
    /// Stores made through these pointers bypass the seam (no accounting, no crash
    /// simulation); they become durable at [`FileMap::persist`] of their range like stores
    /// made through [`FileMap::write`]. The pointers stay valid (the blocks stay allocated to
    /// this file or deferred) until the map is dropped; dereferencing them is the caller's
    /// `unsafe`, with the usual aliasing rules against other writers of the same bytes.
    pub fn raw_extents(&self) -> Vec<RawExtent> {
        let base = self.fs.pm().base_ptr();
        self.extents
            .iter()
            .map(|e| RawExtent {
                file_off: e.file_off,
                ptr: base.wrapping_add(e.pool_off as usize),
                len: e.len as usize,
            })
            .collect()
    }
}

impl<B: Persist> Drop for FileMap<'_, B> {
    fn drop(&mut self) {
        self.fs.unmap(self.ino);
    }
}
