//! On-media layout: constants, the superblock (primary and redundant copy), and the geometry
//! that places the journal, the inode table and the data area (`docs/pmfs-format.md` §1–§3).
//! Words updated in place are `pmem::checked` words.

use crate::error::{Corrupt, FsError};
use pmem::{Header, checked};

/// Pool layout name of a file system.
pub const LAYOUT: &str = "ferrite-fs";
/// Root region size the file system asks the pool for.
pub const ROOT_SIZE: u64 = 4096;
/// Superblock magic.
pub const SB_MAGIC: [u8; 8] = *b"FERRITFS";
/// Format version written by mkfs (2: inodes may point to an extended-attribute block;
/// 3: the inode words that place data or reference other objects are checked words).
pub const SB_VERSION: u32 = 3;
/// Oldest format version still read (1: no extended attributes; they are refused).
pub const SB_VERSION_MIN: u32 = 1;
/// Checksummed superblock bytes.
pub const SB_LEN: usize = 256;
/// Primary superblock, relative to the root region.
pub const SB_PRIMARY: u64 = 0x000;
/// Redundant superblock copy, relative to the root region.
pub const SB_COPY: u64 = 0x800;
/// Journal generation word, relative to the root region (own cache line).
pub const JOURNAL_WORD: u64 = 0x100;
/// Truncate-list head word, relative to the root region (own cache line).
pub const TRUNCATE_HEAD: u64 = 0x140;
/// Block and tree-node size.
pub const BLOCK: u64 = 4096;
/// Leaf size of huge files.
pub const HUGE_BLOCK: u64 = 2 << 20;
/// 4 KiB blocks per huge block.
pub const BLOCKS_PER_HUGE: u64 = HUGE_BLOCK / BLOCK;
/// Pointers per tree node.
pub const FANOUT: u64 = 512;
/// Tallest tree.
pub const MAX_HEIGHT: u32 = 4;
/// Largest file size.
pub const MAX_FILE_SIZE: u64 = (1 << 48) - 1;
/// Bytes per inode.
pub const INODE_SIZE: u64 = 128;
/// Inode number of the root directory.
pub const ROOT_INO: u64 = 1;
/// Bytes per journal entry.
pub const ENTRY_SIZE: u64 = 64;
/// Payload bytes per journal entry.
pub const ENTRY_DATA: usize = 48;
/// Longest name.
pub const NAME_MAX: usize = 255;
/// Most hard links to one inode.
pub const LINK_MAX: u32 = 65_000;
/// Fewest and most journal entries.
pub const JOURNAL_MIN: u32 = 64;
/// See [`JOURNAL_MIN`].
pub const JOURNAL_MAX: u32 = 65_536;
/// Fewest data blocks a file system may have.
pub const DATA_MIN_BLOCKS: u64 = 16;
/// Default journal size in entries (64 KiB).
pub const JOURNAL_DEFAULT: u32 = 1024;
/// Default pool bytes per inode.
pub const BYTES_PER_INODE: u64 = 16 * 1024;

const KNOWN_INCOMPAT: u32 = 0;

mod sb {
    pub const MAGIC: usize = 0x00;
    pub const VERSION: usize = 0x08;
    pub const LEN: usize = 0x0C;
    pub const UUID: usize = 0x10;
    pub const BLOCK_SIZE: usize = 0x20;
    pub const JOURNAL_ENTRIES: usize = 0x24;
    pub const JOURNAL_OFFSET: usize = 0x28;
    pub const INODE_TABLE: usize = 0x30;
    pub const INODE_COUNT: usize = 0x38;
    pub const DATA_OFFSET: usize = 0x40;
    pub const DATA_BLOCKS: usize = 0x48;
    pub const ROOT_INO: usize = 0x50;
    pub const INCOMPAT: usize = 0x58;
    pub const COMPAT: usize = 0x5C;
    pub const CREATED: usize = 0x60;
    pub const CRC: usize = super::SB_LEN - 4;
}

