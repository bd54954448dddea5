//! Locks that workloads take around transactions when the engine leaves isolation to the
//! caller ([`tx::Isolation::External`]); with internal isolation they are no-ops.

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

    fn stripe(&self, key: u64) -> &RwLock<()> {
        let index = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % self.stripes.len();
        &self.stripes[index]
    }

    /// Shared lock on `key`'s stripe when isolation is external.
    pub fn read(&self, isolation: Isolation, key: u64) -> Held<'_> {
        match isolation {
            Isolation::External => Held::Read(self.stripe(key).read()),
            Isolation::Internal => Held::None,
        }
    }

    /// Exclusive lock on `key`'s stripe when isolation is external.
    pub fn write(&self, isolation: Isolation, key: u64) -> Held<'_> {
        match isolation {
            Isolation::External => Held::Write(self.stripe(key).write()),
            Isolation::Internal => Held::None,
        }
    }

    /// Exclusive locks on the stripes of two keys, taken in a fixed order (no deadlock).
    pub fn write_pair(&self, isolation: Isolation, a: u64, b: u64) -> (Held<'_>, Held<'_>) {
        if isolation == Isolation::Internal {
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
