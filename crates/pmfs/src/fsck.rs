//! The consistency checker (`docs/pmfs-format.md` §10): an independent pass over the media
//! that the crash tests run after every recovery. It re-derives everything from PM and
//! compares it with the DRAM state.

use crate::dir::DirIndex;
use crate::error::Corrupt;
use crate::filesystem::Fs;
use crate::inode::{FileType, Inode};
use crate::layout::{BLOCK, BLOCKS_PER_HUGE, ROOT_INO};
use crate::tree::{self, Visit};
use pmem::{Persist, checked};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What fsck counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsckReport {
    /// Live inodes.
    pub inodes: u64,
    /// Regular files.
    pub files: u64,
    /// Directories.
    pub dirs: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// FIFOs, devices and sockets.
    pub specials: u64,
    /// Unlinked files still open.
    pub orphans: u64,
    /// Data blocks in use.
    pub used_blocks: u64,
    /// Free data blocks.
    pub free_blocks: u64,
}

impl<B: Persist> Fs<B> {
    /// Checks the whole file system; the first problem found is the error.
    pub fn fsck(&self) -> Result<FsckReport, Corrupt> {
        let inner = self.lock();
        let (pm, sb) = (self.pm(), &self.sb);
        let mut report = FsckReport::default();
        let listed = self.truncate_list()?;
        let mut live: BTreeMap<u64, (Inode, FileType)> = BTreeMap::new();
        let mut used = vec![false; sb.data_blocks as usize];
        for ino in 1..sb.inode_count {
            let inode = Inode::read(pm, sb, ino)?;
            if !inode.is_live() {
                if !inner.free_inodes.contains(&ino)
                    && !inner.open.contains_key(&ino)
                    && !inner.pins.contains_key(&ino)
                {
                    return Err(Corrupt::new(format!(
                        "free inode {ino} not in the free list"
                    )));
                }
                continue;
            }
            if inner.free_inodes.contains(&ino) {
                return Err(Corrupt::new(format!("live inode {ino} in the free list")));
            }
            let kind = inode.validate(sb, ino)?;
            let count = self.mark_tree(ino, &inode, &mut used, listed.contains(&ino))?;
            if inner.blocks.get(&ino).copied().unwrap_or(0) != count {
                return Err(Corrupt::new(format!(
                    "inode {ino}: block count out of date"
                )));
            }
            live.insert(ino, (inode, kind));
        }
        // Blocks cut from a mapped file stay allocated, unreachable, until its last unmap.
        for &(off, n) in inner.deferred.values().flatten() {
            let first = (off - sb.data_offset) / BLOCK;
            for block in first..first + n {
                if std::mem::replace(&mut used[block as usize], true) {
                    return Err(Corrupt::new(format!(
                        "block {block} deferred for a mapping but still referenced"
                    )));
                }
            }
        }
        for (block, &in_use) in used.iter().enumerate() {
            if in_use == inner.alloc.is_free(block as u64) {
                let what = if in_use { "in use but free" } else { "leaked" };
                return Err(Corrupt::new(format!("data block {block} {what}")));
            }
        }
        let refs = self.check_namespace(&live, &inner.dirs)?;
        for (&ino, (inode, kind)) in &live {
            let found = refs.get(&ino).copied().unwrap_or(0);
            report.inodes += 1;
            match kind {
                FileType::Directory => report.dirs += 1,
                FileType::Regular => report.files += 1,
                FileType::Symlink => report.symlinks += 1,
                _ => report.specials += 1,
            }
            if *kind == FileType::Directory {
                if inode.nlink == 0 && found == 0 {
                    if !listed.contains(&ino) || !inner.open.contains_key(&ino) {
                        return Err(Corrupt::new(format!(
                            "removed directory {ino} not open and listed"
                        )));
                    }
                    report.orphans += 1;
                    continue;
                }
                if ino != ROOT_INO && found != 1 {
                    return Err(Corrupt::new(format!("directory {ino} has {found} names")));
                }
                continue;
            }
            if inode.nlink == 0 {
                if !listed.contains(&ino) || !inner.open.contains_key(&ino) {
                    return Err(Corrupt::new(format!(
                        "unlinked inode {ino} not open and listed"
                    )));
                }
                report.orphans += 1;
            }
            if u64::from(inode.nlink) != found {
                return Err(Corrupt::new(format!(
                    "inode {ino}: link count {} but {found} names",
                    inode.nlink
                )));
            }
            if *kind == FileType::Symlink && !(1..BLOCK).contains(&inode.size) {
                return Err(Corrupt::new(format!(
                    "symlink {ino} of size {}",
                    inode.size
                )));
            }
        }
        for &ino in &listed {
            if live.get(&ino).is_none_or(|(i, _)| i.nlink != 0) {
                return Err(Corrupt::new(format!(
                    "inode {ino} left on the truncate list"
                )));
            }
        }
        report.used_blocks = used.iter().filter(|&&u| u).count() as u64;
        report.free_blocks = inner.alloc.free_blocks();
        Ok(report)
    }

