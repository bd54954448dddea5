//! Inodes: the 128-byte on-media record (`docs/pmfs-format.md` §5), its validation, and the
//! file types.

use crate::error::Corrupt;
use crate::layout::{
    BLOCK, HUGE_BLOCK, INODE_SIZE, MAX_FILE_SIZE, MAX_HEIGHT, Superblock, get_u32, get_u64,
    put_u32, put_u64,
};
use pmem::Persist;

/// Field offsets inside an inode.
pub mod field {
    /// Root word (node offset | height).
    pub const TREE: u64 = 0x00;
    /// Size in bytes.
    pub const SIZE: u64 = 0x08;
    /// Modification time.
    pub const MTIME: u64 = 0x10;
    /// Change time.
    pub const CTIME: u64 = 0x18;
    /// Type and permission bits.
    pub const MODE: u64 = 0x20;
    /// Link count.
    pub const NLINK: u64 = 0x24;
    /// Access time.
    pub const ATIME: u64 = 0x28;
    /// Owner.
    pub const UID: u64 = 0x30;
    /// Group.
    pub const GID: u64 = 0x34;
    /// Parent directory (directories only).
    pub const PARENT: u64 = 0x38;
    /// Next inode on the truncate list.
    pub const TRUNC_NEXT: u64 = 0x40;
    /// Size to cut the tree to.
    pub const TRUNC_SIZE: u64 = 0x48;
    /// Reuse generation.
    pub const GENERATION: u64 = 0x50;
    /// Flags.
    pub const FLAGS: u64 = 0x54;
    /// Creation time.
    pub const BTIME: u64 = 0x58;
    /// Device number (reserved).
    pub const RDEV: u64 = 0x60;
    /// Extended-attribute block (version 2; 0 = none).
    pub const XATTR: u64 = 0x68;
}

/// Bytes of the hot part: one journal entry.
pub const HOT_LEN: u64 = 48;
/// Flag: the file's leaves are 2 MiB.
pub const FLAG_HUGE: u32 = 1;
/// Flag: the file may hold zeroed leaves past its size (`fallocate` with
/// `FALLOC_FL_KEEP_SIZE`); version 2.
pub const FLAG_PREALLOC: u32 = 2;

/// `S_IFMT` mask and the three types stored.
pub const S_IFMT: u32 = 0o170_000;
/// Regular file.
pub const S_IFREG: u32 = 0o100_000;
/// Directory.
pub const S_IFDIR: u32 = 0o040_000;
/// Symbolic link.
pub const S_IFLNK: u32 = 0o120_000;
/// Named pipe.
pub const S_IFIFO: u32 = 0o010_000;
/// Character device.
pub const S_IFCHR: u32 = 0o020_000;
/// Block device.
pub const S_IFBLK: u32 = 0o060_000;
/// Unix-domain socket.
pub const S_IFSOCK: u32 = 0o140_000;
/// Permission bits (including set-id and sticky).
pub const PERM_MASK: u32 = 0o7777;

/// What an inode is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FileType {
    /// Regular file.
    Regular,
    /// Directory.
    Directory,
    /// Symbolic link.
    Symlink,
    /// Named pipe (FIFO): a name and attributes only, no data.
    Fifo,
    /// Character device: a device number, no data.
    CharDevice,
    /// Block device: a device number, no data.
    BlockDevice,
    /// Unix-domain socket: a name and attributes only, no data.
    Socket,
}

impl FileType {
    /// The `S_IFMT` bits.
    pub const fn mode_bits(self) -> u32 {
        match self {
            FileType::Regular => S_IFREG,
            FileType::Directory => S_IFDIR,
            FileType::Symlink => S_IFLNK,
            FileType::Fifo => S_IFIFO,
            FileType::CharDevice => S_IFCHR,
            FileType::BlockDevice => S_IFBLK,
            FileType::Socket => S_IFSOCK,
        }
    }

    /// The type of a mode, if it is one of the three stored.
    pub fn from_mode(mode: u32) -> Option<FileType> {
        match mode & S_IFMT {
            S_IFREG => Some(FileType::Regular),
            S_IFDIR => Some(FileType::Directory),
            S_IFLNK => Some(FileType::Symlink),
            S_IFIFO => Some(FileType::Fifo),
            S_IFCHR => Some(FileType::CharDevice),
            S_IFBLK => Some(FileType::BlockDevice),
            S_IFSOCK => Some(FileType::Socket),
            _ => None,
        }
    }

    /// Whether nodes of this type hold no data (FIFOs, devices, sockets).
    pub const fn is_special(self) -> bool {
        matches!(
            self,
            FileType::Fifo | FileType::CharDevice | FileType::BlockDevice | FileType::Socket
        )
    }

    /// The `d_type` value stored in directory records.
    pub const fn dirent_type(self) -> u8 {
        match self {
            FileType::Regular => 8,
            FileType::Directory => 4,
            FileType::Symlink => 10,
            FileType::Fifo => 1,
            FileType::CharDevice => 2,
            FileType::BlockDevice => 6,
            FileType::Socket => 12,
        }
    }

