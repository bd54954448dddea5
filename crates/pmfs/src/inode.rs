//! Inodes: the 128-byte on-media record (`docs/pmfs-format.md` §5), its validation, and the
//! file types.

use crate::error::Corrupt;
use crate::layout::{
    BLOCK, HUGE_BLOCK, INODE_SIZE, MAX_FILE_SIZE, MAX_HEIGHT, Superblock, get_u32, get_u64,
    put_u32, put_u64,
};
use pmem::{Persist, checked};

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
    /// Type and permission bits (version 3: the mode|nlink checked word).
    pub const MODE: u64 = 0x20;
    /// Link count (versions 1 and 2; version 3 packs it into the word at `MODE`).
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
    /// Reuse generation (version 3: the generation|flags checked word).
    pub const GENERATION: u64 = 0x50;
    /// Flags (versions 1 and 2; version 3 packs them into the word at `GENERATION`).
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

/// The inode words that are checked words (`pmem::checked`) from version 3 on, with the
/// names their errors carry: every word that decides where the file's data lives, what the
/// inode is, or which other inode or block it references.
const CHECKED_WORDS: [(u64, &str); 8] = [
    (field::TREE, "tree word"),
    (field::SIZE, "size word"),
    (field::MODE, "mode|nlink word"),
    (field::PARENT, "parent word"),
    (field::TRUNC_NEXT, "truncate-link word"),
    (field::TRUNC_SIZE, "truncate-size word"),
    (field::GENERATION, "generation|flags word"),
    (field::XATTR, "attribute-block word"),
];

/// Bits of the mode in the packed mode|nlink word (the link count takes the next 32).
const MODE_BITS: u32 = 16;
/// Bits of the generation in the packed generation|flags word (the flags take the next 16).
const GENERATION_BITS: u32 = 32;

/// The name of the checked word at `field` (for messages).
fn word_name(field: u64) -> &'static str {
    CHECKED_WORDS
        .iter()
        .find(|(f, _)| *f == field)
        .map_or("inode word", |(_, name)| name)
}

fn inode_error(ino: u64, error: checked::CheckedError) -> Corrupt {
    Corrupt::new(format!("inode {ino}: {error}"))
}

/// The stored form of the checked word `field` of inode `ino` holding `value` (the plain
/// value before version 3).
pub(crate) fn seal_word(sb: &Superblock, ino: u64, field: u64, value: u64) -> Result<u64, Corrupt> {
    if !sb.checked_inodes() {
        return Ok(value);
    }
    let at = sb.inode_offset(ino) + field;
    checked::seal(value, at, word_name(field)).map_err(|e| inode_error(ino, e))
}

/// Reads the checked word `field` of inode `ino`: its value, or `Corrupt` naming the inode and
/// the word when it fails its check (version 3; earlier versions store the plain value).
pub(crate) fn read_word<B: Persist>(
    pm: &B,
    sb: &Superblock,
    ino: u64,
    field: u64,
) -> Result<u64, Corrupt> {
    let at = sb.inode_offset(ino) + field;
    let word = pm.read_u64(at);
    if !sb.checked_inodes() {
        return Ok(word);
    }
    checked::open(word, at, word_name(field)).map_err(|e| inode_error(ino, e))
}

/// The mode of inode `ino` (0 for a free inode), read through its check.
pub(crate) fn read_mode<B: Persist>(pm: &B, sb: &Superblock, ino: u64) -> Result<u32, Corrupt> {
    let at = sb.inode_offset(ino) + field::MODE;
    if !sb.checked_inodes() {
        return Ok(pm.read_u32(at));
    }
    if pm.read_u64(at) == 0 {
        return Ok(0);
    }
    let packed = read_word(pm, sb, ino, field::MODE)?;
    Ok(low_bits(packed, MODE_BITS))
}

fn low_bits(value: u64, bits: u32) -> u32 {
    (value & ((1u64 << bits) - 1)) as u32
}

