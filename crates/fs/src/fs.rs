//! The file system: mount options, DRAM state, the machinery that turns a planned change
//! ([`Batch`]) into one journal transaction, and the inode-level data operations (read,
//! write, truncate, attributes). Namespace operations are in `ns.rs`, mount and recovery in
//! `recovery.rs`, the path and descriptor layer in `posix.rs`.
//!
//! One mutex serialises every operation (PMFS serialises metadata through its journal lock
//! too); reads take it as well, so a read never sees a half-applied write.

use crate::Mutant;
use crate::alloc::Allocator;
use crate::dir::DirIndex;
use crate::error::{Corrupt, Errno};
use crate::inode::{FileType, Inode, PERM_MASK, S_IFMT, field, split_root};
use crate::journal::Journal;
use crate::layout::{BLOCK, BLOCKS_PER_HUGE, MAX_FILE_SIZE, Superblock, checked};
use crate::posix::FdTable;
use crate::tree;
use parking_lot::{Mutex, MutexGuard};
use pmem::{Persist, Pool, WriteClass};
use std::collections::{BTreeSet, HashMap};

/// How file data is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DataMode {
    /// Overwrites go in place with non-temporal stores (not atomic per write; metadata is).
    #[default]
    InPlace,
    /// Every touched leaf is rewritten into a new block and swapped in by the transaction:
    /// each write of at most 4 MiB is atomic.
    CopyOnWrite,
}

/// Where timestamps come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// The system clock.
    System,
    /// A fixed value (deterministic tests).
    Fixed(u64),
    /// A deterministic clock that advances by one microsecond at every reading, starting at
    /// the given value (crash tests: every operation gets a new time, so a torn pair of
    /// times is visible, and a rerun of the same operations reads the same times).
    Stepping(u64),
}

impl Clock {
    /// Now, in ns since the Unix epoch; `readings` is the mount's count of earlier
    /// readings (used by [`Clock::Stepping`]).
    pub fn at(self, readings: u64) -> u64 {
        match self {
            Clock::Fixed(t) => t,
            Clock::Stepping(start) => start + readings * 1_000,
            Clock::System => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
        }
    }

    /// Now, for clocks that need no state (a stepping clock reads its start).
    pub fn now(self) -> u64 {
        self.at(0)
    }
}

/// Mount-time options (nothing here is recorded on the media).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MountOptions {
    /// Data write mode.
    pub data_mode: DataMode,
    /// Timestamp source.
    pub clock: Clock,
    /// New regular files get 2 MiB leaves.
    pub huge_files: bool,
    /// Test-only deliberate bugs.
    #[doc(hidden)]
    pub mutant: Mutant,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            data_mode: DataMode::InPlace,
            clock: Clock::System,
            huge_files: false,
            mutant: Mutant::None,
        }
    }
}

/// What `stat` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    /// Inode number.
    pub ino: u64,
    /// Type.
    pub kind: FileType,
    /// Permission bits (`0o7777`).
    pub perm: u32,
    /// Link count.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// 512-byte units allocated (tree nodes included).
    pub blocks: u64,
    /// Access time (ns).
    pub atime: u64,
    /// Modification time (ns).
    pub mtime: u64,
    /// Change time (ns).
    pub ctime: u64,
    /// Creation time (ns).
    pub btime: u64,
    /// Inode reuse generation.
    pub generation: u32,
    /// Preferred I/O size.
    pub blksize: u32,
    /// Device number (character and block devices; 0 otherwise).
    pub rdev: u64,
}

impl Attr {
    /// `st_mode`: type bits and permissions.
    pub fn mode(&self) -> u32 {
        self.kind.mode_bits() | self.perm
    }
}

/// A directory entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// Name.
    pub name: Vec<u8>,
    /// Inode.
    pub ino: u64,
    /// Type.
    pub kind: FileType,
    /// Position cookie: entries after this one have larger cookies.
    pub cookie: u64,
}

/// A timestamp change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSet {
    /// The clock's now.
    Now,
    /// A given value (ns).
    At(u64),
}

/// What `setattr` changes (`None`: unchanged).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// New permission bits.
    pub perm: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (regular files).
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<TimeSet>,
    /// New modification time.
    pub mtime: Option<TimeSet>,
}

