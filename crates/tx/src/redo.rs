//! The `redo` engine: writes are buffered in DRAM; at commit one record (the coalesced new
//! values plus the heap actions) is written to the thread's lane and made durable with a
//! single fence; then the values are written in place *without* write-backs. Their lines are
//! written back in bulk by a checkpoint when a lane needs log space (so a hot line is written
//! back once per checkpoint rather than once per transaction).
//!
//! Records carry a global sequence number. Recovery replays, in sequence order, every intact
//! record newer than the persisted *watermark*; a record may be overwritten only once the
//! watermark covers it, and a checkpoint moves the watermark only past records whose in-place
//! writes it has written back and fenced. Replaying a suffix of committed records in order is
//! therefore always correct, even across lanes (see `docs/tx-format.md` for the argument).

use crate::api::{
    Engine, Isolation, Lifecycle, Tx, TxError, TxResult, new_engine_id, pool_tag, run_transaction,
};
use crate::lanes::{EngineOptions, Lanes};
use crate::layout::{EngineKind, EngineLayout};
use crate::logwriter::{LogMode, LogWriter};
use crate::record::{self, RecordKind};
use crate::recovery::{RecoveryMode, RecoveryReport, WATERMARK, refuse, scan_redo};
use crate::ring::LogRing;
use crate::writeset::{Coalesced, WriteSet};
use heap::{Action, Freeing, Heap, Reservation};
use parking_lot::{Mutex, MutexGuard};
use pmem::checked;
use pmem::{CACHE_LINE, Persist, Pool, Region, WriteClass};
use std::sync::atomic::{AtomicU64, Ordering};

const NONE: u64 = u64::MAX;

/// The redo-logging engine over a pool on backend `P`.
#[derive(Debug)]
pub struct Redo<P: Persist> {
    pool: Pool<P>,
    layout: EngineLayout,
    heap: Heap,
    lanes: Lanes<Ring>,
    progress: Box<[Progress]>,
    /// Next sequence number; also serialises reading the lanes' progress.
    next_seq: Mutex<u64>,
    /// The persisted watermark: every record up to it is durable in place.
    watermark: AtomicU64,
    /// One checkpoint at a time; holds the ranges it is writing back.
    checkpoint: Mutex<Vec<(u64, u64)>>,
    /// Heap actions read-modify-write shared bitmap words.
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

/// A lane's log ring and the buffers its transactions reuse (owned by the transaction
/// holding the lane).
#[derive(Debug)]
struct Ring {
    base: u64,
    /// Where the lane's live records are.
    log: LogRing,
    writer: LogWriter,
    scratch: Vec<u8>,
    writes: WriteSet,
    coalesced: Coalesced,
    actions: Vec<Action>,
}

/// A lane's commit progress, readable by every thread.
#[derive(Debug)]
struct Progress {
    /// Sequence number of a commit between sequencing and the end of its apply, or NONE.
    inflight: AtomicU64,
    /// Lowest sequence number whose in-place writes are in `dirty`, or NONE.
    dirty_floor: AtomicU64,
    /// Byte ranges written in place and not yet written back by a checkpoint.
    dirty: Mutex<DirtyRanges>,
}

/// Lines a lane remembers having listed as dirty since the last checkpoint (a direct-mapped
/// filter: a hot line, such as a structure's header, is listed once per checkpoint instead
/// of once per transaction).
const RECENT_LINES: usize = 256;

/// A lane's ranges written in place since the last checkpoint.
#[derive(Debug)]
struct DirtyRanges {
    ranges: Vec<(u64, u64)>,
    /// `line + 1` of recently listed one-line ranges, by a hash of the line (0: none).
    recent: Box<[u64; RECENT_LINES]>,
}

impl DirtyRanges {
    fn new() -> Self {
        DirtyRanges {
            ranges: Vec::new(),
            recent: Box::new([0; RECENT_LINES]),
        }
    }

