//! The `redo` engine: writes are buffered in DRAM; at commit one record (the coalesced new
//! values plus the heap actions) is written to the thread's lane and made durable with a
//! single fence; then the values are written in place and their lines flushed, without a
//! fence. The next fence of the same thread completes those write-backs ("lazy apply").
//!
//! Records carry a global sequence number. Recovery replays, in sequence order, every intact
//! record newer than the persisted *watermark*; a record may be overwritten only once the
//! watermark covers it, and the watermark only passes a record whose in-place writes are
//! durable. Replaying a suffix of committed records in order is therefore always correct,
//! even across lanes (see `docs/tx-format.md` for the argument).

use crate::api::{Engine, Isolation, Tx, TxError, TxResult, pool_tag};
use crate::lanes::{EngineOptions, Lanes};
use crate::layout::{EngineKind, EngineLayout};
use crate::logwriter::{LogMode, LogWriter};
use crate::record::{self, RecordKind};
use crate::writeset::WriteSet;
use heap::{Action, Freeing, Heap, HeapError, Reservation};
use parking_lot::{Mutex, MutexGuard};
use pmem::{CACHE_LINE, Persist, Pool, Region, WriteClass};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::ThreadId;

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
    /// The persisted watermark (every record up to it is durable in place).
    watermark: Mutex<u64>,
    /// Heap actions read-modify-write shared bitmap words.
    actions: Mutex<()>,
    mode: LogMode,
    tag: u16,
    user: Region,
}

/// A lane's log ring (owned by the transaction holding the lane).
#[derive(Debug)]
struct Ring {
    base: u64,
    size: u64,
    /// Live records in ring order: (seq, position, length).
    records: VecDeque<(u64, u64, u64)>,
    writer: LogWriter,
    scratch: Vec<u8>,
}

/// A lane's commit progress, readable by every thread.
#[derive(Debug)]
struct Progress {
    /// Sequence number of a commit between sequencing and apply, or NONE.
    inflight: AtomicU64,
    /// Sequence number of the last applied record whose write-backs no fence has covered.
    unfenced_seq: AtomicU64,
    unfenced: Mutex<Option<Unfenced>>,
}

#[derive(Debug)]
struct Unfenced {
    ranges: Vec<(u64, u64)>,
    thread: ThreadId,
}

impl Ring {
    fn end_of(&self, (_, pos, len): (u64, u64, u64)) -> u64 {
        (pos + len).next_multiple_of(CACHE_LINE).min(self.size)
    }

    /// Where a record of `len` bytes fits, if anywhere.
    fn fit(&self, len: u64) -> Option<u64> {
        let (Some(&first), Some(&last)) = (self.records.front(), self.records.back()) else {
            return (len <= self.size).then_some(0);
        };
        let (tail, head) = (first.1, self.end_of(last));
        // head == tail only when the ring is exactly full.
        if head > tail {
            if head + len <= self.size {
                return Some(head);
            }
            return (len <= tail).then_some(0);
        }
        (head + len <= tail).then_some(head)
    }
}

impl<P: Persist> Redo<P> {
    /// Formats the engine area of a fresh pool and returns the engine.
    pub fn create(pool: Pool<P>, options: &EngineOptions) -> TxResult<Self> {
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
        layout.write(pm);
        Self::open(pool, options)
    }

    /// Opens the engine area of `pool`, replaying committed records (recovery).
    pub fn open(pool: Pool<P>, options: &EngineOptions) -> TxResult<Self> {
        let layout = EngineLayout::read(pool.pm(), pool.arena(), EngineKind::Redo)?;
        let watermark = recover(pool.pm(), &layout)?;
        let heap = Heap::open(pool.pm(), layout.heap)?;
        let lanes = Lanes::new((0..layout.lane_count as usize).map(|lane| Ring {
            base: layout.lane(lane),
            size: layout.lane_size,
            records: VecDeque::new(),
            writer: LogWriter::new(options.log_mode),
            scratch: Vec::new(),
        }));
        let progress = (0..layout.lane_count)
            .map(|_| Progress {
                inflight: AtomicU64::new(NONE),
                unfenced_seq: AtomicU64::new(NONE),
                unfenced: Mutex::new(None),
            })
            .collect();
        let tag = pool_tag(&pool.header().uuid);
        let user = pool.root();
        Ok(Redo {
            pool,
            layout,
            heap,
            lanes,
            progress,
            next_seq: Mutex::new(watermark + 1),
            watermark: Mutex::new(watermark),
            actions: Mutex::new(()),
            mode: options.log_mode,
            tag,
            user,
        })
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
        let chunks = Region {
            offset: self.heap.layout().chunks,
            len: self.heap.layout().end() - self.heap.layout().chunks,
        };
        self.user.contains(addr, len) || chunks.contains(addr, len)
    }

