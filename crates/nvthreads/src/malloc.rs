//! The runtime's side of the interposed `malloc` family (`docs/nvthreads.md` §3.6): blocks
//! from the [`Arena`] of the shared volatile region or of the persistent heap, `calloc`'s
//! clearing, `realloc`'s moves, and, in persistent mode, the arena's header with the
//! high-water marks that keep an earlier run's blocks from being reused.
//!
//! The `cdylib` decides *whether* a call comes here (the runtime is running, the caller is
//! the program rather than libc itself); everything here assumes it does.

use crate::alloc::{Arena, Block, CHUNK, FreeError};
use crate::heapmeta;
use crate::runtime::{MallocMode, Runtime, fatal};
use crate::shared::MAX_THREADS;
use std::sync::atomic::Ordering;

/// Blocks this process freed while it had unmerged writes on their pages (private to each
/// process).
pub(crate) fn pending_frees() -> std::sync::MutexGuard<'static, Vec<usize>> {
    static PENDING: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Name of the persistent arena's object in the heap directory.
pub const ARENA_NAME: &[u8] = b"__nvt_malloc";
/// Magic of the persistent arena's header chunk.
pub const ARENA_MAGIC: [u8; 8] = *b"NVTMALC1";
/// Version of the header chunk.
pub const ARENA_VERSION: u32 = 1;
/// Offset of the high-water slots in the header chunk (one `u64` per thread slot).
const SLOTS_AT: usize = 64;

impl Runtime {
    /// The arena, if the `malloc` family is interposed.
    pub fn arena(&self) -> Option<&Arena> {
        self.arena.get()
    }

    /// Where `malloc`'d memory lives.
    pub fn malloc_mode(&self) -> MallocMode {
        self.malloc_mode
    }

    /// `malloc`/`memalign`/`calloc` (`zero`): a block of the arena, or null when it is
    /// exhausted.
    pub fn arena_alloc(&self, size: usize, align: usize, zero: bool) -> *mut u8 {
        let Some(arena) = self.arena() else {
            return std::ptr::null_mut();
        };
        let Some(block) = arena.alloc(size, align) else {
            return std::ptr::null_mut();
        };
        self.note_block(arena, &block);
        // The block may have been another thread's: this process's copies of its pages can
        // predate that thread's merges. A handler of the program writing another block of
        // one of those pages in the middle (between a kept copy's removal and its discard)
        // would lose its write and leave a dirty page whose twin predates the discard; it
        // runs afterwards instead.
        let held_off = crate::runtime::signals::HandlersHeldOff::new();
        self.tracker
            .refresh_range(block.addr, block.size)
            .unwrap_or_else(|e| fatal(&e.to_string()));
        drop(held_off);
        let at = block.addr as *mut u8;
        if zero && !block.fresh {
            // SAFETY: the block is `block.size ≥ size` bytes of the arena's mapped region,
            // owned by the caller from now on; write faults are resolved by the tracker.
            unsafe { std::ptr::write_bytes(at, 0, size) };
        }
        at
    }

    /// `free` of an arena block. A bad pointer kills the run, as glibc's `free` aborts.
    ///
    /// A block on a page with this process's unmerged writes is released only after the
    /// next merge: released now, another thread could be handed it and write it, and this
    /// process's earlier writes, published later, would overwrite the new owner's.
    pub fn arena_free(&self, addr: usize) {
        let Some(arena) = self.arena() else {
            return;
        };
        let size = arena.usable_size(addr).unwrap_or(1);
        if self.tracker.any_dirty(addr, size) {
            pending_frees().push(addr);
            return;
        }
        self.release_block(arena, addr);
    }

    /// Whether this process holds frees deferred until its next merge's end.
    pub(crate) fn has_pending_frees(&self) -> bool {
        !pending_frees().is_empty()
    }

    /// Releases the frees deferred until this merge (called after publishing).
    pub(crate) fn release_pending_frees(&self) {
        let Some(arena) = self.arena() else {
            return;
        };
        let pending = std::mem::take(&mut *pending_frees());
        for addr in pending {
            self.release_block(arena, addr);
        }
    }

    fn release_block(&self, arena: &Arena, addr: usize) {
        match arena.free(addr) {
            Ok(()) => {}
            Err(FreeError::DoubleFree) => fatal(&format!("free(): double free of {addr:#x}")),
            Err(FreeError::Invalid) => fatal(&format!("free(): invalid pointer {addr:#x}")),
        }
    }

