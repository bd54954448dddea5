//! The journal batch driver: a namespace or attribute operation plans its change as a
//! [`Batch`] (ranges to log, in-place writes, writes into space that is unreachable if the
//! transaction rolls back), and [`commit`] runs it as one journal transaction
//! (`journal.rs`; `docs/pmfs-format.md` §5).

use crate::error::{Corrupt, Errno};
use crate::inode::Inode;
use crate::journal::Journal;
use crate::layout::Superblock;
use pmem::{Persist, checked};

/// A planned change: ranges to log, then writes in order.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    log: Vec<(u64, u64)>,
    writes: Vec<(u64, Vec<u8>, bool)>,
    /// An inode value that could not be sealed into its checked word: the batch is refused
    /// at commit, before anything is logged or written.
    unsealable: Option<Corrupt>,
}

impl Batch {
    pub(crate) fn log(&mut self, off: u64, len: u64) {
        self.log.push((off, len));
    }

    pub(crate) fn set(&mut self, off: u64, bytes: &[u8]) {
        self.writes.push((off, bytes.to_vec(), false));
    }

    pub(crate) fn set_u64(&mut self, off: u64, value: u64) {
        self.set(off, &value.to_le_bytes());
    }

    /// Logs and sets one word.
    pub(crate) fn word(&mut self, off: u64, value: u64) {
        self.log(off, 8);
        self.set_u64(off, value);
    }

    pub(crate) fn fresh(&mut self, off: u64, bytes: &[u8]) {
        self.writes.push((off, bytes.to_vec(), true));
    }

    /// Logs and rewrites the hot part of inode `ino`.
    pub(crate) fn hot(&mut self, sb: &Superblock, ino: u64, inode: &Inode) {
        let off = sb.inode_offset(ino);
        self.log(off, crate::inode::HOT_LEN);
        match inode.hot(sb, ino) {
            Ok(hot) => self.set(off, &hot),
            Err(error) => self.unsealable = Some(error),
        }
    }

    /// Logs and rewrites bytes `[from, to)` of inode `ino`'s cold part.
    pub(crate) fn cold(&mut self, sb: &Superblock, ino: u64, inode: &Inode, from: u64, to: u64) {
        let off = sb.inode_offset(ino);
        self.log(off + from, to - from);
        match inode.encode_range(sb, ino, from, to) {
            Ok(bytes) => self.set(off + from, &bytes[from as usize..to as usize]),
            Err(error) => self.unsealable = Some(error),
        }
    }

    /// Writes inode `ino`'s cold part (after the hot part) into unreachable-on-rollback
    /// space (a newly allocated inode).
    pub(crate) fn fresh_cold(&mut self, sb: &Superblock, ino: u64, inode: &Inode) {
        let hot = crate::inode::HOT_LEN;
        match inode.encode_range(sb, ino, hot, crate::layout::INODE_SIZE) {
            Ok(bytes) => self.fresh(sb.inode_offset(ino) + hot, &bytes[hot as usize..]),
            Err(error) => self.unsealable = Some(error),
        }
    }

    /// Sets the truncate-list head.
    pub(crate) fn head(&mut self, sb: &Superblock, ino: u64) -> Result<(), Corrupt> {
        let at = sb.truncate_head();
        self.word(at, checked::seal(ino, at, "truncate-list head")?);
        Ok(())
    }
}

/// Runs `batch` as one transaction; a batch holding an inode value that does not fit its
/// checked word is refused (`EOVERFLOW`) before anything is written.
pub(crate) fn commit<B: Persist>(pm: &B, journal: &mut Journal, batch: Batch) -> Result<(), Errno> {
    if batch.unsealable.is_some() {
        return Err(Errno::EOVERFLOW);
    }
    let mut tx = journal.begin(pm);
    if tx.log(&batch.log).is_err() {
        tx.abort();
        return Err(Errno::ENOSPC);
    }
    for (off, bytes, fresh) in &batch.writes {
        if *fresh {
            tx.write_fresh(*off, bytes);
        } else {
            tx.write(*off, bytes);
        }
    }
    tx.commit();
    Ok(())
}
