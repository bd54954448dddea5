//! Locks that workloads take around transactions when the engine leaves isolation to the
//! caller ([`tx::Isolation::External`]); with internal isolation, and in a workload prepared
//! for one thread, they are no-ops.

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use tx::Isolation;

/// A fixed set of reader-writer locks, chosen by hashing a key.
#[derive(Debug)]
pub struct StripedLocks {
    stripes: Vec<RwLock<()>>,
}

/// A held stripe (or nothing, under internal isolation).
#[derive(Debug)]
pub enum Held<'a> {
    /// Shared.
    Read(RwLockReadGuard<'a, ()>),
    /// Exclusive.
    Write(RwLockWriteGuard<'a, ()>),
    /// No lock needed.
    None,
}

impl StripedLocks {
    /// `count` stripes (at least one).
    pub fn new(count: usize) -> Self {
        StripedLocks {
            stripes: (0..count.max(1)).map(|_| RwLock::new(())).collect(),
        }
    }

    /// One lock for the whole structure.
    pub fn global() -> Self {
        Self::new(1)
    }

    /// `count` stripes for a workload run by `threads` threads; none for one thread, which
    /// has nobody to isolate itself from (its operations then take no lock at all).
    pub fn for_threads(threads: usize, count: usize) -> Self {
        if threads <= 1 {
            StripedLocks {
                stripes: Vec::new(),
            }
        } else {
            Self::new(count)
        }
    }

    /// Whether callers need the locks: isolation is theirs and there are stripes.
    #[inline]
    fn needed(&self, isolation: Isolation) -> bool {
        isolation == Isolation::External && !self.stripes.is_empty()
    }

    fn stripe(&self, key: u64) -> &RwLock<()> {
        let index = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % self.stripes.len();
        &self.stripes[index]
    }

    /// Shared lock on `key`'s stripe when the caller must isolate itself.
    pub fn read(&self, isolation: Isolation, key: u64) -> Held<'_> {
        if self.needed(isolation) {
            Held::Read(self.stripe(key).read())
        } else {
            Held::None
        }
    }

    /// Exclusive lock on `key`'s stripe when the caller must isolate itself.
    pub fn write(&self, isolation: Isolation, key: u64) -> Held<'_> {
        if self.needed(isolation) {
            Held::Write(self.stripe(key).write())
        } else {
            Held::None
        }
    }

    /// Exclusive locks on the stripes of two keys, taken in a fixed order (no deadlock).
    pub fn write_pair(&self, isolation: Isolation, a: u64, b: u64) -> (Held<'_>, Held<'_>) {
        if !self.needed(isolation) {
            return (Held::None, Held::None);
        }
        let (first, second) = (self.stripe(a), self.stripe(b));
        if std::ptr::eq(first, second) {
            return (Held::Write(first.write()), Held::None);
        }
        let (low, high) = if (first as *const _) < (second as *const _) {
            (first, second)
        } else {
            (second, first)
        };
        (Held::Write(low.write()), Held::Write(high.write()))
    }
}
