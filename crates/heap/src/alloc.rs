//! The volatile side of the heap: which units and chunks are free, rebuilt from the
//! persistent descriptors and bitmaps at open.
//!
//! Allocation is two-phase, as transactions need it:
//! - `reserve` picks a block and marks it used in DRAM only; the persistent change that
//!   publishes it is an [`Action`] the transaction commits atomically with its data;
//! - `prepare_free` marks a block as being freed; its [`Action`] is committed likewise, and
//!   the block becomes reusable (`finish_free`) only after the commit is durable.
//!
//! An abort cancels both in DRAM; a crash loses only DRAM state, so nothing leaks.
//!
//! Creating a new run (a chunk turned into units of one size class) is a system change made
//! durable at once, through a callback the engine provides, because later transactions on other
//! threads may allocate from the run before the creating transaction commits. Returning a run
//! whose units are all free to the free chunks is the other system change: made when a
//! reservation finds no free chunk, so space freed by one size class serves any other and
//! large objects.

use crate::HeapError;
use crate::action::Action;
use crate::layout::{Descriptor, Layout, RunGeometry, UNITS_PER_WORD};
use crate::scan::scan;
use parking_lot::Mutex;
use pmem::{Persist, Region};
use std::collections::HashSet;

/// Makes a list of heap actions durable before returning (the engine's system commit). Its
/// error type `E` is the engine's own, so an engine failure (a full log, a poisoned pool)
/// reaches the allocating transaction unchanged.
pub type SystemCommit<'a, E> = dyn FnMut(&[Action]) -> Result<(), E> + 'a;

/// The engine's say on whether the chunk at `(start, len)` (bytes), an empty run's, may become
/// free space now: false while something outside the heap could still write the chunk's old
/// contents back over a new owner's (a pending write-back of a multi-version engine).
pub type MayReturn<'a> = dyn Fn(u64, u64) -> bool + 'a;

/// Most runs returned by one system change: one record of a logging engine holds their
/// actions (two of 16 bytes each).
const RETURNS_PER_CHANGE: usize = 8;

/// The persistent heap allocator.
#[derive(Debug)]
pub struct Heap {
    layout: Layout,
    state: Mutex<State>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChunkUse {
    Free,
    Run(u32),
    LargeHead(u32),
    LargeBody,
}

#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) chunk: u64,
    pub(crate) class: usize,
    pub(crate) geometry: RunGeometry,
    /// One bit per unit, [`UNITS_PER_WORD`] units per word as on the media: allocated,
    /// reserved or being freed.
    pub(crate) used: Vec<u64>,
    pub(crate) free_units: u64,
    /// Word to start the next search from.
    pub(crate) hint: usize,
    /// Whether the run is in its class's `available` list (keeps the list free of duplicates).
    pub(crate) listed: bool,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) chunks: Vec<ChunkUse>,
    /// Runs by index; the indices in `vacant` are runs returned to the free chunks, kept
    /// (unreachable: no chunk and no list names them) until a new run reuses the index.
    pub(crate) runs: Vec<Run>,
    pub(crate) vacant: Vec<u32>,
    /// Per class, runs that may have free units (entries go stale; checked on use).
    pub(crate) available: Vec<Vec<u32>>,
    pub(crate) chunk_hint: u64,
    pub(crate) being_freed: HashSet<u64>,
    pub(crate) allocated_bytes: u64,
    pub(crate) allocated_blocks: u64,
}

impl State {
    pub(crate) fn usage(&self) -> Usage {
        Usage {
            allocated_bytes: self.allocated_bytes,
            allocated_blocks: self.allocated_blocks,
            free_chunks: self.free_chunks() as u64,
            runs: (self.runs.len() - self.vacant.len()) as u64,
        }
    }

    fn free_chunks(&self) -> usize {
        self.chunks.iter().filter(|c| **c == ChunkUse::Free).count()
    }

    /// The runs with no allocated, reserved or being-freed unit, by index (returned runs,
    /// whose chunks no longer name them, left out).
    fn empty_runs(&self) -> impl Iterator<Item = (u32, &Run)> {
        self.runs
            .iter()
            .enumerate()
            .map(|(index, run)| (index as u32, run))
            .filter(|&(index, run)| self.chunks[run.chunk as usize] == ChunkUse::Run(index))
            .filter(|(_, run)| run.is_empty())
    }
}

