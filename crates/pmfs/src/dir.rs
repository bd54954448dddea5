//! Directories (`docs/pmfs-format.md` §7): variable-length records in 4 KiB blocks, and the
//! DRAM index built on first access (name → record, records by position, free room per
//! block). The index plans inserts and deletes; the caller turns the plans into journaled
//! writes and applies them to the index.

use crate::error::{Corrupt, Errno};
use crate::inode::{FileType, Inode};
use crate::layout::{BLOCK, NAME_MAX, Superblock, get_u16, get_u32, get_u64, put_u64};
use pmem::Persist;
use std::collections::{BTreeMap, HashMap};

/// Bytes of a record header.
pub const HEADER: u64 = 16;

/// Bytes a record with a name of `name_len` bytes needs.
pub fn need(name_len: usize) -> u64 {
    HEADER + (name_len as u64).next_multiple_of(8)
}

/// The check value of a live record.
pub fn check_value(ino: u64, file_type: u8, name: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&ino.to_le_bytes());
    hasher.update(&[name.len() as u8, file_type]);
    hasher.update(name);
    hasher.finalize()
}

/// The word at `+0x08` of a record: rec_len, name_len, file_type, check.
pub fn meta_word(rec_len: u64, name_len: usize, file_type: u8, check: u32) -> u64 {
    rec_len | ((name_len as u64) << 16) | (u64::from(file_type) << 24) | (u64::from(check) << 32)
}

/// A live record's bytes: header plus zero-padded name (`need(name.len())` bytes).
pub fn encode(ino: u64, rec_len: u64, kind: FileType, name: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; need(name.len()) as usize];
    let t = kind.dirent_type();
    put_u64(&mut b, 0, ino);
    put_u64(
        &mut b,
        8,
        meta_word(rec_len, name.len(), t, check_value(ino, t, name)),
    );
    b[16..16 + name.len()].copy_from_slice(name);
    b
}

/// A free record's header.
pub fn encode_free(rec_len: u64) -> [u8; HEADER as usize] {
    let mut b = [0u8; HEADER as usize];
    put_u64(&mut b, 8, rec_len);
    b
}

/// Checks a name for a new entry: not empty, not `.` or `..`, no `/` or NUL, ≤ 255 bytes.
pub fn valid_name(name: &[u8]) -> Result<(), Errno> {
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(Errno::EINVAL);
    }
    if name == b"." || name == b".." {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// An entry of the index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Child inode.
    pub ino: u64,
    /// Child type.
    pub kind: FileType,
    /// Position of the record (byte offset in the directory's content).
    pub pos: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Rec {
    rec_len: u64,
    /// Live record: its name.
    name: Option<Box<[u8]>>,
}

impl Rec {
    fn used(&self) -> u64 {
        self.name.as_ref().map_or(0, |n| need(n.len()))
    }
    fn room(&self) -> u64 {
        self.rec_len - self.used()
    }
}

/// Where a new record goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Over the free record at `pos`.
    Free {
        /// Position of the free record.
        pos: u64,
        /// Its length.
        rec_len: u64,
    },
    /// In the slack after the live record at `pos`.
    Slack {
        /// Position of the live record.
        pos: u64,
        /// Bytes the live record uses.
        used: u64,
        /// Its length.
        rec_len: u64,
    },
    /// In a new block appended to the directory.
    NewBlock,
}

/// How a record is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// Merge into the predecessor at `prev` (its new length `rec_len`).
    Merge {
        /// Position of the predecessor.
        prev: u64,
        /// The predecessor's new length.
        rec_len: u64,
    },
    /// First record of its block: set its ino to 0.
    Clear {
        /// Position of the record.
        pos: u64,
    },
}

/// The DRAM index of one directory.
#[derive(Clone, Debug, Default)]
pub struct DirIndex {
    names: HashMap<Box<[u8]>, Slot>,
    recs: BTreeMap<u64, Rec>,
    /// Offset of each directory block.
    blocks: Vec<u64>,
    /// Largest room (free record or slack) per block.
    room: Vec<u64>,
    subdirs: u64,
}

