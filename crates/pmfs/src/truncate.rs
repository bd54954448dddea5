//! The persistent truncate list (`docs/pmfs-format.md` §8): a truncate that cuts blocks and
//! an unlinked file still open are listed first, so a crash in the middle is finished by the
//! next mount; and the freeing of orphans (inodes whose last link and last handle are gone).

use crate::batch::{Batch, commit};
use crate::error::{Corrupt, Errno};
use crate::filesystem::Fs;
use crate::inode::{Inode, field, read_word, seal_word};
use crate::journal::Journal;
use crate::layout::Superblock;
use crate::state::Inner;
use crate::tree;
use pmem::{Persist, WriteClass, checked};

impl<B: Persist> Fs<B> {
    /// The truncate-list head's value.
    pub(crate) fn truncate_head(&self) -> Result<u64, Corrupt> {
        let at = self.sb.truncate_head();
        let head = checked::open(self.pm().read_u64(at), at, "truncate-list head")?;
        if head >= self.sb.inode_count {
            return Err(Corrupt::new(format!("truncate-list head {head}")));
        }
        Ok(head)
    }

    /// Cuts `inode`'s tree to its `trunc_size` (unlogged, idempotent), then unlinks it from
    /// the truncate list (one transaction). Returns the blocks cut, for the allocator.
    pub(crate) fn finish_truncate(
        &self,
        journal: &mut Journal,
        ino: u64,
        inode: &mut Inode,
    ) -> Result<Vec<(u64, u64)>, Errno> {
        let size = inode.trunc_size;
        let freed = cut_tree(self.pm(), &self.sb, ino, inode, size)?;
        let mut batch = Batch::default();
        unlink_from_list(self.pm(), &self.sb, ino, inode, &mut batch)?;
        commit(self.pm(), journal, batch)?;
        Ok(freed)
    }

    /// Frees an inode whose last link and last handle are gone: unlinks it from the truncate
    /// list and frees it, one transaction; its blocks go to the allocator.
    pub(crate) fn free_orphan(
        &self,
        inner: &mut Inner,
        ino: u64,
        inode: &Inode,
    ) -> Result<(), Errno> {
        let blocks = self.inode_blocks(inode)?;
        let mut batch = Batch::default();
        let mut updated = *inode;
        unlink_from_list(self.pm(), &self.sb, ino, &mut updated, &mut batch)?;
        free_inode_fields(&mut updated);
        batch.hot(&self.sb, ino, &updated);
        self.commit(inner, batch)?;
        self.forget_inode(inner, ino, &blocks);
        Ok(())
    }

    /// DRAM bookkeeping after an inode was freed on the media.
    pub(crate) fn forget_inode(&self, inner: &mut Inner, ino: u64, blocks: &[(u64, u64)]) {
        inner.free_runs(&self.sb, blocks);
        inner.blocks.remove(&ino);
        inner.dirs.remove(&ino);
        // A number still held by a handle or the kernel is reused only after the last
        // release or forget.
        if !inner.open.contains_key(&ino) && !inner.pins.contains_key(&ino) {
            inner.free_inodes.insert(ino);
        }
    }
}

/// Sets the fields of a freed inode (mode 0, no tree, no links).
pub(crate) fn free_inode_fields(inode: &mut Inode) {
    inode.mode = 0;
    inode.tree = 0;
    inode.size = 0;
    inode.nlink = 0;
}

/// Clears `inode`'s tree past `size` (and the root word when nothing is kept), persists the
/// clears. Idempotent.
pub(crate) fn cut_tree<B: Persist>(
    pm: &B,
    sb: &Superblock,
    ino: u64,
    inode: &mut Inode,
    size: u64,
) -> Result<Vec<(u64, u64)>, Corrupt> {
    let keep = size.div_ceil(inode.leaf_size());
    let freed = tree::cut(pm, sb, inode.tree, inode.is_huge(), keep)?;
    if keep == 0 && inode.tree != 0 {
        let at = sb.inode_offset(ino) + field::TREE;
        pm.write_u64(at, seal_word(sb, ino, field::TREE, 0)?, WriteClass::Meta);
        pm.flush(at, 8);
        inode.tree = 0;
    }
    pm.fence();
    Ok(freed)
}

/// Adds to `batch` the stores that unlink `ino` from the truncate list (and clear its list
/// fields in `inode`).
pub(crate) fn unlink_from_list<B: Persist>(
    pm: &B,
    sb: &Superblock,
    ino: u64,
    inode: &mut Inode,
    batch: &mut Batch,
) -> Result<(), Corrupt> {
    let at = sb.truncate_head();
    let head = checked::open(pm.read_u64(at), at, "truncate-list head")?;
    let next = inode.trunc_next;
    if head == ino {
        batch.head(sb, next)?;
    } else {
        let mut prev = head;
        let mut steps = 0;
        loop {
            if prev == 0 || prev >= sb.inode_count || steps > sb.inode_count {
                return Err(Corrupt::new(format!(
                    "inode {ino} is not on the truncate list"
                )));
            }
            let prev_next = read_word(pm, sb, prev, field::TRUNC_NEXT)?;
            if prev_next == ino {
                let stored = seal_word(sb, prev, field::TRUNC_NEXT, next)?;
                batch.word(sb.inode_offset(prev) + field::TRUNC_NEXT, stored);
                break;
            }
            prev = prev_next;
            steps += 1;
        }
    }
    (inode.trunc_next, inode.trunc_size) = (0, 0);
    batch.cold(sb, ino, inode, field::TRUNC_NEXT, field::GENERATION);
    Ok(())
}