/// What `statfs` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFs {
    /// Data blocks.
    pub blocks: u64,
    /// Free data blocks.
    pub free_blocks: u64,
    /// Inodes (usable numbers).
    pub inodes: u64,
    /// Free inodes.
    pub free_inodes: u64,
    /// Block size.
    pub block_size: u32,
    /// Longest name.
    pub name_max: u32,
}

/// Journal usage since mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalStats {
    /// Entries of the last transaction.
    pub last_entries: u32,
    /// Entries since mount.
    pub entries: u64,
    /// Transactions since mount.
    pub commits: u64,
}

/// A planned change: ranges to log, then writes in order.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    log: Vec<(u64, u64)>,
    writes: Vec<(u64, Vec<u8>, bool)>,
}

impl Batch {
    pub(crate) fn log(&mut self, off: u64, len: u64) {
        self.log.push((off, len));
    }

    pub(crate) fn set(&mut self, off: u64, bytes: &[u8]) {
        self.writes.push((off, bytes.to_vec(), false));
    }

    pub(crate) fn set_u64(&mut self, off: u64, value: u64) {
        self.set(off, &value.to_le_bytes());
    }

    /// Logs and sets one word.
    pub(crate) fn word(&mut self, off: u64, value: u64) {
        self.log(off, 8);
        self.set_u64(off, value);
    }

    pub(crate) fn fresh(&mut self, off: u64, bytes: &[u8]) {
        self.writes.push((off, bytes.to_vec(), true));
    }

    /// Logs and rewrites the hot part of inode `ino`.
    pub(crate) fn hot(&mut self, sb: &Superblock, ino: u64, inode: &Inode) {
        let off = sb.inode_offset(ino);
        self.log(off, crate::inode::HOT_LEN);
        self.set(off, &inode.hot());
    }

    /// Logs and rewrites bytes `[from, to)` of inode `ino`'s cold part.
    pub(crate) fn cold(&mut self, sb: &Superblock, ino: u64, inode: &Inode, from: u64, to: u64) {
        let off = sb.inode_offset(ino);
        self.log(off + from, to - from);
        self.set(off + from, &inode.encode()[from as usize..to as usize]);
    }

    /// Sets the truncate-list head.
    pub(crate) fn head(&mut self, sb: &Superblock, ino: u64) {
        let at = sb.truncate_head();
        self.word(at, checked::seal(ino, at));
    }
}

/// Runs `batch` as one transaction.
pub(crate) fn commit<B: Persist>(pm: &B, journal: &mut Journal, batch: Batch) -> Result<(), Errno> {
    let mut tx = journal.begin(pm);
    if tx.log(&batch.log).is_err() {
        tx.abort();
        return Err(Errno::ENOSPC);
    }
    for (off, bytes, fresh) in &batch.writes {
        if *fresh {
            tx.write_fresh(*off, bytes);
        } else {
            tx.write(*off, bytes);
        }
    }
    tx.commit();
    Ok(())
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
    /// Open handles per inode (the posix layer's descriptors and `open_inode`).
    pub(crate) open: HashMap<u64, u32>,
    pub(crate) fds: FdTable,
    pub(crate) creds: (u32, u32),
    /// Kernel references per inode number (FUSE lookup counts): a freed number that is
    /// still referenced is not reused until the kernel forgets it.
    pub(crate) pins: HashMap<u64, u64>,
    /// Live memory mappings per inode (`crate::mmap`).
    pub(crate) mapped: HashMap<u64, crate::mmap::Mapped>,
    /// Blocks cut from a mapped file, handed to the allocator at its last unmap (a mapping
    /// never points into a block someone else may reuse).
    pub(crate) deferred: HashMap<u64, Vec<(u64, u64)>>,
}

impl Inner {
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

/// A mounted file system on a pool over backend `B`.
#[derive(Debug)]
pub struct Fs<B: Persist> {
    pub(crate) pool: Pool<B>,
    pub(crate) sb: Superblock,
    pub(crate) options: MountOptions,
    pub(crate) inner: Mutex<Inner>,
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
        let inode = Inode::read(self.pm(), &self.sb, ino);
        if !inode.is_live() {
            return Err(Errno::ENOENT);
        }
        inode.validate(&self.sb, ino)?;
        Ok(inode)
    }