impl Inode {
    /// Reads inode `ino`, every checked word through its check (not otherwise validated).
    pub fn read<B: Persist>(pm: &B, sb: &Superblock, ino: u64) -> Result<Inode, Corrupt> {
        let mut b = [0u8; INODE_SIZE as usize];
        pm.read(sb.inode_offset(ino), &mut b);
        Inode::decode(&b, sb, ino)
    }

    /// Decodes the 128 bytes of inode `ino`. From version 3 on, a free inode is one whose
    /// mode|nlink word is 0 (its other words are not read, except the generation, whose value
    /// bits are the word's low 32 bits sealed or not); in a live inode every checked word must
    /// pass its check.
    pub fn decode(
        b: &[u8; INODE_SIZE as usize],
        sb: &Superblock,
        ino: u64,
    ) -> Result<Inode, Corrupt> {
        let raw = Inode::decode_plain(b);
        if !sb.checked_inodes() {
            return Ok(raw);
        }
        let word = |f: u64| get_u64(b, f as usize);
        if word(field::MODE) == 0 {
            return Ok(Inode {
                generation: word(field::GENERATION) as u32,
                ..Inode::default()
            });
        }
        let at = sb.inode_offset(ino);
        let open =
            |f: u64| checked::open(word(f), at + f, word_name(f)).map_err(|e| inode_error(ino, e));
        let mode_nlink = open(field::MODE)?;
        let generation_flags = open(field::GENERATION)?;
        Ok(Inode {
            tree: open(field::TREE)?,
            size: open(field::SIZE)?,
            mode: low_bits(mode_nlink, MODE_BITS),
            nlink: (mode_nlink >> MODE_BITS) as u32,
            parent: open(field::PARENT)?,
            trunc_next: open(field::TRUNC_NEXT)?,
            trunc_size: open(field::TRUNC_SIZE)?,
            generation: low_bits(generation_flags, GENERATION_BITS),
            flags: (generation_flags >> GENERATION_BITS) as u32,
            xattr: open(field::XATTR)?,
            ..raw
        })
    }