    /// Lists `[addr, addr + len)`, unless it lies in one line listed since the last
    /// checkpoint.
    #[inline]
    fn add(&mut self, addr: u64, len: u64) {
        let lines = pmem::lines_covering(addr, len);
        if lines.end - lines.start == 1 {
            let slot = (lines.start.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize;
            if self.recent[slot] == lines.start + 1 {
                return;
            }
            self.recent[slot] = lines.start + 1;
        }
        self.ranges.push((addr, len));
    }

    /// Moves the listed ranges to `out` (appended) and forgets them.
    fn drain_into(&mut self, out: &mut Vec<(u64, u64)>) {
        out.append(&mut self.ranges);
        self.recent.fill(0);
    }
}

impl<P: Persist> Redo<P> {
    /// Formats the engine area of a fresh pool (one [`Pool::create`] just made) and returns
    /// the engine. A pool whose engine area holds anything (any engine's area, or other
    /// data) is refused with [`TxError::AlreadyFormatted`] and left unchanged: `open` a pool
    /// that exists.
    pub fn create(pool: Pool<P>, options: &EngineOptions) -> TxResult<Self> {
        crate::layout::refuse_formatted(pool.pm(), pool.arena())?;
        let layout = EngineLayout::plan(
            EngineKind::Redo,
            pool.arena(),
            options.lanes,
            options.lane_size,
        )?;
        let pm = pool.pm();
        let lanes_len = u64::from(layout.lane_count) * layout.lane_size;
        pm.fill(layout.lanes, lanes_len, 0, WriteClass::Log);
        pm.persist(layout.lanes, lanes_len);
        Heap::format(pm, layout.heap, options.chunk_shift)?;
        layout.write(pm)?;
        Self::open(pool, options)
    }

    /// Opens the engine area of `pool`, replaying committed records (recovery). A log with
    /// damage in the middle of a lane (not a torn tail) is refused with `Corrupted`.
    ///
    /// The lanes, their size and the heap's chunk size are the pool's, recorded by
    /// `create`; of `options` only the run-time [`EngineOptions::log_mode`] applies. A pool
    /// of another engine is `WrongEngine`, one no engine formatted `Corrupted`.
    pub fn open(pool: Pool<P>, options: &EngineOptions) -> TxResult<Self> {
        Self::open_with(pool, options, RecoveryMode::Strict)
    }

    /// Opens the engine area of `pool` even if its log is damaged: every intact record is
    /// replayed, and [`Redo::recovery_report`] lists the damage skipped. An explicit choice
    /// for getting data out of a damaged pool; the result may mix states.
    pub fn salvage(pool: Pool<P>, options: &EngineOptions) -> TxResult<Self> {
        Self::open_with(pool, options, RecoveryMode::Salvage)
    }

    fn open_with(pool: Pool<P>, options: &EngineOptions, mode: RecoveryMode) -> TxResult<Self> {
        let recovered =
            EngineLayout::read(pool.pm(), pool.arena(), EngineKind::Redo).and_then(|layout| {
                let (watermark, report) = recover(pool.pm(), &layout, mode)?;
                Ok((
                    layout,
                    watermark,
                    report,
                    Heap::open(pool.pm(), layout.heap)?,
                ))
            });
        // A pool that could not be recovered must not be marked as cleanly closed.
        let (layout, watermark, recovery, heap) =
            recovered.inspect_err(|error| crate::api::refused_open(&pool, error))?;
        let lanes = Lanes::new((0..layout.lane_count as usize).map(|lane| Ring {
            base: layout.lane(lane),
            log: LogRing::new(layout.lane_size),
            writer: LogWriter::new(options.log_mode),
            scratch: Vec::new(),
            writes: WriteSet::default(),
            coalesced: Coalesced::default(),
            actions: Vec::new(),
        }));
        let progress = (0..layout.lane_count)
            .map(|_| Progress {
                inflight: AtomicU64::new(NONE),
                dirty_floor: AtomicU64::new(NONE),
                dirty: Mutex::new(DirtyRanges::new()),
            })
            .collect();
        let tag = pool_tag(&pool.header().uuid);
        let user = pool.root();
        let chunks = Region {
            offset: heap.layout().chunks,
            len: heap.layout().end() - heap.layout().chunks,
        };
        Ok(Redo {
            pool,
            layout,
            heap,
            lanes,
            progress,
            next_seq: Mutex::new(watermark + 1),
            watermark: AtomicU64::new(watermark),
            checkpoint: Mutex::new(Vec::new()),
            actions: Mutex::new(()),
            mode: options.log_mode,
            tag,
            id: new_engine_id(),
            user,
            chunks,
            recovery,
        })
    }

