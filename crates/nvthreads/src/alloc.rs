//! The allocator behind the interposed `malloc` family (`docs/nvthreads.md` §3.6).
//!
//! An [`Arena`] hands out blocks of one tracked region: the volatile shared region (the
//! default: shared between thread-processes, merged like globals, not persistent) or a range
//! of the persistent heap (`NVT_MALLOC=persistent`). Its **metadata lives outside the
//! region**, in one `MAP_SHARED` anonymous mapping made before the first fork, updated with
//! atomics under a process-shared lock. So every thread-process sees allocations and frees at
//! once (not at merges), a block freed by one thread is reused by any other, and the
//! allocator never writes into the region itself: a `malloc` dirties no page, and freed
//! memory is not written (two processes writing free-list links into the same page would
//! clash at their merges).
//!
//! Geometry: the region is cut into 64 KiB chunks. A chunk is either *small* (blocks of one
//! size class from 16 B to 32 KiB, one bit per block in a bitmap, on a doubly linked list of
//! chunks with free blocks per class) or part of a *span* of whole chunks (a large block, or
//! free chunks). Blocks of a class start at multiples of the class size from a 64 KiB-aligned
//! chunk, so a class that is a multiple of `align` serves aligned requests.
//!
//! Chunks that were never handed out are zero (`fresh`); `calloc` skips clearing them.

use crate::shared::LockWord;
use std::io;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, Ordering};

/// Chunk size: the unit of large blocks and of small-block runs.
pub const CHUNK: usize = 64 << 10;
/// Largest small block.
pub const MAX_SMALL: usize = 32 << 10;
/// Bitmap words per chunk (one bit per 16-byte block at the smallest class).
const WORDS: usize = CHUNK / 16 / 64;

/// Small block sizes: 16-byte steps to 128, then four steps per power of two.
pub const CLASSES: [u32; 40] = [
    16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024,
    1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 10240, 12288, 14336,
    16384, 20480, 24576, 28672, 32768,
];

/// Blocks per small chunk, per class (a table: a division by the class size is slow).
const BLOCKS: [u16; CLASSES.len()] = {
    let mut blocks = [0u16; CLASSES.len()];
    let mut class = 0;
    while class < CLASSES.len() {
        blocks[class] = (CHUNK / CLASSES[class] as usize) as u16;
        class += 1;
    }
    blocks
};

// Chunk states: 0 means never handed out (at or above `top`).
const KIND_MASK: u32 = 0xf000_0000;
const VALUE_MASK: u32 = 0x0fff_ffff;
/// A small chunk: low bits are the class index.
const SMALL: u32 = 0x1000_0000;
/// First chunk of a large block: low bits are its length in chunks.
const LARGE: u32 = 0x2000_0000;
/// First chunk of a free span: low bits are its length in chunks.
const FREE: u32 = 0x3000_0000;
/// A chunk inside a span (not its first).
const INNER: u32 = 0x4000_0000;
/// Memory of an earlier run (persistent mode): never reused, frees of it are ignored.
const RESERVED: u32 = 0x5000_0000;

/// Why `free` refused a pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FreeError {
    /// Not the start of a block of this arena.
    #[error("invalid pointer")]
    Invalid,
    /// The block is already free.
    #[error("double free")]
    DoubleFree,
}

/// Per-chunk metadata (shared).
#[repr(C)]
#[derive(Debug, Default)]
struct ChunkMeta {
    /// Kind and value (see the constants above).
    state: AtomicU32,
    /// Small chunk: free blocks.
    free: AtomicU16,
    /// Small chunk: no bitmap word before this one has a free block.
    hint: AtomicU16,
    /// Small chunk with free blocks: next and previous chunk of its class's list, + 1.
    next: AtomicU32,
    prev: AtomicU32,
}

/// The arena's shared header.
#[repr(C)]
#[derive(Debug)]
struct Header {
    lock: LockWord,
    /// Chunks handed out so far (every chunk at or above is `UNUSED`, zero in the region).
    top: AtomicU32,
    /// Free spans below `top` (0: large allocations skip the scan).
    free_spans: AtomicU32,
    /// Per class: first chunk with free blocks, + 1 (0: none).
    nonfull: [AtomicU32; CLASSES.len()],
    /// Bytes in live blocks (block sizes, not requests).
    live_bytes: AtomicU64,
    /// Allocations and frees served.
    allocs: AtomicU64,
    frees: AtomicU64,
}