    /// `realloc` of an arena block: in place when it fits, else a new block of the same
    /// arena with the contents copied.
    pub fn arena_realloc(&self, addr: usize, size: usize) -> *mut u8 {
        let Some(arena) = self.arena() else {
            return std::ptr::null_mut();
        };
        let old = match arena.usable_size(addr) {
            Some(old) if size <= old => return addr as *mut u8,
            Some(old) => old,
            None if arena.is_reserved(addr) => arena.bytes_to_end(addr),
            None => fatal(&format!("realloc(): invalid pointer {addr:#x}")),
        };
        let fresh = self.arena_alloc(size, 16, false);
        if !fresh.is_null() {
            // SAFETY: both are arena blocks (the old one holds at least `old` readable bytes
            // or runs to the arena's end); the new block has `size` bytes; distinct blocks do
            // not overlap.
            unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, fresh, old.min(size)) };
            self.arena_free(addr);
        }
        fresh
    }

    /// The usable size of an arena block (0 for memory of an earlier run).
    pub fn arena_usable_size(&self, addr: usize) -> usize {
        self.arena()
            .and_then(|arena| arena.usable_size(addr))
            .unwrap_or(0)
    }

    /// Persistent mode: makes sure this thread's high-water mark covers `block`, so a crash
    /// after the block's contents commit cannot let a later run reuse it. The mark is a
    /// tracked write in the heap, committed with the same interval as the block's contents.
    fn note_block(&self, arena: &Arena, block: &Block) {
        let header = self.arena_header.load(Ordering::Relaxed);
        if header == 0 {
            return;
        }
        let end = u64::from(arena.end_chunk(block.addr, block.size).unwrap_or(0));
        let slot = (header + SLOTS_AT + 8 * self.thread_index()) as *mut u64;
        // SAFETY: `slot` lies in the header chunk of the persistent arena (mapped, 8-byte
        // aligned); this thread-process is single-threaded and the only writer of its slot.
        unsafe {
            if slot.read_volatile() < end {
                slot.write_volatile(end);
            }
        }
    }

    /// Persistent mode: finds or makes the arena object in the persistent heap, checks or
    /// writes its header chunk, and starts the arena above every block of earlier runs.
    pub(crate) fn open_persistent_arena(&self) -> Result<(), String> {
        let (start, size) = self.persistent_arena_object()?;
        let base = start.next_multiple_of(CHUNK);
        let len = (start + size - base) / CHUNK * CHUNK;
        if len < 2 * CHUNK {
            return Err("the persistent heap is too small for NVT_MALLOC=persistent".into());
        }
        let chunks = (len / CHUNK) as u64;
        // SAFETY: the header chunk lies inside the arena object, mapped for the life of the
        // process; this is the only thread (the runtime is starting), and writes fault into
        // the tracker.
        let header = unsafe { std::slice::from_raw_parts_mut(base as *mut u8, CHUNK) };
        if header[..8] == [0; 8] {
            header[8..12].copy_from_slice(&ARENA_VERSION.to_le_bytes());
            header[12..16].copy_from_slice(&(CHUNK as u32).to_le_bytes());
            header[16..24].copy_from_slice(&chunks.to_le_bytes());
            header[..8].copy_from_slice(&ARENA_MAGIC);
            self.sync_point();
        }
        let version = u32::from_le_bytes(header[8..12].try_into().expect("4"));
        let chunk = u32::from_le_bytes(header[12..16].try_into().expect("4"));
        let stored = u64::from_le_bytes(header[16..24].try_into().expect("8"));
        if header[..8] != ARENA_MAGIC || version != ARENA_VERSION || chunk as usize != CHUNK {
            return Err("persistent malloc arena: bad header".into());
        }
        if stored != chunks {
            return Err(format!(
                "persistent malloc arena: {stored} chunks recorded, {chunks} found"
            ));
        }
        let high = (0..MAX_THREADS)
            .map(|i| {
                let at = SLOTS_AT + 8 * i;
                u64::from_le_bytes(header[at..at + 8].try_into().expect("8"))
            })
            .max()
            .unwrap_or(0)
            .max(1);
        if high > chunks {
            return Err(format!(
                "persistent malloc arena: high-water mark {high} beyond {chunks} chunks"
            ));
        }
        let arena = Arena::new(base, len, high as u32)
            .map_err(|e| format!("mapping the allocator's metadata: {e}"))?;
        let _ = self.arena.set(arena);
        self.arena_header.store(base, Ordering::Relaxed);
        Ok(())
    }

    /// The arena object's address and size: the existing one, or a new one of
    /// `NVT_PMALLOC_MB` (default: three quarters of the free heap).
    fn persistent_arena_object(&self) -> Result<(usize, usize), String> {
        let base = self.heap_base() as usize;
        let (found, free) = {
            let meta = self.heap_meta();
            (
                heapmeta::lookup(meta, ARENA_NAME),
                self.heap_len().saturating_sub(heapmeta::top(meta)),
            )
        };
        if let Some((offset, size)) = found {
            return Ok((base + offset as usize, size as usize));
        }
        let size = crate::runtime::env::env()
            .pmalloc_mb
            .map_or(free / 4 * 3, |mb| mb << 20);
        let at = self
            .nvmalloc(size, Some(ARENA_NAME))
            .map_err(|e| format!("no {size}-byte malloc arena in the persistent heap: {e}"))?;
        Ok((at as usize, size as usize))
    }
}

/// The heap offsets `[start, end)` of the persistent arena's chunks above every thread's
/// high-water mark (never handed out, so zero in the home image), read from the home image
/// with `read`; `None` if there is no arena or its header is not valid.
pub(crate) fn unused_arena_range(
    meta: &[u8],
    mut read: impl FnMut(u64, &mut [u8]),
) -> Option<(u64, u64)> {
    let (offset, size) = heapmeta::lookup(meta, ARENA_NAME)?;
    let base = offset.next_multiple_of(CHUNK as u64);
    let end = offset + size;
    if base + CHUNK as u64 > end {
        return None;
    }
    let mut header = vec![0u8; SLOTS_AT + 8 * MAX_THREADS];
    read(base, &mut header);
    if header[..8] != ARENA_MAGIC {
        return None;
    }
    let high = (0..MAX_THREADS)
        .map(|i| {
            let at = SLOTS_AT + 8 * i;
            u64::from_le_bytes(header[at..at + 8].try_into().expect("8"))
        })
        .max()
        .unwrap_or(0)
        .max(1);
    let start = base + high * CHUNK as u64;
    (start < end).then_some((start, end / PAGE_U64 * PAGE_U64))
}

const PAGE_U64: u64 = crate::pages::PAGE as u64;
