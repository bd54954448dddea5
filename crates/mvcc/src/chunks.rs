//! The DRAM side of the engine: control headers of the versioning unit (64-byte aligned
//! chunks of the pool) and their version chains (TimeStone's TLog), found through a
//! two-level table indexed by chunk number.
//!
//! A chunk gets a control header the first time a transaction locks it for writing; the
//! header starts with one version holding the master's bytes (timestamp 0). Headers live as
//! long as the engine (they are never removed; their chains are trimmed), so a chunk without
//! a header has never been written since `open` and its master is its only version.

use parking_lot::RwLock;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of the versioning unit.
pub const CHUNK: u64 = 64;
/// Marks a version whose commit is not yet durable (the rest is its commit timestamp).
pub const PENDING: u64 = 1 << 63;
/// Chunks per leaf of the table.
const LEAF: u64 = 4096;

/// One version of a chunk.
#[derive(Clone, Debug)]
pub struct Version {
    /// Commit timestamp, with [`PENDING`] set until the commit is durable.
    pub ts: u64,
    /// The chunk's bytes.
    pub data: [u8; CHUNK as usize],
}

/// A chunk's versions and its checkpoint state.
#[derive(Debug)]
pub struct Chain {
    /// Newest first; never empty.
    pub versions: Vec<Version>,
    /// The bytes as of the last durable checkpoint (masters plus CLog).
    pub durable: [u8; CHUNK as usize],
}

/// How a read at a snapshot went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Copied; `true` if the version was the newest.
    Copied(bool),
    /// The version the snapshot needs is still committing: try again soon.
    Pending,
    /// The versions the snapshot needs were reclaimed.
    TooOld,
}

impl Chain {
    /// Copies `dst.len()` bytes at `offset` of the version snapshot `snapshot` sees.
    pub fn read_at(&self, snapshot: u64, offset: usize, dst: &mut [u8]) -> Seen {
        for (i, version) in self.versions.iter().enumerate() {
            let ts = version.ts & !PENDING;
            if ts > snapshot {
                continue;
            }
            if version.ts & PENDING != 0 {
                return Seen::Pending;
            }
            dst.copy_from_slice(&version.data[offset..offset + dst.len()]);
            return Seen::Copied(i == 0);
        }
        Seen::TooOld
    }

    /// Timestamp of the newest version (committed or pending).
    pub fn head_ts(&self) -> u64 {
        self.versions[0].ts & !PENDING
    }

    /// Drops the versions no snapshot at or after `floor` can see. Returns whether only one
    /// version is left.
    pub fn trim(&mut self, floor: u64) -> bool {
        let keep = self
            .versions
            .iter()
            .position(|v| v.ts & PENDING == 0 && v.ts <= floor)
            .map_or(self.versions.len(), |i| i + 1);
        self.versions.truncate(keep);
        self.versions.len() == 1
    }
}

/// A chunk's control header.
#[derive(Debug)]
pub struct Chunk {
    /// The lane (plus one) of the transaction holding the write lock, or 0.
    pub owner: AtomicU64,
    /// Versions and checkpoint state.
    pub chain: RwLock<Chain>,
}

type Leaf = Box<[OnceLock<Box<Chunk>>]>;

/// Control headers by chunk number, and the clean bitmap: a set bit says the chunk's
/// master holds its only version (no writer holds it and no snapshot needs an older one), so
/// readers may read the master directly. A writer clears the bit before changing anything;
/// only write-back sets it, holding the chunk's write lock.
#[derive(Debug)]
pub struct Table {
    leaves: Box<[OnceLock<Leaf>]>,
    clean: Box<[AtomicU64]>,
}

impl Table {
    /// A table for a pool of `pool_len` bytes.
    pub fn new(pool_len: u64) -> Self {
        let chunks = pool_len.div_ceil(CHUNK);
        Table {
            leaves: (0..chunks.div_ceil(LEAF))
                .map(|_| OnceLock::new())
                .collect(),
            clean: (0..chunks.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    /// Whether chunk `index` is marked clean.
    #[inline]
    pub fn is_clean(&self, index: u64) -> bool {
        self.clean[(index / 64) as usize].load(Ordering::Acquire) & (1 << (index % 64)) != 0
    }

    /// Marks chunk `index` clean or not.
    pub fn set_clean(&self, index: u64, clean: bool) {
        let (word, bit) = (&self.clean[(index / 64) as usize], 1u64 << (index % 64));
        if clean {
            word.fetch_or(bit, Ordering::SeqCst);
        } else if word.load(Ordering::SeqCst) & bit != 0 {
            word.fetch_and(!bit, Ordering::SeqCst);
        }
    }

    /// The header of chunk `index`, if it has one.
    #[inline]
    pub fn get(&self, index: u64) -> Option<&Chunk> {
        let leaf = self.leaves.get((index / LEAF) as usize)?.get()?;
        leaf[(index % LEAF) as usize].get().map(|b| &**b)
    }

    /// The header of chunk `index`, created with one version holding `master()` if absent.
    pub fn get_or_create(
        &self,
        index: u64,
        master: impl FnOnce() -> [u8; CHUNK as usize],
    ) -> &Chunk {
        let leaf = self.leaves[(index / LEAF) as usize]
            .get_or_init(|| (0..LEAF).map(|_| OnceLock::new()).collect());
        leaf[(index % LEAF) as usize].get_or_init(|| {
            let data = master();
            Box::new(Chunk {
                owner: AtomicU64::new(0),
                chain: RwLock::new(Chain {
                    versions: vec![Version { ts: 0, data }],
                    durable: data,
                }),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(ts: &[u64]) -> Chain {
        Chain {
            versions: ts
                .iter()
                .map(|&t| Version {
                    ts: t,
                    data: [t as u8; 64],
                })
                .collect(),
            durable: [0; 64],
        }
    }

    #[test]
    fn snapshots_see_the_newest_version_at_or_before_them() {
        let c = chain(&[30, 20, 0]);
        let mut b = [0u8; 1];
        assert_eq!(c.read_at(25, 0, &mut b), Seen::Copied(false));
        assert_eq!(b[0], 20);
        assert_eq!(c.read_at(30, 0, &mut b), Seen::Copied(true));
        assert_eq!(b[0], 30);
        let pending = chain(&[40 | PENDING, 30]);
        assert_eq!(pending.read_at(45, 0, &mut b), Seen::Pending);
        assert_eq!(pending.read_at(35, 0, &mut b), Seen::Copied(false));
        let mut trimmed = chain(&[30, 20, 0]);
        assert!(!trimmed.trim(25));
        assert_eq!(trimmed.versions.len(), 2);
        assert_eq!(trimmed.read_at(10, 0, &mut b), Seen::TooOld);
        assert!(trimmed.trim(35));
    }
}
