//! Per-pool, per-thread accounting of PM traffic, cheap enough to stay on in benchmarks.
//!
//! Each thread owns one cache-padded slot of counters in every pool's [`Stats`]. A thread
//! updates its own slot with a plain load and store (no locked read-modify-write, which on
//! x86 would also act as a full fence and distort what is being measured). Threads beyond
//! [`MAX_THREAD_SLOTS`] share an overflow slot, updated with atomic adds.

use crate::seam::WriteClass;
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Threads that get a slot of their own; later threads share the overflow slot.
pub const MAX_THREAD_SLOTS: usize = 128;
const OVERFLOW_SLOT: usize = MAX_THREAD_SLOTS;

/// Free-list of slot indexes, shared by all pools in the process.
static FREE_SLOTS: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static NEXT_SLOT: Mutex<usize> = Mutex::new(0);

struct ThreadSlot {
    index: usize,
}

impl ThreadSlot {
    fn acquire() -> Self {
        if let Some(index) = FREE_SLOTS.lock().pop() {
            return ThreadSlot { index };
        }
        let mut next = NEXT_SLOT.lock();
        let index = if *next < MAX_THREAD_SLOTS {
            *next
        } else {
            OVERFLOW_SLOT
        };
        if index != OVERFLOW_SLOT {
            *next += 1;
        }
        ThreadSlot { index }
    }
}

impl Drop for ThreadSlot {
    fn drop(&mut self) {
        if self.index != OVERFLOW_SLOT {
            FREE_SLOTS.lock().push(self.index);
        }
    }
}

thread_local! {
    static SLOT: ThreadSlot = ThreadSlot::acquire();
}

/// The calling thread's slot index (stable for the thread's lifetime).
pub fn thread_slot() -> usize {
    SLOT.try_with(|slot| slot.index).unwrap_or(OVERFLOW_SLOT)
}

#[derive(Default)]
struct Slot {
    stored_bytes: [AtomicU64; WriteClass::COUNT],
    nt_bytes: [AtomicU64; WriteClass::COUNT],
    flushed_lines: AtomicU64,
    fences: AtomicU64,
    user_bytes: AtomicU64,
    durability_points: AtomicU64,
}

/// Counters of one pool (or any persistent region), split by thread.
pub struct Stats {
    slots: Box<[CachePadded<Slot>]>,
}

impl std::fmt::Debug for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stats")
            .field("total", &self.snapshot())
            .finish()
    }
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

impl Stats {
    /// Zeroed counters.
    pub fn new() -> Self {
        let slots = (0..=MAX_THREAD_SLOTS)
            .map(|_| CachePadded::new(Slot::default()))
            .collect();
        Stats { slots }
    }

    #[inline]
    fn bump(&self, pick: impl FnOnce(&Slot) -> &AtomicU64, n: u64) {
        let index = thread_slot();
        let counter = pick(&self.slots[index]);
        if index == OVERFLOW_SLOT {
            counter.fetch_add(n, Relaxed);
        } else {
            // Only this thread writes this slot, so load + store cannot lose an update.
            counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
        }
    }

    /// Counts `n` bytes of write-back stores of class `class`.
    #[inline]
    pub fn record_store(&self, class: WriteClass, n: u64) {
        self.bump(|s| &s.stored_bytes[class.index()], n);
    }

    /// Counts `n` bytes of non-temporal stores of class `class`.
    #[inline]
    pub fn record_nt_store(&self, class: WriteClass, n: u64) {
        self.bump(|s| &s.nt_bytes[class.index()], n);
    }

    /// Counts `lines` cache lines written back by flush instructions.
    #[inline]
    pub fn record_flush(&self, lines: u64) {
        self.bump(|s| &s.flushed_lines, lines);
    }

    /// Counts one fence.
    #[inline]
    pub fn record_fence(&self) {
        self.bump(|s| &s.fences, 1);
    }