/// `mkfs` parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MkfsOptions {
    /// Inode count including the unused inode 0; `None`: one per 16 KiB of pool.
    pub inodes: Option<u64>,
    /// Journal entries.
    pub journal_entries: u32,
    /// Owner and group of the root directory (`ferrite fs mkfs` gives it to the invoking
    /// user, so a user's own mount is writable by that user).
    pub root_owner: (u32, u32),
    /// Format version to write (`SB_VERSION_MIN..=SB_VERSION`; default the newest): an
    /// older one makes a pool that older builds read, and the compatibility tests' images.
    pub version: u32,
}

impl Default for MkfsOptions {
    fn default() -> Self {
        MkfsOptions {
            inodes: None,
            journal_entries: JOURNAL_DEFAULT,
            root_owner: (0, 0),
            version: SB_VERSION,
        }
    }
}

/// The decoded superblock plus the root region's offset (the geometry of a file system).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Format version (`SB_VERSION_MIN..=SB_VERSION`).
    pub version: u32,
    /// The pool's UUID.
    pub pool_uuid: [u8; 16],
    /// Journal entries.
    pub journal_entries: u32,
    /// Absolute offset of the journal.
    pub journal_offset: u64,
    /// Absolute offset of the inode table.
    pub inode_table_offset: u64,
    /// Inodes in the table (numbers `1..inode_count` are usable).
    pub inode_count: u64,
    /// Absolute offset of the data area.
    pub data_offset: u64,
    /// 4 KiB blocks in the data area.
    pub data_blocks: u64,
    /// Creation time, ns since the epoch.
    pub created_ns: u64,
    /// Absolute offset of the root region (from the pool header; not stored).
    pub root_offset: u64,
}

impl Superblock {
    /// Places the regions of a new file system in the pool described by `pool`.
    pub fn plan(pool: &Header, options: &MkfsOptions, now_ns: u64) -> Result<Self, FsError> {
        let bad = |message: String| Err(FsError::InvalidArgument(message));
        if pool.root_size < ROOT_SIZE {
            return bad(format!(
                "root region of {} bytes is too small",
                pool.root_size
            ));
        }
        if !(SB_VERSION_MIN..=SB_VERSION).contains(&options.version) {
            return bad(format!(
                "format version {} (this build writes {SB_VERSION_MIN}..={SB_VERSION})",
                options.version
            ));
        }
        let entries = options.journal_entries;
        if !(JOURNAL_MIN..=JOURNAL_MAX).contains(&entries) {
            return bad(format!(
                "journal of {entries} entries (allowed {JOURNAL_MIN}..={JOURNAL_MAX})"
            ));
        }
        let inodes = options
            .inodes
            .unwrap_or((pool.pool_size / BYTES_PER_INODE).max(64));
        if !(2..=1 << 32).contains(&inodes) {
            return bad(format!("{inodes} inodes (allowed 2..=2^32)"));
        }
        let journal_offset = pool.arena_offset;
        let inode_table_offset = journal_offset + journal_bytes(entries);
        let data_offset = inode_table_offset + inode_table_bytes(inodes);
        let blocks = pool.pool_size.saturating_sub(data_offset) / BLOCK;
        if data_offset > pool.pool_size || blocks < DATA_MIN_BLOCKS {
            return bad(format!(
                "a pool of {} bytes leaves fewer than {DATA_MIN_BLOCKS} data blocks",
                pool.pool_size
            ));
        }
        let sb = Superblock {
            version: options.version,
            pool_uuid: pool.uuid,
            journal_entries: entries,
            journal_offset,
            inode_table_offset,
            inode_count: inodes,
            data_offset,
            data_blocks: blocks,
            created_ns: now_ns,
            root_offset: pool.root_offset,
        };
        sb.check_geometry(pool)
            .map_err(|c| FsError::InvalidArgument(c.0))?;
        Ok(sb)
    }