    /// Writes, fences and applies one record in `lane`. Returns after the record is
    /// durable and applied (write-backs issued, not fenced).
    fn commit_record(
        &self,
        lane: usize,
        ring: &mut Ring,
        kind: RecordKind,
        ranges: &[(u64, Vec<u8>)],
        actions: &[Action],
    ) -> TxResult<()> {
        let pm = self.pool.pm();
        if pm.is_poisoned() {
            return Err(TxError::Poisoned);
        }
        let len = record::encoded_len(ranges, actions.len()) as u64;
        let pos = self.reserve_space(ring, len)?;
        let seq = self.sequence(lane);
        let mut scratch = std::mem::take(&mut ring.scratch);
        record::encode(kind, seq, ranges, actions, &mut scratch);
        ring.writer.append(pm, ring.base + pos, &scratch);
        ring.writer.seal(pm);
        ring.scratch = scratch;
        self.cover_previous_apply(lane);
        pm.fence();
        if kind == RecordKind::Transaction {
            pm.durability_point();
        }
        self.progress[lane]
            .unfenced_seq
            .store(NONE, Ordering::Release);
        let flushed = self.apply(ranges, actions);
        self.finish(lane, seq, flushed);
        ring.records.push_back((seq, pos, len));
        Ok(())
    }

    /// Takes the next sequence number and marks it in flight in `lane`.
    fn sequence(&self, lane: usize) -> u64 {
        let mut next = self.next_seq.lock();
        let seq = *next;
        *next += 1;
        self.progress[lane].inflight.store(seq, Ordering::Release);
        seq
    }

    /// Before this lane's commit fence: if the lane's previous record was applied by another
    /// thread, write its lines back again from this thread, so this fence completes them.
    fn cover_previous_apply(&self, lane: usize) {
        let mut unfenced = self.progress[lane].unfenced.lock();
        if let Some(previous) = unfenced.take()
            && previous.thread != std::thread::current().id()
        {
            previous
                .ranges
                .iter()
                .for_each(|&(addr, len)| self.pool.pm().flush(addr, len));
        }
    }

    /// Writes the record's contents in place and issues the write-backs (no fence).
    fn apply(&self, ranges: &[(u64, Vec<u8>)], actions: &[Action]) -> Vec<(u64, u64)> {
        let pm = self.pool.pm();
        let mut flushed = Vec::with_capacity(ranges.len() + actions.len());
        for (addr, bytes) in ranges {
            pm.write(*addr, bytes, WriteClass::User);
            pm.flush(*addr, bytes.len() as u64);
            flushed.push((*addr, bytes.len() as u64));
        }
        if !actions.is_empty() {
            let _serialised = self.actions.lock();
            for action in actions {
                action.apply(pm);
                flushed.push((action.addr(), action.len()));
            }
        }
        flushed
    }

    fn finish(&self, lane: usize, seq: u64, ranges: Vec<(u64, u64)>) {
        let progress = &self.progress[lane];
        *progress.unfenced.lock() = Some(Unfenced {
            ranges,
            thread: std::thread::current().id(),
        });
        progress.unfenced_seq.store(seq, Ordering::Release);
        progress.inflight.store(NONE, Ordering::Release);
    }

    /// Finds room for `len` bytes in the ring, advancing the watermark if records must go.
    fn reserve_space(&self, ring: &mut Ring, len: u64) -> TxResult<u64> {
        if len > ring.size {
            return Err(TxError::LogFull {
                needed: len,
                capacity: ring.size,
            });
        }
        loop {
            let watermark = *self.watermark.lock();
            while ring
                .records
                .front()
                .is_some_and(|&(seq, _, _)| seq <= watermark)
            {
                ring.records.pop_front();
            }
            if let Some(pos) = ring.fit(len) {
                return Ok(pos);
            }
            let oldest = ring.records.front().map_or(0, |r| r.0);
            self.advance_watermark(oldest);
        }
    }

    /// Makes the persisted watermark reach `target`, forcing lagging write-backs if needed.
    fn advance_watermark(&self, target: u64) {
        loop {
            let reachable = self.reachable_watermark();
            if reachable >= target {
                return self.persist_watermark(reachable);
            }
            let mut forced = false;
            for lane in self.progress.iter() {
                if lane.unfenced_seq.load(Ordering::Acquire) <= target {
                    forced |= self.force(lane);
                }
            }
            if !forced {
                std::thread::yield_now();
            }
        }
    }

    /// The highest sequence number below every record that is in flight or not yet durable
    /// in place.
    fn reachable_watermark(&self) -> u64 {
        let next = self.next_seq.lock();
        let floor = self
            .progress
            .iter()
            .flat_map(|p| {
                [
                    p.inflight.load(Ordering::Acquire),
                    p.unfenced_seq.load(Ordering::Acquire),
                ]
            })
            .min()
            .unwrap_or(NONE)
            .min(*next);
        floor - 1
    }

    /// Completes a lane's pending write-backs from this thread. Returns whether it did.
    fn force(&self, lane: &Progress) -> bool {
        let mut unfenced = lane.unfenced.lock();
        let Some(previous) = unfenced.take() else {
            return false;
        };
        let pm = self.pool.pm();
        previous
            .ranges
            .iter()
            .for_each(|&(addr, len)| pm.flush(addr, len));
        pm.fence();
        lane.unfenced_seq.store(NONE, Ordering::Release);
        true
    }