impl DirIndex {
    /// Scans directory `ino` (whose inode is `inode`) and checks every record.
    pub fn load<B: Persist>(
        pm: &B,
        sb: &Superblock,
        ino: u64,
        inode: &Inode,
    ) -> Result<DirIndex, Corrupt> {
        DirIndex::load_checking(pm, sb, ino, inode, true)
    }

    /// [`DirIndex::load`] that, unless `check_targets`, keeps records naming a free inode
    /// or one of another type (for the offline repair, which removes them).
    pub(crate) fn load_checking<B: Persist>(
        pm: &B,
        sb: &Superblock,
        ino: u64,
        inode: &Inode,
        check_targets: bool,
    ) -> Result<DirIndex, Corrupt> {
        let mut index = DirIndex::default();
        let mut bytes = vec![0u8; BLOCK as usize];
        for leaf in 0..inode.size / BLOCK {
            let Some(block) = crate::tree::lookup(pm, sb, inode.tree, false, leaf)? else {
                return Err(Corrupt::new(format!(
                    "directory {ino}: hole at block {leaf}"
                )));
            };
            pm.read(block, &mut bytes);
            index.blocks.push(block);
            index.room.push(0);
            index.scan_block(pm, sb, ino, leaf, &bytes, check_targets)?;
        }
        Ok(index)
    }

    fn scan_block<B: Persist>(
        &mut self,
        pm: &B,
        sb: &Superblock,
        ino: u64,
        leaf: u64,
        bytes: &[u8],
        check_targets: bool,
    ) -> Result<(), Corrupt> {
        let mut at = 0u64;
        while at < BLOCK {
            let pos = leaf * BLOCK + at;
            let fail = |what: &str| {
                Err(Corrupt::new(format!(
                    "directory {ino}, record at {pos}: {what}"
                )))
            };
            if at + HEADER > BLOCK {
                return fail("header crosses the block end");
            }
            let a = at as usize;
            let child = get_u64(bytes, a);
            let rec_len = u64::from(get_u16(bytes, a + 8));
            if rec_len < HEADER || rec_len % 8 != 0 || at + rec_len > BLOCK {
                return fail("bad record length");
            }
            let name = if child == 0 {
                None
            } else {
                let name_len = bytes[a + 10] as usize;
                let file_type = bytes[a + 11];
                if name_len == 0 || need(name_len) > rec_len {
                    return fail("bad name length");
                }
                let name = &bytes[a + 16..a + 16 + name_len];
                if get_u32(bytes, a + 12) != check_value(child, file_type, name) {
                    return fail("check mismatch");
                }
                let Some(kind) = FileType::from_dirent_type(file_type) else {
                    return fail("bad file type");
                };
                if valid_name(name).is_err() || self.names.contains_key(name) {
                    return fail("bad or duplicate name");
                }
                if child >= sb.inode_count {
                    return fail("inode number out of range");
                }
                let Ok(mode) = crate::inode::read_mode(pm, sb, child) else {
                    return fail("names a damaged inode");
                };
                if check_targets && FileType::from_mode(mode) != Some(kind) {
                    return fail("names a free inode or one of another type");
                }
                let slot = Slot {
                    ino: child,
                    kind,
                    pos,
                };
                self.names.insert(name.into(), slot);
                self.subdirs += u64::from(kind == FileType::Directory);
                Some(Box::<[u8]>::from(name))
            };
            self.recs.insert(pos, Rec { rec_len, name });
            at += rec_len;
        }
        self.refresh_room(leaf);
        Ok(())
    }

    fn refresh_room(&mut self, leaf: u64) {
        let start = leaf * BLOCK;
        self.room[leaf as usize] = self
            .recs
            .range(start..start + BLOCK)
            .map(|(_, r)| r.room())
            .max()
            .unwrap_or(0);
    }