    /// The inodes on the truncate list, checked for length and liveness.
    fn truncate_list(&self) -> Result<BTreeSet<u64>, Corrupt> {
        let (pm, sb) = (self.pm(), &self.sb);
        let at = sb.truncate_head();
        let mut ino = checked::open(pm.read_u64(at), at, "truncate-list head")?;
        let mut listed = BTreeSet::new();
        while ino != 0 {
            if ino >= sb.inode_count || !listed.insert(ino) {
                return Err(Corrupt::new(format!(
                    "truncate list: bad or repeated inode {ino}"
                )));
            }
            let inode = Inode::read(pm, sb, ino)?;
            if !inode.is_live() {
                return Err(Corrupt::new(format!(
                    "free inode {ino} on the truncate list"
                )));
            }
            ino = inode.trunc_next;
        }
        Ok(listed)
    }

    /// Marks an inode's blocks (each block once across all inodes); checks that no leaf lies
    /// past its size unless it is on the truncate list. Returns the block count.
    fn mark_tree(
        &self,
        ino: u64,
        inode: &Inode,
        used: &mut [bool],
        listed: bool,
    ) -> Result<u64, Corrupt> {
        let sb = &self.sb;
        let limit = inode.size.div_ceil(inode.leaf_size());
        let mut count = 0;
        if inode.xattr != 0 {
            self.read_attrs(ino, inode)?;
            let block = (inode.xattr - sb.data_offset) / BLOCK;
            if std::mem::replace(&mut used[block as usize], true) {
                return Err(Corrupt::new(format!("block {block} referenced twice")));
            }
            count += 1;
        }
        tree::walk(self.pm(), sb, inode.tree, inode.is_huge(), &mut |visit| {
            let (off, n) = match visit {
                Visit::Node(off) => (off, 1),
                Visit::Leaf(leaf, off) => {
                    let prealloc = inode.flags & crate::inode::FLAG_PREALLOC != 0;
                    if leaf >= limit && !listed && !prealloc {
                        return Err(Corrupt::new(format!(
                            "inode {ino}: leaf {leaf} past its size"
                        )));
                    }
                    (off, if inode.is_huge() { BLOCKS_PER_HUGE } else { 1 })
                }
            };
            let first = (off - sb.data_offset) / BLOCK;
            for block in first..first + n {
                if std::mem::replace(&mut used[block as usize], true) {
                    return Err(Corrupt::new(format!("block {block} referenced twice")));
                }
            }
            count += n;
            Ok(())
        })?;
        Ok(count)
    }

    /// Walks the directory tree from the root: every record names a live inode of its type,
    /// every directory is reached once with the right parent and link count, cached indexes
    /// agree with the media. Returns the names per inode.
    fn check_namespace(
        &self,
        live: &BTreeMap<u64, (Inode, FileType)>,
        cached: &HashMap<u64, DirIndex>,
    ) -> Result<HashMap<u64, u64>, Corrupt> {
        let mut refs: HashMap<u64, u64> = HashMap::new();
        let mut seen = BTreeSet::from([ROOT_INO]);
        let mut queue = vec![ROOT_INO];
        while let Some(dir) = queue.pop() {
            let Some((inode, FileType::Directory)) = live.get(&dir) else {
                return Err(Corrupt::new(format!(
                    "directory {dir} is not a live directory"
                )));
            };
            let index = DirIndex::load(self.pm(), &self.sb, dir, inode)?;
            if let Some(cache) = cached.get(&dir) {
                let media: Vec<_> = index
                    .entries()
                    .map(|(p, n, s)| (p, n.to_vec(), s))
                    .collect();
                let dram: Vec<_> = cache
                    .entries()
                    .map(|(p, n, s)| (p, n.to_vec(), s))
                    .collect();
                if media != dram {
                    return Err(Corrupt::new(format!(
                        "directory {dir}: DRAM index is stale"
                    )));
                }
            }
            if u64::from(inode.nlink) != 2 + index.subdirs() {
                return Err(Corrupt::new(format!(
                    "directory {dir}: link count {} with {} subdirectories",
                    inode.nlink,
                    index.subdirs()
                )));
            }
            for (_, _, slot) in index.entries() {
                let Some((child, kind)) = live.get(&slot.ino) else {
                    return Err(Corrupt::new(format!(
                        "directory {dir} names free inode {}",
                        slot.ino
                    )));
                };
                if *kind != slot.kind {
                    return Err(Corrupt::new(format!("inode {}: type mismatch", slot.ino)));
                }
                *refs.entry(slot.ino).or_insert(0) += 1;
                if *kind == FileType::Directory {
                    if !seen.insert(slot.ino) {
                        return Err(Corrupt::new(format!(
                            "directory {} reached twice",
                            slot.ino
                        )));
                    }
                    if child.parent != dir {
                        return Err(Corrupt::new(format!(
                            "directory {}: wrong parent",
                            slot.ino
                        )));
                    }
                    queue.push(slot.ino);
                }
            }
        }
        if let Some((&lost, _)) = live.iter().find(|(ino, (inode, kind))| {
            // A removed directory still open has no name (checked by the caller).
            *kind == FileType::Directory && inode.nlink != 0 && !seen.contains(ino)
        }) {
            return Err(Corrupt::new(format!("directory {lost} is unreachable")));
        }
        Ok(refs)
    }
}