    /// Counts `n` bytes the application asked to modify (the denominator of write
    /// amplification). Called by the transaction layer, not by backends.
    #[inline]
    pub fn record_user_bytes(&self, n: u64) {
        self.bump(|s| &s.user_bytes, n);
    }

    /// Counts one declared durability point (one completed durable operation).
    #[inline]
    pub fn record_durability_point(&self) {
        self.bump(|s| &s.durability_points, 1);
    }

    /// Sum over all threads.
    pub fn snapshot(&self) -> Counters {
        self.slots.iter().fold(Counters::default(), |acc, slot| {
            acc.plus(&Counters::of(slot))
        })
    }

    /// Counters of each thread slot that has recorded anything, by slot index.
    pub fn per_thread(&self) -> Vec<(usize, Counters)> {
        self.slots
            .iter()
            .enumerate()
            .map(|(index, slot)| (index, Counters::of(slot)))
            .filter(|(_, counters)| *counters != Counters::default())
            .collect()
    }
}

/// A plain copy of counters, for reports and deltas.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Write-back store bytes per [`WriteClass`] (user, log, meta).
    pub stored_bytes: [u64; WriteClass::COUNT],
    /// Non-temporal store bytes per [`WriteClass`].
    pub nt_bytes: [u64; WriteClass::COUNT],
    /// Cache lines written back by flush instructions.
    pub flushed_lines: u64,
    /// Store fences.
    pub fences: u64,
    /// Bytes the application asked to modify.
    pub user_bytes: u64,
    /// Declared durability points (completed durable operations, e.g. commits).
    pub durability_points: u64,
}

impl Counters {
    fn of(slot: &Slot) -> Self {
        let load = |counter: &AtomicU64| counter.load(Relaxed);
        Counters {
            stored_bytes: slot.stored_bytes.each_ref().map(load),
            nt_bytes: slot.nt_bytes.each_ref().map(load),
            flushed_lines: load(&slot.flushed_lines),
            fences: load(&slot.fences),
            user_bytes: load(&slot.user_bytes),
            durability_points: load(&slot.durability_points),
        }
    }

    fn zip(&self, other: &Self, op: impl Fn(u64, u64) -> u64) -> Self {
        let pair = |a: [u64; 3], b: [u64; 3]| [op(a[0], b[0]), op(a[1], b[1]), op(a[2], b[2])];
        Counters {
            stored_bytes: pair(self.stored_bytes, other.stored_bytes),
            nt_bytes: pair(self.nt_bytes, other.nt_bytes),
            flushed_lines: op(self.flushed_lines, other.flushed_lines),
            fences: op(self.fences, other.fences),
            user_bytes: op(self.user_bytes, other.user_bytes),
            durability_points: op(self.durability_points, other.durability_points),
        }
    }

    /// Element-wise sum.
    pub fn plus(&self, other: &Self) -> Self {
        self.zip(other, u64::wrapping_add)
    }

    /// Element-wise difference `self - earlier` (counters only grow).
    pub fn since(&self, earlier: &Self) -> Self {
        self.zip(earlier, u64::wrapping_sub)
    }

    /// All bytes stored to PM (write-back and non-temporal, every class).
    pub fn pm_bytes(&self) -> u64 {
        self.stored_bytes.iter().chain(&self.nt_bytes).sum()
    }

    /// Bytes stored to PM of one class (write-back plus non-temporal).
    pub fn class_bytes(&self, class: WriteClass) -> u64 {
        self.stored_bytes[class.index()] + self.nt_bytes[class.index()]
    }

    /// All non-temporal bytes.
    pub fn nt_total(&self) -> u64 {
        self.nt_bytes.iter().sum()
    }

    /// Bytes that reach the media at cache-line granularity: flushed lines plus non-temporal
    /// bytes (rounded up to whole lines in total). An estimate of media traffic under ADR; it
    /// misses lines written back by eviction, and under eADR it counts no flushed lines.
    pub fn media_bytes(&self) -> u64 {
        self.flushed_lines * crate::CACHE_LINE
            + self.nt_total().div_ceil(crate::CACHE_LINE) * crate::CACHE_LINE
    }

