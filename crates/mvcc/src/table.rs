//! Where a chunk's control header is: a table from chunk number to a header reference
//! (one `u32` per chunk of the pool, allocated zeroed, so the operating system provides
//! pages only for the parts of the pool that get headers), and the slab the headers live
//! in.
//!
//! A table slot holds [`NO_HEADER`] (the master is the chunk's only version: readers read
//! it directly), a header reference, or [`FRESH`] while a transaction writes the master in
//! place (a block it allocated; readers still read the master, whose other bytes do not
//! change) or while a header is being made (its base is read from the master). Headers are
//! made when a transaction first locks a chunk and taken out again once their chain is
//! empty and their base is durable: by cooling after a checkpoint (the base's bytes written
//! to the master) or after a write-back ([`Table::remove`]). A removed
//! header is reused only after a grace period (the engine's retire list), so a reader that
//! still holds its reference reads its base, which equals the master.
//!
//! Beside the slots, one bit per chunk (a `u64` per 4 KiB page) says whether the chunk's
//! slot may hold a header reference. A reader checks it first: the bits of a large pool fit
//! in the cache where the slots do not (a 64-byte line of bits covers 32 KiB of pool, a
//! line of slots 1 KiB), and a chunk without a header costs no second cache miss even when
//! a neighbour on its page has one. The bit is set before a header reference is stored in
//! a slot and cleared before it is taken out — once the header is retired, when its base
//! equals the written-back master — so a clear bit means the slot is [`NO_HEADER`] or
//! [`FRESH`], or holds a retired header whose master reads the same: all read as the
//! master.

use crate::chain::{Bytes, Header};
use crate::sync::{AtomicU32, AtomicU64, Backoff, Ordering};
use parking_lot::Mutex;
use std::sync::OnceLock;
use tx::{TxError, TxResult};

/// Slot value: the chunk has no header.
pub const NO_HEADER: u32 = 0;
/// Slot value: the master is being written in place, or a header is being made.
pub const FRESH: u32 = u32::MAX;
/// Headers per slab segment.
#[cfg(not(loom))]
const SEGMENT: u32 = 1024;
/// Headers per slab segment (small under loom, which tracks every atomic it makes).
#[cfg(loom)]
const SEGMENT: u32 = 4;
/// Chunks per word of header bits (a 4 KiB page).
const BITS_CHUNKS: u64 = 64;

/// The chunk table and the header slab.
#[derive(Debug)]
pub struct Table {
    slots: Box<[AtomicU32]>,
    /// Per page of [`BITS_CHUNKS`] chunks: one bit per chunk whose slot may hold a header.
    present: Box<[AtomicU64]>,
    segments: Box<[OnceLock<Box<[Header]>>]>,
    /// Headers never handed out start here.
    next: AtomicU32,
    free: Mutex<Vec<u32>>,
    /// Debug builds: headers handed out and not released (catches a header released twice
    /// or handed out while in use).
    #[cfg(debug_assertions)]
    out: Mutex<std::collections::HashSet<u32>>,
}

impl Table {
    /// A table for a pool of `pool_len` bytes with room for `max_headers` headers.
    pub fn new(pool_len: u64, max_headers: u32) -> Self {
        let chunks = pool_len.div_ceil(crate::chain::CHUNK);
        let segments = max_headers.div_ceil(SEGMENT).max(1);
        Table {
            slots: zeroed(chunks),
            present: zeroed(chunks.div_ceil(BITS_CHUNKS)),
            segments: (0..segments).map(|_| OnceLock::new()).collect(),
            next: AtomicU32::new(1),
            free: Mutex::new(Vec::new()),
            #[cfg(debug_assertions)]
            out: Mutex::new(std::collections::HashSet::new()),
        }
    }

    /// The slot of `chunk`: [`NO_HEADER`], [`FRESH`] or a header reference.
    #[inline]
    pub fn slot(&self, chunk: u64) -> u32 {
        self.slots[chunk as usize].load(Ordering::Acquire)
    }

    /// The slot of `chunk`, or [`NO_HEADER`] without loading it when the chunk's header bit
    /// is clear: what a reader acts on.
    #[inline]
    pub fn reader_slot(&self, chunk: u64) -> u32 {
        // SeqCst pairs with the SeqCst bit set in `get_or_create`: a reader whose load
        // follows the set in that order sees the bit and loads the slot. A clear bit read
        // from the clear in `remove` (Release) shows the reader the write-back that made
        // the master equal to the retired header's base.
        if self.bits(chunk).load(Ordering::SeqCst) & bit(chunk) == 0 {
            NO_HEADER
        } else {
            self.slot(chunk)
        }
    }