    /// The 256 checksummed bytes.
    pub fn encode(&self) -> [u8; SB_LEN] {
        let mut b = [0u8; SB_LEN];
        b[sb::MAGIC..sb::MAGIC + 8].copy_from_slice(&SB_MAGIC);
        put_u32(&mut b, sb::VERSION, self.version);
        put_u32(&mut b, sb::LEN, SB_LEN as u32);
        b[sb::UUID..sb::UUID + 16].copy_from_slice(&self.pool_uuid);
        put_u32(&mut b, sb::BLOCK_SIZE, BLOCK as u32);
        put_u32(&mut b, sb::JOURNAL_ENTRIES, self.journal_entries);
        put_u64(&mut b, sb::JOURNAL_OFFSET, self.journal_offset);
        put_u64(&mut b, sb::INODE_TABLE, self.inode_table_offset);
        put_u64(&mut b, sb::INODE_COUNT, self.inode_count);
        put_u64(&mut b, sb::DATA_OFFSET, self.data_offset);
        put_u64(&mut b, sb::DATA_BLOCKS, self.data_blocks);
        put_u64(&mut b, sb::ROOT_INO, ROOT_INO);
        put_u32(&mut b, sb::INCOMPAT, 0);
        put_u32(&mut b, sb::COMPAT, 0);
        put_u64(&mut b, sb::CREATED, self.created_ns);
        let crc = crc32fast::hash(&b[..sb::CRC]);
        put_u32(&mut b, sb::CRC, crc);
        b
    }

    /// Decodes and validates one superblock slot against the pool it was read from.
    pub fn decode(b: &[u8; SB_LEN], pool: &Header) -> Result<Self, SbProblem> {
        if b[sb::MAGIC..sb::MAGIC + 8] != SB_MAGIC {
            return Err(if b[..8].iter().all(|&x| x == 0) {
                SbProblem::Blank
            } else {
                SbProblem::Bad(FsError::Corrupted("bad superblock magic".into()))
            });
        }
        let crc = crc32fast::hash(&b[..sb::CRC]);
        if crc != get_u32(b, sb::CRC) {
            return Err(SbProblem::Bad(FsError::Corrupted(
                "superblock checksum mismatch".into(),
            )));
        }
        let version = get_u32(b, sb::VERSION);
        if !(SB_VERSION_MIN..=SB_VERSION).contains(&version) || get_u32(b, sb::LEN) != SB_LEN as u32
        {
            return Err(SbProblem::Bad(FsError::UnsupportedVersion {
                found: version,
            }));
        }
        let incompat = get_u32(b, sb::INCOMPAT);
        if incompat & !KNOWN_INCOMPAT != 0 {
            return Err(SbProblem::Bad(FsError::UnsupportedFeatures {
                bits: incompat,
            }));
        }
        let mut pool_uuid = [0u8; 16];
        pool_uuid.copy_from_slice(&b[sb::UUID..sb::UUID + 16]);
        let sb = Superblock {
            version,
            pool_uuid,
            journal_entries: get_u32(b, sb::JOURNAL_ENTRIES),
            journal_offset: get_u64(b, sb::JOURNAL_OFFSET),
            inode_table_offset: get_u64(b, sb::INODE_TABLE),
            inode_count: get_u64(b, sb::INODE_COUNT),
            data_offset: get_u64(b, sb::DATA_OFFSET),
            data_blocks: get_u64(b, sb::DATA_BLOCKS),
            created_ns: get_u64(b, sb::CREATED),
            root_offset: pool.root_offset,
        };
        let fixed_ok =
            get_u32(b, sb::BLOCK_SIZE) == BLOCK as u32 && get_u64(b, sb::ROOT_INO) == ROOT_INO;
        if !fixed_ok {
            return Err(SbProblem::Bad(FsError::Corrupted(
                "superblock block size or root inode".into(),
            )));
        }
        sb.check_geometry(pool)
            .map_err(|c| SbProblem::Bad(FsError::Corrupted(c.0)))?;
        Ok(sb)
    }