    /// The entry named `name`.
    pub fn get(&self, name: &[u8]) -> Option<Slot> {
        self.names.get(name).copied()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the directory has no entries.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Number of subdirectories.
    pub fn subdirs(&self) -> u64 {
        self.subdirs
    }

    /// Directory blocks.
    pub fn block_count(&self) -> u64 {
        self.blocks.len() as u64
    }

    /// Blocks at the end of the directory that hold no live record (a directory can shrink
    /// by these; emptier blocks in the middle are reused by later inserts).
    pub fn trailing_empty_blocks(&self) -> u64 {
        let empty = |leaf: u64| {
            let start = leaf * BLOCK;
            self.recs
                .range(start..start + BLOCK)
                .all(|(_, r)| r.name.is_none())
        };
        (0..self.block_count())
            .rev()
            .take_while(|&leaf| empty(leaf))
            .count() as u64
    }

    /// Absolute offset of position `pos`.
    pub fn abs(&self, pos: u64) -> u64 {
        self.blocks[(pos / BLOCK) as usize] + pos % BLOCK
    }

    /// Entries in position order: (position, name, slot).
    pub fn entries(&self) -> impl Iterator<Item = (u64, &[u8], Slot)> + '_ {
        self.recs.iter().filter_map(|(&pos, rec)| {
            let name = rec.name.as_deref()?;
            Some((pos, name, self.names[name]))
        })
    }

    /// Where a record of `need` bytes fits.
    pub fn place(&self, need: u64) -> Placement {
        let Some(leaf) = self.room.iter().position(|&r| r >= need) else {
            return Placement::NewBlock;
        };
        let start = leaf as u64 * BLOCK;
        for (&pos, rec) in self.recs.range(start..start + BLOCK) {
            if rec.room() < need {
                continue;
            }
            return if rec.name.is_none() {
                Placement::Free {
                    pos,
                    rec_len: rec.rec_len,
                }
            } else {
                Placement::Slack {
                    pos,
                    used: rec.used(),
                    rec_len: rec.rec_len,
                }
            };
        }
        unreachable!("room[{leaf}] promised a record with {need} bytes of room")
    }

    /// Records an insert at `placement` (after its writes are planned). For `NewBlock`, `block`
    /// is the new block's offset.
    pub fn apply_insert(&mut self, placement: Placement, name: &[u8], slot_of: SlotOf, block: u64) {
        let n = need(name.len());
        let pos = match placement {
            Placement::Free { pos, rec_len } => {
                let own = if rec_len - n >= HEADER { n } else { rec_len };
                if own < rec_len {
                    let tail = Rec {
                        rec_len: rec_len - own,
                        name: None,
                    };
                    self.recs.insert(pos + own, tail);
                }
                self.recs.insert(pos, self.live(own, name));
                pos
            }
            Placement::Slack { pos, used, rec_len } => {
                self.recs.get_mut(&pos).expect("record").rec_len = used;
                self.recs
                    .insert(pos + used, self.live(rec_len - used, name));
                pos + used
            }
            Placement::NewBlock => {
                let pos = self.blocks.len() as u64 * BLOCK;
                self.blocks.push(block);
                self.room.push(0);
                self.recs.insert(pos, self.live(n, name));
                self.recs.insert(
                    pos + n,
                    Rec {
                        rec_len: BLOCK - n,
                        name: None,
                    },
                );
                pos
            }
        };
        let slot = Slot {
            ino: slot_of.ino,
            kind: slot_of.kind,
            pos,
        };
        self.subdirs += u64::from(slot.kind == FileType::Directory);
        self.names.insert(name.into(), slot);
        self.refresh_room(pos / BLOCK);
    }

    fn live(&self, rec_len: u64, name: &[u8]) -> Rec {
        Rec {
            rec_len,
            name: Some(name.into()),
        }
    }

    /// How to delete the record of `name` (which must exist).
    pub fn plan_remove(&self, name: &[u8]) -> Removal {
        let slot = self.names[name];
        let block_start = slot.pos - slot.pos % BLOCK;
        let rec_len = self.recs[&slot.pos].rec_len;
        match self.recs.range(block_start..slot.pos).next_back() {
            Some((&prev, p)) => Removal::Merge {
                prev,
                rec_len: p.rec_len + rec_len,
            },
            None => Removal::Clear { pos: slot.pos },
        }
    }