    /// What the recovery at open found (torn tails discarded, damage salvaged) and replayed.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
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

    /// Whether `[addr, addr + len)` is somewhere a transaction may write: the root object or
    /// the heap's chunks.
    fn writable(&self, addr: u64, len: u64) -> bool {
        self.user.contains(addr, len) || self.chunks.contains(addr, len)
    }

    /// Writes, fences and applies one record in `lane`. Returns once the record is durable
    /// and its contents are written in place (not yet written back: see `checkpoint`).
    fn commit_record(
        &self,
        lane: usize,
        ring: &mut Ring,
        kind: RecordKind,
        ranges: &Coalesced,
        actions: &[Action],
    ) -> TxResult<()> {
        let pm = self.pool.pm();
        if pm.is_poisoned() {
            return Err(TxError::Poisoned);
        }
        let len = record::encoded_size(ranges.iter(), actions.len()) as u64;
        let pos = self.reserve_space(ring, len)?;
        let seq = self.sequence(lane)?;
        record::encode(
            ring.base + pos,
            kind,
            seq,
            ranges.iter(),
            actions,
            &mut ring.scratch,
        );
        ring.writer
            .append_line_record(pm, ring.base + pos, &mut ring.scratch);
        pm.fence();
        if pm.is_poisoned() {
            // The record may not be durable: the commit fails (nothing was applied).
            self.progress[lane].inflight.store(NONE, Ordering::SeqCst);
            return Err(TxError::Poisoned);
        }
        if kind == RecordKind::Transaction {
            pm.durability_point();
        }
        self.apply(lane, seq, ranges, actions);
        ring.log.push(seq, pos, len);
        Ok(())
    }

    /// Takes the next sequence number and marks it in flight in `lane`. A sequence number the
    /// watermark's checked word could not hold is refused before anything is written.
    fn sequence(&self, lane: usize) -> TxResult<u64> {
        let mut next = self.next_seq.lock();
        let seq = *next;
        if seq > checked::MAX_VALUE {
            return Err(TxError::CounterExhausted {
                what: "redo sequence",
            });
        }
        *next += 1;
        self.progress[lane].inflight.store(seq, Ordering::SeqCst);
        Ok(seq)
    }

    /// Writes the record's contents in place, without write-backs: the lines go to the lane's
    /// dirty list, written back together by the next checkpoint (hot lines once per checkpoint
    /// instead of once per transaction).
    fn apply(&self, lane: usize, seq: u64, ranges: &Coalesced, actions: &[Action]) {
        {
            // Heap actions read-modify-write bitmap words other lanes' actions share.
            let _serialised = (!actions.is_empty()).then(|| self.actions.lock());
            store_record(self.pool.pm(), ranges.iter(), actions);
        }
        let progress = &self.progress[lane];
        let mut dirty = progress.dirty.lock();
        for (addr, bytes) in ranges.iter() {
            dirty.add(addr, bytes.len() as u64);
        }
        for action in actions {
            dirty.add(action.addr(), action.len());
        }
        // The floor is set before the sequence number stops being in flight, so a checkpoint
        // that reads `inflight` and then `dirty_floor` always sees one of them.
        if progress.dirty_floor.load(Ordering::SeqCst) == NONE {
            progress.dirty_floor.store(seq, Ordering::SeqCst);
        }
        drop(dirty);
        progress.inflight.store(NONE, Ordering::SeqCst);
    }

    /// Finds room for `len` bytes in the ring, checkpointing if old records must go.
    fn reserve_space(&self, ring: &mut Ring, len: u64) -> TxResult<u64> {
        if len > ring.log.size() {
            return Err(TxError::LogFull {
                needed: len,
                capacity: ring.log.size(),
            });
        }
        self.keep_sequences_near_the_watermark()?;
        loop {
            ring.log
                .drop_covered(self.watermark.load(Ordering::Acquire));
            if let Some(pos) = ring.log.fit(len) {
                return Ok(pos);
            }
            let oldest = ring.log.oldest().unwrap_or(0);
            self.checkpoint(oldest)?;
        }
    }

