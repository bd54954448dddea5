//! `mkfs` and mount (`docs/pmfs-format.md` §2, §10): superblock with repair from its copy,
//! journal rollback, truncate list, free-space rebuild. The same mount runs after a clean
//! unmount and after a crash.

use crate::Mutant;
use crate::alloc::Allocator;
use crate::batch::{Batch, commit};
use crate::error::{Corrupt, FsError};
use crate::filesystem::Fs;
use crate::inode::{FileType, Inode, S_IFDIR};
use crate::journal::{Journal, zero_nt};
use crate::layout::{
    BLOCK, BLOCKS_PER_HUGE, HUGE_BLOCK, INODE_SIZE, LAYOUT, MkfsOptions, ROOT_INO, SB_COPY, SB_LEN,
    SB_PRIMARY, SbProblem, Superblock,
};
use crate::options::MountOptions;
use crate::state::Inner;
use crate::tree::{self, Visit};
use crate::truncate::{cut_tree, free_inode_fields, unlink_from_list};
use parking_lot::Mutex;
use pmem::{Header, Persist, Pool, WriteClass, checked};
use std::collections::{BTreeSet, HashMap};

impl<B: Persist> Fs<B> {
    /// Formats a file system on `pool` (created with layout [`LAYOUT`], e.g. with
    /// [`pool_options`](crate::pool_options)) and mounts it. Whatever the pool held is
    /// lost, a file system included. A pool of another layout is
    /// `FsError::Pool(PoolError::WrongLayout)`; bad `mkfs` options are
    /// `FsError::InvalidArgument`.
    ///
    /// Protocol: clear both superblock magics (durably, if set), zero the inode table and
    /// write the root inode (NT), seal an empty truncate list, format the journal (its fence
    /// completes all of it), then write and persist the superblock copy, then the primary,
    /// each with its magic persisted last.
    /// An interrupted `mkfs` mounts as `NotFormatted`, or (after the copy) as the empty file
    /// system.
    pub fn mkfs(
        pool: Pool<B>,
        mkfs: &MkfsOptions,
        options: MountOptions,
    ) -> Result<Fs<B>, FsError> {
        check_layout(pool.header())?;
        let pm = pool.pm();
        let now = options.clock.now();
        let sb = Superblock::plan(pool.header(), mkfs, now)?;
        let (primary, copy) = (sb.root_offset + SB_PRIMARY, sb.root_offset + SB_COPY);
        if pm.read_u64(primary) != 0 || pm.read_u64(copy) != 0 {
            for slot in [primary, copy] {
                pm.write_u64(slot, 0, WriteClass::Meta);
                pm.flush(slot, 8);
            }
            pm.fence();
        }
        zero_nt(pm, sb.inode_table_offset, sb.inode_count * INODE_SIZE);
        let root = Inode {
            mode: S_IFDIR | 0o755,
            nlink: 2,
            parent: ROOT_INO,
            mtime: now,
            ctime: now,
            atime: now,
            btime: now,
            generation: 1,
            uid: mkfs.root_owner.0,
            gid: mkfs.root_owner.1,
            ..Inode::default()
        };
        pm.write_nt(
            sb.inode_offset(ROOT_INO),
            &root.encode(&sb, ROOT_INO)?,
            WriteClass::Meta,
        );
        let head = sb.truncate_head();
        let empty = checked::seal(0, head, "truncate-list head").map_err(Corrupt::from)?;
        pm.write_u64(head, empty, WriteClass::Meta);
        pm.flush(head, 8);
        Journal::format(pm, &sb, 1);
        // Each slot gets its magic last, so a torn slot never carries one: an interrupted
        // mkfs reads as blank (`NotFormatted`), not as a damaged superblock.
        let bytes = sb.encode();
        for slot in [copy, primary] {
            pm.write(slot + 8, &bytes[8..], WriteClass::Meta);
            pm.persist(slot + 8, SB_LEN as u64 - 8);
            pm.write(slot, &bytes[..8], WriteClass::Meta);
            pm.persist(slot, 8);
        }
        Fs::mount(pool, options)
    }

