//! Offline repair (`ferrite fs fsck --repair`, `docs/pmfs-format.md` §10.1): what one flipped
//! byte can make unmountable, made mountable again with everything else intact.
//!
//! Two phases, every change one journaled transaction, and every decision derived from the
//! media alone, so a crash at any fence leaves a pool the next repair finishes the same way
//! (idempotent: a second repair finds nothing to do).
//!
//! 1. Before the mount (after the superblock fallback and the journal rollback): every live
//!    inode that fails validation, or whose block tree cannot be walked (a damaged tree
//!    node, a pointer out of range, a block another inode already holds), is freed. Its
//!    fields cannot be trusted, so nothing of it is salvaged: a damaged map would read
//!    back zeros or foreign blocks as the file's data.
//! 2. After the mount (whose free-space rebuild returns every block no live inode reaches,
//!    the freed inodes' included: orphaned blocks need no persistent repair): a walk from
//!    the root removes directory records that name a free inode, an inode of another type,
//!    or a directory reached twice; fixes parent links and link counts; and frees every
//!    live inode the walk no longer reaches (the contents of a removed directory). A
//!    directory whose records cannot be read is freed like a bad inode, and the walk runs
//!    again until nothing changes.

use crate::batch::{Batch, commit};
use crate::error::{Corrupt, FsError};
use crate::filesystem::Fs;
use crate::inode::{FileType, Inode, field};
use crate::journal::Journal;
use crate::layout::{BLOCK, BLOCKS_PER_HUGE, ROOT_INO, Superblock};
use crate::options::MountOptions;
use crate::recovery::{Repair, check_layout, read_superblock};
use crate::state::Inner;
use crate::tree::{self, Visit};
use crate::truncate::free_inode_fields;
use crate::{Mutant, dir::DirIndex};
use pmem::{Persist, Pool};
use std::collections::{BTreeSet, HashMap};

/// One change `--repair` made.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FsckRepair {
    /// A superblock slot restored from the other.
    Superblock {
        /// Which.
        repair: Repair,
    },
    /// A live inode freed because its fields or its block tree are damaged.
    InodeRemoved {
        /// The inode.
        ino: u64,
        /// What was wrong.
        why: String,
    },
    /// A directory record removed.
    EntryRemoved {
        /// The directory.
        dir: u64,
        /// The record's name (lossy UTF-8).
        name: String,
        /// The inode it named.
        ino: u64,
        /// Why.
        why: &'static str,
    },
    /// A link count or a directory's parent link set to what the namespace holds.
    LinkFixed {
        /// The inode.
        ino: u64,
        /// What changed.
        what: String,
    },
    /// A live inode no directory reaches any more, freed.
    UnreachableRemoved {
        /// The inode.
        ino: u64,
    },
}

impl std::fmt::Display for FsckRepair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FsckRepair::Superblock { repair } => write!(f, "{repair}"),
            FsckRepair::InodeRemoved { ino, why } => {
                write!(
                    f,
                    "inode {ino} removed (damaged: {why}); its blocks are free space again"
                )
            }
            FsckRepair::EntryRemoved {
                dir,
                name,
                ino,
                why,
            } => write!(
                f,
                "record {name:?} in directory {dir} removed (inode {ino}: {why})"
            ),
            FsckRepair::LinkFixed { ino, what } => write!(f, "inode {ino}: {what}"),
            FsckRepair::UnreachableRemoved { ino } => {
                write!(f, "inode {ino} removed (no directory reaches it)")
            }
        }
    }
}

/// Passes of the namespace walk before the repair gives up (each pass that changes
/// something removes a damaged directory or a record; a handful suffices for one damage).
const MAX_PASSES: usize = 64;

impl<B: Persist> Fs<B> {
    /// Repairs the file system on `pool` and mounts it; returns what changed (empty when
    /// the file system was consistent). Refuses, changing nothing more, what it cannot
    /// repair: an unreadable superblock pair, a damaged journal or root directory.
    pub fn repair(
        pool: Pool<B>,
        options: MountOptions,
    ) -> Result<(Fs<B>, Vec<FsckRepair>), FsError> {
        let mut repairs = match free_damaged_inodes(&pool) {
            Ok(repairs) => repairs,
            Err(error) => {
                pool.mark_unclean_on_drop();
                return Err(error);
            }
        };
        let fs = Fs::mount(pool, options)?;
        // The superblock was repaired (and reported) by the first phase.
        let mut changed = true;
        let mut passes = 0;
        while changed {
            passes += 1;
            if passes > MAX_PASSES {
                fs.abandon();
                return Err(FsError::Corrupted(
                    "the namespace repair does not converge".into(),
                ));
            }
            let before = repairs.len();
            if let Err(error) = fs.repair_namespace(&mut repairs) {
                fs.abandon();
                return Err(error);
            }
            changed = repairs.len() > before;
        }
        fs.pm().durability_point();
        Ok((fs, repairs))
    }

