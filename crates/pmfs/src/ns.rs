//! Namespace operations (`docs/pmfs-format.md` §9.1): lookup, readdir, create, mkdir,
//! symlink, link, unlink, rmdir, rename. Each is one journal transaction. The directory
//! index of every directory touched is taken out of the cache for the operation; it goes
//! back after a successful commit or a failed check, and is dropped (rebuilt on next use)
//! if the operation failed after planning changes into it.

use crate::Mutant;
use crate::attr::{Attr, DirEntry};
use crate::batch::Batch;
use crate::dir::{self, DirIndex, Placement, Removal, SlotOf};
use crate::error::{Corrupt, Errno};
use crate::filesystem::Fs;
use crate::inode::{FLAG_HUGE, FileType, Inode, field, root_word};
use crate::layout::{BLOCK, LINK_MAX, MAX_FILE_SIZE, ROOT_INO};
use crate::state::Inner;
use crate::truncate::free_inode_fields;
use pmem::{Persist, WriteClass};

/// The set-group-ID bit.
const S_ISGID: u32 = 0o2000;
const DOT: &[u8] = b".";
const DOTDOT: &[u8] = b"..";

/// The inode a name resolves to, with its type.
fn slot_of(ino: u64, kind: FileType) -> SlotOf {
    SlotOf { ino, kind }
}

impl<B: Persist> Fs<B> {
    /// Removes `name` from `parent` (not a directory), then gives back the directory's
    /// emptied trailing blocks.
    pub(crate) fn unlink_locked(
        &self,
        inner: &mut Inner,
        parent: u64,
        name: &[u8],
    ) -> Result<(), Errno> {
        self.unlink_entry(inner, parent, name)?;
        self.shrink_dir(inner, parent)
    }

    /// Removes the empty directory `name` from `parent`, then gives back `parent`'s emptied
    /// trailing blocks.
    pub(crate) fn rmdir_locked(
        &self,
        inner: &mut Inner,
        parent: u64,
        name: &[u8],
    ) -> Result<(), Errno> {
        self.rmdir_entry(inner, parent, name)?;
        self.shrink_dir(inner, parent)
    }

    /// Renames, then gives back the source directory's emptied trailing blocks.
    pub(crate) fn rename_locked(
        &self,
        inner: &mut Inner,
        p1: u64,
        n1: &[u8],
        p2: u64,
        n2: &[u8],
    ) -> Result<(), Errno> {
        self.rename_entry(inner, p1, n1, p2, n2)?;
        self.shrink_dir(inner, p1)
    }

    /// Cuts directory `dir`'s trailing blocks that hold no record, through the truncate
    /// list like any truncate (a crash in the middle is finished by the next mount).
    fn shrink_dir(&self, inner: &mut Inner, dir: u64) -> Result<(), Errno> {
        let mut inode = self.dir_inode(dir)?;
        let index = self.take_dir(inner, dir, &inode)?;
        let empty = index.trailing_empty_blocks();
        if empty == 0 {
            inner.dirs.insert(dir, index);
            return Ok(());
        }
        let size = (index.block_count() - empty) * BLOCK;
        let now = self.now();
        // The index is reloaded from the media on next use.
        self.set_size(inner, dir, &mut inode, size, now)
    }

    /// Takes directory `ino`'s index out of the cache (loading it on first use).
    pub(crate) fn take_dir(
        &self,
        inner: &mut Inner,
        ino: u64,
        inode: &Inode,
    ) -> Result<DirIndex, Errno> {
        if inode.kind() != Some(FileType::Directory) {
            return Err(Errno::ENOTDIR);
        }
        match inner.dirs.remove(&ino) {
            Some(index) => Ok(index),
            None => Ok(DirIndex::load(self.pm(), &self.sb, ino, inode)?),
        }
    }

    /// A live directory inode (`ENOTDIR` for anything else).
    pub(crate) fn dir_inode(&self, ino: u64) -> Result<Inode, Errno> {
        let inode = self.inode(ino)?;
        if inode.kind() != Some(FileType::Directory) {
            return Err(Errno::ENOTDIR);
        }
        Ok(inode)
    }