    /// Whether a reader of `chunk` loads its slot (its header bit is set).
    pub fn may_have_header(&self, chunk: u64) -> bool {
        self.bits(chunk).load(Ordering::SeqCst) & bit(chunk) != 0
    }

    /// Whether a reader reads `chunk` from its master ([`Table::reader_slot`] is
    /// [`NO_HEADER`] or [`FRESH`]).
    #[inline]
    pub fn reads_master(&self, chunk: u64) -> bool {
        matches!(self.reader_slot(chunk), NO_HEADER | FRESH)
    }

    /// Whether a reader reads every chunk of `first..=last` from its master. Chunks on one
    /// page (a value across two chunks, nearly always) take one load of their bits; a set
    /// bit, or a range over pages, is checked chunk by chunk as [`Table::reads_master`].
    #[inline]
    pub fn reads_masters(&self, first: u64, last: u64) -> bool {
        self.masters_by_bits(first, last) || (first..=last).all(|chunk| self.reads_master(chunk))
    }

    /// Whether one load of header bits shows that a reader reads every chunk of
    /// `first..=last` from its master: the chunks share a page and none has its bit set. A
    /// false answer says nothing (a bit set, or chunks on two pages): ask
    /// [`Table::reads_masters`]. Inlined into the common read of a value across two chunks.
    #[inline(always)]
    pub fn masters_by_bits(&self, first: u64, last: u64) -> bool {
        debug_assert!(first <= last);
        if first / BITS_CHUNKS != last / BITS_CHUNKS {
            return false;
        }
        let span = last - first + 1;
        let mask = if span == BITS_CHUNKS {
            u64::MAX
        } else {
            ((1u64 << span) - 1) << (first % BITS_CHUNKS)
        };
        // SeqCst, as in `reader_slot`: one load observes each chunk's bit as a load of that
        // chunk alone would.
        self.bits(first).load(Ordering::SeqCst) & mask == 0
    }

    fn bits(&self, chunk: u64) -> &AtomicU64 {
        &self.present[(chunk / BITS_CHUNKS) as usize]
    }

    fn cell(&self, chunk: u64) -> &AtomicU32 {
        &self.slots[chunk as usize]
    }

    /// Header `r`.
    #[inline]
    pub fn header(&self, r: u32) -> &Header {
        let index = r - 1;
        let segment = self.segments[(index / SEGMENT) as usize]
            .get()
            .expect("a handed-out header's segment exists");
        &segment[(index % SEGMENT) as usize]
    }

    /// The header of `chunk`, made (with `master()` as its base) if it has none.
    pub fn get_or_create(&self, chunk: u64, master: impl FnOnce() -> Bytes) -> TxResult<u32> {
        let cell = self.cell(chunk);
        let mut backoff = Backoff::default();
        loop {
            match cell.load(Ordering::Acquire) {
                FRESH => backoff.snooze(),
                NO_HEADER => {
                    if cell
                        .compare_exchange(NO_HEADER, FRESH, Ordering::Acquire, Ordering::Relaxed)
                        .is_err()
                    {
                        continue;
                    }
                    let r = match self.alloc() {
                        Ok(r) => r,
                        Err(e) => {
                            cell.store(NO_HEADER, Ordering::Release);
                            return Err(e);
                        }
                    };
                    self.header(r).reset(&master());
                    // Marked before the reference is visible (see the module docs). The
                    // slot was NO_HEADER, so the bit was clear: `remove` clears it first.
                    let before = self.bits(chunk).fetch_or(bit(chunk), Ordering::SeqCst);
                    debug_assert!(
                        before & bit(chunk) == 0,
                        "a chunk without a header has no bit"
                    );
                    cell.store(r, Ordering::SeqCst);
                    return Ok(r);
                }
                r => return Ok(r),
            }
        }
    }