    /// Records the delete of `name` planned by [`DirIndex::plan_remove`].
    pub fn apply_remove(&mut self, name: &[u8], removal: Removal) {
        let slot = self.names.remove(name).expect("entry");
        self.subdirs -= u64::from(slot.kind == FileType::Directory);
        match removal {
            Removal::Merge { prev, rec_len } => {
                self.recs.remove(&slot.pos);
                self.recs.get_mut(&prev).expect("record").rec_len = rec_len;
            }
            Removal::Clear { pos } => self.recs.get_mut(&pos).expect("record").name = None,
        }
        self.refresh_room(slot.pos / BLOCK);
    }

    /// Records that the entry `name` now names another inode (rename over a target).
    pub fn apply_replace(&mut self, name: &[u8], slot_of: SlotOf) {
        let slot = self.names.get_mut(name).expect("entry");
        self.subdirs -= u64::from(slot.kind == FileType::Directory);
        self.subdirs += u64::from(slot_of.kind == FileType::Directory);
        slot.ino = slot_of.ino;
        slot.kind = slot_of.kind;
    }

    /// Records an in-place rename of a record (the mutant's path; never used otherwise).
    pub fn apply_rename_in_place(&mut self, old: &[u8], new: &[u8]) {
        let slot = self.names.remove(old).expect("entry");
        self.recs.get_mut(&slot.pos).expect("record").name = Some(new.into());
        self.names.insert(new.into(), slot);
    }

    /// The word at `+0x08` of the record at `pos`, computed from the index (so it is right
    /// even when the record was written earlier in the same, not yet applied, batch). A free
    /// record's word carries only its length.
    pub fn meta_word(&self, pos: u64) -> u64 {
        let rec = &self.recs[&pos];
        match rec.name.as_deref() {
            None => rec.rec_len,
            Some(name) => {
                let slot = self.names[name];
                let t = slot.kind.dirent_type();
                meta_word(rec.rec_len, name.len(), t, check_value(slot.ino, t, name))
            }
        }
    }

    /// The length of the record at `pos`.
    pub fn rec_len(&self, pos: u64) -> u64 {
        self.recs[&pos].rec_len
    }
}

/// The inode an entry names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotOf {
    /// Inode.
    pub ino: u64,
    /// Type.
    pub kind: FileType,
}

/// A block holding one live record followed by one free record.
pub fn new_block(ino: u64, kind: FileType, name: &[u8]) -> Vec<u8> {
    let n = need(name.len());
    let mut block = vec![0u8; BLOCK as usize];
    block[..n as usize].copy_from_slice(&encode(ino, n, kind, name));
    block[n as usize..(n + HEADER) as usize].copy_from_slice(&encode_free(BLOCK - n));
    block
}

/// Replaces the rec_len of a meta word.
pub fn with_rec_len(word: u64, rec_len: u64) -> u64 {
    (word & !0xFFFF) | rec_len
}

