//! Sorting the checkpoint's lists by radix rather than by comparison.
//!
//! A checkpoint sorts what the lanes listed since the last one (header and chunk pairs, one
//! per chunk a commit wrote: tens of thousands in an update-heavy interval) and the cache
//! lines it writes back. The keys are small numbers — header references below the header
//! slab's size, line numbers below the pool's — so a least-significant-digit radix sort over
//! the digits on which the keys differ takes two or three passes of a few instructions per
//! item, where a comparison sort takes about log₂ n comparisons per item.

/// Bits of one radix digit (a 2 048-entry count table: 16 KiB on the stack, in L1).
const DIGIT_BITS: u32 = 11;
/// Buckets of one digit.
const BUCKETS: usize = 1 << DIGIT_BITS;
/// Lists shorter than this are sorted by comparison: a radix pass's count table costs more.
const RADIX_MIN: usize = 512;

/// Sorts `items` (ascending, as `sort_unstable`), given a `key` that orders them
/// coarsely: `key(a) < key(b)` implies `a < b`. Long lists are radix-sorted by the key
/// (stable, skipping the digits on which every key agrees), then each run of equal keys is
/// sorted by comparison (runs are short: a header listed again for the same chunk, or for
/// another chunk its slot held since). `scratch` is a buffer kept for its capacity.
pub(crate) fn sort_by_radix<T: Copy + Ord>(
    items: &mut Vec<T>,
    scratch: &mut Vec<T>,
    key: impl Fn(&T) -> u64,
) {
    if items.len() < RADIX_MIN {
        items.sort_unstable();
        return;
    }
    let (any, all) = items.iter().fold((0u64, u64::MAX), |(any, all), item| {
        let k = key(item);
        (any | k, all & k)
    });
    let varying = any ^ all;
    let mut shift = 0;
    while shift < u64::BITS && varying >> shift != 0 {
        if (varying >> shift) & (BUCKETS as u64 - 1) != 0 {
            radix_pass(items, scratch, shift, &key);
            std::mem::swap(items, scratch);
        }
        shift += DIGIT_BITS;
    }
    for run in items.chunk_by_mut(|a, b| key(a) == key(b)) {
        if run.len() > 1 {
            run.sort_unstable();
        }
    }
}

/// One stable counting pass: `to` gets `from` ordered by the digit of the key at `shift`.
fn radix_pass<T: Copy>(from: &[T], to: &mut Vec<T>, shift: u32, key: &impl Fn(&T) -> u64) {
    let digit = |item: &T| ((key(item) >> shift) as usize) & (BUCKETS - 1);
    let mut starts = [0usize; BUCKETS];
    for item in from {
        starts[digit(item)] += 1;
    }
    let mut next = 0;
    for start in starts.iter_mut() {
        let count = *start;
        *start = next;
        next += count;
    }
    // Every slot is overwritten below: only a length change costs a fill (after the first
    // pass `to` holds the previous order, as long as `from`).
    if let Some(&first) = from.first() {
        to.resize(from.len(), first);
    }
    for item in from {
        let d = digit(item);
        to[starts[d]] = *item;
        starts[d] += 1;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Long and short lists of header/chunk pairs, with duplicates, repeated references for
    /// other chunks and keys that agree on some digits, come out as `sort_unstable` leaves
    /// them.
    #[test]
    fn pairs_sort_by_radix_as_by_comparison() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
        let mut scratch = Vec::new();
        for len in [0, 1, 2, 100, RADIX_MIN - 1, RADIX_MIN, 5_000, 40_000] {
            for refs in [1u32, 7, 3_000, 1 << 20, u32::MAX] {
                let mut items: Vec<(u32, u64)> = (0..len)
                    .map(|_| {
                        let r = rng.random_range(0..refs) | 0x4000;
                        (r, rng.random_range(0..8u64) * 1_000_003)
                    })
                    .collect();
                let mut expected = items.clone();
                expected.sort_unstable();
                sort_by_radix(&mut items, &mut scratch, |&(r, _)| u64::from(r));
                assert_eq!(items, expected, "{len} pairs over {refs} references");
            }
        }
    }

    /// Line numbers over every digit position, including the top one.
    #[test]
    fn line_numbers_sort_by_radix_as_by_comparison() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut scratch = Vec::new();
        for bits in [1u32, 11, 12, 33, 63, 64] {
            let mut items: Vec<u64> = (0..3_000)
                .map(|_| rng.random::<u64>() >> (64 - bits))
                .collect();
            let mut expected = items.clone();
            expected.sort_unstable();
            sort_by_radix(&mut items, &mut scratch, |&line| line);
            assert_eq!(items, expected, "{bits}-bit lines");
        }
    }
}