    /// One walk of the namespace from the root (see the module comment); appends what it
    /// changed.
    fn repair_namespace(&self, repairs: &mut Vec<FsckRepair>) -> Result<(), FsError> {
        let mut inner = self.lock();
        let mut names: HashMap<u64, u32> = HashMap::new();
        let mut reached = BTreeSet::from([ROOT_INO]);
        let mut queue = vec![ROOT_INO];
        while let Some(dir) = queue.pop() {
            let dinode = Inode::read(self.pm(), &self.sb, dir)?;
            let index = match DirIndex::load_checking(self.pm(), &self.sb, dir, &dinode, false) {
                Ok(index) => index,
                Err(e) if dir == ROOT_INO => {
                    return Err(FsError::Corrupted(format!(
                        "the root directory's records are damaged ({}); not repairable",
                        e.0
                    )));
                }
                Err(e) => {
                    reached.remove(&dir);
                    self.free_inode(&mut inner, dir, &dinode)?;
                    repairs.push(FsckRepair::InodeRemoved { ino: dir, why: e.0 });
                    continue;
                }
            };
            inner.dirs.remove(&dir);
            let children = self.check_records(&mut inner, dir, index, &mut reached, repairs)?;
            for (ino, kind) in children {
                if kind == FileType::Directory {
                    queue.push(ino);
                } else {
                    *names.entry(ino).or_insert(0) += 1;
                }
            }
        }
        for ino in 1..self.sb.inode_count {
            let inode = Inode::read(self.pm(), &self.sb, ino)?;
            if !inode.is_live() {
                continue;
            }
            let count = names.get(&ino).copied().unwrap_or(0);
            let unreached = match inode.kind() {
                Some(FileType::Directory) => !reached.contains(&ino),
                _ => count == 0,
            };
            if unreached {
                self.free_inode(&mut inner, ino, &inode)?;
                repairs.push(FsckRepair::UnreachableRemoved { ino });
            } else if let Some(end) = self.leaves_past_size(&inode)? {
                if inode.kind() == Some(FileType::Regular) {
                    // e2fsck's choice: the size covers the blocks the file holds (a shrunk
                    // size would hide data; the blocks are the file's own).
                    let mut fixed = inode;
                    fixed.size = end;
                    self.commit_hot(&mut inner, ino, &fixed)?;
                    repairs.push(FsckRepair::LinkFixed {
                        ino,
                        what: format!("size {} set to {end} to cover its blocks", inode.size),
                    });
                } else {
                    self.free_inode(&mut inner, ino, &inode)?;
                    repairs.push(FsckRepair::InodeRemoved {
                        ino,
                        why: format!("blocks past its size {}", inode.size),
                    });
                }
            } else if inode.kind() != Some(FileType::Directory) && inode.nlink != count {
                let mut fixed = inode;
                fixed.nlink = count;
                self.commit_hot(&mut inner, ino, &fixed)?;
                repairs.push(FsckRepair::LinkFixed {
                    ino,
                    what: format!("link count {} set to its {count} names", inode.nlink),
                });
            }
        }
        Ok(())
    }