    /// The type of a `d_type` value.
    pub fn from_dirent_type(t: u8) -> Option<FileType> {
        match t {
            8 => Some(FileType::Regular),
            4 => Some(FileType::Directory),
            10 => Some(FileType::Symlink),
            1 => Some(FileType::Fifo),
            2 => Some(FileType::CharDevice),
            6 => Some(FileType::BlockDevice),
            12 => Some(FileType::Socket),
            _ => None,
        }
    }
}

/// A decoded inode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inode {
    /// Root word.
    pub tree: u64,
    /// Size.
    pub size: u64,
    /// Modification time (ns).
    pub mtime: u64,
    /// Change time (ns).
    pub ctime: u64,
    /// Type + permissions; 0 = free.
    pub mode: u32,
    /// Link count.
    pub nlink: u32,
    /// Access time (ns).
    pub atime: u64,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Parent (directories).
    pub parent: u64,
    /// Truncate list link.
    pub trunc_next: u64,
    /// Truncate target size.
    pub trunc_size: u64,
    /// Reuse generation.
    pub generation: u32,
    /// Flags.
    pub flags: u32,
    /// Creation time (ns).
    pub btime: u64,
    /// Device number.
    pub rdev: u64,
    /// Extended-attribute block, 0 for none.
    pub xattr: u64,
}

impl Inode {
    /// Reads inode `ino` (not validated).
    pub fn read<B: Persist>(pm: &B, sb: &Superblock, ino: u64) -> Inode {
        let mut b = [0u8; INODE_SIZE as usize];
        pm.read(sb.inode_offset(ino), &mut b);
        Inode::decode(&b)
    }

    /// Decodes the 128 bytes.
    pub fn decode(b: &[u8; INODE_SIZE as usize]) -> Inode {
        let u64_at = |f: u64| get_u64(b, f as usize);
        let u32_at = |f: u64| get_u32(b, f as usize);
        Inode {
            tree: u64_at(field::TREE),
            size: u64_at(field::SIZE),
            mtime: u64_at(field::MTIME),
            ctime: u64_at(field::CTIME),
            mode: u32_at(field::MODE),
            nlink: u32_at(field::NLINK),
            atime: u64_at(field::ATIME),
            uid: u32_at(field::UID),
            gid: u32_at(field::GID),
            parent: u64_at(field::PARENT),
            trunc_next: u64_at(field::TRUNC_NEXT),
            trunc_size: u64_at(field::TRUNC_SIZE),
            generation: u32_at(field::GENERATION),
            flags: u32_at(field::FLAGS),
            btime: u64_at(field::BTIME),
            rdev: u64_at(field::RDEV),
            xattr: u64_at(field::XATTR),
        }
    }

    /// The 128 bytes.
    pub fn encode(&self) -> [u8; INODE_SIZE as usize] {
        let mut b = [0u8; INODE_SIZE as usize];
        let mut p64 = |f: u64, v: u64| put_u64(&mut b, f as usize, v);
        p64(field::TREE, self.tree);
        p64(field::SIZE, self.size);
        p64(field::MTIME, self.mtime);
        p64(field::CTIME, self.ctime);
        p64(field::ATIME, self.atime);
        p64(field::PARENT, self.parent);
        p64(field::TRUNC_NEXT, self.trunc_next);
        p64(field::TRUNC_SIZE, self.trunc_size);
        p64(field::BTIME, self.btime);
        p64(field::RDEV, self.rdev);
        p64(field::XATTR, self.xattr);
        let mut p32 = |f: u64, v: u32| put_u32(&mut b, f as usize, v);
        p32(field::MODE, self.mode);
        p32(field::NLINK, self.nlink);
        p32(field::UID, self.uid);
        p32(field::GID, self.gid);
        p32(field::GENERATION, self.generation);
        p32(field::FLAGS, self.flags);
        b
    }

    /// The hot part (first 48 bytes).
    pub fn hot(&self) -> [u8; HOT_LEN as usize] {
        let mut hot = [0u8; HOT_LEN as usize];
        hot.copy_from_slice(&self.encode()[..HOT_LEN as usize]);
        hot
    }

    /// Whether the inode is in use.
    pub fn is_live(&self) -> bool {
        self.mode != 0
    }

    /// The file type (`None` for a free or damaged inode).
    pub fn kind(&self) -> Option<FileType> {
        FileType::from_mode(self.mode)
    }

    /// Whether the leaves are 2 MiB.
    pub fn is_huge(&self) -> bool {
        self.flags & FLAG_HUGE != 0
    }

    /// Leaf size in bytes.
    pub fn leaf_size(&self) -> u64 {
        if self.is_huge() { HUGE_BLOCK } else { BLOCK }
    }