impl Run {
    /// No unit allocated, reserved or being freed (each holds its bit in `used`).
    fn is_empty(&self) -> bool {
        self.free_units == self.geometry.units
    }
}

/// A block picked for a transaction, not yet published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// Absolute offset of the block.
    pub addr: u64,
    /// Usable size (the class size, or the span's bytes).
    pub size: u64,
    block: Block,
}

/// A block being freed by a transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Freeing {
    /// Absolute offset of the block.
    pub addr: u64,
    /// Bytes of the block (its unit or span size), fixed when the free starts so that
    /// callers holding their own locks can ask for it without taking the heap's.
    pub len: u64,
    block: Block,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    Unit { run: u32, unit: u64 },
    Span { chunk: u64, span: u32 },
}

/// Space accounting, for reports and leak checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Usage {
    /// Bytes in allocated (or reserved) blocks, at block size.
    pub allocated_bytes: u64,
    /// Allocated (or reserved) blocks.
    pub allocated_blocks: u64,
    /// Chunks neither in a run nor in a large span.
    pub free_chunks: u64,
    /// Runs.
    pub runs: u64,
}

impl Heap {
    /// Formats an empty heap in `region` with chunks of `1 << chunk_shift` bytes.
    pub fn format<P: Persist>(pm: &P, region: Region, chunk_shift: u32) -> Result<Self, HeapError> {
        let layout = Layout::format(pm, region, chunk_shift)?;
        let heap = Self::open(pm, region)?;
        debug_assert_eq!(heap.layout, layout);
        Ok(heap)
    }

    /// Opens the heap in `region`, rebuilding the free-space index from the persistent
    /// descriptors and bitmaps (run after the engine's log recovery).
    pub fn open<P: Persist>(pm: &P, region: Region) -> Result<Self, HeapError> {
        let layout = Layout::read(pm, region)?;
        let scanned = scan(pm, &layout, true);
        if let Some(problem) = scanned.problems.into_iter().next() {
            return Err(HeapError::Corrupted(problem.message));
        }
        // A marker a crash left over a free chunk would outlive the chunk's next owner if that
        // is a large span whose object never overwrites its first word, and object bytes that
        // pass a bitmap word's check then read as a run whose descriptor was lost. Cleared
        // here, before anything is allocated (`docs/heap-format.md` §11.1). A crash in the
        // middle leaves some of them, which the next open clears.
        if !scanned.stale_markers.is_empty() {
            layout.clear_markers(pm, scanned.stale_markers);
            pm.fence();
        }
        Ok(Heap {
            layout,
            state: Mutex::new(scanned.state),
        })
    }

    /// The heap's geometry.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Current space accounting.
    pub fn usage(&self) -> Usage {
        self.state.lock().usage()
    }

    /// Reserves a block of at least `size` bytes. `system` makes run creation and run returns
    /// durable; any empty run may be returned when no chunk is free.
    pub fn reserve<E: From<HeapError>>(
        &self,
        size: u64,
        system: &mut SystemCommit<'_, E>,
    ) -> Result<Reservation, E> {
        self.reserve_returning(size, system, &|_, _| true)
    }

    /// [`Heap::reserve`], returning only the empty runs whose chunks `may_return` allows.
    pub fn reserve_returning<E: From<HeapError>>(
        &self,
        size: u64,
        system: &mut SystemCommit<'_, E>,
        may_return: &MayReturn<'_>,
    ) -> Result<Reservation, E> {
        let size = size.max(1);
        let mut state = self.state.lock();
        let mut space = Space { system, may_return };
        match self.layout.class_for(size) {
            Some(class) => self.reserve_unit(&mut state, class, &mut space),
            None => self.reserve_span(&mut state, size, &mut space),
        }
    }

    /// Whether some run has no allocated, reserved or being-freed unit: a reservation that
    /// found no space may find it once such a run can be returned.
    pub fn has_empty_runs(&self) -> bool {
        self.state.lock().empty_runs().next().is_some()
    }