    /// Mounts the file system on `pool`, recovering from a crash if there was one (journal
    /// rollback, truncate list, a damaged superblock slot restored from the other:
    /// [`Fs::repairs`]). A pool of another layout is `FsError::Pool(PoolError::WrongLayout)`,
    /// one never formatted `NotFormatted`, damage that recovery cannot undo `Corrupted`
    /// (see [`Fs::repair`]). On an error the pool is left marked unclean.
    pub fn mount(pool: Pool<B>, options: MountOptions) -> Result<Fs<B>, FsError> {
        match mount_state(&pool, options) {
            Ok((sb, inner, repairs)) => Ok(Fs {
                pool,
                sb,
                options,
                inner: Mutex::new(inner),
                readings: std::sync::atomic::AtomicU64::new(0),
                repairs,
            }),
            Err(error) => {
                if !refused_before_writing(&error) {
                    pool.mark_unclean_on_drop();
                }
                Err(error)
            }
        }
    }
}

/// Whether a mount failed with `error` before it wrote anything (the layout or the
/// superblock pair refused it), so the pool is closed as cleanly as it was opened; after a
/// repair or a recovery started, the pool is left marked unclean.
fn refused_before_writing(error: &FsError) -> bool {
    matches!(
        error,
        FsError::NotFormatted(_)
            | FsError::UnsupportedVersion { .. }
            | FsError::UnsupportedFeatures { .. }
            | FsError::Pool(pmem::PoolError::WrongLayout { .. })
    )
}

/// A pool of another layout (an engine's, an NVthreads heap) is the pool error a
/// `Pool::open(path, LAYOUT, …)` of it gives, not a bad argument.
pub(crate) fn check_layout(header: &Header) -> Result<(), FsError> {
    if header.layout != LAYOUT {
        return Err(FsError::Pool(pmem::PoolError::WrongLayout {
            expected: LAYOUT.to_owned(),
            found: header.layout.clone(),
        }));
    }
    Ok(())
}

/// Something a mount found damaged and repaired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Repair {
    /// The primary superblock was damaged; it was rewritten from the copy.
    PrimarySuperblockFromCopy,
    /// The superblock copy was damaged or stale; it was rewritten from the primary.
    SuperblockCopyFromPrimary,
}

impl std::fmt::Display for Repair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Repair::PrimarySuperblockFromCopy => {
                "primary superblock damaged: restored from its copy"
            }
            Repair::SuperblockCopyFromPrimary => {
                "superblock copy damaged or stale: restored from the primary"
            }
        })
    }
}

fn mount_state<B: Persist>(
    pool: &Pool<B>,
    options: MountOptions,
) -> Result<(Superblock, Inner, Vec<Repair>), FsError> {
    check_layout(pool.header())?;
    let pm = pool.pm();
    let (sb, repairs) = read_superblock(pm, pool.header())?;
    if options.mutant == Mutant::TruncateBeforeRollback {
        cut_listed_before_rollback(pm, &sb);
    }
    let mut journal = Journal::recover(pm, &sb, options.mutant)?;
    process_truncate_list(pm, &sb, &mut journal)?;
    let rebuilt = rebuild(pm, &sb)?;
    let inner = Inner::new(journal, rebuilt.alloc, rebuilt.free_inodes, rebuilt.blocks);
    Ok((sb, inner, repairs))
}

/// Reads the primary superblock, falling back to the copy; repairs whichever is bad and
/// says which.
pub(crate) fn read_superblock<B: Persist>(
    pm: &B,
    header: &Header,
) -> Result<(Superblock, Vec<Repair>), FsError> {
    let (primary, copy) = (
        header.root_offset + SB_PRIMARY,
        header.root_offset + SB_COPY,
    );
    let read = |at: u64| {
        let mut bytes = [0u8; SB_LEN];
        pm.read(at, &mut bytes);
        bytes
    };
    let (p_bytes, c_bytes) = (read(primary), read(copy));
    let repair = |at: u64, bytes: &[u8; SB_LEN]| {
        pm.write(at, bytes, WriteClass::Meta);
        pm.persist(at, SB_LEN as u64);
    };
    match (
        Superblock::decode(&p_bytes, header),
        Superblock::decode(&c_bytes, header),
    ) {
        (Ok(sb), copy_result) => {
            if copy_result.is_err() || c_bytes != p_bytes {
                repair(copy, &p_bytes);
                return Ok((sb, vec![Repair::SuperblockCopyFromPrimary]));
            }
            Ok((sb, Vec::new()))
        }
        (Err(_), Ok(sb)) => {
            repair(primary, &c_bytes);
            Ok((sb, vec![Repair::PrimarySuperblockFromCopy]))
        }
        (Err(primary), Err(copy)) => Err(no_usable_superblock(primary, copy)),
    }
}