    pub(crate) fn commit(&self, inner: &mut Inner, batch: Batch) -> Result<(), Errno> {
        commit(self.pm(), &mut inner.journal, batch)
    }

    /// Stores file data: non-temporal, durable at the next fence.
    pub(crate) fn store_data(&self, off: u64, bytes: &[u8]) {
        if self.options.mutant == Mutant::NoDataFence {
            self.pm().write(off, bytes, WriteClass::User);
        } else {
            self.pm().write_nt(off, bytes, WriteClass::User);
        }
    }

    fn zero_data(&self, off: u64, len: u64) {
        const ZEROS: [u8; 4096] = [0; 4096];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(4096);
            self.store_data(off + done, &ZEROS[..n as usize]);
            done += n;
        }
    }

    pub(crate) fn attr(&self, inner: &Inner, ino: u64, inode: &Inode) -> Attr {
        let kind = inode.kind().expect("validated inode");
        Attr {
            ino,
            kind,
            perm: inode.mode & PERM_MASK,
            nlink: inode.nlink,
            uid: inode.uid,
            gid: inode.gid,
            size: inode.size,
            blocks: inner.blocks.get(&ino).copied().unwrap_or(0) * (BLOCK / 512),
            atime: inode.atime,
            mtime: inode.mtime,
            ctime: inode.ctime,
            btime: inode.btime,
            generation: inode.generation,
            blksize: inode.leaf_size() as u32,
            rdev: inode.rdev,
        }
    }

    /// Attributes of inode `ino`.
    pub fn getattr(&self, ino: u64) -> Result<Attr, Errno> {
        let inner = self.lock();
        let inode = self.inode(ino)?;
        Ok(self.attr(&inner, ino, &inode))
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
        let inode = Inode::read(self.pm(), &self.sb, ino);
        if !inode.is_live() {
            // Removed while open (a directory): its number is free only now.
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

    /// Reads up to `buf.len()` bytes at `off`; returns the bytes read (0 at or past EOF).
    pub fn read(&self, ino: u64, off: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        let _inner = self.lock();
        let inode = self.inode(ino)?;
        match inode.kind() {
            Some(FileType::Directory) => return Err(Errno::EISDIR),
            Some(FileType::Symlink) => return Err(Errno::EINVAL),
            Some(kind) if kind.is_special() => return Err(Errno::EINVAL),
            _ => {}
        }
        self.read_inode(&inode, off, buf)
    }

    pub(crate) fn read_inode(
        &self,
        inode: &Inode,
        off: u64,
        buf: &mut [u8],
    ) -> Result<usize, Errno> {
        if off >= inode.size || buf.is_empty() {
            return Ok(0);
        }
        let n = (buf.len() as u64).min(inode.size - off);
        let leaf = inode.leaf_size();
        let mut done = 0u64;
        while done < n {
            let pos = off + done;
            let idx = pos / leaf;
            let within = pos % leaf;
            let take = (leaf - within).min(n - done);
            let out = &mut buf[done as usize..(done + take) as usize];
            match tree::lookup(self.pm(), &self.sb, inode.tree, inode.is_huge(), idx)? {
                Some(block) => self.pm().read(block + within, out),
                None => out.fill(0),
            }
            done += take;
        }
        Ok(n as usize)
    }

    /// Writes `data` at `off`; returns the bytes written (all of them, or an error).
    pub fn write(&self, ino: u64, off: u64, data: &[u8]) -> Result<usize, Errno> {
        let mut inner = self.lock();
        let n = self.write_locked(&mut inner, ino, off, data)?;
        self.pm().durability_point();
        Ok(n)
    }

    pub(crate) fn write_locked(
        &self,
        inner: &mut Inner,
        ino: u64,
        off: u64,
        data: &[u8],
    ) -> Result<usize, Errno> {
        let mut inode = self.inode(ino)?;
        match inode.kind() {
            Some(FileType::Directory) => return Err(Errno::EISDIR),
            Some(FileType::Symlink) => return Err(Errno::EINVAL),
            Some(kind) if kind.is_special() => return Err(Errno::EINVAL),
            _ => {}
        }
        if data.is_empty() {
            return Ok(0);
        }
        let len = data.len() as u64;
        if off.checked_add(len).is_none_or(|end| end > MAX_FILE_SIZE) {
            return Err(Errno::EFBIG);
        }
        let chunk = self.chunk_bytes(&inode);
        let mut done = 0u64;
        while done < len {
            let pos = off + done;
            let n = (len - done).min(chunk - pos % chunk);
            let piece = &data[done as usize..(done + n) as usize];
            if let Err(e) = self.write_piece(inner, ino, &mut inode, pos, piece) {
                return if done > 0 { Ok(done as usize) } else { Err(e) };
            }
            done += n;
        }
        Ok(len as usize)
    }

    /// Bytes per transaction of a write: bounded so the slot ranges fit the journal.
    fn chunk_bytes(&self, inode: &Inode) -> u64 {
        let cap = match self.options.data_mode {
            DataMode::InPlace => 256,
            DataMode::CopyOnWrite => 1024,
        };
        let by_journal = (u64::from(inner_capacity(&self.sb)) - 16) * 6;
        let leaves = cap.min(by_journal).max(1);
        let leaves = 1u64 << (63 - leaves.leading_zeros());
        leaves * inode.leaf_size()
    }

    fn write_piece(
        &self,
        inner: &mut Inner,
        ino: u64,
        inode: &mut Inode,
        off: u64,
        data: &[u8],
    ) -> Result<(), Errno> {
        let (pm, sb) = (self.pm(), &self.sb);
        let (leaf, huge) = (inode.leaf_size(), inode.is_huge());
        // A mapped file is overwritten in place even in copy-on-write mode: the mapping
        // must see every write (coherence wins over per-write atomicity, as in PMFS).
        let cow =
            self.options.data_mode == DataMode::CopyOnWrite && !inner.mapped.contains_key(&ino);
        let end = off + data.len() as u64;
        let old_size = inode.size;
        self.zero_after_eof(inode, off)?;
        let mut mappings = Vec::new();
        for idx in off / leaf..=(end - 1) / leaf {
            let (lo, hi) = (off.max(idx * leaf), end.min((idx + 1) * leaf));
            let piece = &data[(lo - off) as usize..(hi - off) as usize];
            let existing = tree::lookup(pm, sb, inode.tree, huge, idx)?;
            if let (Some(block), false) = (existing, cow) {
                self.store_data(block + lo - idx * leaf, piece);
                continue;
            }
            let Some(new) = inner.alloc_leaf(sb, huge) else {
                self.free_leaves(inner, &mappings, huge);
                return Err(Errno::ENOSPC);
            };
            if hi - lo == leaf {
                self.store_data(new, piece);
            } else {
                let mut buf = vec![0u8; leaf as usize];
                if let Some(block) = existing {
                    pm.read(block, &mut buf);
                }
                buf[(lo - idx * leaf) as usize..(hi - idx * leaf) as usize].copy_from_slice(piece);
                self.store_data(new, &buf);
            }
            mappings.push((idx, new));
        }
        let new_size = old_size.max(end);
        let now = self.now();
        if mappings.is_empty() && new_size == old_size {
            // Overwrite in place: data durable first, then the two times, ctime first.
            pm.fence();
            let at = sb.inode_offset(ino);
            let order = if self.options.mutant == Mutant::TimesOutOfOrder {
                [field::MTIME, field::CTIME]
            } else {
                [field::CTIME, field::MTIME]
            };
            for time in order {
                pm.write_u64(at + time, now, WriteClass::Meta);
            }
            pm.flush(at + field::MTIME, 16);
            pm.fence();
            (inode.ctime, inode.mtime) = (now, now);
            return Ok(());
        }
        let mut updated = *inode;
        (updated.size, updated.mtime, updated.ctime) = (new_size, now, now);
        let replaced = match self.link_leaves(inner, ino, &mut updated, &mappings, Batch::default())
        {
            Ok(replaced) => replaced,
            Err(e) => {
                self.free_leaves(inner, &mappings, huge);
                return Err(e);
            }
        };
        *inode = updated;
        let per_leaf = if huge { BLOCKS_PER_HUGE } else { 1 };
        inner.add_blocks(ino, (mappings.len() as u64 * per_leaf) as i64);
        for block in replaced {
            inner.free_runs(sb, &[(block, per_leaf)]);
            inner.add_blocks(ino, -(per_leaf as i64));
        }
        Ok(())
    }

    /// Zeroes `[size, min(off, end of size's leaf))` of the last leaf before a write at `off`
    /// (or a truncate to `off`) grows the file: bytes after EOF are not kept zero.
    fn zero_after_eof(&self, inode: &Inode, off: u64) -> Result<(), Errno> {
        let (size, leaf) = (inode.size, inode.leaf_size());
        if off <= size || size % leaf == 0 {
            return Ok(());
        }
        let tail = size / leaf;
        if let Some(block) = tree::lookup(self.pm(), &self.sb, inode.tree, inode.is_huge(), tail)? {
            let stop = off.min((tail + 1) * leaf);
            self.zero_data(block + size % leaf, stop - size);
        }
        Ok(())
    }

    fn free_leaves(&self, inner: &mut Inner, mappings: &[(u64, u64)], huge: bool) {
        let per_leaf = if huge { BLOCKS_PER_HUGE } else { 1 };
        let runs: Vec<(u64, u64)> = mappings.iter().map(|&(_, b)| (b, per_leaf)).collect();
        inner.free_runs(&self.sb, &runs);
    }

    /// Links `mappings` (leaf index → new leaf) into `inode`'s tree in one transaction that
    /// also writes `inode`'s hot part (and whatever `batch` already holds). On success the
    /// inode's tree is updated, new node blocks are accounted, and the replaced leaves are
    /// returned (to free).
    pub(crate) fn link_leaves(
        &self,
        inner: &mut Inner,
        ino: u64,
        inode: &mut Inode,
        mappings: &[(u64, u64)],
        mut batch: Batch,
    ) -> Result<Vec<u64>, Errno> {
        let (pm, sb) = (self.pm(), &self.sb);
        let huge = inode.is_huge();
        let planned = tree::plan_install(pm, sb, inode.tree, huge, mappings, &mut || {
            inner.alloc_block(sb)
        })?;
        let plan = match planned {
            Ok(plan) => plan,
            Err(nodes) => {
                let runs: Vec<(u64, u64)> = nodes.iter().map(|&n| (n, 1)).collect();
                inner.free_runs(sb, &runs);
                return Err(Errno::ENOSPC);
            }
        };
        plan.write_fresh(pm);
        for (addr, len) in plan.slot_ranges() {
            batch.log(addr, len);
        }
        for (&addr, &value) in &plan.slots {
            batch.set_u64(addr, value);
        }
        let old_tree = inode.tree;
        inode.tree = plan.root;
        batch.hot(sb, ino, inode);
        if let Err(e) = self.commit(inner, batch) {
            inode.tree = old_tree;
            let runs: Vec<(u64, u64)> = plan.fresh.keys().map(|&n| (n, 1)).collect();
            inner.free_runs(sb, &runs);
            return Err(e);
        }
        inner.add_blocks(ino, plan.fresh.len() as i64);
        Ok(plan.replaced)
    }

    /// Changes attributes; a size change truncates or extends.
    pub fn setattr(&self, ino: u64, set: SetAttr) -> Result<Attr, Errno> {
        let mut inner = self.lock();
        let attr = self.setattr_locked(&mut inner, ino, set)?;
        self.pm().durability_point();
        Ok(attr)
    }

    pub(crate) fn setattr_locked(
        &self,
        inner: &mut Inner,
        ino: u64,
        set: SetAttr,
    ) -> Result<Attr, Errno> {
        let mut inode = self.inode(ino)?;
        let now = self.now();
        if let Some(perm) = set.perm
            && perm & !PERM_MASK != 0
        {
            return Err(Errno::EINVAL);
        }
        if let Some(size) = set.size {
            match inode.kind() {
                Some(FileType::Directory) => return Err(Errno::EISDIR),
                Some(FileType::Symlink) => return Err(Errno::EINVAL),
                Some(kind) if kind.is_special() => return Err(Errno::EINVAL),
                _ => {}
            }
            self.set_size(inner, ino, &mut inode, size, now)?;
        }
        let changes_meta = set.perm.is_some()
            || set.uid.is_some()
            || set.gid.is_some()
            || set.atime.is_some()
            || set.mtime.is_some();
        if changes_meta {
            let mut batch = Batch::default();
            if let Some(perm) = set.perm {
                inode.mode = (inode.mode & S_IFMT) | perm;
            }
            let owner = (set.uid.unwrap_or(inode.uid), set.gid.unwrap_or(inode.gid));
            if owner != (inode.uid, inode.gid) {
                (inode.uid, inode.gid) = owner;
                batch.cold(&self.sb, ino, &inode, field::UID, field::PARENT);
            }
            let time = |t: TimeSet| match t {
                TimeSet::Now => now,
                TimeSet::At(at) => at,
            };
            if let Some(t) = set.atime {
                inode.atime = time(t);
            }
            if let Some(t) = set.mtime {
                inode.mtime = time(t);
            }
            inode.ctime = now;
            batch.hot(&self.sb, ino, &inode);
            self.commit(inner, batch)?;
        }
        Ok(self.attr(inner, ino, &inode))
    }

    /// Sets the size of a regular file: extends with zeros, or truncates (section 8 of the
    /// format: truncate list, cut, unlink from the list).
    fn set_size(
        &self,
        inner: &mut Inner,
        ino: u64,
        inode: &mut Inode,
        size: u64,
        now: u64,
    ) -> Result<(), Errno> {
        if size > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        let sb = &self.sb;
        let mut updated = *inode;
        (updated.size, updated.mtime, updated.ctime) = (size, now, now);
        let mut batch = Batch::default();
        if let Some(mapped) = inner.mapped.get_mut(&ino) {
            mapped.floor = mapped.floor.min(size);
        }
        if size >= inode.size {
            self.zero_after_eof(inode, size)?;
            batch.hot(sb, ino, &updated);
            self.commit(inner, batch)?;
            *inode = updated;
            return Ok(());
        }
        let keep = size.div_ceil(inode.leaf_size());
        let (root, height) = split_root(inode.tree);
        let cut = root != 0 && keep < tree::capacity(height);
        // An unlinked open file (no links) is on the list already, to be freed whole.
        let listed = inode.nlink == 0;
        if cut && !listed {
            let head = self.truncate_head()?;
            (updated.trunc_next, updated.trunc_size) = (head, size);
            batch.cold(sb, ino, &updated, field::TRUNC_NEXT, field::GENERATION);
            batch.head(sb, ino);
        }
        batch.hot(sb, ino, &updated);
        self.commit(inner, batch)?;
        *inode = updated;
        if cut {
            let freed = if listed {
                cut_tree(self.pm(), sb, ino, inode, size)?
            } else {
                self.finish_truncate(&mut inner.journal, ino, inode)?
            };
            let blocks: u64 = freed.iter().map(|r| r.1).sum();
            if inner.mapped.contains_key(&ino) {
                inner.deferred.entry(ino).or_default().extend(freed);
            } else {
                inner.free_runs(sb, &freed);
            }
            inner.add_blocks(ino, -(blocks as i64));
        }
        Ok(())
    }

    /// The truncate-list head's value.
    pub(crate) fn truncate_head(&self) -> Result<u64, Corrupt> {
        let at = self.sb.truncate_head();
        let head = checked::open(self.pm().read_u64(at), at, "truncate-list head")?;
        if head >= self.sb.inode_count {
            return Err(Corrupt::new(format!("truncate-list head {head}")));
        }
        Ok(head)
    }

    /// Cuts `inode`'s tree to its `trunc_size` (unlogged, idempotent), then unlinks it from
    /// the truncate list (one transaction). Returns the blocks cut, for the allocator.
    pub(crate) fn finish_truncate(
        &self,
        journal: &mut Journal,
        ino: u64,
        inode: &mut Inode,
    ) -> Result<Vec<(u64, u64)>, Errno> {
        let size = inode.trunc_size;
        let freed = cut_tree(self.pm(), &self.sb, ino, inode, size)?;
        let mut batch = Batch::default();
        unlink_from_list(self.pm(), &self.sb, ino, inode, &mut batch)?;
        commit(self.pm(), journal, batch)?;
        Ok(freed)
    }

    /// Frees an inode whose last link and last handle are gone: unlinks it from the truncate
    /// list and frees it, one transaction; its blocks go to the allocator.
    pub(crate) fn free_orphan(
        &self,
        inner: &mut Inner,
        ino: u64,
        inode: &Inode,
    ) -> Result<(), Errno> {
        let blocks = tree::blocks(self.pm(), &self.sb, inode.tree, inode.is_huge())?;
        let mut batch = Batch::default();
        let mut updated = *inode;
        unlink_from_list(self.pm(), &self.sb, ino, &mut updated, &mut batch)?;
        free_inode_fields(&mut updated);
        batch.hot(&self.sb, ino, &updated);
        self.commit(inner, batch)?;
        self.forget_inode(inner, ino, &blocks);
        Ok(())
    }

    /// DRAM bookkeeping after an inode was freed on the media.
    pub(crate) fn forget_inode(&self, inner: &mut Inner, ino: u64, blocks: &[(u64, u64)]) {
        inner.free_runs(&self.sb, blocks);
        inner.blocks.remove(&ino);
        inner.dirs.remove(&ino);
        // A number still held by a handle or the kernel is reused only after the last
        // release or forget.
        if !inner.open.contains_key(&ino) && !inner.pins.contains_key(&ino) {
            inner.free_inodes.insert(ino);
        }
    }

    /// Reads a symbolic link's target.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>, Errno> {
        let _inner = self.lock();
        self.readlink_locked(ino)
    }

    pub(crate) fn readlink_locked(&self, ino: u64) -> Result<Vec<u8>, Errno> {
        let inode = self.inode(ino)?;
        if inode.kind() != Some(FileType::Symlink) {
            return Err(Errno::EINVAL);
        }
        if inode.size == 0 || inode.size >= BLOCK {
            return Err(Errno::EIO);
        }
        let mut target = vec![0u8; inode.size as usize];
        self.read_inode(&inode, 0, &mut target)?;
        Ok(target)
    }
}

