//! File data (`docs/pmfs-format.md` §9.2): reads, writes (in place with non-temporal stores,
//! or copy-on-write leaves), growing and cutting a file's size, symbolic-link targets.
//!
//! An overwrite fences the data and then updates the two times in place; anything that
//! allocates or grows links the new leaves and the size in one journal transaction whose
//! log fence has already made the data durable.

use crate::Mutant;
use crate::batch::Batch;
use crate::error::{Corrupt, Errno};
use crate::filesystem::Fs;
use crate::inode::{FileType, Inode, field, split_root};
use crate::layout::{BLOCK, BLOCKS_PER_HUGE, MAX_FILE_SIZE, Superblock};
use crate::options::DataMode;
use crate::state::Inner;
use crate::tree;
use crate::truncate::cut_tree;
use pmem::{Persist, WriteClass};

impl<B: Persist> Fs<B> {
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

    /// Writes `data` at `off`; returns the bytes written: all of them, or when space runs out
    /// the prefix that fitted (a short write; `ENOSPC` only when not one byte fits).
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
            match self.write_piece(inner, ino, &mut inode, pos, piece) {
                Ok(written) if written == n => done += n,
                Ok(written) => return Ok((done + written) as usize),
                Err(e) => return if done > 0 { Ok(done as usize) } else { Err(e) },
            }
        }
        Ok(len as usize)
    }

    /// Allocates zeroed blocks for every hole of `[off, off + len)` of regular file `ino`
    /// and, unless `keep_size`, grows the file to cover the range (`fallocate` mode 0 or
    /// `FALLOC_FL_KEEP_SIZE`). Each piece is one transaction linking its leaves (and the
    /// size); a piece that does not fit gives its blocks back and fails with `ENOSPC`.
    pub fn fallocate(&self, ino: u64, off: u64, len: u64, keep_size: bool) -> Result<(), Errno> {
        let mut inner = self.lock();
        let mut inode = self.inode(ino)?;
        match inode.kind() {
            Some(FileType::Regular) => {}
            Some(FileType::Directory) => return Err(Errno::EISDIR),
            _ => return Err(Errno::ENODEV),
        }
        if keep_size && !self.sb.has_xattrs() {
            return Err(Errno::EOPNOTSUPP);
        }
        let end = off
            .checked_add(len)
            .filter(|&end| len > 0 && end <= MAX_FILE_SIZE)
            .ok_or(Errno::EINVAL)?;
        let chunk = self.chunk_bytes(&inode);
        let mut pos = off;
        while pos < end {
            let stop = end.min((pos / chunk + 1) * chunk);
            self.fallocate_piece(&mut inner, ino, &mut inode, pos, stop, keep_size)?;
            pos = stop;
        }
        self.pm().durability_point();
        Ok(())
    }

    fn fallocate_piece(
        &self,
        inner: &mut Inner,
        ino: u64,
        inode: &mut Inode,
        off: u64,
        end: u64,
        keep_size: bool,
    ) -> Result<(), Errno> {
        let (pm, sb) = (self.pm(), &self.sb);
        let (leaf, huge) = (inode.leaf_size(), inode.is_huge());
        let grows = !keep_size && end > inode.size;
        if grows {
            self.zero_after_eof(inode, end)?;
        }
        let mut holes = Vec::new();
        for idx in off / leaf..end.div_ceil(leaf) {
            if tree::lookup(pm, sb, inode.tree, huge, idx)?.is_some() {
                continue;
            }
            let Some(block) = inner.alloc_leaf(sb, huge) else {
                self.free_leaves(inner, &holes, huge);
                return Err(Errno::ENOSPC);
            };
            self.zero_data(block, leaf);
            holes.push((idx, block));
        }
        if holes.is_empty() && !grows {
            return Ok(());
        }
        let mut updated = *inode;
        if grows {
            updated.size = end;
        }
        if keep_size && end.div_ceil(leaf) > inode.size.div_ceil(leaf) {
            updated.flags |= crate::inode::FLAG_PREALLOC;
        }
        updated.ctime = self.now();
        let mut batch = Batch::default();
        if updated.flags != inode.flags {
            batch.cold(sb, ino, &updated, field::GENERATION, field::BTIME);
        }
        if let Err(e) = self.link_leaves(inner, ino, &mut updated, &holes, batch) {
            self.free_leaves(inner, &holes, huge);
            return Err(e);
        }
        let per_leaf = if huge { BLOCKS_PER_HUGE } else { 1 };
        inner.add_blocks(ino, (holes.len() as u64 * per_leaf) as i64);
        *inode = updated;
        Ok(())
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

    /// Writes one piece (one transaction at most); returns the bytes written: all of them,
    /// or, when space runs out, the prefix whose leaves could be allocated (a short write;
    /// `ENOSPC` only when not one byte fits).
    fn write_piece(
        &self,
        inner: &mut Inner,
        ino: u64,
        inode: &mut Inode,
        off: u64,
        data: &[u8],
    ) -> Result<u64, Errno> {
        let (pm, sb) = (self.pm(), &self.sb);
        let (leaf, huge) = (inode.leaf_size(), inode.is_huge());
        // A mapped file is overwritten in place even in copy-on-write mode: the mapping
        // must see every write (coherence wins over per-write atomicity, as in PMFS).
        let cow =
            self.options.data_mode == DataMode::CopyOnWrite && !inner.mapped.contains_key(&ino);
        let mut end = off + data.len() as u64;
        let old_size = inode.size;
        self.zero_after_eof(inode, off)?;
        let mut mappings: Vec<(u64, u64)> = Vec::new();
        for idx in off / leaf..=(end - 1) / leaf {
            let (lo, hi) = (off.max(idx * leaf), end.min((idx + 1) * leaf));
            let piece = &data[(lo - off) as usize..(hi - off) as usize];
            let existing = tree::lookup(pm, sb, inode.tree, huge, idx)?;
            if let (Some(block), false) = (existing, cow) {
                self.store_data(block + lo - idx * leaf, piece);
                continue;
            }
            let Some(new) = inner.alloc_leaf(sb, huge) else {
                end = lo;
                break;
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
        if end == off {
            return Err(Errno::ENOSPC);
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
            return Ok(end - off);
        }
        // Tree nodes come from the same space: with too few blocks for them, give back the
        // last new leaves until the rest links (a shorter write).
        let replaced = loop {
            let mut updated = *inode;
            (updated.size, updated.mtime, updated.ctime) = (old_size.max(end), now, now);
            match self.link_leaves(inner, ino, &mut updated, &mappings, Batch::default()) {
                Ok(replaced) => {
                    *inode = updated;
                    break replaced;
                }
                Err(Errno::ENOSPC) if mappings.len() > 1 => {
                    let (idx, block) = mappings.pop().expect("more than one");
                    self.free_leaves(inner, &[(idx, block)], huge);
                    end = end.min(idx * leaf).max(off);
                }
                Err(e) => {
                    self.free_leaves(inner, &mappings, huge);
                    return Err(e);
                }
            }
        };
        let per_leaf = if huge { BLOCKS_PER_HUGE } else { 1 };
        inner.add_blocks(ino, (mappings.len() as u64 * per_leaf) as i64);
        for block in replaced {
            inner.free_runs(sb, &[(block, per_leaf)]);
            inner.add_blocks(ino, -(per_leaf as i64));
        }
        Ok(end - off)
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

    /// Sets the size of a regular file: extends with zeros, or truncates (section 8 of the
    /// format: truncate list, cut, unlink from the list).
    pub(crate) fn set_size(
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
            batch.head(sb, ino)?;
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
            let why = format!("a symbolic link of {} bytes (1 to 4095)", inode.size);
            return Err(Corrupt::new(why).of_inode(ino).into());
        }
        let mut target = vec![0u8; inode.size as usize];
        self.read_inode(&inode, 0, &mut target)?;
        Ok(target)
    }
}

fn inner_capacity(sb: &Superblock) -> u32 {
    sb.journal_entries
}