/// Why neither superblock slot can be used: a slot this build cannot read (a newer version,
/// unknown incompatible features) says so first, as it is a valid superblock; two blank
/// slots are an unformatted pool; otherwise both slots' problems, named as both (one
/// damaged slot alone is restored from the other, so the message must not read like that).
fn no_usable_superblock(primary: SbProblem, copy: SbProblem) -> FsError {
    let unsupported = |error: &FsError| {
        matches!(
            error,
            FsError::UnsupportedVersion { .. } | FsError::UnsupportedFeatures { .. }
        )
    };
    match (primary, copy) {
        (SbProblem::Blank, SbProblem::Blank) => {
            FsError::NotFormatted("no superblock; never formatted, or mkfs was interrupted")
        }
        (SbProblem::Bad(error), _) if unsupported(&error) => error,
        (_, SbProblem::Bad(error)) if unsupported(&error) => error,
        (primary, copy) => FsError::Corrupted(format!(
            "both superblock slots are damaged (primary: {}; copy: {})",
            slot_problem(&primary),
            slot_problem(&copy)
        )),
    }
}

/// What is wrong with one superblock slot, for [`no_usable_superblock`].
fn slot_problem(problem: &SbProblem) -> String {
    match problem {
        SbProblem::Blank => "blank".to_owned(),
        SbProblem::Bad(FsError::Corrupted(what)) => what.clone(),
        SbProblem::Bad(error) => error.to_string(),
    }
}

impl<B: Persist> Fs<B> {
    /// Reads the superblock of the file system on `pool` and writes nothing (a damaged slot
    /// is not repaired): whether this build can use the pool at all. `NotFormatted`,
    /// `UnsupportedVersion`, `UnsupportedFeatures` and a wrong layout
    /// (`Pool(PoolError::WrongLayout)`) mean it cannot; `Corrupted` that neither slot is
    /// usable.
    pub fn probe(pool: &Pool<B>) -> Result<Superblock, FsError> {
        check_layout(pool.header())?;
        let (pm, header) = (pool.pm(), pool.header());
        let decode = |slot: u64| {
            let mut bytes = [0u8; SB_LEN];
            pm.read(header.root_offset + slot, &mut bytes);
            Superblock::decode(&bytes, header)
        };
        match (decode(SB_PRIMARY), decode(SB_COPY)) {
            (Ok(sb), _) | (_, Ok(sb)) => Ok(sb),
            (Err(primary), Err(copy)) => Err(no_usable_superblock(primary, copy)),
        }
    }
}

/// The recovery-order mutant: cuts the trees of the listed inodes from the state as it is
/// before the journal is rolled back.
fn cut_listed_before_rollback<B: Persist>(pm: &B, sb: &Superblock) {
    let at = sb.truncate_head();
    let Ok(mut ino) = checked::open(pm.read_u64(at), at, "head") else {
        return;
    };
    for _ in 0..sb.inode_count {
        if ino == 0 || ino >= sb.inode_count {
            return;
        }
        let Ok(mut inode) = Inode::read(pm, sb, ino) else {
            return;
        };
        if inode.validate(sb, ino).is_err() {
            return;
        }
        let next = inode.trunc_next;
        let size = inode.trunc_size;
        let _ = cut_tree(pm, sb, ino, &mut inode, size);
        ino = next;
    }
}