fn inner_capacity(sb: &Superblock) -> u32 {
    sb.journal_entries
}

/// Sets the fields of a freed inode (mode 0, no tree, no links).
pub(crate) fn free_inode_fields(inode: &mut Inode) {
    inode.mode = 0;
    inode.tree = 0;
    inode.size = 0;
    inode.nlink = 0;
}

/// Clears `inode`'s tree past `size` (and the root word when nothing is kept), persists the
/// clears. Idempotent.
pub(crate) fn cut_tree<B: Persist>(
    pm: &B,
    sb: &Superblock,
    ino: u64,
    inode: &mut Inode,
    size: u64,
) -> Result<Vec<(u64, u64)>, Corrupt> {
    let keep = size.div_ceil(inode.leaf_size());
    let freed = tree::cut(pm, sb, inode.tree, inode.is_huge(), keep)?;
    if keep == 0 && inode.tree != 0 {
        let at = sb.inode_offset(ino) + field::TREE;
        pm.write_u64(at, 0, WriteClass::Meta);
        pm.flush(at, 8);
        inode.tree = 0;
    }
    pm.fence();
    Ok(freed)
}

/// Adds to `batch` the stores that unlink `ino` from the truncate list (and clear its list
/// fields in `inode`).
pub(crate) fn unlink_from_list<B: Persist>(
    pm: &B,
    sb: &Superblock,
    ino: u64,
    inode: &mut Inode,
    batch: &mut Batch,
) -> Result<(), Corrupt> {
    let at = sb.truncate_head();
    let head = checked::open(pm.read_u64(at), at, "truncate-list head")?;
    let next = inode.trunc_next;
    if head == ino {
        batch.head(sb, next);
    } else {
        let mut prev = head;
        let mut steps = 0;
        loop {
            if prev == 0 || prev >= sb.inode_count || steps > sb.inode_count {
                return Err(Corrupt::new(format!(
                    "inode {ino} is not on the truncate list"
                )));
            }
            let prev_next = pm.read_u64(sb.inode_offset(prev) + field::TRUNC_NEXT);
            if prev_next == ino {
                batch.word(sb.inode_offset(prev) + field::TRUNC_NEXT, next);
                break;
            }
            prev = prev_next;
            steps += 1;
        }
    }
    (inode.trunc_next, inode.trunc_size) = (0, 0);
    batch.cold(sb, ino, inode, field::TRUNC_NEXT, field::GENERATION);
    Ok(())
}