    /// Checkpoints everything committed so far when the next sequence number runs
    /// [`record::SEQ_AHEAD`] past the persisted watermark: records store only the low 16 bits
    /// of their sequence number, and a reader rebuilds it from the watermark, so no record
    /// (nor the one before it in its lane) may lie 2^15 or more away from it.
    fn keep_sequences_near_the_watermark(&self) -> TxResult<()> {
        let next = *self.next_seq.lock();
        // Other lanes may draw later numbers and checkpoint past `next` between the two
        // reads: a watermark ahead of `next` leaves nothing to do.
        if next.saturating_sub(self.watermark.load(Ordering::Acquire)) >= record::SEQ_AHEAD {
            self.checkpoint(next - 1)?;
        }
        Ok(())
    }

    /// Writes back every lane's dirty lines, fences, and moves the persisted watermark past
    /// every record whose writes are now durable, until it reaches `target`.
    fn checkpoint(&self, target: u64) -> TxResult<()> {
        let mut ranges = self.checkpoint.lock();
        let pm = self.pool.pm();
        while self.watermark.load(Ordering::Acquire) < target {
            for progress in self.progress.iter() {
                let mut dirty = progress.dirty.lock();
                dirty.drain_into(&mut ranges);
                progress.dirty_floor.store(NONE, Ordering::SeqCst);
            }
            // Order does not matter before the fence, and the lanes' filters dropped most
            // repeats: write the ranges back as listed.
            ranges.drain(..).for_each(|(addr, len)| pm.flush(addr, len));
            pm.fence();
            if pm.is_poisoned() {
                // The write-backs may have failed: never move the watermark past them.
                return Err(TxError::Poisoned);
            }
            let reachable = self.reachable_watermark();
            self.persist_watermark(reachable)?;
            if reachable < target {
                // A record below the target is still being applied by another thread.
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// The highest sequence number below every record that is in flight or whose in-place
    /// writes are not yet written back.
    fn reachable_watermark(&self) -> u64 {
        let next = self.next_seq.lock();
        let floor = self
            .progress
            .iter()
            .map(|p| {
                let inflight = p.inflight.load(Ordering::SeqCst);
                inflight.min(p.dirty_floor.load(Ordering::SeqCst))
            })
            .min()
            .unwrap_or(NONE)
            .min(*next);
        floor - 1
    }

    fn persist_watermark(&self, value: u64) -> TxResult<()> {
        if value > self.watermark.load(Ordering::Acquire) {
            let pm = self.pool.pm();
            let at = self.layout.watermark();
            pm.write_u64(at, checked::seal(value, at, WATERMARK)?, WriteClass::Meta);
            pm.persist(at, 8);
            self.watermark.store(value, Ordering::Release);
        }
        Ok(())
    }

    /// Writes back every pending in-place write and moves the watermark past every record,
    /// so the next open has nothing to replay.
    pub fn quiesce(&self) -> TxResult<()> {
        let last = *self.next_seq.lock() - 1;
        self.checkpoint(last)
    }
}

/// Writes back each distinct cache line of `lines` once, merging runs of adjacent lines.
fn write_back_lines<P: Persist>(pm: &P, lines: &mut Vec<u64>) {
    lines.sort_unstable();
    lines.dedup();
    let mut runs = lines.chunk_by(|a, b| b - a == 1);
    for run in &mut runs {
        let (first, count) = (run[0], run.len() as u64);
        pm.flush(first * CACHE_LINE, count * CACHE_LINE);
    }
}

impl<P: Persist> Drop for Redo<P> {
    fn drop(&mut self) {
        // A failed write-back leaves the records in the log for the next open to replay.
        if !std::thread::panicking() {
            let _ = self.quiesce();
        }
    }
}

/// Replays every intact record newer than the watermark, in sequence order, then moves the
/// watermark past them. Idempotent: a crash during it leaves the records to replay again.
/// Damage in the middle of a lane (`crate::lanecheck`) is refused before anything is
/// written, unless salvaging.
fn recover<P: Persist>(
    pm: &P,
    layout: &EngineLayout,
    mode: RecoveryMode,
) -> TxResult<(u64, RecoveryReport)> {
    let scan = scan_redo(pm, layout)?;
    if mode == RecoveryMode::Strict && scan.damage().next().is_some() {
        return Err(refuse("the redo log", scan.damage()));
    }
    let mut lines = store_pending(pm, &scan.pending);
    write_back_lines(pm, &mut lines);
    pm.fence();
    let newest = scan.newest;
    if newest > scan.watermark {
        if pm.is_poisoned() {
            return Err(TxError::Poisoned);
        }
        let word = checked::seal(newest, layout.watermark(), WATERMARK)?;
        pm.write_u64(layout.watermark(), word, WriteClass::Meta);
        pm.persist(layout.watermark(), 8);
    }
    let report = RecoveryReport {
        replayed: scan.pending.len(),
        findings: scan.findings,
    };
    Ok((newest, report))
}

/// Stores the pending records' contents in place, in sequence order, without write-backs,
/// and returns the cache lines they touched. Recovery writes those back; the deep check
/// runs it on its private copy of the pool to see the heap as the open will.
pub(crate) fn store_pending<P: Persist>(pm: &P, pending: &[record::Record]) -> Vec<u64> {
    let mut lines = Vec::new();
    for rec in pending {
        let ranges = || {
            rec.ranges
                .iter()
                .map(|(addr, bytes)| (*addr, bytes.as_slice()))
        };
        store_record(pm, ranges(), &rec.actions);
        for (addr, len) in record_spans(ranges(), &rec.actions) {
            lines.extend(pmem::lines_covering(addr, len));
        }
    }
    lines
}

/// Zeroes the bytes of `dst` (which holds `[addr, addr + len)`) that fall in `zeroed`.
fn zero_overlap(zeroed: &[(u64, u64)], addr: u64, dst: &mut [u8]) {
    let end = addr + dst.len() as u64;
    for &(start, len) in zeroed {
        let (from, to) = (start.max(addr), (start + len).min(end));
        if from < to {
            dst[(from - addr) as usize..(to - addr) as usize].fill(0);
        }
    }
}

/// Applies a record's contents in place without write-backs, in replay order: `Zero`
/// actions first (they clear blocks the record's ranges then fill), then the ranges, then
/// the other actions. The caller writes back the lines of `record_spans` later.
fn store_record<'a, P: Persist>(
    pm: &P,
    ranges: impl Iterator<Item = (u64, &'a [u8])>,
    actions: &[Action],
) {
    let is_zero = |a: &&Action| matches!(a, Action::Zero { .. });
    actions
        .iter()
        .filter(is_zero)
        .for_each(|action| action.store(pm));
    for (addr, bytes) in ranges {
        pm.write(addr, bytes, WriteClass::User);
    }
    actions
        .iter()
        .filter(|a| !is_zero(a))
        .for_each(|action| action.store(pm));
}

/// The byte ranges a record changes.
fn record_spans<'a>(
    ranges: impl Iterator<Item = (u64, &'a [u8])>,
    actions: &[Action],
) -> Vec<(u64, u64)> {
    ranges
        .map(|(addr, bytes)| (addr, bytes.len() as u64))
        .chain(actions.iter().map(|action| (action.addr(), action.len())))
        .collect()
}

/// A transaction of the redo engine.
#[derive(Debug)]
pub struct RedoTx<'e, P: Persist> {
    engine: &'e Redo<P>,
    lane: usize,
    ring: MutexGuard<'e, Ring>,
    reservations: Vec<Reservation>,
    /// Fresh blocks that read as zeros; zeroed in place by `Zero` actions at commit.
    zeroed: Vec<(u64, u64)>,
    frees: Vec<Freeing>,
}

impl<P: Persist> Lifecycle for RedoTx<'_, P> {
    fn commit(&mut self) -> TxResult<()> {
        let engine = self.engine;
        let ring = &mut *self.ring;
        if ring.writes.is_empty() && self.reservations.is_empty() && self.frees.is_empty() {
            return Ok(());
        }
        let mut coalesced = std::mem::take(&mut ring.coalesced);
        let mut actions = std::mem::take(&mut ring.actions);
        ring.writes.coalesce_into(&mut coalesced);
        actions.clear();
        actions.extend(
            self.zeroed
                .iter()
                .map(|&(addr, len)| Action::Zero { addr, len }),
        );
        actions.extend(
            self.reservations
                .iter()
                .map(|r| engine.heap.publish_action(r)),
        );
        actions.extend(self.frees.iter().map(|f| engine.heap.free_action(f)));
        let committed = engine.commit_record(
            self.lane,
            ring,
            RecordKind::Transaction,
            &coalesced,
            &actions,
        );
        (ring.coalesced, ring.actions) = (coalesced, actions);
        committed?;
        self.reservations.clear();
        self.frees
            .drain(..)
            .for_each(|f| engine.heap.finish_free(&f));
        engine
            .pool
            .pm()
            .stats()
            .record_user_bytes(ring.coalesced.bytes());
        Ok(())
    }

    fn abort(&mut self) {
        self.reservations
            .drain(..)
            .for_each(|r| self.engine.heap.cancel(&r));
        self.frees
            .drain(..)
            .for_each(|f| self.engine.heap.cancel_free(&f));
    }
}

impl<P: Persist> RedoTx<'_, P> {
    fn check_read(&self, addr: u64, len: usize) -> TxResult<()> {
        if self.engine.pool.pm().check_range(addr, len as u64) {
            Ok(())
        } else {
            Err(TxError::OutOfBounds {
                addr,
                len: len as u64,
            })
        }
    }
}

impl<P: Persist> Tx for RedoTx<'_, P> {
    fn read_raw(&mut self, addr: u64, dst: &mut [u8]) -> TxResult<()> {
        self.check_read(addr, dst.len())?;
        self.engine.pool.pm().read(addr, dst);
        if !self.zeroed.is_empty() {
            zero_overlap(&self.zeroed, addr, dst);
        }
        self.ring.writes.overlay(addr, dst);
        Ok(())
    }