    /// Checks a live inode's fields (`ino` for messages).
    pub fn validate(&self, sb: &Superblock, ino: u64) -> Result<FileType, Corrupt> {
        let fail = |what: String| Err(Corrupt::new(format!("inode {ino}: {what}")));
        let Some(kind) = self.kind() else {
            return fail(format!("mode {:#o}", self.mode));
        };
        if self.mode & !(S_IFMT | PERM_MASK) != 0 {
            return fail(format!("mode {:#o}", self.mode));
        }
        if let Err(c) = check_root_word(sb, self.tree, self.is_huge()) {
            return fail(c.0);
        }
        if self.size > MAX_FILE_SIZE {
            return fail(format!("size {}", self.size));
        }
        let known = if sb.has_xattrs() {
            FLAG_HUGE | FLAG_PREALLOC
        } else {
            FLAG_HUGE
        };
        let regular_only = self.is_huge() || self.flags & FLAG_PREALLOC != 0;
        if self.flags & !known != 0 || (regular_only && kind != FileType::Regular) {
            return fail(format!("flags {:#x}", self.flags));
        }
        if kind == FileType::Directory {
            if !self.size.is_multiple_of(BLOCK) {
                return fail(format!("directory size {}", self.size));
            }
            if self.parent == 0 || self.parent >= sb.inode_count {
                return fail(format!("parent {}", self.parent));
            }
        }
        if kind.is_special() && (self.tree != 0 || self.size != 0) {
            return fail(format!("special file with data (size {})", self.size));
        }
        if !matches!(kind, FileType::CharDevice | FileType::BlockDevice) && self.rdev != 0 {
            return fail(format!("device number {:#x} on a {kind:?}", self.rdev));
        }
        if self.trunc_next >= sb.inode_count {
            return fail(format!("truncate link {}", self.trunc_next));
        }
        if self.xattr != 0
            && (!sb.has_xattrs() || crate::tree::check_ptr(sb, self.xattr, true, false).is_err())
        {
            return fail(format!("attribute block {:#x}", self.xattr));
        }
        Ok(kind)
    }
}

/// Splits a root word into (root offset, height).
pub fn split_root(tree: u64) -> (u64, u32) {
    (tree & !0xFFF, (tree & 7) as u32)
}

/// Packs a root word.
pub fn root_word(root: u64, height: u32) -> u64 {
    debug_assert!(root.is_multiple_of(BLOCK) && height <= MAX_HEIGHT);
    root | u64::from(height)
}

/// Checks a root word: reserved bits, height, alignment and range of the root.
pub fn check_root_word(sb: &Superblock, tree: u64, huge: bool) -> Result<(), Corrupt> {
    let (root, height) = split_root(tree);
    if tree & 0xFF8 != 0 || height > MAX_HEIGHT {
        return Err(Corrupt::new(format!("root word {tree:#x}")));
    }
    if root == 0 {
        return if height == 0 {
            Ok(())
        } else {
            Err(Corrupt::new(format!("empty tree with height {height}")))
        };
    }
    crate::tree::check_ptr(sb, root, height == 0, huge)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{LAYOUT, MkfsOptions, ROOT_SIZE};

    fn sb() -> Superblock {
        let pool = pmem::Header::new(LAYOUT, 8 << 20, ROOT_SIZE).expect("header");
        Superblock::plan(&pool, &MkfsOptions::default(), 0).expect("plan")
    }

    #[test]
    fn encode_decode_round_trip_and_hot_part() {
        let inode = Inode {
            tree: 0,
            size: 5,
            mtime: 6,
            ctime: 7,
            mode: S_IFREG | 0o644,
            nlink: 1,
            atime: 8,
            uid: 9,
            gid: 10,
            parent: 0,
            trunc_next: 0,
            trunc_size: 0,
            generation: 3,
            flags: 0,
            btime: 11,
            rdev: 0,
            xattr: 0,
        };
        assert_eq!(Inode::decode(&inode.encode()), inode);
        assert_eq!(&inode.hot()[..], &inode.encode()[..48]);
        assert_eq!(inode.validate(&sb(), 2), Ok(FileType::Regular));
    }

    #[test]
    fn validation_rejects_damage() {
        let sb = sb();
        let good = Inode {
            mode: S_IFDIR | 0o755,
            nlink: 2,
            parent: 1,
            ..Inode::default()
        };
        assert!(good.validate(&sb, 1).is_ok());
        let bad = [
            Inode {
                mode: 0o030_644,
                ..good
            }, // no such type
            Inode { tree: 3, ..good }, // height without a root
            Inode {
                tree: sb.data_offset + 8,
                ..good
            }, // misaligned root
            Inode {
                tree: sb.data_end() | 1,
                ..good
            }, // outside the data area
            Inode { size: 100, ..good }, // directory size
            Inode { parent: 0, ..good }, // directory without parent
            Inode { flags: 2, ..good }, // unknown flag
            Inode {
                trunc_next: sb.inode_count,
                ..good
            }, // link out of range
            Inode {
                tree: sb.data_offset | 5,
                ..good
            }, // height 5
        ];
        for (i, inode) in bad.iter().enumerate() {
            assert!(inode.validate(&sb, 1).is_err(), "case {i}");
        }
    }
}
