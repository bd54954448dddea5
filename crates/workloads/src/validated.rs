//! What a workload validated once per opened engine: a few words read from a structure's
//! header and checked, kept for later operations on the same engine (see
//! [`tx::Tx::engine_id`]), so they skip reading and validating the header again.
//!
//! The words are published with a sequence lock (Lamport's "Concurrent reading and writing",
//! CACM 1977, in the form Boehm gives for language memory models, MSPC 2012): a reader takes
//! them only if the sequence number was even and unchanged around its reads, so it never
//! mixes the words of two engines. Readers write nothing, so threads reading the same words
//! do not contend.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering, fence};

/// `N` words validated for one engine.
#[derive(Debug)]
pub struct ValidatedOnce<const N: usize> {
    /// Odd while the words are being replaced.
    sequence: AtomicU64,
    /// The engine the words belong to (0: none yet).
    engine: AtomicU64,
    words: [AtomicU64; N],
    /// One writer at a time.
    writer: Mutex<()>,
}

impl<const N: usize> Default for ValidatedOnce<N> {
    fn default() -> Self {
        ValidatedOnce {
            sequence: AtomicU64::new(0),
            engine: AtomicU64::new(0),
            words: std::array::from_fn(|_| AtomicU64::new(0)),
            writer: Mutex::new(()),
        }
    }
}

impl<const N: usize> ValidatedOnce<N> {
    /// The words validated for `engine`, if they are the ones kept (never for engine 0, which
    /// has no identity).
    #[inline]
    pub fn get(&self, engine: u64) -> Option<[u64; N]> {
        if engine == 0 {
            return None;
        }
        let before = self.sequence.load(Ordering::Acquire);
        let owner = self.engine.load(Ordering::Relaxed);
        let words = std::array::from_fn(|i| self.words[i].load(Ordering::Relaxed));
        fence(Ordering::Acquire);
        let after = self.sequence.load(Ordering::Relaxed);
        (before.is_multiple_of(2) && before == after && owner == engine).then_some(words)
    }

    /// Forgets the words kept (the structure was rebuilt).
    pub fn forget(&self) {
        let _one_writer = self.writer.lock();
        let sequence = self.sequence.load(Ordering::Relaxed);
        self.sequence.store(sequence + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.engine.store(0, Ordering::Relaxed);
        self.sequence.store(sequence + 2, Ordering::Release);
    }

    /// Keeps `words`, validated for `engine`, in place of what was kept (nothing for engine 0).
    pub fn set(&self, engine: u64, words: [u64; N]) {
        if engine == 0 {
            return;
        }
        let _one_writer = self.writer.lock();
        let sequence = self.sequence.load(Ordering::Relaxed);
        self.sequence.store(sequence + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        self.engine.store(engine, Ordering::Relaxed);
        for (slot, word) in self.words.iter().zip(words) {
            slot.store(word, Ordering::Relaxed);
        }
        self.sequence.store(sequence + 2, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_kept_per_engine_and_never_for_engine_zero() {
        let kept = ValidatedOnce::<2>::default();
        assert_eq!(kept.get(1), None);
        kept.set(0, [5, 6]);
        assert_eq!(kept.get(0), None);
        kept.set(7, [1, 2]);
        assert_eq!(kept.get(7), Some([1, 2]));
        assert_eq!(kept.get(8), None);
        kept.set(8, [3, 4]);
        assert_eq!((kept.get(7), kept.get(8)), (None, Some([3, 4])));
        kept.forget();
        assert_eq!(kept.get(8), None);
    }

    #[test]
    fn concurrent_readers_never_see_words_of_two_writes() {
        let kept = ValidatedOnce::<2>::default();
        let reading = std::sync::atomic::AtomicBool::new(true);
        let hits = AtomicU64::new(0);
        std::thread::scope(|scope| {
            // The writer keeps replacing the words for as long as the reader reads, so the
            // reader overlaps writes however the threads are scheduled.
            scope.spawn(|| {
                let mut i = 1u64;
                while reading.load(Ordering::Relaxed) {
                    kept.set(1 + i % 2, [i, i.wrapping_mul(3) ^ (i % 2)]);
                    i += 1;
                }
            });
            scope.spawn(|| {
                let mut i = 0u64;
                // Enough reads, and enough of them taking the words, to have raced writes.
                while i < 400_000 || hits.load(Ordering::Relaxed) < 1_000 {
                    let engine = 1 + i % 2;
                    if let Some([a, b]) = kept.get(engine) {
                        assert_eq!(b, a.wrapping_mul(3) ^ (engine - 1), "torn read");
                        assert_eq!(a % 2, engine - 1, "words of the other engine");
                        hits.fetch_add(1, Ordering::Relaxed);
                    }
                    i += 1;
                }
                reading.store(false, Ordering::Relaxed);
            });
        });
        assert!(hits.load(Ordering::Relaxed) >= 1_000);
    }
}