    fn write_raw(&mut self, addr: u64, src: &[u8]) -> TxResult<()> {
        if !self.engine.writable(addr, src.len() as u64) {
            return Err(TxError::OutOfBounds {
                addr,
                len: src.len() as u64,
            });
        }
        if src.is_empty() {
            // Nothing to log: a transaction whose only writes are empty commits without a
            // record (and without a fence).
            return Ok(());
        }
        // Buffered bytes can never exceed what one record (one lane) can hold.
        let buffered = self.ring.writes.buffered_bytes() + src.len() as u64;
        if buffered > self.ring.log.size() {
            return Err(TxError::LogFull {
                needed: buffered,
                capacity: self.ring.log.size(),
            });
        }
        self.ring.writes.write(addr, src);
        Ok(())
    }

    fn alloc_raw(&mut self, size: u64) -> TxResult<u64> {
        let (engine, lane, ring) = (self.engine, self.lane, &mut self.ring);
        // A system record, not stores in place: replay keeps it in sequence order, after
        // older records that may still write the chunk and before every transaction that can
        // use the new run.
        let mut system = |actions: &[Action]| {
            engine.commit_record(
                lane,
                ring,
                RecordKind::System,
                &Coalesced::default(),
                actions,
            )
        };
        let reservation = engine.heap.reserve(size, &mut system)?;
        self.reservations.push(reservation);
        Ok(reservation.addr)
    }