/// Finishes every truncate and frees every orphan on the truncate list.
fn process_truncate_list<B: Persist>(
    pm: &B,
    sb: &Superblock,
    journal: &mut Journal,
) -> Result<(), Corrupt> {
    let at = sb.truncate_head();
    for _ in 0..=sb.inode_count {
        let ino = checked::open(pm.read_u64(at), at, "truncate-list head")?;
        if ino == 0 {
            return Ok(());
        }
        if ino >= sb.inode_count {
            return Err(Corrupt::new(format!("truncate-list head {ino}")));
        }
        let mut inode = Inode::read(pm, sb, ino)?;
        if !inode.is_live() {
            return Err(Corrupt::new(format!(
                "free inode {ino} on the truncate list"
            )));
        }
        inode.validate(sb, ino)?;
        let mut batch = Batch::default();
        if inode.nlink == 0 {
            unlink_from_list(pm, sb, ino, &mut inode, &mut batch)?;
            free_inode_fields(&mut inode);
            batch.hot(sb, ino, &inode);
        } else {
            let size = inode.trunc_size;
            cut_tree(pm, sb, ino, &mut inode, size)?;
            unlink_from_list(pm, sb, ino, &mut inode, &mut batch)?;
        }
        commit(pm, journal, batch).map_err(|_| Corrupt::new("journal too small"))?;
    }
    Err(Corrupt::new("truncate list longer than the inode table"))
}

/// What the free-space rebuild produces.
pub(crate) struct Rebuilt {
    pub(crate) alloc: Allocator,
    pub(crate) free_inodes: BTreeSet<u64>,
    pub(crate) blocks: HashMap<u64, u64>,
}

/// Scans the inode table and walks every live inode's tree: the blocks in use (each at most
/// once), the free inodes, and each inode's block count.
pub(crate) fn rebuild<B: Persist>(pm: &B, sb: &Superblock) -> Result<Rebuilt, Corrupt> {
    let mut used = vec![0u64; sb.data_blocks.div_ceil(64) as usize];
    let mut free_inodes = BTreeSet::new();
    let mut blocks = HashMap::new();
    let per_chunk = BLOCK / INODE_SIZE;
    let mut chunk = vec![0u8; BLOCK as usize];
    for ino in 1..sb.inode_count {
        if ino % per_chunk == 0 || ino == 1 {
            let first = ino - ino % per_chunk;
            let n = (sb.inode_count - first).min(per_chunk);
            pm.read(
                sb.inode_offset(first),
                &mut chunk[..(n * INODE_SIZE) as usize],
            );
        }
        let at = ((ino % per_chunk) * INODE_SIZE) as usize;
        let bytes = chunk[at..at + INODE_SIZE as usize].try_into().expect("128");
        let inode = Inode::decode(bytes, sb, ino)?;
        if !inode.is_live() {
            if ino == ROOT_INO {
                return Err(Corrupt::new("the root inode is free"));
            }
            free_inodes.insert(ino);
            continue;
        }
        let kind = inode.validate(sb, ino)?;
        if ino == ROOT_INO && kind != FileType::Directory {
            return Err(Corrupt::new("the root inode is not a directory"));
        }
        let mut count = 0u64;
        let xattr = (inode.xattr != 0).then_some(Visit::Node(inode.xattr));
        let mut mark = |visit| {
            let (off, n) = match visit {
                Visit::Node(off) => (off, 1),
                Visit::Leaf(_, off) if inode.is_huge() => (off, BLOCKS_PER_HUGE),
                Visit::Leaf(_, off) => (off, 1),
            };
            let first = (off - sb.data_offset) / BLOCK;
            for block in first..first + n {
                let (word, bit) = ((block / 64) as usize, block % 64);
                if used[word] & (1 << bit) != 0 {
                    return Err(Corrupt::new(format!(
                        "block {block} referenced twice (second time by inode {ino})"
                    )));
                }
                used[word] |= 1 << bit;
            }
            count += n;
            Ok(())
        };
        tree::walk(pm, sb, inode.tree, inode.is_huge(), &mut mark)
            .map_err(|error| error.of_inode(ino))?;
        if let Some(visit) = xattr {
            mark(visit)?;
        }
        blocks.insert(ino, count);
    }
    let huge_phase = ((HUGE_BLOCK - sb.data_offset % HUGE_BLOCK) % HUGE_BLOCK) / BLOCK;
    let alloc = Allocator::from_used(sb.data_blocks, BLOCKS_PER_HUGE, huge_phase, |b| {
        used[(b / 64) as usize] & (1 << (b % 64)) != 0
    });
    Ok(Rebuilt {
        alloc,
        free_inodes,
        blocks,
    })
}