    /// Decodes the 128 bytes as plain integers (versions 1 and 2).
    fn decode_plain(b: &[u8; INODE_SIZE as usize]) -> Inode {
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

    /// The 128 bytes of inode `ino`: from version 3 on, the checked words sealed to their
    /// addresses (a free inode's mode|nlink word is 0). A value that does not fit its word
    /// (a mode or flags past 16 bits, a 48-bit overflow) is refused, never stored masked.
    pub fn encode(&self, sb: &Superblock, ino: u64) -> Result<[u8; INODE_SIZE as usize], Corrupt> {
        self.encode_range(sb, ino, 0, INODE_SIZE)
    }

    /// As [`Inode::encode`], but only the checked words inside bytes `[from, to)` are sealed
    /// (the bytes outside are plain and must not be stored): a journaled store of the hot or
    /// cold part computes only the checks it writes.
    pub(crate) fn encode_range(
        &self,
        sb: &Superblock,
        ino: u64,
        from: u64,
        to: u64,
    ) -> Result<[u8; INODE_SIZE as usize], Corrupt> {
        let mut b = self.encode_plain();
        if !sb.checked_inodes() {
            return Ok(b);
        }
        if self.mode >> MODE_BITS != 0 || self.flags >> (48 - GENERATION_BITS) != 0 {
            return Err(Corrupt::new(format!(
                "inode {ino}: mode {:#o} or flags {:#x} does not fit its checked word",
                self.mode, self.flags
            )));
        }
        let mode_nlink = u64::from(self.mode) | u64::from(self.nlink) << MODE_BITS;
        let generation_flags =
            u64::from(self.generation) | u64::from(self.flags) << GENERATION_BITS;
        let values = [
            (field::TREE, self.tree),
            (field::SIZE, self.size),
            (field::PARENT, self.parent),
            (field::TRUNC_NEXT, self.trunc_next),
            (field::TRUNC_SIZE, self.trunc_size),
            (field::GENERATION, generation_flags),
            (field::XATTR, self.xattr),
        ];
        for (f, value) in values.into_iter().filter(|(f, _)| (from..to).contains(f)) {
            put_u64(&mut b, f as usize, seal_word(sb, ino, f, value)?);
        }
        if (from..to).contains(&field::MODE) {
            let mode_word = if self.mode == 0 {
                0
            } else {
                seal_word(sb, ino, field::MODE, mode_nlink)?
            };
            put_u64(&mut b, field::MODE as usize, mode_word);
        }
        Ok(b)
    }

    /// The 128 bytes as plain integers (versions 1 and 2).
    fn encode_plain(&self) -> [u8; INODE_SIZE as usize] {
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

    /// The hot part (first 48 bytes) of inode `ino`'s encoding.
    pub fn hot(&self, sb: &Superblock, ino: u64) -> Result<[u8; HOT_LEN as usize], Corrupt> {
        let mut hot = [0u8; HOT_LEN as usize];
        hot.copy_from_slice(&self.encode_range(sb, ino, 0, HOT_LEN)?[..HOT_LEN as usize]);
        Ok(hot)
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
        if kind != FileType::Directory && self.parent != 0 {
            return fail(format!(
                "parent {} on a {kind:?} (only directories have one)",
                self.parent
            ));
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
    use crate::layout::{LAYOUT, MkfsOptions, ROOT_SIZE, SB_VERSION};

    fn sb() -> Superblock {
        let pool = pmem::Header::new(LAYOUT, 8 << 20, ROOT_SIZE).expect("header");
        Superblock::plan(&pool, &MkfsOptions::default(), 0).expect("plan")
    }

    fn sb_version(version: u32) -> Superblock {
        let pool = pmem::Header::new(LAYOUT, 8 << 20, ROOT_SIZE).expect("header");
        let options = MkfsOptions {
            version,
            ..MkfsOptions::default()
        };
        Superblock::plan(&pool, &options, 0).expect("plan")
    }

    fn sample() -> Inode {
        Inode {
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
        }
    }

    #[test]
    fn encode_decode_round_trip_and_hot_part() {
        for version in [2, SB_VERSION] {
            let sb = sb_version(version);
            let inode = sample();
            let bytes = inode.encode(&sb, 2).expect("fits");
            assert_eq!(
                Inode::decode(&bytes, &sb, 2),
                Ok(inode),
                "version {version}"
            );
            assert_eq!(&inode.hot(&sb, 2).expect("fits")[..], &bytes[..48]);
            assert_eq!(inode.validate(&sb, 2), Ok(FileType::Regular));
        }
    }

    /// Version 2 stores plain integers where version 3 stores checked words: the byte
    /// layout of the unchecked fields is the same in both.
    #[test]
    fn version_two_stores_plain_words_and_version_three_checked_ones() {
        let inode = sample();
        let plain = inode.encode(&sb_version(2), 2).expect("fits");
        assert_eq!(get_u64(&plain, field::SIZE as usize), 5);
        assert_eq!(get_u32(&plain, field::NLINK as usize), 1);
        let sb = sb_version(3);
        let sealed = inode.encode(&sb, 2).expect("fits");
        let at = sb.inode_offset(2);
        for (f, name) in CHECKED_WORDS {
            let word = get_u64(&sealed, f as usize);
            assert!(checked::open(word, at + f, name).is_ok(), "{name}");
        }
        assert_eq!(
            get_u64(&sealed, field::MODE as usize) & checked::MAX_VALUE,
            u64::from(S_IFREG | 0o644) | 1 << 16,
            "mode in bits 0..16, nlink in 16..48"
        );
        for f in [field::MTIME, field::CTIME, field::ATIME, field::BTIME] {
            assert_eq!(
                &sealed[f as usize..f as usize + 8],
                &plain[f as usize..f as usize + 8]
            );
        }
    }

    #[test]
    fn free_inodes_are_a_zero_mode_word_and_keep_their_generation() {
        let sb = sb_version(3);
        assert_eq!(Inode::decode(&[0; 128], &sb, 5), Ok(Inode::default()));
        let freed = Inode {
            mode: 0,
            nlink: 0,
            tree: 0,
            generation: 7,
            ..sample()
        };
        let bytes = freed.encode(&sb, 5).expect("fits");
        assert_eq!(get_u64(&bytes, field::MODE as usize), 0);
        let decoded = Inode::decode(&bytes, &sb, 5).expect("free");
        assert!(!decoded.is_live());
        assert_eq!(decoded.generation, 7);
    }

    #[test]
    fn values_that_do_not_fit_their_words_are_refused() {
        let sb = sb_version(3);
        for inode in [
            Inode {
                size: checked::MAX_VALUE + 1,
                ..sample()
            },
            Inode {
                flags: 1 << 16,
                ..sample()
            },
            Inode {
                mode: 1 << 16,
                ..sample()
            },
        ] {
            assert!(inode.encode(&sb, 2).is_err(), "{inode:?}");
        }
    }

    /// A live inode with every checked word in use (a directory on the truncate list with
    /// an attribute block).
    fn busy(sb: &Superblock) -> Inode {
        Inode {
            tree: sb.data_offset + 3 * BLOCK + 2,
            size: 8 * BLOCK,
            mode: S_IFDIR | 0o755,
            nlink: 3,
            parent: 1,
            trunc_next: 4,
            trunc_size: BLOCK,
            generation: 9,
            flags: 0,
            xattr: sb.data_offset + 7 * BLOCK,
            ..sample()
        }
    }

    #[test]
    fn every_single_bit_flip_of_every_checked_word_is_caught_and_named() {
        let sb = sb_version(3);
        let ino = 2;
        let bytes = busy(&sb).encode(&sb, ino).expect("fits");
        for (f, name) in CHECKED_WORDS {
            for bit in 0..64 {
                let mut damaged = bytes;
                damaged[f as usize + bit / 8] ^= 1 << (bit % 8);
                let error = Inode::decode(&damaged, &sb, ino).expect_err(name);
                assert!(
                    error.0.starts_with(&format!("inode {ino}: {name}")),
                    "bit {bit} of the {name}: {error:?}"
                );
            }
        }
    }

    #[test]
    fn a_checked_word_copied_from_another_inode_fails() {
        let sb = sb_version(3);
        let mut two = busy(&sb).encode(&sb, 2).expect("fits");
        let three = busy(&sb).encode(&sb, 3).expect("fits");
        two[..8].copy_from_slice(&three[..8]);
        assert!(Inode::decode(&two, &sb, 2).is_err());
    }

    proptest::proptest! {
        /// Any live inode, any checked word, any bit: the flip is caught.
        #[test]
        fn flipped_bits_of_random_inodes_are_caught(
            size in 0..=MAX_FILE_SIZE,
            nlink in 1u32..=65_000,
            perm in 0u32..=PERM_MASK,
            trunc in 0u64..64,
            generation in proptest::prelude::any::<u32>(),
            word in 0usize..CHECKED_WORDS.len(),
            bit in 0usize..64,
            ino in 1u64..64,
        ) {
            let sb = sb_version(3);
            let inode = Inode {
                size,
                nlink,
                mode: S_IFREG | perm,
                trunc_next: trunc,
                trunc_size: size / 2,
                generation,
                ..sample()
            };
            let mut bytes = inode.encode(&sb, ino).expect("fits");
            proptest::prop_assert_eq!(Inode::decode(&bytes, &sb, ino), Ok(inode));
            let (f, name) = CHECKED_WORDS[word];
            bytes[f as usize + bit / 8] ^= 1 << (bit % 8);
            let decoded = Inode::decode(&bytes, &sb, ino);
            proptest::prop_assert!(
                decoded.as_ref().is_err_and(|e| e.0.contains(name)),
                "{:?}", decoded
            );
        }
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
            Inode {
                mode: S_IFREG | 0o644,
                nlink: 1,
                parent: 1,
                ..good
            }, // a regular file with a parent
        ];
        for (i, inode) in bad.iter().enumerate() {
            assert!(inode.validate(&sb, 1).is_err(), "case {i}");
        }
    }
}
