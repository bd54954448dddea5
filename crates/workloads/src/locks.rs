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

    /// `count` stripes for a workload prepared by `params`; none for one thread, which has
    /// nobody to isolate itself from (its operations then take no lock at all), unless
    /// `params.locks_at_one_thread` asks for them.
    pub fn for_workload(params: &crate::Params, count: usize) -> Self {
        if params.threads <= 1 && !params.locks_at_one_thread {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Params;

    fn params(threads: usize, locks_at_one_thread: bool) -> Params {
        Params {
            threads,
            locks_at_one_thread,
            ..Params::default()
        }
    }

    #[test]
    fn one_thread_takes_no_lock_unless_asked() {
        let alone = StripedLocks::for_workload(&params(1, false), 4);
        assert!(matches!(alone.read(Isolation::External, 7), Held::None));
        assert!(matches!(alone.write(Isolation::External, 7), Held::None));

        let asked = StripedLocks::for_workload(&params(1, true), 4);
        assert!(matches!(asked.read(Isolation::External, 7), Held::Read(_)));
        assert!(matches!(
            asked.write(Isolation::External, 7),
            Held::Write(_)
        ));
        let pair = asked.write_pair(Isolation::External, 1, 2);
        assert!(matches!(pair.0, Held::Write(_)));
    }

    #[test]
    fn several_threads_lock_and_internal_isolation_never_does() {
        let shared = StripedLocks::for_workload(&params(2, false), 4);
        assert!(matches!(shared.read(Isolation::External, 7), Held::Read(_)));
        for locks in [shared, StripedLocks::for_workload(&params(1, true), 4)] {
            assert!(matches!(locks.read(Isolation::Internal, 7), Held::None));
            assert!(matches!(locks.write(Isolation::Internal, 7), Held::None));
        }
    }
}