    /// The action that publishes a reservation.
    pub fn publish_action(&self, reservation: &Reservation) -> Action {
        match reservation.block {
            Block::Unit { run, unit } => {
                let state = self.state.lock();
                let (addr, mask) = self.bit_of(&state.runs[run as usize], unit);
                Action::Or { addr, mask }
            }
            Block::Span { chunk, span } => Action::Set {
                addr: self.layout.descriptor_at(chunk),
                value: Descriptor::Large { span }.encode(chunk),
            },
        }
    }

    /// Gives a reservation back (the transaction aborted).
    pub fn cancel(&self, reservation: &Reservation) {
        self.release(&mut self.state.lock(), reservation.block);
    }

    /// Starts freeing the block at `addr`, which must be the start of an allocated block
    /// (`InvalidFree`) not already being freed (`BeingFreed`).
    pub fn prepare_free(&self, addr: u64) -> Result<Freeing, HeapError> {
        let mut state = self.state.lock();
        let block = self
            .block_at(&state, addr)
            .ok_or(HeapError::InvalidFree(addr))?;
        if !state.being_freed.insert(addr) {
            return Err(HeapError::BeingFreed(addr));
        }
        let len = self.len_of(&state, block);
        Ok(Freeing { addr, len, block })
    }

    /// The action that frees a block.
    pub fn free_action(&self, freeing: &Freeing) -> Action {
        match freeing.block {
            Block::Unit { run, unit } => {
                let state = self.state.lock();
                let (addr, mask) = self.bit_of(&state.runs[run as usize], unit);
                Action::AndNot { addr, mask }
            }
            Block::Span { chunk, .. } => Action::Set {
                addr: self.layout.descriptor_at(chunk),
                value: 0,
            },
        }
    }

    /// Abandons a free (the transaction aborted).
    pub fn cancel_free(&self, freeing: &Freeing) {
        self.state.lock().being_freed.remove(&freeing.addr);
    }

    /// Whether a block being freed is a large span (a span's chunks may later hold a run).
    pub fn freeing_is_span(freeing: &Freeing) -> bool {
        matches!(freeing.block, Block::Span { .. })
    }

    fn len_of(&self, state: &State, block: Block) -> u64 {
        match block {
            Block::Unit { run, .. } => state.runs[run as usize].geometry.unit,
            Block::Span { span, .. } => u64::from(span) << self.layout.chunk_shift,
        }
    }

    /// Makes a freed block reusable (its free action is durable).
    pub fn finish_free(&self, freeing: &Freeing) {
        let mut state = self.state.lock();
        state.being_freed.remove(&freeing.addr);
        self.release(&mut state, freeing.block);
    }

    fn bit_of(&self, run: &Run, unit: u64) -> (u64, u64) {
        (
            self.layout.bitmap_word_at(run.chunk, unit / UNITS_PER_WORD),
            1 << (unit % UNITS_PER_WORD),
        )
    }

    fn unit_addr(&self, run: &Run, unit: u64) -> u64 {
        self.layout.chunk_start(run.chunk) + run.geometry.data_offset + unit * run.geometry.unit
    }

    fn reserve_unit<E: From<HeapError>>(
        &self,
        state: &mut State,
        class: usize,
        space: &mut Space<'_, '_, E>,
    ) -> Result<Reservation, E> {
        while let Some(&run) = state.available[class].last() {
            if let Some(unit) = take_unit(&mut state.runs[run as usize]) {
                let r = &state.runs[run as usize];
                let (addr, size) = (self.unit_addr(r, unit), r.geometry.unit);
                state.allocated_bytes += size;
                state.allocated_blocks += 1;
                return Ok(Reservation {
                    addr,
                    size,
                    block: Block::Unit { run, unit },
                });
            }
            state.available[class].pop();
            state.runs[run as usize].listed = false;
        }
        self.create_run(state, class, space)?;
        self.reserve_unit(state, class, space)
    }