    /// Write amplification: PM bytes stored per user byte requested (`None` without user bytes).
    pub fn write_amplification(&self) -> Option<f64> {
        (self.user_bytes > 0).then(|| self.pm_bytes() as f64 / self.user_bytes as f64)
    }

    /// Write amplification at cache-line granularity ([`Counters::media_bytes`] per user byte).
    pub fn media_write_amplification(&self) -> Option<f64> {
        (self.user_bytes > 0).then(|| self.media_bytes() as f64 / self.user_bytes as f64)
    }

    /// `value / per`, or `None` when `per` is zero (e.g. fences per transaction).
    pub fn ratio(value: u64, per: u64) -> Option<f64> {
        (per > 0).then(|| value as f64 / per as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_class_and_derives_write_amplification() {
        let stats = Stats::new();
        stats.record_user_bytes(8);
        stats.record_store(WriteClass::User, 8);
        stats.record_store(WriteClass::Log, 16);
        stats.record_nt_store(WriteClass::Log, 64);
        stats.record_flush(2);
        stats.record_fence();
        let c = stats.snapshot();
        assert_eq!(c.pm_bytes(), 88);
        assert_eq!(c.class_bytes(WriteClass::Log), 80);
        assert_eq!(c.write_amplification(), Some(11.0));
        assert_eq!(c.media_bytes(), 2 * 64 + 64);
        assert_eq!(c.fences, 1);
    }

    #[test]
    fn threads_count_into_their_own_slots_and_sum() {
        let stats = std::sync::Arc::new(Stats::new());
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let stats = stats.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        stats.record_fence();
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().expect("counting thread panicked");
        }
        assert_eq!(stats.snapshot().fences, 4000);
        assert!(stats.per_thread().iter().all(|(_, c)| c.fences % 1000 == 0));
    }

    /// More threads than slots, some alive at once (the overflow slot shares atomics) and
    /// some after others exited (their slots are reused): no count is lost or doubled.
    #[test]
    fn reused_and_overflow_slots_lose_no_count() {
        let stats = std::sync::Arc::new(Stats::new());
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(MAX_THREAD_SLOTS + 20));
        for _wave in 0..3 {
            let handles: Vec<_> = (0..MAX_THREAD_SLOTS + 20)
                .map(|_| {
                    let (stats, barrier) = (stats.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        // Every thread of the wave holds its slot before any counts.
                        stats.record_fence();
                        barrier.wait();
                        for _ in 0..200 {
                            stats.record_flush(2);
                            stats.record_store(WriteClass::Log, 3);
                        }
                    })
                })
                .collect();
            for handle in handles {
                handle.join().expect("counting thread panicked");
            }
        }
        let threads = 3 * (MAX_THREAD_SLOTS as u64 + 20);
        let total = stats.snapshot();
        assert_eq!(total.fences, threads);
        assert_eq!(total.flushed_lines, threads * 400);
        assert_eq!(total.stored_bytes[WriteClass::Log.index()], threads * 600);
        let overflow = stats
            .per_thread()
            .into_iter()
            .find(|(slot, _)| *slot == OVERFLOW_SLOT)
            .map(|(_, counters)| counters.fences);
        assert!(
            overflow.is_some_and(|fences| fences >= 3 * 20),
            "threads past the {MAX_THREAD_SLOTS} slots shared the overflow slot: {overflow:?}"
        );
    }

    #[test]
    fn since_gives_deltas() {
        let stats = Stats::new();
        stats.record_fence();
        let before = stats.snapshot();
        stats.record_fence();
        stats.record_flush(3);
        let delta = stats.snapshot().since(&before);
        assert_eq!((delta.fences, delta.flushed_lines), (1, 3));
    }
}