    /// The inode `name` names in directory `parent` (`.` and `..` included).
    pub(crate) fn lookup_locked(
        &self,
        inner: &mut Inner,
        parent: u64,
        name: &[u8],
    ) -> Result<(u64, FileType), Errno> {
        let pinode = self.dir_inode(parent)?;
        if name == DOT {
            return Ok((parent, FileType::Directory));
        }
        if name == DOTDOT {
            return Ok((pinode.parent, FileType::Directory));
        }
        if name.len() > crate::layout::NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let dir = self.take_dir(inner, parent, &pinode)?;
        let slot = dir.get(name);
        inner.dirs.insert(parent, dir);
        let slot = slot.ok_or(Errno::ENOENT)?;
        Ok((slot.ino, slot.kind))
    }

    /// Looks `name` up in directory `parent`.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr, Errno> {
        let mut inner = self.lock();
        let (ino, _) = self.lookup_locked(&mut inner, parent, name)?;
        let inode = self.inode(ino)?;
        Ok(self.attr(&inner, ino, &inode))
    }

    /// The entries of directory `ino`: `.`, `..`, then the others in position order.
    pub fn readdir(&self, ino: u64) -> Result<Vec<DirEntry>, Errno> {
        let mut inner = self.lock();
        self.readdir_locked(&mut inner, ino)
    }

    pub(crate) fn readdir_locked(
        &self,
        inner: &mut Inner,
        ino: u64,
    ) -> Result<Vec<DirEntry>, Errno> {
        let inode = self.dir_inode(ino)?;
        if inode.nlink == 0 {
            // Removed while open: Linux lists nothing of a dead directory.
            return Err(Errno::ENOENT);
        }
        let dir = self.take_dir(inner, ino, &inode)?;
        let mut out = vec![
            DirEntry {
                name: DOT.to_vec(),
                ino,
                kind: FileType::Directory,
                cookie: 1,
            },
            DirEntry {
                name: DOTDOT.to_vec(),
                ino: inode.parent,
                kind: FileType::Directory,
                cookie: 2,
            },
        ];
        out.extend(dir.entries().map(|(pos, name, slot)| DirEntry {
            name: name.to_vec(),
            ino: slot.ino,
            kind: slot.kind,
            cookie: pos + 3,
        }));
        inner.dirs.insert(ino, dir);
        Ok(out)
    }

    /// Creates a regular file.
    pub fn create(&self, parent: u64, name: &[u8], perm: u32) -> Result<Attr, Errno> {
        self.make(parent, name, FileType::Regular, perm, None)
    }

    /// Creates a directory.
    pub fn mkdir(&self, parent: u64, name: &[u8], perm: u32) -> Result<Attr, Errno> {
        self.make(parent, name, FileType::Directory, perm, None)
    }

    /// Creates a symbolic link to `target`.
    pub fn symlink(&self, parent: u64, name: &[u8], target: &[u8]) -> Result<Attr, Errno> {
        self.make(parent, name, FileType::Symlink, 0o777, Some(target))
    }

    fn make(
        &self,
        parent: u64,
        name: &[u8],
        kind: FileType,
        perm: u32,
        target: Option<&[u8]>,
    ) -> Result<Attr, Errno> {
        let mut inner = self.lock();
        let attr = self.make_locked(&mut inner, parent, name, kind, perm, target)?;
        self.pm().durability_point();
        Ok(attr)
    }

    pub(crate) fn make_locked(
        &self,
        inner: &mut Inner,
        parent: u64,
        name: &[u8],
        kind: FileType,
        perm: u32,
        target: Option<&[u8]>,
    ) -> Result<Attr, Errno> {
        self.make_node_locked(inner, parent, name, kind, perm, target, 0)
    }

    /// As `make_locked`, with a device number for character and block devices.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn make_node_locked(
        &self,
        inner: &mut Inner,
        parent: u64,
        name: &[u8],
        kind: FileType,
        perm: u32,
        target: Option<&[u8]>,
        rdev: u64,
    ) -> Result<Attr, Errno> {
        if rdev != 0 && !matches!(kind, FileType::CharDevice | FileType::BlockDevice) {
            return Err(Errno::EINVAL);
        }
        // A symbolic link has a target and nothing else has one: a link made without one
        // would be a link of size 0, which fsck reports as damage.
        if target.is_some() != (kind == FileType::Symlink) {
            return Err(Errno::EINVAL);
        }
        if name == DOT || name == DOTDOT {
            return Err(Errno::EEXIST);
        }
        dir::valid_name(name)?;
        if perm & !crate::inode::PERM_MASK != 0 {
            return Err(Errno::EINVAL);
        }
        if let Some(target) = target {
            if target.is_empty() {
                return Err(Errno::ENOENT);
            }
            if target.len() as u64 >= BLOCK {
                return Err(Errno::ENAMETOOLONG);
            }
        }
        let mut pinode = self.dir_for_new_entry(parent)?;
        let mut dir = self.take_dir(inner, parent, &pinode)?;
        let check = if dir.get(name).is_some() {
            Err(Errno::EEXIST)
        } else if kind == FileType::Directory && pinode.nlink >= LINK_MAX {
            Err(Errno::EMLINK)
        } else {
            Ok(())
        };
        if let Err(e) = check {
            inner.dirs.insert(parent, dir);
            return Err(e);
        }
        let attr = self.make_in(
            inner,
            parent,
            &mut pinode,
            &mut dir,
            name,
            (kind, perm, rdev),
            target,
        )?;
        inner.dirs.insert(parent, dir);
        Ok(attr)
    }

    #[allow(clippy::too_many_arguments)]
    fn make_in(
        &self,
        inner: &mut Inner,
        parent: u64,
        pinode: &mut Inode,
        dir: &mut DirIndex,
        name: &[u8],
        (kind, perm, rdev): (FileType, u32, u64),
        target: Option<&[u8]>,
    ) -> Result<Attr, Errno> {
        let sb = &self.sb;
        let ino = inner.free_inodes.pop_first().ok_or(Errno::ENOSPC)?;
        let old = Inode::read(self.pm(), sb, ino)?;
        let now = self.now();
        let (uid, mut gid) = inner.creds;
        let mut perm = perm;
        // A set-group-ID directory gives its group to new nodes, and the bit to new
        // subdirectories (as Linux does).
        if pinode.mode & S_ISGID != 0 {
            gid = pinode.gid;
            if kind == FileType::Directory {
                perm |= S_ISGID;
            }
        }
        let huge = kind == FileType::Regular && self.options.huge_files;
        let mut inode = Inode {
            mode: kind.mode_bits() | perm,
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            uid,
            gid,
            mtime: now,
            ctime: now,
            atime: now,
            btime: now,
            parent: if kind == FileType::Directory {
                parent
            } else {
                0
            },
            generation: old.generation.wrapping_add(1),
            flags: if huge { FLAG_HUGE } else { 0 },
            rdev,
            ..Inode::default()
        };
        let mut taken = Vec::new();
        if let Some(target) = target {
            let Some(block) = inner.alloc_block(sb) else {
                inner.free_inodes.insert(ino);
                return Err(Errno::ENOSPC);
            };
            let mut bytes = vec![0u8; BLOCK as usize];
            bytes[..target.len()].copy_from_slice(target);
            self.store_data(block, &bytes);
            inode.tree = root_word(block, 0);
            inode.size = target.len() as u64;
            taken.push((block, 1));
        }
        let mut batch = Batch::default();
        batch.hot(sb, ino, &inode);
        batch.fresh_cold(sb, ino, &inode);
        let result = self
            .plan_insert(inner, pinode, dir, name, slot_of(ino, kind), &mut batch)
            .and_then(|new_block| {
                (pinode.mtime, pinode.ctime) = (now, now);
                pinode.nlink += u32::from(kind == FileType::Directory);
                self.finish_parent(inner, parent, pinode, new_block, batch)
            });
        if let Err(e) = result {
            inner.free_runs(sb, &taken);
            inner.free_inodes.insert(ino);
            return Err(e);
        }
        inner.blocks.insert(ino, taken.len() as u64);
        if kind == FileType::Directory {
            inner.dirs.insert(ino, DirIndex::default());
        }
        Ok(self.attr(inner, ino, &inode))
    }

    /// Plans the record for `name` in `dir` (of `pinode`): adds its writes to `batch` and the
    /// entry to `dir`. A new directory block is written (NT) and returned, to be linked by
    /// [`Fs::finish_parent`]; `pinode.size` already counts it.
    fn plan_insert(
        &self,
        inner: &mut Inner,
        pinode: &mut Inode,
        dir: &mut DirIndex,
        name: &[u8],
        child: SlotOf,
        batch: &mut Batch,
    ) -> Result<Option<u64>, Errno> {
        let need = dir::need(name.len());
        let placement = dir.place(need);
        let mut new_block = None;
        match placement {
            Placement::Free { pos, rec_len } => {
                let abs = dir.abs(pos);
                let own = if rec_len - need >= dir::HEADER {
                    need
                } else {
                    rec_len
                };
                let rec = dir::encode(child.ino, own, child.kind, name);
                batch.log(abs, dir::HEADER);
                batch.set(abs, &rec[..dir::HEADER as usize]);
                batch.fresh(abs + dir::HEADER, &rec[dir::HEADER as usize..]);
                if own < rec_len {
                    batch.fresh(abs + own, &dir::encode_free(rec_len - own));
                }
            }
            Placement::Slack { pos, used, rec_len } => {
                let abs = dir.abs(pos);
                batch.fresh(
                    abs + used,
                    &dir::encode(child.ino, rec_len - used, child.kind, name),
                );
                batch.word(abs + 8, dir::with_rec_len(dir.meta_word(pos), used));
            }
            Placement::NewBlock => {
                if pinode.size + BLOCK > MAX_FILE_SIZE {
                    return Err(Errno::ENOSPC);
                }
                let block = inner.alloc_block(&self.sb).ok_or(Errno::ENOSPC)?;
                let bytes = dir::new_block(child.ino, child.kind, name);
                self.pm().write_nt(block, &bytes, WriteClass::Meta);
                pinode.size += BLOCK;
                new_block = Some(block);
            }
        }
        dir.apply_insert(placement, name, child, new_block.unwrap_or(0));
        Ok(new_block)
    }

    /// Plans deleting `name`'s record from `dir`.
    pub(crate) fn plan_remove(&self, dir: &mut DirIndex, name: &[u8], batch: &mut Batch) {
        let removal = dir.plan_remove(name);
        match removal {
            Removal::Merge { prev, rec_len } => {
                let word = dir::with_rec_len(dir.meta_word(prev), rec_len);
                batch.word(dir.abs(prev) + 8, word);
            }
            Removal::Clear { pos } => batch.word(dir.abs(pos), 0),
        }
        dir.apply_remove(name, removal);
    }

    /// Adds `parent`'s hot part to `batch` and commits it; with a new directory block, links
    /// the block in the same transaction.
    fn finish_parent(
        &self,
        inner: &mut Inner,
        parent: u64,
        pinode: &mut Inode,
        new_block: Option<u64>,
        mut batch: Batch,
    ) -> Result<(), Errno> {
        let Some(block) = new_block else {
            batch.hot(&self.sb, parent, pinode);
            return self.commit(inner, batch);
        };
        let leaf = pinode.size / BLOCK - 1;
        match self.link_leaves(inner, parent, pinode, &[(leaf, block)], batch) {
            Ok(replaced) => {
                debug_assert!(replaced.is_empty());
                inner.add_blocks(parent, 1);
                Ok(())
            }
            Err(e) => {
                inner.free_runs(&self.sb, &[(block, 1)]);
                Err(e)
            }
        }
    }

    /// Adds a link `name` in `parent` to inode `ino` (not a directory).
    pub fn link(&self, ino: u64, parent: u64, name: &[u8]) -> Result<Attr, Errno> {
        let mut inner = self.lock();
        let attr = self.link_locked(&mut inner, ino, parent, name)?;
        self.pm().durability_point();
        Ok(attr)
    }

    pub(crate) fn link_locked(
        &self,
        inner: &mut Inner,
        ino: u64,
        parent: u64,
        name: &[u8],
    ) -> Result<Attr, Errno> {
        // The kernel's order: the new name (EEXIST) first, then the source's type and state.
        let mut target = self.inode(ino)?;
        if name == DOT || name == DOTDOT {
            return Err(Errno::EEXIST);
        }
        dir::valid_name(name)?;
        let mut pinode = self.dir_for_new_entry(parent)?;
        let mut dir = self.take_dir(inner, parent, &pinode)?;
        let check = if dir.get(name).is_some() {
            Err(Errno::EEXIST)
        } else if target.kind() == Some(FileType::Directory) {
            Err(Errno::EPERM)
        } else if target.nlink == 0 {
            Err(Errno::ENOENT)
        } else if target.nlink >= LINK_MAX {
            Err(Errno::EMLINK)
        } else {
            Ok(())
        };
        if let Err(e) = check {
            inner.dirs.insert(parent, dir);
            return Err(e);
        }
        let now = self.now();
        let mut batch = Batch::default();
        let kind = target.kind().expect("validated");
        let new_block = self.plan_insert(
            inner,
            &mut pinode,
            &mut dir,
            name,
            slot_of(ino, kind),
            &mut batch,
        )?;
        target.nlink += 1;
        target.ctime = now;
        batch.hot(&self.sb, ino, &target);
        (pinode.mtime, pinode.ctime) = (now, now);
        self.finish_parent(inner, parent, &mut pinode, new_block, batch)?;
        inner.dirs.insert(parent, dir);
        Ok(self.attr(inner, ino, &target))
    }

    /// Removes the name `name` (not a directory) from `parent`.
    pub fn unlink(&self, parent: u64, name: &[u8]) -> Result<(), Errno> {
        let mut inner = self.lock();
        self.unlink_locked(&mut inner, parent, name)?;
        self.pm().durability_point();
        Ok(())
    }

    fn unlink_entry(&self, inner: &mut Inner, parent: u64, name: &[u8]) -> Result<(), Errno> {
        if name == DOT || name == DOTDOT {
            return Err(Errno::EISDIR);
        }
        if name.len() > crate::layout::NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let mut pinode = self.dir_inode(parent)?;
        let mut dir = self.take_dir(inner, parent, &pinode)?;
        let checked = match dir.get(name) {
            None => Err(Errno::ENOENT),
            Some(slot) if slot.kind == FileType::Directory => Err(Errno::EISDIR),
            Some(slot) => self.inode(slot.ino).map(|child| (slot, child)),
        };
        let (slot, mut child) = match checked {
            Ok(found) => found,
            Err(e) => {
                inner.dirs.insert(parent, dir);
                return Err(e);
            }
        };
        let now = self.now();
        let mut batch = Batch::default();
        self.plan_remove(&mut dir, name, &mut batch);
        let freed = self.drop_link(inner, slot.ino, &mut child, now, &mut batch)?;
        (pinode.mtime, pinode.ctime) = (now, now);
        batch.hot(&self.sb, parent, &pinode);
        self.commit(inner, batch)?;
        inner.dirs.insert(parent, dir);
        if let Some(blocks) = freed {
            self.forget_inode(inner, slot.ino, &blocks);
        }
        Ok(())
    }

    /// Plans dropping one link of a non-directory: at zero links the inode is freed (its
    /// blocks returned, for after the commit) or, while open, pushed on the truncate list.
    fn drop_link(
        &self,
        inner: &Inner,
        ino: u64,
        child: &mut Inode,
        now: u64,
        batch: &mut Batch,
    ) -> Result<Option<Vec<(u64, u64)>>, Errno> {
        child.nlink = child.nlink.saturating_sub(1);
        child.ctime = now;
        let freed = if child.nlink == 0 {
            self.plan_last_link_gone(inner, ino, child, batch)?
        } else {
            None
        };
        batch.hot(&self.sb, ino, child);
        Ok(freed)
    }

    /// Plans what happens to `ino` (`child`, no links left) when its last name goes: it is
    /// freed (its blocks returned, for after the commit) or, while a handle is open on it,
    /// pushed on the truncate list until the last close. The caller stores `child`.
    fn plan_last_link_gone(
        &self,
        inner: &Inner,
        ino: u64,
        child: &mut Inode,
        batch: &mut Batch,
    ) -> Result<Option<Vec<(u64, u64)>>, Errno> {
        if inner.open.contains_key(&ino) {
            (child.trunc_next, child.trunc_size) = (self.truncate_head()?, 0);
            batch.cold(&self.sb, ino, child, field::TRUNC_NEXT, field::GENERATION);
            batch.head(&self.sb, ino)?;
            return Ok(None);
        }
        let blocks = self.inode_blocks(child)?;
        free_inode_fields(child);
        Ok(Some(blocks))
    }

    /// Removes the empty directory `name` from `parent`.
    pub fn rmdir(&self, parent: u64, name: &[u8]) -> Result<(), Errno> {
        let mut inner = self.lock();
        self.rmdir_locked(&mut inner, parent, name)?;
        self.pm().durability_point();
        Ok(())
    }

    fn rmdir_entry(&self, inner: &mut Inner, parent: u64, name: &[u8]) -> Result<(), Errno> {
        if name == DOT {
            return Err(Errno::EINVAL);
        }
        if name == DOTDOT {
            return Err(Errno::ENOTEMPTY);
        }
        if name.len() > crate::layout::NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let mut pinode = self.dir_inode(parent)?;
        let mut dir = self.take_dir(inner, parent, &pinode)?;
        let checked = match dir.get(name) {
            None => Err(Errno::ENOENT),
            Some(slot) if slot.kind != FileType::Directory => Err(Errno::ENOTDIR),
            Some(slot) => self.empty_dir(inner, slot.ino).map(|child| (slot, child)),
        };
        let (slot, mut child) = match checked {
            Ok(found) => found,
            Err(e) => {
                inner.dirs.insert(parent, dir);
                return Err(e);
            }
        };
        let now = self.now();
        let mut batch = Batch::default();
        self.plan_remove(&mut dir, name, &mut batch);
        let freed = self.drop_directory(inner, slot.ino, &mut child, now, &mut batch)?;
        pinode.nlink -= 1;
        (pinode.mtime, pinode.ctime) = (now, now);
        batch.hot(&self.sb, parent, &pinode);
        self.commit(inner, batch)?;
        inner.dirs.insert(parent, dir);
        if let Some(blocks) = freed {
            self.forget_inode(inner, slot.ino, &blocks);
        }
        Ok(())
    }

    /// Plans removing the last name of the empty directory `ino`: it is freed (its blocks
    /// returned, for after the commit) or, while a handle is open on it, kept with no links
    /// on the truncate list until the last close, as Linux keeps it (`fstat` of the handle
    /// then reports 0 links; nothing can be created in it).
    fn drop_directory(
        &self,
        inner: &Inner,
        ino: u64,
        child: &mut Inode,
        now: u64,
        batch: &mut Batch,
    ) -> Result<Option<Vec<(u64, u64)>>, Errno> {
        child.nlink = 0;
        child.ctime = now;
        let freed = self.plan_last_link_gone(inner, ino, child, batch)?;
        batch.hot(&self.sb, ino, child);
        Ok(freed)
    }

    /// Directory `ino`'s inode, to add a name to: `ENOENT` once it was removed (a handle
    /// still open on it keeps it alive with no links).
    fn dir_for_new_entry(&self, ino: u64) -> Result<Inode, Errno> {
        let inode = self.dir_inode(ino)?;
        if inode.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        Ok(inode)
    }

    /// Directory `ino`'s inode if it has no entries (`ENOTEMPTY` otherwise).
    fn empty_dir(&self, inner: &mut Inner, ino: u64) -> Result<Inode, Errno> {
        let inode = self.dir_inode(ino)?;
        let index = self.take_dir(inner, ino, &inode)?;
        let empty = index.is_empty();
        inner.dirs.insert(ino, index);
        if empty {
            Ok(inode)
        } else {
            Err(Errno::ENOTEMPTY)
        }
    }

    /// Renames `p1/n1` to `p2/n2`, replacing an existing target of a compatible type.
    pub fn rename(&self, p1: u64, n1: &[u8], p2: u64, n2: &[u8]) -> Result<(), Errno> {
        let mut inner = self.lock();
        self.rename_locked(&mut inner, p1, n1, p2, n2)?;
        self.pm().durability_point();
        Ok(())
    }

    /// Renames unless the target name exists (`RENAME_NOREPLACE`: `EEXIST`), checked and
    /// done under one lock.
    pub fn rename_noreplace(&self, p1: u64, n1: &[u8], p2: u64, n2: &[u8]) -> Result<(), Errno> {
        let mut inner = self.lock();
        match self.lookup_locked(&mut inner, p2, n2) {
            Ok(_) => return Err(Errno::EEXIST),
            Err(Errno::ENOENT) => {}
            Err(e) => return Err(e),
        }
        self.rename_locked(&mut inner, p1, n1, p2, n2)?;
        self.pm().durability_point();
        Ok(())
    }

    fn rename_entry(
        &self,
        inner: &mut Inner,
        p1: u64,
        n1: &[u8],
        p2: u64,
        n2: &[u8],
    ) -> Result<(), Errno> {
        for name in [n1, n2] {
            if name == DOT || name == DOTDOT {
                return Err(Errno::EBUSY);
            }
        }
        if n1.len() > crate::layout::NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        dir::valid_name(n2)?;
        let i1 = self.dir_inode(p1)?;
        let i2 = if p1 == p2 {
            None
        } else {
            Some(self.dir_for_new_entry(p2)?)
        };
        let mut d1 = self.take_dir(inner, p1, &i1)?;
        let mut d2 = match &i2 {
            None => None,
            Some(i2) => match self.take_dir(inner, p2, i2) {
                Ok(d) => Some(d),
                Err(e) => {
                    inner.dirs.insert(p1, d1);
                    return Err(e);
                }
            },
        };
        let checked = self.rename_checks(inner, &d1, d2.as_ref(), (p1, p2), n1, n2, i2.as_ref());
        let plan = match checked {
            Ok(Some(plan)) => plan,
            result => {
                inner.dirs.insert(p1, d1);
                if let Some(d2) = d2 {
                    inner.dirs.insert(p2, d2);
                }
                return result.map(|_| ());
            }
        };
        if self.options.mutant == Mutant::InPlaceRename && p1 == p2 && plan.dst.is_none() {
            let done = self.rename_in_place(&mut d1, n1, n2);
            inner.dirs.insert(p1, d1);
            if done {
                return Ok(());
            }
            d1 = inner.dirs.remove(&p1).expect("just inserted");
        }
        self.rename_commit(
            inner,
            (p1, i1, &mut d1),
            (p2, i2, d2.as_mut()),
            n1,
            n2,
            plan,
        )?;
        inner.dirs.insert(p1, d1);
        if let Some(d2) = d2 {
            inner.dirs.insert(p2, d2);
        }
        Ok(())
    }

    /// The checks of rename; `Ok(None)` means "nothing to do" (both names are one inode).
    #[allow(clippy::too_many_arguments)]
    fn rename_checks(
        &self,
        inner: &mut Inner,
        d1: &DirIndex,
        d2: Option<&DirIndex>,
        (p1, p2): (u64, u64),
        n1: &[u8],
        n2: &[u8],
        i2: Option<&Inode>,
    ) -> Result<Option<RenamePlan>, Errno> {
        let src = d1.get(n1).ok_or(Errno::ENOENT)?;
        let dst = d2.unwrap_or(d1).get(n2);
        // The kernel's order: ancestry (EINVAL, ENOTEMPTY), same inode, types, link count,
        // emptiness.
        if i2.is_some() {
            if src.kind == FileType::Directory && self.is_ancestor_or_self(src.ino, p2)? {
                return Err(Errno::EINVAL);
            }
            if let Some(d) = dst
                && d.kind == FileType::Directory
                && self.is_ancestor_or_self(d.ino, p1)?
            {
                return Err(Errno::ENOTEMPTY);
            }
        }
        if dst.is_some_and(|d| d.ino == src.ino) {
            return Ok(None);
        }
        let src_inode = self.inode(src.ino)?;
        if src.kind == FileType::Directory {
            if let Some(dst) = dst
                && dst.kind != FileType::Directory
            {
                return Err(Errno::ENOTDIR);
            }
            if dst.is_none() && i2.is_some_and(|i| i.nlink >= LINK_MAX) {
                return Err(Errno::EMLINK);
            }
            if let Some(dst) = dst {
                self.empty_dir(inner, dst.ino)?;
            }
        } else if dst.is_some_and(|d| d.kind == FileType::Directory) {
            return Err(Errno::EISDIR);
        }
        let victim = match dst {
            Some(d) => Some((d, self.inode(d.ino)?)),
            None => None,
        };
        Ok(Some(RenamePlan {
            src,
            src_inode,
            dst,
            victim,
        }))
    }

    /// Whether directory `dir` is `ino` or one of its ancestors.
    fn is_ancestor_or_self(&self, dir: u64, ino: u64) -> Result<bool, Errno> {
        let mut cur = ino;
        for _ in 0..self.sb.inode_count {
            if cur == dir {
                return Ok(true);
            }
            if cur == ROOT_INO {
                return Ok(false);
            }
            cur = self.dir_inode(cur)?.parent;
        }
        let why = format!("its parent links never reach the root (a loop through directory {cur})");
        Err(Corrupt::new(why).of_inode(ino).into())
    }

    fn rename_commit(
        &self,
        inner: &mut Inner,
        (p1, mut i1, d1): (u64, Inode, &mut DirIndex),
        (p2, i2, d2): (u64, Option<Inode>, Option<&mut DirIndex>),
        n1: &[u8],
        n2: &[u8],
        plan: RenamePlan,
    ) -> Result<(), Errno> {
        let sb = &self.sb;
        let now = self.now();
        let RenamePlan {
            src,
            mut src_inode,
            dst,
            victim,
        } = plan;
        let moved = slot_of(src.ino, src.kind);
        let cross = i2.is_some();
        let mut i2 = i2;
        let mut batch = Batch::default();
        let mut new_block = None;
        {
            let (target_dir, target_inode) = match (d2, i2.as_mut()) {
                (Some(d2), Some(i2)) => (d2, i2),
                _ => (&mut *d1, &mut i1),
            };
            match dst {
                Some(dst) => {
                    let abs = target_dir.abs(dst.pos);
                    let header =
                        dir::replaced_header(target_dir.rec_len(dst.pos), src.kind, n2, src.ino);
                    batch.log(abs, dir::HEADER);
                    batch.set(abs, &header);
                    target_dir.apply_replace(n2, moved);
                }
                None => {
                    new_block =
                        self.plan_insert(inner, target_inode, target_dir, n2, moved, &mut batch)?;
                }
            }
        }
        self.plan_remove(d1, n1, &mut batch);
        let mut freed = None;
        if let Some((dst, mut victim_inode)) = victim {
            if dst.kind == FileType::Directory {
                freed = self.drop_directory(inner, dst.ino, &mut victim_inode, now, &mut batch)?;
                i2.as_mut().unwrap_or(&mut i1).nlink -= 1;
            } else {
                freed = self.drop_link(inner, dst.ino, &mut victim_inode, now, &mut batch)?;
            }
        }
        src_inode.ctime = now;
        if src.kind == FileType::Directory && cross {
            src_inode.parent = p2;
            batch.cold(sb, src.ino, &src_inode, field::PARENT, field::TRUNC_NEXT);
            i1.nlink -= 1;
            i2.as_mut().expect("cross").nlink += 1;
        }
        batch.hot(sb, src.ino, &src_inode);
        (i1.mtime, i1.ctime) = (now, now);
        match i2.as_mut() {
            Some(i2) => {
                (i2.mtime, i2.ctime) = (now, now);
                batch.hot(sb, p1, &i1);
                self.finish_parent(inner, p2, i2, new_block, batch)?;
            }
            None => self.finish_parent(inner, p1, &mut i1, new_block, batch)?,
        }
        if let (Some(blocks), Some((dst, _))) = (freed, victim) {
            self.forget_inode(inner, dst.ino, &blocks);
        }
        Ok(())
    }

    /// The mutant rename: the new name overwrites the old record in place, outside the
    /// journal. Returns false when the name does not fit (then the correct path runs).
    fn rename_in_place(&self, dir: &mut DirIndex, n1: &[u8], n2: &[u8]) -> bool {
        let Some(slot) = dir.get(n1) else {
            return false;
        };
        if dir::need(n2.len()) > dir::need(n1.len()) {
            return false;
        }
        let abs = dir.abs(slot.pos);
        let rec = dir::encode(slot.ino, dir.rec_len(slot.pos), slot.kind, n2);
        self.pm().write(abs + 8, &rec[8..], WriteClass::Meta);
        self.pm().persist(abs + 8, rec.len() as u64 - 8);
        dir.apply_rename_in_place(n1, n2);
        true
    }
}

#[derive(Clone, Copy, Debug)]
struct RenamePlan {
    src: dir::Slot,
    src_inode: Inode,
    dst: Option<dir::Slot>,
    victim: Option<(dir::Slot, Inode)>,
}