    fn alloc_zeroed_raw(&mut self, size: u64) -> TxResult<u64> {
        let addr = self.alloc_raw(size)?;
        let len = size.next_multiple_of(8);
        self.zeroed.push((addr, len));
        Ok(addr)
    }

    fn free_raw(&mut self, addr: u64) -> TxResult<()> {
        let freeing = self.engine.heap.prepare_free(addr)?;
        self.frees.push(freeing);
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

impl<P: Persist> Engine for Redo<P> {
    type Tx<'e>
        = RedoTx<'e, P>
    where
        Self: 'e;

    fn name(&self) -> &'static str {
        "redo"
    }

    fn isolation(&self) -> Isolation {
        Isolation::External
    }

    fn transaction<R, E>(
        &self,
        body: impl FnMut(&mut RedoTx<'_, P>) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<TxError>,
    {
        let _running = crate::api::enter(self)?;
        let (lane, mut ring) = self.lanes.acquire();
        ring.writes.clear();
        let tx = RedoTx {
            engine: self,
            lane,
            ring,
            reservations: Vec::new(),
            zeroed: Vec::new(),
            frees: Vec::new(),
        };
        run_transaction(tx, body)
    }

    fn counters(&self) -> pmem::Counters {
        self.pool.pm().stats().snapshot()
    }

    fn sync(&self) -> TxResult<()> {
        self.quiesce()
    }
}