/// A header for `ino` with the other fields of the record at `pos` (rename over a target).
pub fn replaced_header(rec_len: u64, kind: FileType, name: &[u8], ino: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    let t = kind.dirent_type();
    put_u64(&mut b, 0, ino);
    put_u64(
        &mut b,
        8,
        meta_word(rec_len, name.len(), t, check_value(ino, t, name)),
    );
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inode::S_IFREG;
    use crate::layout::{LAYOUT, MkfsOptions, ROOT_SIZE};
    use crashsim::{SimConfig, SimPm};
    use pmem::WriteClass;

    #[test]
    fn record_sizes_and_names() {
        assert_eq!(need(1), 24);
        assert_eq!(need(8), 24);
        assert_eq!(need(9), 32);
        assert_eq!(need(255), 272);
        assert_eq!(valid_name(b"a"), Ok(()));
        assert_eq!(valid_name(&[b'x'; 256]), Err(Errno::ENAMETOOLONG));
        for bad in [&b""[..], b".", b"..", b"a/b", b"a\0"] {
            assert_eq!(valid_name(bad), Err(Errno::EINVAL));
        }
    }

    /// Builds a directory block by planning inserts and deletes on the index, writes the
    /// block, and checks that a fresh scan finds the same entries.
    #[test]
    fn plans_round_trip_through_a_scan() {
        let pool_size = 4 << 20;
        let pm = SimPm::new(pool_size, SimConfig::default());
        let header = pmem::Header::new(LAYOUT, pool_size, ROOT_SIZE).expect("header");
        let sb = Superblock::plan(&header, &MkfsOptions::default(), 0).expect("plan");
        // Make inodes 2..40 live regular files.
        for ino in 2..40 {
            let file = Inode {
                mode: S_IFREG | 0o644,
                nlink: 1,
                ..Inode::default()
            };
            let bytes = file.encode(&sb, ino).expect("fits");
            pm.write(sb.inode_offset(ino), &bytes, WriteClass::Meta);
        }
        let block = sb.data_offset;
        let mut index = DirIndex::default();
        let mut image = vec![0u8; BLOCK as usize];
        let file = |ino| SlotOf {
            ino,
            kind: FileType::Regular,
        };
        let names: Vec<Vec<u8>> = (2..40u64)
            .map(|i| format!("name-{i}").repeat(i as usize % 7 + 1).into_bytes())
            .collect();
        for (i, name) in names.iter().enumerate() {
            let ino = i as u64 + 2;
            let placement = index.place(need(name.len()));
            match placement {
                Placement::NewBlock => {
                    if index.block_count() > 0 {
                        break;
                    }
                    image = new_block(ino, FileType::Regular, name);
                }
                Placement::Free { pos, rec_len } => {
                    let n = need(name.len());
                    let own = if rec_len - n >= HEADER { n } else { rec_len };
                    let p = pos as usize;
                    image[p..p + n as usize].copy_from_slice(&encode(
                        ino,
                        own,
                        FileType::Regular,
                        name,
                    ));
                    if own < rec_len {
                        image[p + own as usize..p + own as usize + 16]
                            .copy_from_slice(&encode_free(rec_len - own));
                    }
                }
                Placement::Slack { pos, used, rec_len } => {
                    let p = pos as usize;
                    let word = get_u64(&image, p + 8);
                    put_u64(&mut image, p + 8, with_rec_len(word, used));
                    let at = (pos + used) as usize;
                    let rec = encode(ino, rec_len - used, FileType::Regular, name);
                    image[at..at + rec.len()].copy_from_slice(&rec);
                }
            }
            index.apply_insert(placement, name, file(ino), block);
            // Delete every third name again.
            if i % 3 == 2 {
                let victim = &names[i - 1];
                let removal = index.plan_remove(victim);
                match removal {
                    Removal::Merge { prev, rec_len } => {
                        let p = prev as usize;
                        let word = get_u64(&image, p + 8);
                        put_u64(&mut image, p + 8, with_rec_len(word, rec_len));
                    }
                    Removal::Clear { pos } => put_u64(&mut image, pos as usize, 0),
                }
                index.apply_remove(victim, removal);
            }
        }
        pm.write(block, &image, WriteClass::Meta);
        let inode = Inode {
            tree: block,
            size: BLOCK,
            mode: crate::inode::S_IFDIR | 0o755,
            nlink: 2,
            parent: 1,
            ..Inode::default()
        };
        let scanned = DirIndex::load(&pm, &sb, 1, &inode).expect("scan");
        let a: Vec<_> = index
            .entries()
            .map(|(p, n, s)| (p, n.to_vec(), s))
            .collect();
        let b: Vec<_> = scanned
            .entries()
            .map(|(p, n, s)| (p, n.to_vec(), s))
            .collect();
        assert!(a.len() > 10);
        assert_eq!(a, b);
        assert_eq!(index.room, scanned.room);
        // Damage: a flipped name byte fails the check.
        let first = a[0].0 as usize;
        pm.write(block + first as u64 + 16, b"#", WriteClass::Meta);
        assert!(DirIndex::load(&pm, &sb, 1, &inode).is_err());
    }
}