/// Counters of an arena.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArenaStats {
    /// Bytes in live blocks.
    pub live_bytes: u64,
    /// Allocations served.
    pub allocs: u64,
    /// Blocks freed.
    pub frees: u64,
    /// Chunks handed out (the high-water mark).
    pub top_chunks: u32,
}

/// A block handed out by [`Arena::alloc`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Address in the region's private view.
    pub addr: usize,
    /// Usable bytes.
    pub size: usize,
    /// Whether the memory is known to be zero (never handed out before).
    pub fresh: bool,
}

/// An allocator over `[base, base + chunks × CHUNK)`, shared by every process forked after
/// it was made.
#[derive(Debug)]
pub struct Arena {
    base: usize,
    chunks: u32,
    header: &'static Header,
    meta: &'static [ChunkMeta],
    bitmaps: &'static [AtomicU64],
}

impl Arena {
    /// An arena over `len` bytes at `base` (64 KiB-aligned) whose first `reserved` chunks
    /// are never handed out. The metadata is mapped here, shared with future children.
    pub fn new(base: usize, len: usize, reserved: u32) -> io::Result<Self> {
        assert!(
            base.is_multiple_of(CHUNK),
            "arena base {base:#x} not chunk-aligned"
        );
        let chunks = u32::try_from(len / CHUNK)
            .ok()
            .filter(|&n| n < VALUE_MASK && n > reserved)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "arena size"))?;
        let header_len = std::mem::size_of::<Header>().next_multiple_of(64);
        let meta_len = chunks as usize * std::mem::size_of::<ChunkMeta>();
        let bitmap_len = chunks as usize * WORDS * 8;
        let total = header_len + meta_len + bitmap_len;
        let at = crate::pages::map_shared_zeroed(total)?;
        // SAFETY: a fresh shared anonymous mapping (zero-filled, never unmapped, so the
        // 'static references below stay valid); all-zero bytes are valid values of every
        // type placed in it (atomics only). The three parts are laid out without overlap and
        // suitably aligned (mmap returns page-aligned memory; each part's length is a
        // multiple of 16).
        let (header, meta, bitmaps) = unsafe {
            (
                &*at.cast::<Header>(),
                std::slice::from_raw_parts(at.add(header_len).cast::<ChunkMeta>(), chunks as usize),
                std::slice::from_raw_parts(
                    at.add(header_len + meta_len).cast::<AtomicU64>(),
                    chunks as usize * WORDS,
                ),
            )
        };
        for chunk in &meta[..reserved as usize] {
            chunk.state.store(RESERVED, Ordering::Relaxed);
        }
        header.top.store(reserved, Ordering::Relaxed);
        Ok(Arena {
            base,
            chunks,
            header,
            meta,
            bitmaps,
        })
    }

    /// Whether `addr` lies in the arena.
    pub fn contains(&self, addr: usize) -> bool {
        addr >= self.base && addr - self.base < self.chunks as usize * CHUNK
    }

    /// Counters.
    pub fn stats(&self) -> ArenaStats {
        ArenaStats {
            live_bytes: self.header.live_bytes.load(Ordering::Relaxed),
            allocs: self.header.allocs.load(Ordering::Relaxed),
            frees: self.header.frees.load(Ordering::Relaxed),
            top_chunks: self.header.top.load(Ordering::Relaxed),
        }
    }

    /// A block of at least `size` bytes aligned to `align` (a power of two), or `None` when
    /// the arena is exhausted.
    pub fn alloc(&self, size: usize, align: usize) -> Option<Block> {
        debug_assert!(align.is_power_of_two());
        let size = size.max(1);
        let class = (align <= MAX_SMALL)
            .then(|| small_class(size, align))
            .flatten();
        self.header.lock.lock();
        let block = match class {
            Some(class) => self.alloc_small(class),
            None => self.alloc_large(size.div_ceil(CHUNK), align.div_ceil(CHUNK).max(1)),
        };
        if let Some(block) = block {
            add(&self.header.live_bytes, block.size as u64);
            add(&self.header.allocs, 1);
        }
        self.header.lock.unlock();
        block
    }

    /// Frees the block at `addr`. Blocks of an earlier run (persistent mode) are ignored.
    pub fn free(&self, addr: usize) -> Result<(), FreeError> {
        self.header.lock.lock();
        let result = self.free_locked(addr);
        self.header.lock.unlock();
        result
    }

    /// The usable size of the block at `addr`; `None` if `addr` is not a live block's start
    /// (or is memory of an earlier run, whose size is unknown).
    pub fn usable_size(&self, addr: usize) -> Option<usize> {
        let (chunk, offset) = self.locate(addr)?;
        let state = self.meta[chunk].state.load(Ordering::Acquire);
        match state & KIND_MASK {
            SMALL => {
                let class = CLASSES[(state & VALUE_MASK) as usize] as usize;
                let bit = offset / class;
                (offset % class == 0 && self.bit(chunk, bit)).then_some(class)
            }
            LARGE if offset == 0 => Some((state & VALUE_MASK) as usize * CHUNK),
            _ => None,
        }
    }

    /// Whether `addr` lies in memory reserved from an earlier run.
    pub fn is_reserved(&self, addr: usize) -> bool {
        self.locate(addr)
            .is_some_and(|(chunk, _)| self.meta[chunk].state.load(Ordering::Acquire) == RESERVED)
    }

    /// The chunk just past the block at `addr` (persistent mode records it as a high-water
    /// mark), or `None` if `addr` is not in the arena.
    pub fn end_chunk(&self, addr: usize, size: usize) -> Option<u32> {
        self.contains(addr)
            .then(|| ((addr - self.base + size).div_ceil(CHUNK)) as u32)
    }

    /// Bytes from `addr` to the end of the arena (for copying out of a block of unknown size).
    pub fn bytes_to_end(&self, addr: usize) -> usize {
        (self.base + self.chunks as usize * CHUNK).saturating_sub(addr)
    }

    fn locate(&self, addr: usize) -> Option<(usize, usize)> {
        self.contains(addr)
            .then(|| ((addr - self.base) / CHUNK, (addr - self.base) % CHUNK))
    }

    fn chunk_addr(&self, chunk: usize) -> usize {
        self.base + chunk * CHUNK
    }

    fn bit(&self, chunk: usize, bit: usize) -> bool {
        self.bitmaps[chunk * WORDS + bit / 64].load(Ordering::Relaxed) & (1 << (bit % 64)) != 0
    }

    fn alloc_small(&self, class: usize) -> Option<Block> {
        let head = self.header.nonfull[class].load(Ordering::Relaxed);
        let chunk = match head {
            0 => self.new_small_chunk(class)?,
            n => n as usize - 1,
        };
        let blocks = BLOCKS[class] as usize;
        let words = &self.bitmaps[chunk * WORDS..chunk * WORDS + blocks.div_ceil(64)];
        let meta = &self.meta[chunk];
        let hint = meta.hint.load(Ordering::Relaxed) as usize;
        let bit = words
            .iter()
            .enumerate()
            .skip(hint)
            .find_map(|(index, word)| {
                let value = word.load(Ordering::Relaxed);
                let free = (!value).trailing_zeros() as usize;
                (value != u64::MAX && index * 64 + free < blocks).then_some((index, value, free))
            });
        let (index, value, free) = bit.expect("a chunk on the free list has a free block");
        // Under the arena's lock, so a load and a store are enough (no read-modify-write).
        words[index].store(value | 1 << free, Ordering::Relaxed);
        meta.hint.store(index as u16, Ordering::Relaxed);
        let left = meta.free.load(Ordering::Relaxed) - 1;
        meta.free.store(left, Ordering::Relaxed);
        if left == 0 {
            self.unlink(class, chunk);
        }
        let size = CLASSES[class] as usize;
        Some(Block {
            addr: self.chunk_addr(chunk) + (index * 64 + free) * size,
            size,
            fresh: false,
        })
    }

    fn new_small_chunk(&self, class: usize) -> Option<usize> {
        let (chunk, _) = self.take_span(1, 1)?;
        let meta = &self.meta[chunk];
        meta.state.store(SMALL | class as u32, Ordering::Release);
        meta.free.store(BLOCKS[class], Ordering::Relaxed);
        meta.hint.store(0, Ordering::Relaxed);
        for word in &self.bitmaps[chunk * WORDS..(chunk + 1) * WORDS] {
            word.store(0, Ordering::Relaxed);
        }
        self.push(class, chunk);
        Some(chunk)
    }

    fn alloc_large(&self, chunks: usize, align_chunks: usize) -> Option<Block> {
        let (chunk, fresh) = self.take_span(chunks, align_chunks)?;
        self.meta[chunk]
            .state
            .store(LARGE | chunks as u32, Ordering::Release);
        Some(Block {
            addr: self.chunk_addr(chunk),
            size: chunks * CHUNK,
            fresh,
        })
    }

    /// `count` chunks starting at a multiple of `align` (in chunks), marked as a span with
    /// inner chunks; the caller sets the first chunk's state. Reuses a free span (first fit)
    /// or grows `top`. Returns the first chunk and whether it is fresh.
    fn take_span(&self, count: usize, align: usize) -> Option<(usize, bool)> {
        let found = match self.header.free_spans.load(Ordering::Relaxed) {
            0 => None,
            _ => self.find_free_span(count, align),
        };
        let (start, fresh) = match found {
            Some(start) => (start, false),
            None => (self.grow(count, align)?, true),
        };
        for chunk in &self.meta[start + 1..start + count] {
            chunk.state.store(INNER, Ordering::Relaxed);
        }
        Some((start, fresh))
    }

    /// First fit among the free spans (merging neighbours on the way), split around the
    /// aligned start; the pieces left over stay free.
    fn find_free_span(&self, count: usize, align: usize) -> Option<usize> {
        let top = self.header.top.load(Ordering::Relaxed) as usize;
        let mut chunk = 0;
        while chunk < top {
            let state = self.meta[chunk].state.load(Ordering::Relaxed);
            let len = self.span_len(state);
            if state & KIND_MASK != FREE {
                chunk += len;
                continue;
            }
            let len = self.merge_following(chunk, len, top);
            let start = chunk.next_multiple_of(align);
            if start + count <= chunk + len {
                self.header.free_spans.fetch_sub(1, Ordering::Relaxed);
                if start > chunk {
                    self.mark_free(chunk, start - chunk);
                }
                if chunk + len > start + count {
                    self.mark_free(start + count, chunk + len - start - count);
                }
                return Some(start);
            }
            chunk += len;
        }
        None
    }

    /// Length in chunks of the span or chunk whose first chunk has `state`.
    fn span_len(&self, state: u32) -> usize {
        match state & KIND_MASK {
            LARGE | FREE => (state & VALUE_MASK).max(1) as usize,
            _ => 1,
        }
    }

    /// Joins the free spans that directly follow the free span at `chunk`; returns its new
    /// length.
    fn merge_following(&self, chunk: usize, mut len: usize, top: usize) -> usize {
        while chunk + len < top {
            let next = self.meta[chunk + len].state.load(Ordering::Relaxed);
            if next & KIND_MASK != FREE {
                break;
            }
            self.meta[chunk + len].state.store(INNER, Ordering::Relaxed);
            self.header.free_spans.fetch_sub(1, Ordering::Relaxed);
            len += (next & VALUE_MASK) as usize;
        }
        self.meta[chunk]
            .state
            .store(FREE | len as u32, Ordering::Relaxed);
        len
    }

    fn mark_free(&self, chunk: usize, len: usize) {
        self.meta[chunk]
            .state
            .store(FREE | len as u32, Ordering::Relaxed);
        for inner in &self.meta[chunk + 1..chunk + len] {
            inner.state.store(INNER, Ordering::Relaxed);
        }
        self.header.free_spans.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes `count` fresh chunks from `top` at a multiple of `align` (a gap left by the
    /// alignment becomes a free span).
    fn grow(&self, count: usize, align: usize) -> Option<usize> {
        let top = self.header.top.load(Ordering::Relaxed) as usize;
        let start = top.next_multiple_of(align);
        let end = start.checked_add(count)?;
        if end > self.chunks as usize {
            return None;
        }
        if start > top {
            self.mark_free(top, start - top);
        }
        self.header.top.store(end as u32, Ordering::Relaxed);
        Some(start)
    }

    fn free_locked(&self, addr: usize) -> Result<(), FreeError> {
        let (chunk, offset) = self.locate(addr).ok_or(FreeError::Invalid)?;
        let meta = &self.meta[chunk];
        let state = meta.state.load(Ordering::Relaxed);
        match state & KIND_MASK {
            SMALL => self.free_small(chunk, offset, (state & VALUE_MASK) as usize)?,
            LARGE if offset == 0 => {
                let len = (state & VALUE_MASK) as usize;
                self.release_span(chunk, len);
                self.account_free(len * CHUNK);
            }
            RESERVED => return Ok(()),
            FREE if offset == 0 => return Err(FreeError::DoubleFree),
            _ => return Err(FreeError::Invalid),
        }
        Ok(())
    }

    fn account_free(&self, bytes: usize) {
        sub(&self.header.live_bytes, bytes as u64);
        add(&self.header.frees, 1);
    }

    fn free_small(&self, chunk: usize, offset: usize, class: usize) -> Result<(), FreeError> {
        let size = CLASSES[class] as usize;
        let bit = offset / size;
        if !offset.is_multiple_of(size) || bit >= BLOCKS[class] as usize {
            return Err(FreeError::Invalid);
        }
        let word = &self.bitmaps[chunk * WORDS + bit / 64];
        let mask = 1u64 << (bit % 64);
        let value = word.load(Ordering::Relaxed);
        if value & mask == 0 {
            return Err(FreeError::DoubleFree);
        }
        word.store(value & !mask, Ordering::Relaxed);
        self.account_free(size);
        let meta = &self.meta[chunk];
        if bit / 64 < meta.hint.load(Ordering::Relaxed) as usize {
            meta.hint.store((bit / 64) as u16, Ordering::Relaxed);
        }
        let free = meta.free.load(Ordering::Relaxed) + 1;
        meta.free.store(free, Ordering::Relaxed);
        if free == 1 {
            self.push(class, chunk);
        }
        // An empty chunk goes back to the spans unless it is its class's only chunk with
        // room (keeping one avoids churn when a program allocates and frees one block).
        let head = self.header.nonfull[class].load(Ordering::Relaxed);
        let alone = head as usize == chunk + 1 && meta.next.load(Ordering::Relaxed) == 0;
        if free == BLOCKS[class] && !alone {
            self.unlink(class, chunk);
            self.release_span(chunk, 1);
        }
        Ok(())
    }

    /// Makes a span free again. `top` never moves down: the chunks hold old data now, and
    /// only chunks above `top` are known to be zero.
    fn release_span(&self, chunk: usize, len: usize) {
        self.mark_free(chunk, len);
    }

    /// Pushes `chunk` on its class's list of chunks with free blocks.
    fn push(&self, class: usize, chunk: usize) {
        let head = self.header.nonfull[class].load(Ordering::Relaxed);
        let meta = &self.meta[chunk];
        meta.next.store(head, Ordering::Relaxed);
        meta.prev.store(0, Ordering::Relaxed);
        if head != 0 {
            self.meta[head as usize - 1]
                .prev
                .store(chunk as u32 + 1, Ordering::Relaxed);
        }
        self.header.nonfull[class].store(chunk as u32 + 1, Ordering::Relaxed);
    }

    /// Removes `chunk` from its class's list.
    fn unlink(&self, class: usize, chunk: usize) {
        let meta = &self.meta[chunk];
        let (next, prev) = (
            meta.next.swap(0, Ordering::Relaxed),
            meta.prev.swap(0, Ordering::Relaxed),
        );
        match prev {
            0 => self.header.nonfull[class].store(next, Ordering::Relaxed),
            p => self.meta[p as usize - 1]
                .next
                .store(next, Ordering::Relaxed),
        }
        if next != 0 {
            self.meta[next as usize - 1]
                .prev
                .store(prev, Ordering::Relaxed);
        }
    }
}

/// `counter += delta` for a counter written only under the arena's lock.
fn add(counter: &AtomicU64, delta: u64) {
    counter.store(counter.load(Ordering::Relaxed) + delta, Ordering::Relaxed);
}

/// `counter -= delta` for a counter written only under the arena's lock.
fn sub(counter: &AtomicU64, delta: u64) {
    counter.store(counter.load(Ordering::Relaxed) - delta, Ordering::Relaxed);
}

/// The smallest class that holds `size` bytes at alignment `align`, if any.
fn small_class(size: usize, align: usize) -> Option<usize> {
    if size <= 128 && align <= 16 {
        // Classes 16, 32, …, 128 are the first eight.
        return Some(size.max(1).div_ceil(16) - 1);
    }
    let start = CLASSES.partition_point(|&class| (class as usize) < size);
    (start..CLASSES.len()).find(|&index| (CLASSES[index] as usize).is_multiple_of(align.max(16)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arena addresses are only computed, never dereferenced, so any aligned base works.
    const BASE: usize = 0x7000_0000_0000;

    fn arena(chunks: usize, reserved: u32) -> Arena {
        Arena::new(BASE, chunks * CHUNK, reserved).expect("arena")
    }

    #[test]
    fn classes_are_sorted_and_aligned() {
        assert!(CLASSES.windows(2).all(|w| w[0] < w[1]));
        assert!(CLASSES.iter().all(|&c| c % 16 == 0));
        assert_eq!(small_class(1, 1), Some(0));
        assert_eq!(small_class(17, 8), Some(1));
        assert_eq!(CLASSES[small_class(100, 64).unwrap()], 128);
        assert_eq!(CLASSES[small_class(100, 4096).unwrap()], 4096);
        assert_eq!(small_class(MAX_SMALL + 1, 16), None);
        for size in 1..=2048 {
            for align in [1usize, 8, 16, 32, 4096] {
                let slow = (CLASSES.partition_point(|&class| (class as usize) < size)
                    ..CLASSES.len())
                    .find(|&index| (CLASSES[index] as usize).is_multiple_of(align.max(16)));
                assert_eq!(small_class(size, align), slow, "size {size} align {align}");
            }
        }
        assert!((0..CLASSES.len()).all(|c| BLOCKS[c] as usize * CLASSES[c] as usize <= CHUNK));
    }

    #[test]
    fn small_blocks_are_distinct_aligned_and_reused() {
        let arena = arena(64, 0);
        let mut seen = std::collections::HashSet::new();
        for size in [1usize, 16, 17, 100, 1000, 5000, 32768] {
            for align in [1usize, 16, 64, 4096] {
                let block = arena.alloc(size, align).expect("room");
                assert!(block.size >= size && block.addr.is_multiple_of(align.max(16)));
                assert!(seen.insert(block.addr), "block handed out twice");
                assert_eq!(arena.usable_size(block.addr), Some(block.size));
            }
        }
        let a = arena.alloc(40, 16).unwrap();
        arena.free(a.addr).unwrap();
        assert_eq!(arena.free(a.addr), Err(FreeError::DoubleFree));
        assert_eq!(arena.free(a.addr + 8), Err(FreeError::Invalid));
        assert_eq!(
            arena.alloc(40, 16).unwrap().addr,
            a.addr,
            "freed block reused"
        );
    }

    #[test]
    fn large_blocks_split_merge_and_align() {
        let arena = arena(64, 0);
        let a = arena.alloc(3 * CHUNK, 16).unwrap();
        let b = arena.alloc(CHUNK + 1, 16).unwrap();
        assert!(a.fresh && b.fresh);
        assert_eq!((a.size, b.size), (3 * CHUNK, 2 * CHUNK));
        arena.free(a.addr).unwrap();
        arena.free(b.addr).unwrap();
        // The two free spans merge and serve a larger request without growing.
        let top = arena.stats().top_chunks;
        let c = arena.alloc(5 * CHUNK, 16).unwrap();
        assert_eq!((c.addr, c.fresh), (a.addr, false));
        assert_eq!(arena.stats().top_chunks, top);
        let aligned = arena.alloc(10, 4 * CHUNK).unwrap();
        assert_eq!((aligned.addr - BASE) % (4 * CHUNK), 0);
        assert_eq!(arena.stats().live_bytes as usize, 5 * CHUNK + CHUNK);
        assert!(arena.alloc(100 * CHUNK, 16).is_none(), "exhaustion is None");
    }

    #[test]
    fn empty_small_chunks_return_to_the_spans() {
        let arena = arena(16, 0);
        let per_chunk = CHUNK / 4096;
        let blocks: Vec<_> = (0..3 * per_chunk)
            .map(|_| arena.alloc(4096, 16).unwrap())
            .collect();
        let top = arena.stats().top_chunks;
        for block in &blocks {
            arena.free(block.addr).unwrap();
        }
        assert_eq!(arena.stats().live_bytes, 0);
        let large = arena.alloc(2 * CHUNK, 16).unwrap();
        assert!(!large.fresh, "reuses the emptied chunks");
        assert_eq!(arena.stats().top_chunks, top);
    }

    #[test]
    fn reserved_chunks_are_never_handed_out() {
        let arena = arena(8, 3);
        let block = arena.alloc(10, 16).unwrap();
        assert!(block.addr >= BASE + 3 * CHUNK);
        assert!(arena.is_reserved(BASE + CHUNK + 24));
        assert_eq!(arena.free(BASE + CHUNK + 24), Ok(()), "ignored");
        assert_eq!(arena.usable_size(BASE + CHUNK), None);
    }
}