    /// Removes `dir`'s records that name no live inode of their type or a directory
    /// already reached; fixes the parent links of its subdirectories and its own link
    /// count. Returns the children kept.
    fn check_records(
        &self,
        inner: &mut Inner,
        dir: u64,
        mut index: DirIndex,
        reached: &mut BTreeSet<u64>,
        repairs: &mut Vec<FsckRepair>,
    ) -> Result<Vec<(u64, FileType)>, FsError> {
        let records: Vec<(Vec<u8>, u64, FileType)> = index
            .entries()
            .map(|(_, name, slot)| (name.to_vec(), slot.ino, slot.kind))
            .collect();
        let mut kept = Vec::new();
        for (name, ino, kind) in records {
            let child = (ino != 0 && ino < self.sb.inode_count)
                .then(|| Inode::read(self.pm(), &self.sb, ino))
                .transpose()?;
            let why = match child {
                None => Some("out of range"),
                Some(c) if !c.is_live() => Some("free"),
                Some(c) if c.kind() != Some(kind) => Some("of another type"),
                Some(_) if kind == FileType::Directory && !reached.insert(ino) => {
                    Some("a directory already named elsewhere")
                }
                Some(_) => None,
            };
            if let Some(why) = why {
                let mut batch = Batch::default();
                self.plan_remove(&mut index, &name, &mut batch);
                self.commit(inner, batch).map_err(errno_to_fs)?;
                repairs.push(FsckRepair::EntryRemoved {
                    dir,
                    name: String::from_utf8_lossy(&name).into_owned(),
                    ino,
                    why,
                });
                continue;
            }
            let child = child.expect("checked above");
            if kind == FileType::Directory && child.parent != dir {
                let mut fixed = child;
                fixed.parent = dir;
                let mut batch = Batch::default();
                batch.cold(&self.sb, ino, &fixed, field::PARENT, field::TRUNC_NEXT);
                self.commit(inner, batch).map_err(errno_to_fs)?;
                repairs.push(FsckRepair::LinkFixed {
                    ino,
                    what: format!("parent {} set to {dir}", child.parent),
                });
            }
            kept.push((ino, kind));
        }
        let dinode = Inode::read(self.pm(), &self.sb, dir)?;
        let want = u32::try_from(2 + index.subdirs()).unwrap_or(u32::MAX);
        if dinode.nlink != want {
            let mut fixed = dinode;
            fixed.nlink = want;
            self.commit_hot(inner, dir, &fixed)?;
            repairs.push(FsckRepair::LinkFixed {
                ino: dir,
                what: format!("directory link count {} set to {want}", dinode.nlink),
            });
        }
        inner.dirs.insert(dir, index);
        Ok(kept)
    }

    /// Frees live inode `ino` (one transaction) and returns its blocks.
    fn free_inode(&self, inner: &mut Inner, ino: u64, inode: &Inode) -> Result<(), FsError> {
        let blocks = self.inode_blocks(inode)?;
        let mut freed = *inode;
        free_inode_fields(&mut freed);
        self.commit_hot(inner, ino, &freed)?;
        self.forget_inode(inner, ino, &blocks);
        Ok(())
    }

    /// When `inode` holds a leaf past its size (and may not: no preallocation), the end of
    /// its last leaf.
    fn leaves_past_size(&self, inode: &Inode) -> Result<Option<u64>, FsError> {
        if inode.flags & crate::inode::FLAG_PREALLOC != 0 {
            return Ok(None);
        }
        let mut last = None;
        tree::walk(
            self.pm(),
            &self.sb,
            inode.tree,
            inode.is_huge(),
            &mut |visit| {
                if let Visit::Leaf(leaf, _) = visit {
                    last = last.max(Some(leaf));
                }
                Ok(())
            },
        )?;
        let limit = inode.size.div_ceil(inode.leaf_size());
        Ok(last
            .filter(|&leaf| leaf >= limit)
            .map(|leaf| (leaf + 1) * inode.leaf_size()))
    }

    fn commit_hot(&self, inner: &mut Inner, ino: u64, inode: &Inode) -> Result<(), FsError> {
        let mut batch = Batch::default();
        batch.hot(&self.sb, ino, inode);
        self.commit(inner, batch).map_err(errno_to_fs)
    }
}

fn errno_to_fs(errno: crate::Errno) -> FsError {
    FsError::Corrupted(format!("repair transaction failed: {errno:?}"))
}