    fn check_geometry(&self, pool: &Header) -> Result<(), Corrupt> {
        let fail = |what: &str| Err(Corrupt::new(format!("superblock geometry: {what}")));
        if self.pool_uuid != pool.uuid {
            return fail("belongs to another pool");
        }
        if pool.root_size < ROOT_SIZE {
            return fail("root region too small");
        }
        if !(JOURNAL_MIN..=JOURNAL_MAX).contains(&self.journal_entries) {
            return fail("journal size");
        }
        if !(2..=1 << 32).contains(&self.inode_count) {
            return fail("inode count");
        }
        if self.journal_offset != pool.arena_offset {
            return fail("journal is not at the arena start");
        }
        if self.inode_table_offset != self.journal_offset + journal_bytes(self.journal_entries) {
            return fail("inode table does not follow the journal");
        }
        let data = self.inode_table_offset + inode_table_bytes(self.inode_count);
        if self.data_offset != data {
            return fail("data area does not follow the inode table");
        }
        if self.checked_inodes() && pool.pool_size > checked::MAX_VALUE {
            return fail("pool offsets past 48 bits do not fit the inodes' checked words");
        }
        if self.data_offset > pool.pool_size
            || self.data_blocks != (pool.pool_size - self.data_offset) / BLOCK
            || self.data_blocks < DATA_MIN_BLOCKS
        {
            return fail("data area does not fill the pool");
        }
        Ok(())
    }

    /// Whether inodes may have an extended-attribute block (version 2 and later).
    pub fn has_xattrs(&self) -> bool {
        self.version >= 2
    }

    /// Whether the inode words that place data or reference other objects are checked
    /// words (version 3 and later; `docs/pmfs-format.md` §5).
    pub fn checked_inodes(&self) -> bool {
        self.version >= 3
    }

    /// Absolute offset of inode `ino`.
    pub fn inode_offset(&self, ino: u64) -> u64 {
        debug_assert!(ino < self.inode_count);
        self.inode_table_offset + ino * INODE_SIZE
    }

    /// One past the last byte of the data area.
    pub fn data_end(&self) -> u64 {
        self.data_offset + self.data_blocks * BLOCK
    }

    /// Absolute offset of the journal word.
    pub fn journal_word(&self) -> u64 {
        self.root_offset + JOURNAL_WORD
    }

    /// Absolute offset of the truncate-list head.
    pub fn truncate_head(&self) -> u64 {
        self.root_offset + TRUNCATE_HEAD
    }

    /// Whether `[off, off + len)` is a block-aligned range inside the data area.
    pub fn is_data_range(&self, off: u64, len: u64) -> bool {
        off >= self.data_offset
            && off.is_multiple_of(BLOCK)
            && off
                .checked_add(len)
                .is_some_and(|end| end <= self.data_end())
    }

    /// Whether the journal may log `[addr, addr + len)`: the two mutable root-region words,
    /// the inode table (inode 0 excluded), or the data area.
    pub fn is_loggable(&self, addr: u64, len: u64) -> bool {
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        let within = |start: u64, stop: u64| addr >= start && end <= stop;
        let word = |w: u64| within(w, w + 8);
        word(self.journal_word())
            || word(self.truncate_head())
            || within(
                self.inode_table_offset + INODE_SIZE,
                self.inode_table_offset + self.inode_count * INODE_SIZE,
            )
            || within(self.data_offset, self.data_end())
    }
}

/// Why one superblock slot did not decode.
#[derive(Debug)]
pub enum SbProblem {
    /// Zero magic: never written.
    Blank,
    /// Anything else.
    Bad(FsError),
}

fn journal_bytes(entries: u32) -> u64 {
    (u64::from(entries) * ENTRY_SIZE).next_multiple_of(BLOCK)
}

