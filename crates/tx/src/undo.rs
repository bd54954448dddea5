//! The `undo` engine (PMDK-style): before the first in-place write to a range, its old bytes
//! are logged and persisted; writes then go straight to their place. Commit persists the data,
//! then invalidates the log by advancing the lane's generation (one 8-byte store). Heap
//! actions ride on a small redo record tagged with the committing generation.
//!
//! Lane layout (offsets from the lane start; details in `docs/tx-format.md`):
//! - `+0` generation `u64` — undo entries tagged with it are live;
//! - `+8` applied `u64` — the generation whose heap actions are known applied;
//! - `+64` action record: tag `u64`, count `u32`, CRC `u32`, then 16-byte actions;
//! - entries (after the action area): tag `u64`, addr `u64`, len `u32`, CRC `u32`, old bytes
//!   padded to 8.
//!
//! Recovery, per lane: if the action record is tagged `generation - 1` and `applied` is
//! behind, apply it (the transaction committed but its actions may not have reached their
//! place); then roll back every live entry (a transaction was in flight), newest first.

use crate::api::{
    Engine, Isolation, Lifecycle, Tx, TxError, TxResult, new_engine_id, pool_tag, run_transaction,
};
use crate::bytes::extend_bytes;
use crate::lanes::{EngineOptions, Lanes};
use crate::layout::{EngineKind, EngineLayout};
use crate::logwriter::{LogMode, LogWriter};
use crate::rangeset::RangeSet;
use crate::recovery::{RecoveryMode, RecoveryReport};
use crate::undo_recovery::{
    ACTION_HEADER_LEN, ACTIONS_AT, APPLIED, APPLIED_AT, ENTRY_HEADER_LEN, GENERATION,
    GENERATION_AT, LaneState, LaneView, action_area, action_crc, check_damage, entry_crc,
    examine_lane,
};
use heap::{ACTION_LEN, Action, Freeing, Heap, Reservation};
use parking_lot::{Mutex, MutexGuard};
use pmem::checked;
use pmem::{Persist, Pool, Region, WriteClass};

/// The undo-logging engine over a pool on backend `P`.
#[derive(Debug)]
pub struct Undo<P: Persist> {
    pool: Pool<P>,
    heap: Heap,
    lanes: Lanes<UndoLane>,
    actions: Mutex<()>,
    mode: LogMode,
    tag: u16,
    /// This open's identity (`Tx::engine_id`).
    id: u64,
    user: Region,
    chunks: Region,
    /// What the recovery at open found and did.
    recovery: RecoveryReport,
}

/// A lane: its PM geometry and the DRAM mirror of its state.
#[derive(Debug)]
struct UndoLane {
    base: u64,
    /// Bytes of the action area (after the header line).
    action_area: u64,
    /// End of the lane.
    end: u64,
    generation: u64,
    /// Next free byte of the entry area.
    tail: u64,
    writer: LogWriter,
    /// The running transaction's state, kept here so transactions reuse its buffers.
    work: Work,
}

/// What an undo transaction tracks, in buffers reused from one transaction to the next.
#[derive(Debug, Default)]
struct Work {
    /// Ranges whose old bytes are logged, or that this transaction allocated.
    covered: RangeSet,
    /// Ranges written in place.
    modified: RangeSet,
    /// (address, length) of each logged range, its old bytes in `old` in the same order
    /// (DRAM copies, for abort).
    snapshots: Vec<(u64, usize)>,
    old: Vec<u8>,
    reservations: Vec<Reservation>,
    frees: Vec<Freeing>,
    /// Fresh blocks zeroed in place (written back at commit; not user bytes).
    zeroed: Vec<(u64, u64)>,
    /// Scratch: the gaps of a write, an encoded entry or action record, the commit's actions.
    gaps: Vec<(u64, u64)>,
    scratch: Vec<u8>,
    actions: Vec<Action>,
}

impl Work {
    fn clear(&mut self) {
        self.covered.clear();
        self.modified.clear();
        self.snapshots.clear();
        self.old.clear();
        self.reservations.clear();
        self.frees.clear();
        self.zeroed.clear();
    }
}

impl UndoLane {
    fn entries_start(&self) -> u64 {
        self.base + ACTIONS_AT + self.action_area
    }
}