    fn persist_watermark(&self, value: u64) {
        let mut watermark = self.watermark.lock();
        if value > *watermark {
            let pm = self.pool.pm();
            pm.write_u64(self.layout.watermark(), value, WriteClass::Meta);
            pm.persist(self.layout.watermark(), 8);
            *watermark = value;
        }
    }

    /// Completes every pending write-back and moves the watermark past every record, so the
    /// next open has nothing to replay.
    pub fn quiesce(&self) {
        for lane in self.progress.iter() {
            self.force(lane);
        }
        self.pool.pm().fence();
        let last = *self.next_seq.lock() - 1;
        self.persist_watermark(last);
    }
}

impl<P: Persist> Drop for Redo<P> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.quiesce();
        }
    }
}

/// Replays every intact record newer than the watermark, in sequence order, then moves the
/// watermark past them. Idempotent: a crash during it leaves the records to replay again.
fn recover<P: Persist>(pm: &P, layout: &EngineLayout) -> TxResult<u64> {
    let watermark = pm.read_u64(layout.watermark());
    let mut newest = watermark;
    let mut pending = Vec::new();
    for lane in 0..layout.lane_count as usize {
        let (base, limit) = (layout.lane(lane), layout.lane(lane) + layout.lane_size);
        for pos in (base..limit).step_by(CACHE_LINE as usize) {
            if let Some(rec) = record::read(pm, pos, limit)? {
                newest = newest.max(rec.seq);
                if rec.seq > watermark {
                    pending.push(rec);
                }
            }
        }
    }
    pending.sort_by_key(|rec| rec.seq);
    for rec in &pending {
        for (addr, bytes) in &rec.ranges {
            pm.write(*addr, bytes, WriteClass::User);
            pm.flush(*addr, bytes.len() as u64);
        }
        rec.actions.iter().for_each(|action| action.apply(pm));
    }
    pm.fence();
    if newest > watermark {
        pm.write_u64(layout.watermark(), newest, WriteClass::Meta);
        pm.persist(layout.watermark(), 8);
    }
    Ok(newest)
}

/// A transaction of the redo engine.
#[derive(Debug)]
pub struct RedoTx<'e, P: Persist> {
    engine: &'e Redo<P>,
    lane: usize,
    ring: MutexGuard<'e, Ring>,
    writes: WriteSet,
    reservations: Vec<Reservation>,
    frees: Vec<Freeing>,
    user_bytes: u64,
}

impl<P: Persist> RedoTx<'_, P> {
    fn commit(&mut self) -> TxResult<()> {
        if self.writes.is_empty() && self.reservations.is_empty() && self.frees.is_empty() {
            return Ok(());
        }
        let engine = self.engine;
        let ranges = self.writes.coalesce();
        let actions: Vec<Action> = self
            .reservations
            .iter()
            .map(|r| engine.heap.publish_action(r))
            .chain(self.frees.iter().map(|f| engine.heap.free_action(f)))
            .collect();
        engine.commit_record(
            self.lane,
            &mut self.ring,
            RecordKind::Transaction,
            &ranges,
            &actions,
        )?;
        self.reservations.clear();
        self.frees
            .drain(..)
            .for_each(|f| engine.heap.finish_free(&f));
        engine.pool.pm().stats().record_user_bytes(self.user_bytes);
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
        self.writes.overlay(addr, dst);
        Ok(())
    }

    fn write_raw(&mut self, addr: u64, src: &[u8]) -> TxResult<()> {
        if !self.engine.writable(addr, src.len() as u64) {
            return Err(TxError::OutOfBounds {
                addr,
                len: src.len() as u64,
            });
        }
        self.writes.write(addr, src);
        self.user_bytes += src.len() as u64;
        Ok(())
    }

    fn alloc_raw(&mut self, size: u64) -> TxResult<u64> {
        let (engine, lane, ring) = (self.engine, self.lane, &mut self.ring);
        let mut system = |actions: &[Action]| {
            engine
                .commit_record(lane, ring, RecordKind::System, &[], actions)
                .map_err(|e| HeapError::Corrupted(format!("run creation failed: {e}")))
        };
        let reservation = engine.heap.reserve(size, &mut system)?;
        self.reservations.push(reservation);
        Ok(reservation.addr)
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
        mut body: impl FnMut(&mut RedoTx<'_, P>) -> Result<R, E>,
    ) -> Result<R, E>
    where
        E: From<TxError>,
    {
        let (lane, ring) = self.lanes.acquire();
        let mut tx = RedoTx {
            engine: self,
            lane,
            ring,
            writes: WriteSet::default(),
            reservations: Vec::new(),
            frees: Vec::new(),
            user_bytes: 0,
        };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&mut tx)));
        match outcome {
            Ok(Ok(value)) => match tx.commit() {
                Ok(()) => Ok(value),
                Err(error) => {
                    tx.abort();
                    Err(E::from(error))
                }
            },
            Ok(Err(error)) => {
                tx.abort();
                Err(error)
            }
            Err(panic) => {
                tx.abort();
                drop(tx);
                std::panic::resume_unwind(panic)
            }
        }
    }

    fn counters(&self) -> pmem::Counters {
        self.pool.pm().stats().snapshot()
    }
}