    /// Claims `chunk` for an in-place write if it has no header (see the module docs);
    /// [`Table::end_fresh`] releases it.
    pub fn try_fresh(&self, chunk: u64) -> bool {
        self.cell(chunk)
            .compare_exchange(NO_HEADER, FRESH, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Ends an in-place write of `chunk`.
    pub fn end_fresh(&self, chunk: u64) {
        self.cell(chunk).store(NO_HEADER, Ordering::Release);
    }

    /// Takes header `r` (retired by [`Header::try_retire`], its base written back to the
    /// master) out of `chunk`'s slot; it may be reused after a grace period
    /// ([`Table::release`]).
    pub fn remove(&self, chunk: u64, r: u32) {
        // Unmarked before the slot is emptied: a creator can mark the chunk again only once
        // the slot is NO_HEADER, so a clear here never hides its new header. Release so a
        // reader that sees the bit clear also sees the write-back (the retired base and the
        // master read the same from then on).
        let before = self.bits(chunk).fetch_and(!bit(chunk), Ordering::Release);
        debug_assert!(
            before & bit(chunk) != 0,
            "a chunk with a header has its bit"
        );
        let swapped =
            self.cell(chunk)
                .compare_exchange(r, NO_HEADER, Ordering::AcqRel, Ordering::Relaxed);
        debug_assert!(swapped.is_ok(), "a retired header leaves its own slot");
    }

    /// Returns header `r` to the free list (no reader can hold it any more).
    pub fn release(&self, r: u32) {
        #[cfg(debug_assertions)]
        assert!(self.out.lock().remove(&r), "header {r} released twice");
        self.free.lock().push(r);
    }

    /// Headers in use.
    pub fn live(&self) -> u64 {
        u64::from(self.next.load(Ordering::Relaxed) - 1) - self.free.lock().len() as u64
    }

    fn alloc(&self) -> TxResult<u32> {
        let r = self.alloc_ref()?;
        #[cfg(debug_assertions)]
        assert!(self.out.lock().insert(r), "header {r} handed out twice");
        Ok(r)
    }

    fn alloc_ref(&self) -> TxResult<u32> {
        if let Some(r) = self.free.lock().pop() {
            return Ok(r);
        }
        let r = self.next.fetch_add(1, Ordering::Relaxed);
        let index = r - 1;
        let Some(segment) = self.segments.get((index / SEGMENT) as usize) else {
            self.next.fetch_sub(1, Ordering::Relaxed);
            return Err(TxError::InvalidArgument(format!(
                "more than {} chunks have versions at once (raise MvccOptions::max_headers)",
                self.segments.len() as u64 * u64::from(SEGMENT)
            )));
        };
        segment.get_or_init(|| (0..SEGMENT).map(|_| Header::default()).collect());
        Ok(r)
    }
}

/// `chunk`'s bit in its page's word.
#[inline]
fn bit(chunk: u64) -> u64 {
    1 << (chunk % BITS_CHUNKS)
}

/// `n` atomics at zero. Zeroed memory: the operating system provides pages only for the
/// parts of a large pool's table that get written.
#[cfg(not(loom))]
fn zeroed<T: bytemuck::Zeroable>(n: u64) -> Box<[T]> {
    bytemuck::zeroed_slice_box(n as usize)
}

/// `n` atomics at zero (loom's atomics are not plain memory).
#[cfg(loom)]
fn zeroed<T: Default>(n: u64) -> Box<[T]> {
    (0..n).map(|_| T::default()).collect()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_header_sends_readers_to_the_slot_of_its_own_chunk_only() {
        let table = Table::new(128 * 64, 4);
        let r = table.get_or_create(70, || [7; 64]).expect("header");
        assert!(table.may_have_header(70));
        assert_eq!(table.reader_slot(70), r);
        for neighbour in [64, 69, 71, 127] {
            assert!(
                !table.may_have_header(neighbour),
                "chunk {neighbour} shares a page with a header but has none"
            );
        }
        let other = table.get_or_create(71, || [8; 64]).expect("header");
        assert_eq!(table.reader_slot(71), other);
        assert!(table.header(r).try_retire());
        table.remove(70, r);
        assert!(!table.may_have_header(70));
        assert_eq!(table.reader_slot(70), NO_HEADER);
        assert!(
            table.may_have_header(71),
            "removing a header leaves its neighbour's bit"
        );
    }

    /// A range's answer is every chunk's answer, for ranges within a page, across pages,
    /// a whole page, and next to headers on either side of a page boundary.
    #[test]
    fn a_range_reads_the_masters_exactly_when_each_of_its_chunks_does() {
        let table = Table::new(256 * 64, 8);
        for chunk in [0, 63, 64, 100, 191] {
            table.get_or_create(chunk, || [0; 64]).expect("header");
        }
        for first in 0..256u64 {
            for last in first..(first + 70).min(256) {
                let each = (first..=last).all(|chunk| table.reads_master(chunk));
                assert_eq!(table.reads_masters(first, last), each, "{first}..={last}");
            }
        }
        assert!(
            table.reads_masters(1, 62),
            "a page's inside, its two ends headed"
        );
        assert!(!table.reads_masters(62, 63));
        assert!(!table.reads_masters(99, 100));
        assert!(
            table.reads_masters(192, 255),
            "a whole page without headers"
        );
    }

    #[test]
    fn a_chunk_gets_a_new_header_after_its_old_one_is_removed() {
        let table = Table::new(64 * 64, 4);
        let r = table.get_or_create(5, || [1; 64]).expect("header");
        assert!(table.header(r).try_retire());
        table.remove(5, r);
        let again = table.get_or_create(5, || [2; 64]).expect("header");
        assert!(table.may_have_header(5));
        assert_eq!(table.reader_slot(5), again);
    }
}
