//! Attributes: what `stat`, `readdir`, `statfs` and `setattr` exchange with callers, and the
//! inode-level attribute operations (`getattr`, `setattr`: owner, mode and times are one
//! journal transaction; a size change goes to the data path, `data.rs`).

use crate::batch::Batch;
use crate::error::Errno;
use crate::filesystem::Fs;
use crate::inode::{FileType, Inode, PERM_MASK, S_IFMT, field};
use crate::layout::BLOCK;
use crate::state::Inner;
use pmem::Persist;

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

impl<B: Persist> Fs<B> {
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
}