impl<P: Persist> Undo<P> {
    /// Formats the engine area of a fresh pool (one [`Pool::create`] just made) and returns
    /// the engine. A pool whose engine area holds anything (any engine's area, or other
    /// data) is refused with [`TxError::AlreadyFormatted`] and left unchanged: `open` a pool
    /// that exists.
    pub fn create(pool: Pool<P>, options: &EngineOptions) -> TxResult<Self> {
        crate::layout::refuse_formatted(pool.pm(), pool.arena())?;
        let layout = EngineLayout::plan(
            EngineKind::Undo,
            pool.arena(),
            options.lanes,
            options.lane_size,
        )?;
        let pm = pool.pm();
        let lanes_len = u64::from(layout.lane_count) * layout.lane_size;
        pm.fill(layout.lanes, lanes_len, 0, WriteClass::Log);
        for lane in 0..layout.lane_count as usize {
            let base = layout.lane(lane);
            for (at, what) in [(GENERATION_AT, GENERATION), (APPLIED_AT, APPLIED)] {
                let word = checked::seal(1, base + at, what)?;
                pm.write_u64(base + at, word, WriteClass::Log);
            }
        }
        pm.persist(layout.lanes, lanes_len);
        Heap::format(pm, layout.heap, options.chunk_shift)?;
        layout.write(pm)?;
        Self::open(pool, options)
    }

    /// Opens the engine area of `pool`, finishing committed and rolling back interrupted
    /// transactions (recovery). A lane whose log is damaged (not torn) is refused with
    /// `Corrupted`.
    ///
    /// The lanes, their size and the heap's chunk size are the pool's, recorded by
    /// `create`; of `options` only the run-time [`EngineOptions::log_mode`] applies. A pool
    /// of another engine is `WrongEngine`, one no engine formatted `Corrupted`.
    pub fn open(pool: Pool<P>, options: &EngineOptions) -> TxResult<Self> {
        Self::open_with(pool, options, RecoveryMode::Strict)
    }

    /// Opens the engine area of `pool` even if a lane's log is damaged: every intact live
    /// entry is rolled back and a damaged pending action record is skipped;
    /// [`Undo::recovery_report`] lists the damage. An explicit choice for getting data out
    /// of a damaged pool; the result may mix states.
    pub fn salvage(pool: Pool<P>, options: &EngineOptions) -> TxResult<Self> {
        Self::open_with(pool, options, RecoveryMode::Salvage)
    }

    fn open_with(pool: Pool<P>, options: &EngineOptions, mode: RecoveryMode) -> TxResult<Self> {
        // A pool that could not be recovered must not be marked as cleanly closed.
        let (lanes, heap, recovery) = Self::recover(&pool, options, mode)
            .inspect_err(|error| crate::api::refused_open(&pool, error))?;
        let chunks = Region {
            offset: heap.layout().chunks,
            len: heap.layout().end() - heap.layout().chunks,
        };
        let (tag, user) = (pool_tag(&pool.header().uuid), pool.root());
        Ok(Undo {
            pool,
            heap,
            lanes: Lanes::new(lanes),
            actions: Mutex::new(()),
            mode: options.log_mode,
            tag,
            id: new_engine_id(),
            user,
            chunks,
            recovery,
        })
    }

