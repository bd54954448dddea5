//! The persistent metadata libpmemobj's allocator writes, for the PMDK store discipline
//! (`StoreDiscipline::Pmdk`).
//!
//! PMDK 1.x places a 16 B *compact allocation header* immediately before every object (its
//! size, then its type number and flags) and records which 64 B units of a run are taken in
//! the run's bitmap. A transactional allocation (`pmemobj_tx_alloc`, `TX_NEW`) writes the
//! header and, when the transaction publishes it, sets the object's bits in the bitmap; a
//! transactional free clears them. Those stores go to PM like the program's own, so a trace
//! of a libpmemobj program carries them.
//!
//! Here every allocation of the recorded engine takes 16 B more, the header sits in them and
//! the object starts right after it, as in PMDK; the bitmaps live in a region of their own
//! above the heap ([`BITMAP_OFFSET`], one bit per 64 B unit of the heap), whose words this
//! model keeps so that each store carries the word's old and new value.

use std::collections::HashMap;

/// Bytes of the allocation header before each object.
pub const HEADER_BYTES: u64 = 16;
/// Allocation unit a bitmap bit stands for.
pub const UNIT_BYTES: u64 = 64;
/// Offset (within a core's address space) of the bitmap region: above any heap the
/// recorder's engine can have (`TraceSpec::memory_bytes` is at most 2^39).
pub const BITMAP_OFFSET: u64 = 1 << 39;
/// The type number written in every header (the workloads have one object type each).
pub const TYPE_NUMBER: u64 = 1;

/// A store the allocator makes: byte address (within the core's address space), old and
/// new value of the 8 B word.
pub type MetaStore = (u64, u64, u64);

/// The allocator's bitmaps and the sizes of live objects.
#[derive(Debug, Default)]
pub struct AllocMeta {
    bitmap: HashMap<u64, u64>,
    sizes: HashMap<u64, u64>,
    /// Undo entries of the running transaction: (bitmap word, old bits), (object, old size).
    journal: Vec<Undo>,
}

#[derive(Debug)]
enum Undo {
    Bits(u64, u64),
    Size(u64, Option<u64>),
}

/// The words of the 16 B header of an object of `size` bytes (block size incl. header).
pub fn header_words(size: u64) -> [u64; 2] {
    [size + HEADER_BYTES, TYPE_NUMBER]
}

impl AllocMeta {
    /// The heap block of `size` bytes at heap offset `block` was allocated (its object
    /// starts `HEADER_BYTES` later): sets its bits; returns the bitmap stores.
    pub fn allocated(&mut self, block: u64, size: u64) -> Vec<MetaStore> {
        let object = block + HEADER_BYTES;
        let old = self.sizes.insert(object, size);
        self.journal.push(Undo::Size(object, old));
        self.flip(block, size + HEADER_BYTES, true)
    }

    /// The object at heap offset `object` is freed: clears its bits; returns its block and
    /// the bitmap stores (`None` for an object this model never saw allocated).
    pub fn freed(&mut self, object: u64) -> Option<(u64, Vec<MetaStore>)> {
        let size = self.sizes.remove(&object)?;
        self.journal.push(Undo::Size(object, Some(size)));
        let block = object - HEADER_BYTES;
        Some((block, self.flip(block, size + HEADER_BYTES, false)))
    }

    /// Sets or clears the bits of the units of `bytes` at `block`, one store per word.
    fn flip(&mut self, block: u64, bytes: u64, set: bool) -> Vec<MetaStore> {
        let first = block / UNIT_BYTES;
        let last = (block + bytes.max(1) - 1) / UNIT_BYTES;
        let mut stores = Vec::new();
        for word in first / 64..=last / 64 {
            let lo = first.max(word * 64) - word * 64;
            let hi = last.min(word * 64 + 63) - word * 64;
            let mask = if hi - lo == 63 {
                u64::MAX
            } else {
                ((1u64 << (hi - lo + 1)) - 1) << lo
            };
            let bits = self.bitmap.entry(word).or_insert(0);
            let old = *bits;
            *bits = if set { old | mask } else { old & !mask };
            self.journal.push(Undo::Bits(word, old));
            stores.push((BITMAP_OFFSET + 8 * word, old, *bits));
        }
        stores
    }

    /// The running transaction committed: its changes stay.
    pub fn commit(&mut self) {
        self.journal.clear();
    }

    /// The running transaction aborted (or is retried): its changes are undone.
    pub fn roll_back(&mut self) {
        while let Some(undo) = self.journal.pop() {
            match undo {
                Undo::Bits(word, old) => {
                    self.bitmap.insert(word, old);
                }
                Undo::Size(object, Some(size)) => {
                    self.sizes.insert(object, size);
                }
                Undo::Size(object, None) => {
                    self.sizes.remove(&object);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_sets_and_free_clears_the_units_bits() {
        let mut meta = AllocMeta::default();
        // A 64 B object in a 80 B block at 4096: units 64 and 65, bits 0 and 1 of word 1.
        let stores = meta.allocated(4096, 64);
        assert_eq!(stores, vec![(BITMAP_OFFSET + 8, 0, 0b11)]);
        let stores = meta.allocated(4096 + 128, 64);
        assert_eq!(stores, vec![(BITMAP_OFFSET + 8, 0b11, 0b1111)]);
        meta.commit();
        let (block, stores) = meta.freed(4096 + HEADER_BYTES).expect("allocated");
        assert_eq!(block, 4096);
        assert_eq!(stores, vec![(BITMAP_OFFSET + 8, 0b1111, 0b1100)]);
        assert!(meta.freed(12345).is_none());
        // Rolling back restores the bits and the size.
        meta.roll_back();
        assert!(meta.freed(4096 + HEADER_BYTES).is_some());
        assert_eq!(header_words(64), [80, TYPE_NUMBER]);
    }

    #[test]
    fn a_block_across_bitmap_words_stores_each_word() {
        let mut meta = AllocMeta::default();
        // Units 62..=65 straddle words 0 and 1.
        let stores = meta.allocated(62 * 64, 4 * 64 - HEADER_BYTES);
        assert_eq!(
            stores,
            vec![(BITMAP_OFFSET, 0, 0b11 << 62), (BITMAP_OFFSET + 8, 0, 0b11)]
        );
    }
}
