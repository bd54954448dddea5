//! What a kernel-facing adapter (the FUSE mount, `crates/fsmount`) needs beyond the
//! inode-level API: entries that **pin** their inode number until the kernel forgets them,
//! and nodes created with the **caller's credentials**.
//!
//! The kernel caches inodes by number. A file unlinked while the kernel still holds a
//! reference to it (a lookup it has not forgotten yet) is freed on the media at once, as
//! always, but its number is not handed out again before [`Fs::forget`] drops the last
//! reference: the kernel never sees one number name two different files.

use crate::attr::Attr;
use crate::error::Errno;
use crate::filesystem::Fs;
use crate::inode::{FileType, Inode};
use crate::state::Inner;
use pmem::Persist;

/// Who asks for a new node: its owner and group (before set-group-ID inheritance).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    /// Owner of new nodes.
    pub uid: u32,
    /// Group of new nodes (a set-group-ID parent directory overrides it).
    pub gid: u32,
}

impl<B: Persist> Fs<B> {
    /// Looks `name` up in `parent` and takes one kernel reference on the result.
    pub fn lookup_pinned(&self, parent: u64, name: &[u8]) -> Result<Attr, Errno> {
        let mut inner = self.lock();
        let (ino, _) = self.lookup_locked(&mut inner, parent, name)?;
        let inode = self.inode(ino)?;
        pin(&mut inner, ino);
        Ok(self.attr(&inner, ino, &inode))
    }

    /// Creates a node owned by `caller` (a regular file, a directory, a symbolic link to
    /// `target`, a FIFO, a socket, or a device numbered `rdev`) and takes one kernel
    /// reference on it. `target` is required for a symbolic link and refused for anything
    /// else, as `rdev` other than 0 is for anything but a device (`EINVAL`); `perm` holds
    /// permission bits only (`0o7777`, else `EINVAL`).
    #[allow(clippy::too_many_arguments)]
    pub fn make_pinned(
        &self,
        parent: u64,
        name: &[u8],
        kind: FileType,
        perm: u32,
        target: Option<&[u8]>,
        rdev: u64,
        caller: Caller,
    ) -> Result<Attr, Errno> {
        let mut inner = self.lock();
        let saved = std::mem::replace(&mut inner.creds, (caller.uid, caller.gid));
        let made = self.make_node_locked(&mut inner, parent, name, kind, perm, target, rdev);
        inner.creds = saved;
        let attr = made?;
        pin(&mut inner, attr.ino);
        self.pm().durability_point();
        Ok(attr)
    }

    /// Adds the link `parent/name` to `ino` and takes one kernel reference on it.
    pub fn link_pinned(&self, ino: u64, parent: u64, name: &[u8]) -> Result<Attr, Errno> {
        let mut inner = self.lock();
        let attr = self.link_locked(&mut inner, ino, parent, name)?;
        pin(&mut inner, ino);
        self.pm().durability_point();
        Ok(attr)
    }

    /// Drops `count` kernel references on `ino`. A number whose inode was freed meanwhile
    /// becomes reusable when neither references nor handles remain.
    pub fn forget(&self, ino: u64, count: u64) {
        let mut inner = self.lock();
        let Some(held) = inner.pins.get_mut(&ino) else {
            return;
        };
        *held = held.saturating_sub(count);
        if *held > 0 {
            return;
        }
        inner.pins.remove(&ino);
        self.reuse_if_free(&mut inner, ino);
    }

    /// Kernel references held on `ino`.
    pub fn pins(&self, ino: u64) -> u64 {
        self.lock().pins.get(&ino).copied().unwrap_or(0)
    }

    /// Puts a number back on the free list if its inode is free on the media and nothing
    /// refers to it any more.
    fn reuse_if_free(&self, inner: &mut Inner, ino: u64) {
        if ino == 0 || ino >= self.sb.inode_count || inner.open.contains_key(&ino) {
            return;
        }
        // A damaged inode is not free: it stays out of the free list.
        if Inode::read(self.pm(), &self.sb, ino).is_ok_and(|inode| !inode.is_live()) {
            inner.free_inodes.insert(ino);
        }
    }
}

fn pin(inner: &mut Inner, ino: u64) {
    *inner.pins.entry(ino).or_insert(0) += 1;
}