    /// Turns a free chunk into an empty run of `class`, durably.
    fn create_run<E: From<HeapError>>(
        &self,
        state: &mut State,
        class: usize,
        space: &mut Space<'_, '_, E>,
    ) -> Result<(), E> {
        let geometry = self
            .layout
            .run_geometry(class)
            .expect("class_for returns usable classes");
        let chunk = self
            .find_space(state, 1, space)?
            .ok_or(HeapError::OutOfSpace {
                size: geometry.unit,
            })?;
        (space.system)(&[
            Action::InitRun {
                addr: self.layout.chunk_start(chunk),
                class: class as u8,
                words: geometry.bitmap_words,
            },
            Action::Set {
                addr: self.layout.descriptor_at(chunk),
                value: Descriptor::Run { class: class as u8 }.encode(chunk),
            },
        ])?;
        let run = Run {
            chunk,
            class,
            geometry,
            used: vec![0; geometry.bitmap_words as usize],
            free_units: geometry.units,
            hint: 0,
            listed: true,
        };
        let index = match state.vacant.pop() {
            Some(index) => {
                state.runs[index as usize] = run;
                index
            }
            None => {
                state.runs.push(run);
                state.runs.len() as u32 - 1
            }
        };
        state.chunks[chunk as usize] = ChunkUse::Run(index);
        state.available[class].push(index);
        Ok(())
    }

    fn reserve_span<E: From<HeapError>>(
        &self,
        state: &mut State,
        size: u64,
        space: &mut Space<'_, '_, E>,
    ) -> Result<Reservation, E> {
        let span = size.div_ceil(self.layout.chunk_size());
        let span = u32::try_from(span).map_err(|_| HeapError::OutOfSpace { size })?;
        let chunk = self
            .find_space(state, span, space)?
            .ok_or(HeapError::OutOfSpace { size })?;
        mark_span(state, chunk, span);
        let bytes = u64::from(span) << self.layout.chunk_shift;
        state.allocated_bytes += bytes;
        state.allocated_blocks += 1;
        Ok(Reservation {
            addr: self.layout.chunk_start(chunk),
            size: bytes,
            block: Block::Span { chunk, span },
        })
    }

    /// First fit for `span` free chunks; when there is none, returns the empty runs the
    /// engine allows (durably) and searches once more.
    fn find_space<E: From<HeapError>>(
        &self,
        state: &mut State,
        span: u32,
        space: &mut Space<'_, '_, E>,
    ) -> Result<Option<u64>, E> {
        if let Some(chunk) = find_free_span(state, span) {
            return Ok(Some(chunk));
        }
        // Returning runs cannot make room for more chunks than are free or empty runs: a
        // request that could not fit even then (one larger than the heap) changes nothing.
        if state.free_chunks() + state.empty_runs().count() < span as usize {
            return Ok(None);
        }
        if self.return_empty_runs(state, space)? == 0 {
            return Ok(None);
        }
        Ok(find_free_span(state, span))
    }

    /// Returns every empty run the engine allows to the free chunks: per run its descriptor set
    /// to FREE, then its marker cleared, by system changes of at most [`RETURNS_PER_CHANGE`]
    /// runs, each durable before its chunks are marked free here. The marker goes because the
    /// chunk's next owner may be a large span whose object bytes fill the bitmap's place: a
    /// stale marker over object words that happen to pass a bitmap word's check reads as a run
    /// whose descriptor was lost, and the heap would refuse to open. The descriptor goes first:
    /// a crash between the two leaves a FREE chunk with a marker over an all-zero bitmap, as a
    /// crash inside run creation does (`docs/heap-format.md` §11). Returns how many.
    fn return_empty_runs<E: From<HeapError>>(
        &self,
        state: &mut State,
        space: &mut Space<'_, '_, E>,
    ) -> Result<usize, E> {
        let chunk_size = self.layout.chunk_size();
        let empty: Vec<u32> = state
            .empty_runs()
            .filter(|(_, run)| (space.may_return)(self.layout.chunk_start(run.chunk), chunk_size))
            .map(|(index, _)| index)
            .collect();
        for batch in empty.chunks(RETURNS_PER_CHANGE) {
            let actions: Vec<Action> = batch
                .iter()
                .flat_map(|&index| {
                    let chunk = state.runs[index as usize].chunk;
                    [
                        Action::Set {
                            addr: self.layout.descriptor_at(chunk),
                            value: 0,
                        },
                        Action::Set {
                            addr: self.layout.chunk_start(chunk),
                            value: 0,
                        },
                    ]
                })
                .collect();
            (space.system)(&actions)?;
            for &index in batch {
                retire_run(state, index);
            }
        }
        Ok(empty.len())
    }

