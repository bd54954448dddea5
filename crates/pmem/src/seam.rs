//! The persistence seam: the one interface through which every PM store, flush, fence and
//! non-temporal copy in Ferrite goes.
//!
//! Code above the seam is generic over [`Persist`], so the same engine runs on the native
//! backend ([`crate::Native`]) and on the crash simulator (`crashsim::SimPm`), and every
//! byte it writes is counted in [`crate::Stats`].
//!
//! # Ordering contract (what implementations guarantee, what callers may assume)
//! - A `write` of an 8-byte-aligned 8-byte word is failure-atomic (it persists entirely or
//!   not at all). Nothing larger is failure-atomic: a 16-byte or 64-byte write may persist
//!   in 8-byte pieces.
//! - Writes to the same cache line persist in program order; writes to different lines persist
//!   in any order unless separated by `flush` of the earlier line and a `fence`.
//! - After `flush(range)` followed by `fence()`, every write to `range` issued before the
//!   flush is durable. `persist` is exactly that pair.
//! - A `write_nt` is durable after the next `fence()`, with no `flush` needed; before that
//!   fence, each 8-byte piece of it may or may not have persisted.
//! - Reads return the latest write (the volatile view), durable or not.
//! - Offsets are absolute byte offsets into the pool; `off + len` must not exceed `len()`.
//!   Out-of-range accesses are bugs in the caller and panic: callers validate offsets read
//!   from the media (see [`Persist::check_range`]) before using them.

use crate::Stats;

/// Size of a cache line, the unit of flushing.
pub const CACHE_LINE: u64 = 64;

/// What a PM write is for. Accounting keeps bytes per class, which is how write amplification
/// is split into data, log and metadata traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WriteClass {
    /// Application data written in place.
    User = 0,
    /// Log records: undo/redo entries, commit records, operation logs.
    Log = 1,
    /// Allocator state, pool and engine headers, other metadata.
    Meta = 2,
}

impl WriteClass {
    /// Number of classes (the size of per-class counter arrays).
    pub const COUNT: usize = 3;
    /// All classes, in index order.
    pub const ALL: [WriteClass; Self::COUNT] =
        [WriteClass::User, WriteClass::Log, WriteClass::Meta];

    /// Index into per-class arrays.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Short lower-case name, used in reports.
    pub const fn name(self) -> &'static str {
        match self {
            WriteClass::User => "user",
            WriteClass::Log => "log",
            WriteClass::Meta => "meta",
        }
    }
}

/// The persistence seam. See the module documentation for the ordering contract.
///
/// Implementations take `&self` and must be safe to call from several threads at once on
/// disjoint ranges; callers provide isolation for overlapping ranges (as with any memory).
/// A backend owns its mapping (`'static`), so an engine may share its pool with a
/// background thread.
pub trait Persist: Send + Sync + 'static {
    /// Size of the persistent region in bytes.
    fn len(&self) -> u64;

    /// Whether the region is empty (never true for a pool).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `dst.len()` bytes at `off` into `dst` (the volatile view).
    fn read(&self, off: u64, dst: &mut [u8]);

    /// Ordinary write-back store of `src` at `off`. Not durable until flushed and fenced.
    fn write(&self, off: u64, src: &[u8], class: WriteClass);

    /// Non-temporal (streaming) store of `src` at `off`. Durable at the next fence.
    fn write_nt(&self, off: u64, src: &[u8], class: WriteClass);

    /// Writes back every cache line overlapping `[off, off + len)`.
    fn flush(&self, off: u64, len: u64);

    /// Store fence: orders and completes earlier flushes and non-temporal stores.
    fn fence(&self);

    /// Accounting for this region.
    fn stats(&self) -> &Stats;

    /// A point where the caller declares an operation durable (e.g. a commit returning).
    /// The native backend only counts it (`Stats`); the crash simulator also takes a
    /// crash-point snapshot there.
    fn durability_point(&self) {}

    /// Whether an earlier write-back failed (e.g. `msync` returned an error): the region's
    /// durability can no longer be trusted, and callers should refuse further commits.
    fn is_poisoned(&self) -> bool {
        false
    }

    /// `flush` then `fence`.
    fn persist(&self, off: u64, len: u64) {
        self.flush(off, len);
        self.fence();
    }

    /// Writes one 8-byte little-endian word. When `off` is 8-byte aligned this is a single
    /// failure-atomic store.
    fn write_u64(&self, off: u64, value: u64, class: WriteClass) {
        self.write(off, &value.to_le_bytes(), class);
    }

    /// Reads one 8-byte little-endian word.
    fn read_u64(&self, off: u64) -> u64 {
        let mut word = [0u8; 8];
        self.read(off, &mut word);
        u64::from_le_bytes(word)
    }

    /// Reads one 4-byte little-endian word.
    fn read_u32(&self, off: u64) -> u32 {
        let mut word = [0u8; 4];
        self.read(off, &mut word);
        u32::from_le_bytes(word)
    }

    /// Stores `len` copies of `byte` at `off` (write-back stores, not flushed).
    fn fill(&self, off: u64, len: u64, byte: u8, class: WriteClass) {
        const CHUNK: usize = 4096;
        let buf = [byte; CHUNK];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(CHUNK as u64);
            self.write(off + done, &buf[..n as usize], class);
            done += n;
        }
    }

    /// Whether `[off, off + len)` lies inside the region. Use it to validate offsets read from
    /// the media before passing them to the seam.
    fn check_range(&self, off: u64, len: u64) -> bool {
        off.checked_add(len).is_some_and(|end| end <= self.len())
    }
}

/// Index of the cache line containing byte `off`.
#[inline]
pub const fn line_of(off: u64) -> u64 {
    off / CACHE_LINE
}

/// The cache lines overlapping `[off, off + len)`, as a range of line indexes.
/// Computed from the original address and length, so unaligned heads and tails are covered.
#[inline]
pub fn lines_covering(off: u64, len: u64) -> std::ops::Range<u64> {
    if len == 0 {
        return 0..0;
    }
    line_of(off)..line_of(off + len - 1) + 1
}

/// Panics with a clear message if `[off, off + len)` is outside a region of `size` bytes.
#[inline]
#[track_caller]
pub fn assert_in_bounds(off: u64, len: u64, size: u64) {
    let end = off.checked_add(len);
    assert!(
        end.is_some_and(|end| end <= size),
        "PM access out of bounds: offset {off:#x} + {len} bytes exceeds region of {size} bytes"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn empty_range_covers_no_line() {
        assert_eq!(lines_covering(100, 0), 0..0);
    }

    #[test]
    fn unaligned_tail_is_covered() {
        // 60..68 straddles lines 0 and 1.
        assert_eq!(lines_covering(60, 8), 0..2);
        assert_eq!(lines_covering(64, 64), 1..2);
        assert_eq!(lines_covering(63, 2), 0..2);
    }

    proptest! {
        #[test]
        fn covering_lines_contain_every_byte(off in 0u64..1 << 20, len in 1u64..4096) {
            let lines = lines_covering(off, len);
            // Every byte of the range is in a covered line ...
            for byte in [off, off + len / 2, off + len - 1] {
                prop_assert!(lines.contains(&line_of(byte)));
            }
            // ... and the first and last covered lines each contain a byte of the range.
            prop_assert_eq!(lines.start, off / 64);
            prop_assert_eq!(lines.end - 1, (off + len - 1) / 64);
        }
    }
}