fn inode_table_bytes(inodes: u64) -> u64 {
    (inodes * INODE_SIZE).next_multiple_of(BLOCK)
}

pub(crate) fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

pub(crate) fn get_u32(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

pub(crate) fn get_u64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmem::checked;

    fn pool_header(size: u64) -> Header {
        Header::new(LAYOUT, size, ROOT_SIZE).expect("header")
    }

    #[test]
    fn superblock_round_trips_and_every_bit_flip_is_caught() {
        let pool = pool_header(4 << 20);
        let sb = Superblock::plan(&pool, &MkfsOptions::default(), 42).expect("plan");
        assert_eq!(sb.journal_offset, 0x2000);
        assert_eq!(sb.inode_table_offset, 0x2000 + 64 * 1024);
        assert_eq!(sb.inode_count, 256);
        let bytes = sb.encode();
        assert_eq!(Superblock::decode(&bytes, &pool).expect("decode"), sb);
        for bit in 0..SB_LEN * 8 {
            let mut flipped = bytes;
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(Superblock::decode(&flipped, &pool).is_err(), "bit {bit}");
        }
        let other = pool_header(4 << 20);
        assert!(Superblock::decode(&bytes, &other).is_err(), "other pool");
        assert!(matches!(
            Superblock::decode(&[0; SB_LEN], &pool),
            Err(SbProblem::Blank)
        ));
    }

    #[test]
    fn plan_rejects_pools_that_are_too_small() {
        let pool = pool_header(128 * 1024);
        let options = MkfsOptions {
            inodes: Some(4096),
            journal_entries: 1024,
            ..MkfsOptions::default()
        };
        assert!(Superblock::plan(&pool, &options, 0).is_err());
        let options = MkfsOptions {
            inodes: Some(1),
            journal_entries: 64,
            ..MkfsOptions::default()
        };
        assert!(Superblock::plan(&pool, &options, 0).is_err());
    }

    #[test]
    fn checked_words_bind_value_and_address() {
        for (value, addr) in [(0, 0x1100), (1, 0x1140), (checked::MAX_VALUE, 8)] {
            let word = checked::seal(value, addr, "w").expect("48 bits");
            assert_eq!(checked::open(word, addr, "w"), Ok(value));
            assert!(checked::open(word, addr + 64, "w").is_err());
            for bit in 0..64 {
                assert!(checked::open(word ^ (1 << bit), addr, "w").is_err());
            }
        }
        assert!(
            checked::open(0, 0x1100, "w").is_err(),
            "a zero word is invalid"
        );
    }

    /// The stored words of version 1 images, computed independently (CRC-32 of the value's
    /// then the offset's little-endian bytes, low 16 bits on top): the shared checked word
    /// writes the same bytes as the format always did.
    #[test]
    fn checked_words_keep_their_stored_form() {
        assert_eq!(checked::seal(1, 0x1100, "w"), Ok(0x4dbe_0000_0000_0001));
        assert_eq!(checked::seal(0, 0x140, "w"), Ok(0x820c_0000_0000_0000));
    }

    #[test]
    fn loggable_ranges() {
        let pool = pool_header(4 << 20);
        let sb = Superblock::plan(&pool, &MkfsOptions::default(), 0).expect("plan");
        assert!(sb.is_loggable(sb.truncate_head(), 8));
        assert!(!sb.is_loggable(sb.truncate_head(), 9));
        assert!(
            !sb.is_loggable(sb.root_offset, 8),
            "superblock is immutable"
        );
        assert!(!sb.is_loggable(sb.inode_offset(0), 8), "inode 0 is unused");
        assert!(sb.is_loggable(sb.inode_offset(1), 48));
        assert!(sb.is_loggable(sb.data_offset, 4096));
        assert!(!sb.is_loggable(sb.data_end() - 4, 8));
        assert!(!sb.is_loggable(u64::MAX - 2, 8));
    }
}