    /// What the recovery at open found (transactions rolled back, damage salvaged).
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// Recovers every lane, then rebuilds the heap. In strict mode every lane is read first,
    /// so damage anywhere is refused before any lane is changed.
    fn recover(
        pool: &Pool<P>,
        options: &EngineOptions,
        mode: RecoveryMode,
    ) -> TxResult<(Vec<UndoLane>, Heap, RecoveryReport)> {
        let layout = EngineLayout::read(pool.pm(), pool.arena(), EngineKind::Undo)?;
        let views: Vec<LaneView> = (0..layout.lane_count as usize)
            .map(|index| LaneView {
                index,
                base: layout.lane(index),
                action_area: action_area(layout.lane_size),
                end: layout.lane(index) + layout.lane_size,
            })
            .collect();
        let mut report = RecoveryReport::default();
        let states = views
            .iter()
            .map(|view| examine_lane(pool.pm(), *view))
            .collect::<TxResult<Vec<_>>>()?;
        states
            .iter()
            .for_each(|state| report.findings.extend(state.findings.iter().cloned()));
        if mode == RecoveryMode::Strict {
            check_damage(&report.findings)?;
        }
        let mut lanes = Vec::with_capacity(layout.lane_count as usize);
        for (view, found) in views.iter().zip(states) {
            let mut state = UndoLane {
                base: view.base,
                action_area: view.action_area,
                end: view.end,
                generation: 0,
                tail: 0,
                writer: LogWriter::new(options.log_mode),
                work: Work::default(),
            };
            report.replayed += recover_lane(pool.pm(), &mut state, found)?;
            lanes.push(state);
        }
        Ok((lanes, Heap::open(pool.pm(), layout.heap)?, report))
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<P> {
        &self.pool
    }

    /// The heap.
    pub fn heap(&self) -> &Heap {
        &self.heap
    }

    /// The log mode in use.
    pub fn log_mode(&self) -> LogMode {
        self.mode
    }

    /// Makes a system change (run creation) durable in place at once.
    fn apply_system(&self, actions: &[Action]) -> TxResult<()> {
        let _serialised = self.actions.lock();
        heap::apply_durably(self.pool.pm(), actions);
        Ok(())
    }
}

/// Finishes a committed transaction's heap actions and rolls back live undo entries;
/// returns how many entries it rolled back. Salvaging skips what is damaged.
fn recover_lane<P: Persist>(pm: &P, lane: &mut UndoLane, state: LaneState) -> TxResult<usize> {
    lane.generation = state.generation;
    // Recovery ends by retiring the generation, which needs the next one.
    check_generation_room(lane)?;
    if let Some(actions) = &state.pending {
        actions.iter().for_each(|a| a.apply(pm));
        pm.fence();
        set_word(pm, lane.base + APPLIED_AT, lane.generation);
    }
    for entry in state.rollback.iter().rev() {
        pm.write(entry.addr, &entry.old, WriteClass::User);
        pm.flush(entry.addr, entry.old.len() as u64);
    }
    pm.fence();
    if pm.is_poisoned() {
        return Err(TxError::Poisoned);
    }
    // Always retire the current generation: a transaction that crashed before its commit
    // may have left an action record (or entries) tagged with it, which a later commit
    // would otherwise make look committed.
    retire_entries(pm, lane);
    Ok(state.rollback.len())
}

/// Invalidates the lane's live entries without making its stale action record look pending:
/// `applied` moves past the new generation first.
fn retire_entries<P: Persist>(pm: &P, lane: &mut UndoLane) {
    set_word(pm, lane.base + APPLIED_AT, lane.generation + 1);
    lane.generation += 1;
    set_word(pm, lane.base + GENERATION_AT, lane.generation);
    lane.tail = 0;
}

/// Refuses to start work on a lane whose generation has no successor: a commit, an abort
/// and a recovery each move the generation (and `applied`) one up, and every value must fit
/// the lane's checked words.
fn check_generation_room(lane: &UndoLane) -> TxResult<()> {
    if lane.generation >= checked::MAX_VALUE {
        return Err(TxError::CounterExhausted { what: GENERATION });
    }
    Ok(())
}

/// Stores a checked counter word and makes it durable. Every caller stores at most one past
/// a generation [`check_generation_room`] accepted, so the value fits.
fn set_word<P: Persist>(pm: &P, at: u64, value: u64) {
    let word = checked::seal(value, at, "undo lane counter")
        .expect("a lane only starts work below its generation limit");
    pm.write_u64(at, word, WriteClass::Log);
    pm.persist(at, 8);
}

/// A transaction of the undo engine (its state is in the lane it holds).
#[derive(Debug)]
pub struct UndoTx<'e, P: Persist> {
    engine: &'e Undo<P>,
    lane: MutexGuard<'e, UndoLane>,
}