/// Phase 1 on the unmounted pool: superblock fallback, journal rollback, then every live
/// inode with damaged fields or an unwalkable tree freed, one transaction each. A block two
/// trees claim (or one tree twice) condemns every claimant but the root: the media cannot
/// tell which map is the damaged one, and keeping either could serve another file's bytes
/// as its own; the root, which cannot be freed, keeps its claim when its records read back
/// whole ([`keep_root_claims`]).
fn free_damaged_inodes<B: Persist>(pool: &Pool<B>) -> Result<Vec<FsckRepair>, FsError> {
    check_layout(pool.header())?;
    let pm = pool.pm();
    let (sb, sb_repairs) = read_superblock(pm, pool.header())?;
    let mut repairs: Vec<FsckRepair> = sb_repairs
        .into_iter()
        .map(|repair| FsckRepair::Superblock { repair })
        .collect();
    let mut journal = Journal::recover(pm, &sb, Mutant::None)?;
    let mut damaged: Vec<(u64, String)> = Vec::new();
    let mut owner = vec![0u64; sb.data_blocks as usize];
    let mut shared: HashMap<u64, u64> = HashMap::new();
    for ino in 1..sb.inode_count {
        // An inode whose checked words fail their checks is damaged like one that fails
        // validation: nothing of it can be trusted (version 3, `docs/pmfs-format.md` §5).
        let inode = match Inode::read(pm, &sb, ino) {
            Ok(inode) => inode,
            Err(damage) => {
                damaged.push((ino, damage.0));
                continue;
            }
        };
        if !inode.is_live() {
            continue;
        }
        match blocks_of(pm, &sb, ino, &inode) {
            Ok(blocks) => {
                for block in blocks {
                    let first = std::mem::replace(&mut owner[block as usize], ino);
                    if first != 0 {
                        shared.entry(first).or_insert(block);
                        shared.entry(ino).or_insert(block);
                    }
                }
            }
            Err(damage) => damaged.push((ino, damage.0)),
        }
    }
    keep_root_claims(pm, &sb, &mut shared)?;
    damaged.extend(
        shared
            .into_iter()
            .map(|(ino, block)| (ino, format!("block {block} claimed by another tree too"))),
    );
    damaged.sort_unstable();
    for (ino, why) in damaged {
        if ino == ROOT_INO {
            return Err(FsError::Corrupted(format!(
                "the root directory is damaged ({why}); not repairable"
            )));
        }
        let mut batch = Batch::default();
        let off = sb.inode_offset(ino);
        batch.log(off, crate::layout::INODE_SIZE);
        batch.set(off, &[0u8; crate::layout::INODE_SIZE as usize]);
        commit(pm, &mut journal, batch)
            .map_err(|_| Corrupt::new("journal too small for an inode"))?;
        repairs.push(FsckRepair::InodeRemoved { ino, why });
    }
    Ok(repairs)
}

/// The root cannot be freed, so when it shares a block with another tree its claim is the
/// one kept, provided its directory records read back whole (a root whose map is the
/// damaged one would show another file's bytes as records). Otherwise nothing is freed and
/// the pool is refused as not repairable.
fn keep_root_claims<B: Persist>(
    pm: &B,
    sb: &Superblock,
    shared: &mut HashMap<u64, u64>,
) -> Result<(), FsError> {
    let Some(block) = shared.remove(&ROOT_INO) else {
        return Ok(());
    };
    let root = Inode::read(pm, sb, ROOT_INO)?;
    match DirIndex::load_checking(pm, sb, ROOT_INO, &root, false) {
        Ok(_) => Ok(()),
        Err(e) => Err(FsError::Corrupted(format!(
            "the root directory is damaged (block {block} claimed by another tree too, and \
             its records: {}); not repairable",
            e.0
        ))),
    }
}

/// Validates `inode` and walks its tree: the data blocks it holds (nodes, leaves, the
/// attribute block), each checked to lie in the data area.
fn blocks_of<B: Persist>(
    pm: &B,
    sb: &Superblock,
    ino: u64,
    inode: &Inode,
) -> Result<Vec<u64>, Corrupt> {
    let kind = inode.validate(sb, ino)?;
    if ino == ROOT_INO && kind != FileType::Directory {
        return Err(Corrupt::new("the root inode is not a directory"));
    }
    let mut runs = Vec::new();
    tree::walk(pm, sb, inode.tree, inode.is_huge(), &mut |visit| {
        runs.push(match visit {
            Visit::Node(off) => (off, 1),
            Visit::Leaf(_, off) if inode.is_huge() => (off, BLOCKS_PER_HUGE),
            Visit::Leaf(_, off) => (off, 1),
        });
        Ok(())
    })?;
    if inode.xattr != 0 {
        let mut block = vec![0u8; BLOCK as usize];
        pm.read(inode.xattr, &mut block);
        crate::xattr::decode(&block, ino)?;
        runs.push((inode.xattr, 1));
    }
    if kind == FileType::Symlink && !(1..BLOCK).contains(&inode.size) {
        return Err(Corrupt::new(format!("symlink of size {}", inode.size)));
    }
    let blocks: Vec<u64> = runs
        .iter()
        .flat_map(|&(off, n)| {
            let first = (off - sb.data_offset) / BLOCK;
            first..first + n
        })
        .collect();
    if let Some(&bad) = blocks.iter().find(|&&b| b >= sb.data_blocks) {
        return Err(Corrupt::new(format!("block {bad} out of range")));
    }
    Ok(blocks)
}