    fn release(&self, state: &mut State, block: Block) {
        match block {
            Block::Unit { run, unit } => {
                let r = &mut state.runs[run as usize];
                let (word, bit) = (
                    (unit / UNITS_PER_WORD) as usize,
                    1u64 << (unit % UNITS_PER_WORD),
                );
                debug_assert!(r.used[word] & bit != 0, "releasing a free unit");
                r.used[word] &= !bit;
                r.free_units += 1;
                r.hint = r.hint.min(word);
                let (size, class) = (r.geometry.unit, r.class);
                if !r.listed {
                    r.listed = true;
                    state.available[class].push(run);
                }
                state.allocated_bytes -= size;
            }
            Block::Span { chunk, span } => {
                for c in chunk..chunk + u64::from(span) {
                    state.chunks[c as usize] = ChunkUse::Free;
                }
                state.chunk_hint = state.chunk_hint.min(chunk);
                state.allocated_bytes -= u64::from(span) << self.layout.chunk_shift;
            }
        }
        state.allocated_blocks -= 1;
    }

    /// The allocated block starting at `addr`, if there is one.
    fn block_at(&self, state: &State, addr: u64) -> Option<Block> {
        let chunk = self.layout.chunk_of(addr)?;
        match state.chunks[chunk as usize] {
            ChunkUse::Run(run) => {
                let r = &state.runs[run as usize];
                let offset =
                    addr.checked_sub(self.layout.chunk_start(chunk) + r.geometry.data_offset)?;
                let unit = offset / r.geometry.unit;
                let exact = offset % r.geometry.unit == 0 && unit < r.geometry.units;
                let used = r
                    .used
                    .get((unit / UNITS_PER_WORD) as usize)
                    .is_some_and(|w| w & (1 << (unit % UNITS_PER_WORD)) != 0);
                (exact && used).then_some(Block::Unit { run, unit })
            }
            ChunkUse::LargeHead(span) if addr == self.layout.chunk_start(chunk) => {
                Some(Block::Span { chunk, span })
            }
            _ => None,
        }
    }
}

/// How a reservation may make room: the engine's system commit and its say on returning runs.
struct Space<'s, 'a, E> {
    system: &'s mut SystemCommit<'a, E>,
    may_return: &'s MayReturn<'s>,
}

/// Forgets returned run `index` (its descriptor already FREE on the media): its chunk is free,
/// no class list names it, and its index waits for the next new run.
fn retire_run(state: &mut State, index: u32) {
    let run = &mut state.runs[index as usize];
    let (chunk, class) = (run.chunk, run.class);
    run.used = Vec::new();
    run.free_units = 0;
    run.listed = false;
    state.available[class].retain(|&listed| listed != index);
    state.chunks[chunk as usize] = ChunkUse::Free;
    state.chunk_hint = state.chunk_hint.min(chunk);
    state.vacant.push(index);
}

/// Takes the first free unit of a run, if any.
fn take_unit(run: &mut Run) -> Option<u64> {
    if run.free_units == 0 {
        return None;
    }
    for word in run.hint..run.used.len() {
        let free = !run.used[word] & pmem::checked::MAX_VALUE;
        if free == 0 {
            continue;
        }
        let unit = UNITS_PER_WORD * word as u64 + u64::from(free.trailing_zeros());
        if unit >= run.geometry.units {
            break;
        }
        run.used[word] |= 1 << (unit % UNITS_PER_WORD);
        run.free_units -= 1;
        run.hint = word;
        return Some(unit);
    }
    None
}

/// First-fit search for `span` contiguous free chunks.
fn find_free_span(state: &mut State, span: u32) -> Option<u64> {
    let count = state.chunks.len() as u64;
    let span = u64::from(span);
    let mut start = state.chunk_hint.min(count);
    let mut wrapped = false;
    loop {
        if start + span > count {
            if wrapped || state.chunk_hint == 0 {
                return None;
            }
            (start, wrapped) = (0, true);
            continue;
        }
        match (start..start + span).find(|&c| state.chunks[c as usize] != ChunkUse::Free) {
            None => {
                state.chunk_hint = start + span;
                return Some(start);
            }
            Some(busy) => start = busy + 1,
        }
    }
}

pub(crate) fn mark_span(state: &mut State, chunk: u64, span: u32) {
    state.chunks[chunk as usize] = ChunkUse::LargeHead(span);
    for c in chunk + 1..chunk + u64::from(span) {
        state.chunks[c as usize] = ChunkUse::LargeBody;
    }
}