impl<P: Persist> UndoTx<'_, P> {
    /// Logs and persists the old bytes of every part of `[addr, addr + len)` not yet covered.
    fn snapshot(&mut self, addr: u64, len: u64) -> TxResult<()> {
        let lane = &mut *self.lane;
        if lane.work.covered.covers(addr, addr + len) {
            return Ok(());
        }
        let mut gaps = std::mem::take(&mut lane.work.gaps);
        lane.work.covered.gaps_into(addr, addr + len, &mut gaps);
        let logged = self.log_gaps(&gaps);
        self.lane.work.gaps = gaps;
        logged
    }

    /// Logs the old bytes of `gaps` (all or nothing: a partly logged write would leave bytes
    /// marked covered whose old contents are not durable), fences, and marks them covered.
    fn log_gaps(&mut self, gaps: &[(u64, u64)]) -> TxResult<()> {
        let needed: u64 = gaps
            .iter()
            .map(|(s, e)| ENTRY_HEADER_LEN + (e - s).next_multiple_of(8))
            .sum();
        let lane = &mut *self.lane;
        let capacity = lane.end - lane.entries_start();
        if lane.tail + needed > capacity {
            return Err(TxError::LogFull {
                needed: lane.tail + needed,
                capacity,
            });
        }
        let pm = self.engine.pool.pm();
        for &(start, end) in gaps {
            let len = (end - start) as usize;
            let at = lane.work.old.len();
            lane.work.old.resize(at + len, 0);
            pm.read(start, &mut lane.work.old[at..]);
            append_entry(pm, lane, start, at..at + len);
            lane.work.snapshots.push((start, len));
        }
        lane.writer.seal(pm);
        pm.fence();
        if pm.is_poisoned() {
            // The old bytes may not be durable: the caller must not write in place.
            return Err(TxError::Poisoned);
        }
        gaps.iter()
            .for_each(|&(start, end)| lane.work.covered.insert(start, end));
        Ok(())
    }

    fn write_action_record(&mut self) {
        let lane = &mut *self.lane;
        let work = &mut lane.work;
        work.scratch.clear();
        work.scratch
            .extend_from_slice(&lane.generation.to_le_bytes());
        work.scratch
            .extend_from_slice(&(work.actions.len() as u32).to_le_bytes());
        work.scratch.extend_from_slice(&[0u8; 4]);
        for action in &work.actions {
            work.scratch.extend_from_slice(&action.encode());
        }
        let crc = action_crc(lane.generation, &work.scratch[ACTION_HEADER_LEN as usize..]);
        work.scratch[12..16].copy_from_slice(&crc.to_le_bytes());
        let pm = self.engine.pool.pm();
        lane.writer
            .append(pm, lane.base + ACTIONS_AT, &work.scratch);
        lane.writer.seal(pm);
    }
}

/// Appends one entry holding the old bytes `lane.work.old[old]` of `addr` (the caller checked
/// that it fits).
fn append_entry<P: Persist>(pm: &P, lane: &mut UndoLane, addr: u64, old: std::ops::Range<usize>) {
    let len = old.len();
    let size = ENTRY_HEADER_LEN + (len as u64).next_multiple_of(8);
    let at = lane.entries_start() + lane.tail;
    debug_assert!(at + size <= lane.end);
    let (work, generation) = (&mut lane.work, lane.generation);
    let old = &work.old[old];
    let scratch = &mut work.scratch;
    scratch.clear();
    scratch.extend_from_slice(&generation.to_le_bytes());
    scratch.extend_from_slice(&addr.to_le_bytes());
    scratch.extend_from_slice(&(len as u32).to_le_bytes());
    scratch.extend_from_slice(&entry_crc(generation, addr, old, at).to_le_bytes());
    extend_bytes(scratch, old);
    scratch.resize(size as usize, 0);
    lane.writer.append(pm, at, scratch);
    lane.tail += size;
}

impl<P: Persist> Lifecycle for UndoTx<'_, P> {
    fn commit(&mut self) -> TxResult<()> {
        let engine = self.engine;
        let pm = engine.pool.pm();
        let work = &mut self.lane.work;
        work.actions.clear();
        work.actions.extend(
            work.reservations
                .iter()
                .map(|r| engine.heap.publish_action(r))
                .chain(work.frees.iter().map(|f| engine.heap.free_action(f))),
        );
        // Before the "nothing to commit" return: a write refused because the pool is
        // poisoned left its undo entries in the log without marking anything modified, and
        // a body that ignored that error must not see its transaction commit.
        if pm.is_poisoned() {
            return Err(TxError::Poisoned);
        }
        if work.modified.is_empty() && work.zeroed.is_empty() && work.actions.is_empty() {
            debug_assert!(work.snapshots.is_empty());
            return Ok(());
        }
        let record_len = ACTION_HEADER_LEN + (work.actions.len() * ACTION_LEN) as u64;
        if record_len > self.lane.action_area {
            return Err(TxError::LogFull {
                needed: record_len,
                capacity: self.lane.action_area,
            });
        }
        let work = &self.lane.work;
        work.modified
            .iter()
            .for_each(|(start, end)| pm.flush(start, end - start));
        work.zeroed
            .iter()
            .for_each(|&(addr, len)| pm.flush(addr, len));
        let has_actions = !work.actions.is_empty();
        if has_actions {
            self.write_action_record();
        }
        pm.fence();
        if pm.is_poisoned() {
            // The data may not be durable: do not commit (the abort path rolls it back).
            return Err(TxError::Poisoned);
        }
        let lane = &mut *self.lane;
        lane.generation += 1;
        set_word(pm, lane.base + GENERATION_AT, lane.generation);
        pm.durability_point();
        lane.tail = 0;
        if has_actions {
            let _serialised = engine.actions.lock();
            lane.work.actions.iter().for_each(|a| a.apply(pm));
            pm.fence();
            set_word(pm, lane.base + APPLIED_AT, lane.generation);
        }
        let work = &mut lane.work;
        work.reservations.clear();
        work.frees
            .drain(..)
            .for_each(|f| engine.heap.finish_free(&f));
        pm.stats().record_user_bytes(work.modified.total_len());
        work.clear();
        Ok(())
    }

    fn abort(&mut self) {
        let pm = self.engine.pool.pm();
        let lane = &mut *self.lane;
        if !lane.work.snapshots.is_empty() {
            let mut end = lane.work.old.len();
            for &(addr, len) in lane.work.snapshots.iter().rev() {
                pm.write(addr, &lane.work.old[end - len..end], WriteClass::User);
                pm.flush(addr, len as u64);
                end -= len;
            }
            pm.fence();
            retire_entries(pm, lane);
        }
        let work = &mut lane.work;
        work.reservations
            .drain(..)
            .for_each(|r| self.engine.heap.cancel(&r));
        work.frees
            .drain(..)
            .for_each(|f| self.engine.heap.cancel_free(&f));
        work.clear();
    }
}

impl<P: Persist> Tx for UndoTx<'_, P> {
    fn read_raw(&mut self, addr: u64, dst: &mut [u8]) -> TxResult<()> {
        if !self.engine.pool.pm().check_range(addr, dst.len() as u64) {
            return Err(TxError::OutOfBounds {
                addr,
                len: dst.len() as u64,
            });
        }
        self.engine.pool.pm().read(addr, dst);
        Ok(())
    }

    fn write_raw(&mut self, addr: u64, src: &[u8]) -> TxResult<()> {
        let len = src.len() as u64;
        let engine = self.engine;
        if !(engine.user.contains(addr, len) || engine.chunks.contains(addr, len)) {
            return Err(TxError::OutOfBounds { addr, len });
        }
        self.snapshot(addr, len)?;
        engine.pool.pm().write(addr, src, WriteClass::User);
        self.lane.work.modified.insert(addr, addr + len);
        Ok(())
    }

    fn alloc_raw(&mut self, size: u64) -> TxResult<u64> {
        let engine = self.engine;
        let reservation = engine
            .heap
            .reserve(size, &mut |actions| engine.apply_system(actions))?;
        // A block allocated here needs no snapshot: if the transaction aborts, it is freed.
        let work = &mut self.lane.work;
        work.covered
            .insert(reservation.addr, reservation.addr + reservation.size);
        work.reservations.push(reservation);
        Ok(reservation.addr)
    }

    fn alloc_zeroed_raw(&mut self, size: u64) -> TxResult<u64> {
        let addr = self.alloc_raw(size)?;
        // A fresh block needs no snapshot: zero it in place and write it back at commit.
        self.engine.pool.pm().fill(addr, size, 0, WriteClass::User);
        self.lane.work.zeroed.push((addr, size));
        Ok(addr)
    }

    fn free_raw(&mut self, addr: u64) -> TxResult<()> {
        let freeing = self.engine.heap.prepare_free(addr)?;
        self.lane.work.frees.push(freeing);
        Ok(())
    }

    fn pool_tag(&self) -> u16 {
        self.engine.tag
    }

    fn root_offset(&self) -> u64 {
        self.engine.user.offset
    }

    fn engine_id(&self) -> u64 {
        self.engine.id
    }
}

impl<P: Persist> Engine for Undo<P> {
    type Tx<'e>
        = UndoTx<'e, P>
    where
        Self: 'e;

    fn name(&self) -> &'static str {
        "undo"
    }

    fn isolation(&self) -> Isolation {
        Isolation::External
    }

    fn transaction<R, E>(
        &self,
        body: impl FnMut(&mut UndoTx<'_, P>) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<TxError>,
    {
        let _running = crate::api::enter(self)?;
        let (_, mut lane) = self.lanes.acquire();
        check_generation_room(&lane)?;
        // A transaction that panicked inside `abort` may have left its state behind.
        lane.work.clear();
        let tx = UndoTx { engine: self, lane };
        run_transaction(tx, body)
    }

    fn counters(&self) -> pmem::Counters {
        self.pool.pm().stats().snapshot()
    }
}
