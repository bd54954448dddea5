//! The engine: open and recovery, the commit path, checkpoints and write-back.

use crate::chunks::{CHUNK, PENDING, Table};
use crate::layout::{MvccLayout, checked};
use crate::options::{Level, Mutant, MvccOptions};
use crate::record::{self, Kind, Record};
use crate::txn::{MvccTx, Outcome};
use crossbeam_utils::CachePadded;
use heap::{Action, Descriptor, Heap, HeapError};
use parking_lot::Mutex;
use pmem::{CACHE_LINE, Persist, Pool, Region, WriteClass};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tx::api::{Engine, Isolation, NoReplay, Op, OpId, Replay, TxError, TxResult};
use tx::lanes::Lanes;
use tx::pool_tag;

/// No timestamp (an idle slot).
pub(crate) const NONE: u64 = u64::MAX;

/// The MVCC engine over a pool on backend `P`; `R` re-executes logged operations during
/// recovery.
#[derive(Debug)]
pub struct Mvcc<P: Persist, R: Replay = NoReplay> {
    pub(crate) pool: Pool<P>,
    pub(crate) layout: MvccLayout,
    pub(crate) heap: Heap,
    pub(crate) replay: R,
    pub(crate) table: Table,
    pub(crate) lanes: Lanes<Lane>,
    pub(crate) shared: Box<[CachePadded<Shared>]>,
    /// Serialises taking a commit timestamp, validation and marking versions pending.
    pub(crate) seq: Mutex<()>,
    /// The newest commit timestamp handed out (snapshots read it).
    pub(crate) clock: AtomicU64,
    /// Time of the last durable checkpoint: operations at or before it may leave the OLog.
    pub(crate) checkpointed: AtomicU64,
    /// Chunk versions committed since the last checkpoint.
    pub(crate) dirty_versions: AtomicU64,
    pub(crate) ckpt: Mutex<Ckpt>,
    /// Heap metadata written in place and not yet written back.
    pub(crate) meta_dirty: Mutex<Vec<(u64, u64)>>,
    /// Heap actions read-modify-write shared bitmap words.
    pub(crate) actions: Mutex<()>,
    pub(crate) options: MvccOptions,
    pub(crate) tag: u16,
    pub(crate) user: Region,
    pub(crate) chunks: Region,
    pub(crate) stats: Stats,
    /// Odd while a write-back rewrites masters (readers of clean chunks retry then).
    pub(crate) wb_epoch: AtomicU64,
    /// Set when recovery failed: the engine must not write anything on drop.
    failed: AtomicBool,
}

/// What every thread can see of a lane.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Snapshot of the transaction holding the lane, or NONE.
    pub(crate) snapshot: AtomicU64,
    /// Commit timestamp between sequencing and publication, or NONE.
    pub(crate) inflight: AtomicU64,
    /// Chunks that got versions since the last checkpoint.
    pub(crate) dirty: Mutex<Vec<u64>>,
}

/// A lane's operation log and the buffers its transactions reuse.
#[derive(Debug)]
pub(crate) struct Lane {
    pub(crate) base: u64,
    pub(crate) size: u64,
    /// Live records in ring order: (ts, offset in the lane's log, length).
    pub(crate) records: VecDeque<(u64, u64, u64)>,
    pub(crate) scratch: Vec<u8>,
    pub(crate) writes: Vec<WriteEntry>,
    pub(crate) index: HashMap<u64, usize>,
    pub(crate) reads: Vec<u64>,
    pub(crate) args: Vec<u8>,
}

/// A chunk locked by a transaction, with its private copy.
#[derive(Clone, Debug)]
pub(crate) struct WriteEntry {
    pub(crate) index: u64,
    pub(crate) data: [u8; CHUNK as usize],
    /// Bytes written (bit i = byte i).
    pub(crate) mask: u64,
}

/// Checkpoint-log state (one checkpoint or write-back at a time).
#[derive(Debug, Default)]
pub(crate) struct Ckpt {
    /// Next free offset in the CLog (everything before it is live until the next write-back).
    head: u64,
    /// Time of the newest durable checkpoint.
    last_t: u64,
    /// Chunks checkpointed since the last write-back.
    writeback: Vec<u64>,
    /// Chunks to look at again at the next checkpoint (newer versions, untrimmed chains).
    retrim: Vec<u64>,
    scratch: Vec<u8>,
}

/// Counters of the engine's own events.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) commits_logical: AtomicU64,
    pub(crate) commits_physical: AtomicU64,
    pub(crate) conflicts: AtomicU64,
    pub(crate) checkpoints: AtomicU64,
    pub(crate) writebacks: AtomicU64,
    pub(crate) replayed: AtomicU64,
}

/// A snapshot of the engine's event counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MvccStats {
    /// Commits logged as a registered operation.
    pub commits_logical: u64,
    /// Commits logged as their written bytes.
    pub commits_physical: u64,
    /// Aborted attempts (write–write conflicts, failed validations, reclaimed snapshots).
    pub conflicts: u64,
    /// Checkpoints written to the CLog.
    pub checkpoints: u64,
    /// Write-backs of checkpointed chunks to their masters.
    pub writebacks: u64,
    /// Operations re-executed or re-applied by the last recovery.
    pub replayed: u64,
}

impl Lane {
    fn end_of(&self, (_, pos, len): (u64, u64, u64)) -> u64 {
        (pos + len).next_multiple_of(CACHE_LINE).min(self.size)
    }

    /// Where a record of `len` bytes fits in the ring, if anywhere.
    fn fit(&self, len: u64) -> Option<u64> {
        let (Some(&first), Some(&last)) = (self.records.front(), self.records.back()) else {
            return (len <= self.size).then_some(0);
        };
        let (tail, head) = (first.1, self.end_of(last));
        if head > tail {
            if head + len <= self.size {
                return Some(head);
            }
            return (len <= tail).then_some(0);
        }
        (head + len <= tail).then_some(head)
    }

    /// Bytes of the ring in use.
    pub(crate) fn used(&self) -> u64 {
        let (Some(&first), Some(&last)) = (self.records.front(), self.records.back()) else {
            return 0;
        };
        let (tail, head) = (first.1, self.end_of(last));
        if head > tail {
            head - tail
        } else {
            self.size - tail + head
        }
    }

    pub(crate) fn find(&self, index: u64) -> Option<usize> {
        if self.writes.len() <= 16 {
            self.writes.iter().position(|w| w.index == index)
        } else {
            self.index.get(&index).copied()
        }
    }

    pub(crate) fn push_write(&mut self, entry: WriteEntry) -> usize {
        let at = self.writes.len();
        self.writes.push(entry);
        if self.writes.len() == 17 {
            self.index = self
                .writes
                .iter()
                .enumerate()
                .map(|(i, w)| (w.index, i))
                .collect();
        } else if self.writes.len() > 17 {
            self.index.insert(self.writes[at].index, at);
        }
        at
    }

    pub(crate) fn reset(&mut self) {
        self.writes.clear();
        self.index.clear();
        self.reads.clear();
        self.args.clear();
    }
}

/// The byte ranges of a write set (sorted by chunk, adjacent ranges merged).
pub(crate) fn written_ranges(writes: &[WriteEntry]) -> Vec<(u64, Vec<u8>)> {
    let mut order: Vec<&WriteEntry> = writes.iter().collect();
    order.sort_unstable_by_key(|w| w.index);
    let mut ranges: Vec<(u64, Vec<u8>)> = Vec::new();
    for w in order {
        let mut mask = w.mask;
        while mask != 0 {
            let start = mask.trailing_zeros() as usize;
            let run = (!(mask >> start)).trailing_zeros() as usize;
            let addr = w.index * CHUNK + start as u64;
            let bytes = &w.data[start..start + run];
            match ranges.last_mut() {
                Some((at, data)) if *at + data.len() as u64 == addr => {
                    data.extend_from_slice(bytes)
                }
                _ => ranges.push((addr, bytes.to_vec())),
            }
            mask = if start + run >= 64 {
                0
            } else {
                mask & !(((1u64 << run) - 1) << start)
            };
        }
    }
    ranges
}

/// The 8-byte words that differ between `old` and `new`, merged into ranges, relative to the
/// chunk start.
fn changed_words(old: &[u8; 64], new: &[u8; 64]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for word in 0..8 {
        let r = word * 8..word * 8 + 8;
        if old[r.clone()] != new[r] {
            match out.last_mut() {
                Some((start, len)) if *start + *len == word * 8 => *len += 8,
                _ => out.push((word * 8, 8)),
            }
        }
    }
    out
}

/// Writes back each distinct line of `lines` once, merging runs of adjacent lines.
fn write_back_lines<P: Persist>(pm: &P, lines: &mut Vec<u64>) {
    lines.sort_unstable();
    lines.dedup();
    for run in lines.chunk_by(|a, b| b - a == 1) {
        pm.flush(run[0] * CACHE_LINE, run.len() as u64 * CACHE_LINE);
    }
}

/// What recovery found before the engine can run.
struct Scanned {
    layout: MvccLayout,
    heap: Heap,
    /// Time of the newest durable checkpoint.
    checkpoint: u64,
    /// The newest timestamp of any intact record.
    newest: u64,
    /// Operations after the checkpoint, in timestamp order.
    pending: Vec<Record>,
}

impl<P: Persist, R: Replay> Mvcc<P, R> {
    /// Formats the engine area of a fresh pool and returns the engine.
    pub fn create(pool: Pool<P>, options: &MvccOptions, replay: R) -> TxResult<Self> {
        let layout = MvccLayout::plan(
            pool.arena(),
            options.lanes,
            options.olog_size,
            options.clog_size,
        )?;
        let pm = pool.pm();
        layout.format_logs(pm);
        Heap::format(pm, layout.heap, options.chunk_shift)?;
        layout.write(pm);
        Self::open(pool, options, replay)
    }

    /// Opens the engine area of `pool`: replays the checkpoint log, then re-executes the
    /// operations logged after the newest checkpoint, in timestamp order (recovery).
    pub fn open(pool: Pool<P>, options: &MvccOptions, replay: R) -> TxResult<Self> {
        let scanned = match scan(&pool) {
            Ok(scanned) => scanned,
            Err(error) => {
                pool.mark_unclean_on_drop();
                return Err(error);
            }
        };
        let Scanned {
            layout,
            heap,
            checkpoint,
            newest,
            pending,
        } = scanned;
        let engine = Self::assemble(pool, options, replay, layout, heap, checkpoint);
        if let Err(error) = engine.replay_all(pending, newest) {
            engine.failed.store(true, Ordering::SeqCst);
            engine.pool.mark_unclean_on_drop();
            return Err(error);
        }
        Ok(engine)
    }

    fn assemble(
        pool: Pool<P>,
        options: &MvccOptions,
        replay: R,
        layout: MvccLayout,
        heap: Heap,
        checkpoint: u64,
    ) -> Self {
        let lanes = Lanes::new((0..layout.lane_count as usize).map(|lane| {
            let (base, size) = layout.olog(lane);
            Lane {
                base,
                size,
                records: VecDeque::new(),
                scratch: Vec::new(),
                writes: Vec::new(),
                index: HashMap::new(),
                reads: Vec::new(),
                args: Vec::new(),
            }
        }));
        let shared = (0..layout.lane_count)
            .map(|_| {
                CachePadded::new(Shared {
                    snapshot: AtomicU64::new(NONE),
                    inflight: AtomicU64::new(NONE),
                    dirty: Mutex::new(Vec::new()),
                })
            })
            .collect();
        let tag = pool_tag(&pool.header().uuid);
        let user = pool.root();
        let chunks = Region {
            offset: heap.layout().chunks,
            len: heap.layout().end() - heap.layout().chunks,
        };
        Mvcc {
            table: Table::new(pool.pm().len()),
            pool,
            layout,
            heap,
            replay,
            lanes,
            shared,
            seq: Mutex::new(()),
            clock: AtomicU64::new(checkpoint),
            checkpointed: AtomicU64::new(checkpoint),
            dirty_versions: AtomicU64::new(0),
            ckpt: Mutex::new(Ckpt {
                last_t: checkpoint,
                ..Ckpt::default()
            }),
            meta_dirty: Mutex::new(Vec::new()),
            actions: Mutex::new(()),
            options: *options,
            tag,
            user,
            chunks,
            stats: Stats::default(),
            wb_epoch: AtomicU64::new(0),
            failed: AtomicBool::new(false),
        }
    }

    /// Re-executes the operations logged after the checkpoint, then checkpoints and writes
    /// back their effects so the logs are empty.
    fn replay_all(&self, pending: Vec<Record>, newest: u64) -> TxResult<()> {
        for record in &pending {
            let allocs = self.allocations_of(record)?;
            self.replay_one(record, allocs).map_err(|e| {
                TxError::Corrupted(format!(
                    "recovery could not re-execute the operation logged at {:#x} (ts {}): {e}",
                    record.pos, record.ts
                ))
            })?;
            self.stats.replayed.fetch_add(1, Ordering::Relaxed);
        }
        self.clock.fetch_max(newest, Ordering::SeqCst);
        if self.clock.load(Ordering::SeqCst) > self.checkpointed.load(Ordering::SeqCst) {
            self.quiesce()?;
        }
        Ok(())
    }

    fn replay_one(&self, record: &Record, allocs: VecDeque<u64>) -> TxResult<()> {
        let outcome = Outcome::default();
        let (lane, state) = self.lanes.acquire();
        let snapshot = self.clock.load(Ordering::SeqCst);
        let mut tx = MvccTx::new(self, lane, state, snapshot, Level::Snapshot, None, &outcome);
        tx.replaying = Some((record.ts, allocs));
        tx::api::run_transaction(tx, |tx| match record.kind {
            Kind::Logical => self.replay.replay(
                tx,
                Op {
                    id: OpId(record.op),
                    args: &record.args,
                },
            ),
            _ => record
                .ranges
                .iter()
                .try_for_each(|(addr, bytes)| tx::Tx::write_raw(tx, *addr, bytes)),
        })
    }

    /// The blocks a logged operation allocated, in order, derived from its publish actions.
    fn allocations_of(&self, record: &Record) -> TxResult<VecDeque<u64>> {
        let layout = *self.heap.layout();
        let pm = self.pool.pm();
        let bad = |what: String| TxError::Corrupted(format!("logged heap action: {what}"));
        let mut out = VecDeque::new();
        if record.kind != Kind::Logical {
            return Ok(out);
        }
        for action in &record.actions {
            match *action {
                Action::Or { addr, mask } => {
                    let chunk = layout
                        .chunk_of(addr)
                        .ok_or_else(|| bad(format!("{addr:#x} outside the chunks")))?;
                    let descriptor =
                        Descriptor::decode(pm.read_u64(layout.descriptor_at(chunk)), chunk)?;
                    let Descriptor::Run { class } = descriptor else {
                        return Err(bad(format!("bit set in chunk {chunk}, not a run")));
                    };
                    let geometry = layout
                        .run_geometry(class as usize)
                        .ok_or_else(|| bad(format!("class {class}")))?;
                    let word = (addr - layout.chunk_start(chunk)) / 8;
                    let unit = word * 64 + u64::from(mask.trailing_zeros());
                    if mask.count_ones() != 1 || unit >= geometry.units {
                        return Err(bad(format!("mask {mask:#x} at {addr:#x}")));
                    }
                    out.push_back(
                        layout.chunk_start(chunk) + geometry.data_offset + unit * geometry.unit,
                    );
                }
                Action::Set { addr, value } if value != 0 => {
                    let chunk = addr
                        .checked_sub(layout.descriptors)
                        .map(|d| d / 8)
                        .filter(|&c| c < layout.chunk_count)
                        .ok_or_else(|| bad(format!("descriptor at {addr:#x}")))?;
                    out.push_back(layout.chunk_start(chunk));
                }
                _ => {}
            }
        }
        Ok(out)
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<P> {
        &self.pool
    }

    /// The heap.
    pub fn heap(&self) -> &Heap {
        &self.heap
    }

    /// The engine's event counters.
    pub fn stats(&self) -> MvccStats {
        let s = &self.stats;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MvccStats {
            commits_logical: get(&s.commits_logical),
            commits_physical: get(&s.commits_physical),
            conflicts: get(&s.conflicts),
            checkpoints: get(&s.checkpoints),
            writebacks: get(&s.writebacks),
            replayed: get(&s.replayed),
        }
    }

    /// Whether `[addr, addr + len)` may be written: the root object or the heap's chunks.
    pub(crate) fn writable(&self, addr: u64, len: u64) -> bool {
        self.user.contains(addr, len) || self.chunks.contains(addr, len)
    }

    /// Runs `body` at isolation `level` (instead of the engine's default).
    pub fn transaction_with<Out, E>(
        &self,
        level: Level,
        body: impl FnMut(&mut MvccTx<'_, P, R>) -> Result<Out, E>,
    ) -> Result<Out, E>
    where
        E: From<TxError>,
    {
        self.run(None, level, body)
    }

    fn run<Out, E>(
        &self,
        op: Option<Op<'_>>,
        level: Level,
        mut body: impl FnMut(&mut MvccTx<'_, P, R>) -> Result<Out, E>,
    ) -> Result<Out, E>
    where
        E: From<TxError>,
    {
        let mut attempt = 0u32;
        loop {
            let outcome = Outcome::default();
            let (lane, mut state) = self.lanes.acquire();
            state.reset();
            if let Some(op) = op {
                state.args.extend_from_slice(op.args);
            }
            // Announce a lower bound first, then read the snapshot: a reclaimer that missed
            // the announcement trimmed nothing this snapshot needs.
            let announced = self.clock.load(Ordering::SeqCst);
            self.shared[lane]
                .snapshot
                .store(announced, Ordering::SeqCst);
            let snapshot = self.clock.load(Ordering::SeqCst);
            let id = op.map(|o| o.id).filter(|&id| self.replay.handles(id));
            let tx = MvccTx::new(self, lane, state, snapshot, level, id, &outcome);
            let result = tx::api::run_transaction(tx, &mut body);
            if result.is_err() && outcome.conflict.get() {
                self.stats.conflicts.fetch_add(1, Ordering::Relaxed);
                attempt += 1;
                backoff(attempt);
                continue;
            }
            if outcome.checkpoint.get()
                || self.dirty_versions.load(Ordering::Relaxed) >= self.options.checkpoint_versions
            {
                self.checkpoint(None).map_err(E::from)?;
            }
            return result;
        }
    }

    /// Finds room for `len` bytes in the lane's OLog, checkpointing while it is full.
    pub(crate) fn reserve_olog(&self, lane: &mut Lane, len: u64) -> TxResult<u64> {
        if len > lane.size {
            return Err(TxError::LogFull {
                needed: len,
                capacity: lane.size,
            });
        }
        loop {
            let done = self.checkpointed.load(Ordering::Acquire);
            while lane.records.front().is_some_and(|&(ts, _, _)| ts <= done) {
                lane.records.pop_front();
            }
            if let Some(pos) = lane.fit(len) {
                return Ok(pos);
            }
            let oldest = lane.records.front().map_or(0, |r| r.0);
            self.checkpoint(Some(oldest))?;
        }
    }

    /// The newest time every commit at or before which is published.
    fn reachable(&self) -> u64 {
        let _seq = self.seq.lock();
        let floor = self
            .shared
            .iter()
            .map(|s| s.inflight.load(Ordering::SeqCst))
            .min()
            .unwrap_or(NONE);
        let clock = self.clock.load(Ordering::SeqCst);
        if floor == NONE {
            clock
        } else {
            clock.min(floor - 1)
        }
    }

    /// The oldest snapshot of a running transaction (versions it may need are kept).
    fn oldest_snapshot(&self) -> u64 {
        self.shared
            .iter()
            .map(|s| s.snapshot.load(Ordering::SeqCst))
            .min()
            .unwrap_or(NONE)
    }

    /// Checkpoints the newest version at or before the reachable time of every chunk changed
    /// since the last checkpoint, looping until the checkpoint time reaches `target`.
    pub(crate) fn checkpoint(&self, target: Option<u64>) -> TxResult<()> {
        let mut ck = self.ckpt.lock();
        loop {
            let t = self.reachable();
            self.checkpoint_once(&mut ck, t)?;
            match target {
                Some(target) if t < target => std::thread::yield_now(),
                _ => return Ok(()),
            }
        }
    }

    fn checkpoint_once(&self, ck: &mut Ckpt, t: u64) -> TxResult<()> {
        let pm = self.pool.pm();
        self.dirty_versions.store(0, Ordering::Relaxed);
        let mut indexes = std::mem::take(&mut ck.retrim);
        for shared in self.shared.iter() {
            indexes.append(&mut shared.dirty.lock());
        }
        indexes.sort_unstable();
        indexes.dedup();
        let meta = std::mem::take(&mut *self.meta_dirty.lock());
        if indexes.is_empty() && meta.is_empty() && t <= ck.last_t {
            return Ok(());
        }
        if pm.is_poisoned() {
            return Err(TxError::Poisoned);
        }
        let mut changes: Vec<(u64, [u8; CHUNK as usize])> = Vec::new();
        let mut ranges: Vec<(u64, Vec<u8>)> = Vec::new();
        for &index in &indexes {
            let chunk = self.table.get(index).expect("dirty chunks have headers");
            let chain = chunk.chain.read();
            let Some(i) = chain
                .versions
                .iter()
                .position(|v| v.ts & PENDING == 0 && v.ts <= t)
            else {
                ck.retrim.push(index);
                continue;
            };
            let data = chain.versions[i].data;
            if i > 0 {
                ck.retrim.push(index);
            }
            for (start, len) in changed_words(&chain.durable, &data) {
                ranges.push((
                    index * CHUNK + start as u64,
                    data[start..start + len].to_vec(),
                ));
            }
            if data != chain.durable {
                changes.push((index, data));
            }
        }
        // Heap metadata of the checkpointed commits is durable before the record says so.
        if !meta.is_empty() {
            let mut lines: Vec<u64> = meta
                .iter()
                .flat_map(|&(addr, len)| pmem::lines_covering(addr, len))
                .collect();
            write_back_lines(pm, &mut lines);
            pm.fence();
        }
        let (len, _) = record::encoded_len(0, ranges.iter().map(|(a, b)| (*a, &b[..])), 0);
        let len = len as u64;
        if ck.head + len > self.layout.clog_size {
            self.write_back(ck)?;
        }
        if len > self.layout.clog_size {
            return Err(TxError::LogFull {
                needed: len,
                capacity: self.layout.clog_size,
            });
        }
        let at = self.layout.clog + ck.head;
        let mut scratch = std::mem::take(&mut ck.scratch);
        record::encode(
            at,
            Kind::Checkpoint,
            t,
            0,
            &[],
            ranges.iter().map(|(a, b)| (*a, &b[..])),
            &[],
            &mut scratch,
        );
        pm.write(at, &scratch, WriteClass::Log);
        pm.flush(at, len);
        pm.fence();
        ck.scratch = scratch;
        if pm.is_poisoned() {
            return Err(TxError::Poisoned);
        }
        ck.head = (ck.head + len).next_multiple_of(CACHE_LINE);
        ck.last_t = t;
        self.checkpointed.store(t, Ordering::Release);
        self.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
        for (index, data) in changes {
            let chunk = self.table.get(index).expect("dirty chunks have headers");
            chunk.chain.write().durable = data;
            ck.writeback.push(index);
        }
        let floor = self.oldest_snapshot().min(t);
        for &index in &indexes {
            let chunk = self.table.get(index).expect("dirty chunks have headers");
            if !chunk.chain.write().trim(floor) {
                ck.retrim.push(index);
            }
        }
        ck.retrim.sort_unstable();
        ck.retrim.dedup();
        if ck.head * 4 > self.layout.clog_size * 3 {
            self.write_back(ck)?;
        }
        Ok(())
    }

    /// Writes every checkpointed chunk back to its master, then moves the watermark to the
    /// last checkpoint: the CLog is empty afterwards.
    fn write_back(&self, ck: &mut Ckpt) -> TxResult<()> {
        let pm = self.pool.pm();
        ck.writeback.sort_unstable();
        ck.writeback.dedup();
        let mut lines = Vec::new();
        self.wb_epoch.fetch_add(1, Ordering::SeqCst);
        for &index in &ck.writeback {
            let chunk = self
                .table
                .get(index)
                .expect("checkpointed chunks have headers");
            let durable = chunk.chain.read().durable;
            let mut master = [0u8; CHUNK as usize];
            pm.read(index * CHUNK, &mut master);
            for (start, len) in changed_words(&master, &durable) {
                let addr = index * CHUNK + start as u64;
                pm.write(addr, &durable[start..start + len], WriteClass::User);
                lines.push(index);
            }
        }
        self.wb_epoch.fetch_add(1, Ordering::SeqCst);
        if self.options.mutant == Mutant::EarlyWatermark {
            self.persist_watermark(ck.last_t);
        }
        write_back_lines(pm, &mut lines);
        pm.fence();
        if pm.is_poisoned() {
            return Err(TxError::Poisoned);
        }
        self.persist_watermark(ck.last_t);
        for &index in &ck.writeback {
            self.mark_clean(index);
        }
        ck.head = 0;
        ck.writeback.clear();
        self.stats.writebacks.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Marks a written-back chunk clean if its master is now its only version, holding its
    /// write lock so no writer changes it meanwhile.
    fn mark_clean(&self, index: u64) {
        let chunk = self
            .table
            .get(index)
            .expect("checkpointed chunks have headers");
        if chunk
            .owner
            .compare_exchange(0, NONE, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let chain = chunk.chain.read();
        if chain.versions.len() == 1 && chain.versions[0].data == chain.durable {
            self.table.set_clean(index, true);
        }
        drop(chain);
        chunk.owner.store(0, Ordering::Release);
    }

    fn persist_watermark(&self, value: u64) {
        let pm = self.pool.pm();
        let at = self.layout.watermark();
        pm.write_u64(at, checked::seal(value, at), WriteClass::Meta);
        pm.persist(at, 8);
    }

    /// Checkpoints every commit and writes everything back: the next open replays nothing.
    pub fn quiesce(&self) -> TxResult<()> {
        let target = self.clock.load(Ordering::SeqCst);
        self.checkpoint(Some(target))?;
        let mut ck = self.ckpt.lock();
        self.write_back(&mut ck)
    }

    /// The heap's run creation, made durable at once. Lines of the new run's bitmap that
    /// were versioned as data (an earlier large block) are checkpointed and written back
    /// first, so no later write-back can overwrite the bitmap with old data.
    pub(crate) fn system_commit(&self, actions: &[Action]) -> Result<(), HeapError> {
        let pm = self.pool.pm();
        let versioned = actions.iter().any(|action| {
            let (addr, len) = (action.addr(), action.len());
            (addr / CHUNK..(addr + len).div_ceil(CHUNK)).any(|i| self.table.get(i).is_some())
        });
        if versioned {
            self.quiesce()
                .map_err(|e| HeapError::Corrupted(format!("run creation failed: {e}")))?;
        }
        let _serialised = self.actions.lock();
        for action in actions {
            action.apply(pm);
            pm.fence();
        }
        Ok(())
    }
}

/// Waits a little longer after each failed attempt.
fn backoff(attempt: u32) {
    if attempt > 6 {
        std::thread::yield_now();
    }
    for _ in 0..(1u32 << attempt.min(10)) {
        std::hint::spin_loop();
    }
}

/// Recovery's first phase, before the engine exists: the CLog, the OLog scan, the heap.
fn scan<P: Persist>(pool: &Pool<P>) -> TxResult<Scanned> {
    let pm = pool.pm();
    let layout = MvccLayout::read(pm, pool.arena())?;
    let at = layout.watermark();
    let written_back = checked::open(pm.read_u64(at), at, "mvcc write-back watermark")?;
    let clog_end = layout.clog + layout.clog_size;
    let mut checkpoints = Vec::new();
    for pos in (layout.clog..clog_end).step_by(CACHE_LINE as usize) {
        if let Some(rec) = record::read(pm, pos, clog_end)? {
            if rec.kind != Kind::Checkpoint {
                return Err(TxError::Corrupted(format!(
                    "an operation record in the checkpoint log at {pos:#x}"
                )));
            }
            if rec.ts > written_back {
                checkpoints.push(rec);
            }
        }
    }
    checkpoints.sort_by_key(|r| r.ts);
    let mut lines = Vec::new();
    for rec in &checkpoints {
        for (addr, bytes) in &rec.ranges {
            pm.write(*addr, bytes, WriteClass::User);
            lines.extend(pmem::lines_covering(*addr, bytes.len() as u64));
        }
    }
    write_back_lines(pm, &mut lines);
    pm.fence();
    let checkpoint = checkpoints.last().map_or(written_back, |r| r.ts);
    if checkpoint > written_back {
        if pm.is_poisoned() {
            return Err(TxError::Poisoned);
        }
        pm.write_u64(at, checked::seal(checkpoint, at), WriteClass::Meta);
        pm.persist(at, 8);
    }
    let (newest, pending) = scan_olog(pm, &layout, checkpoint)?;
    let mut lines = Vec::new();
    for rec in &pending {
        for action in &rec.actions {
            action.store(pm);
            lines.extend(pmem::lines_covering(action.addr(), action.len()));
        }
    }
    write_back_lines(pm, &mut lines);
    pm.fence();
    let heap = Heap::open(pm, layout.heap)?;
    Ok(Scanned {
        layout,
        heap,
        checkpoint,
        newest,
        pending,
    })
}

/// Every intact operation record newer than `checkpoint`, in timestamp order, and the
/// newest timestamp of any intact record.
fn scan_olog<P: Persist>(
    pm: &P,
    layout: &MvccLayout,
    checkpoint: u64,
) -> TxResult<(u64, Vec<Record>)> {
    let mut newest = checkpoint;
    let mut pending = Vec::new();
    for lane in 0..layout.lane_count as usize {
        let (base, len) = layout.olog(lane);
        for pos in (base..base + len).step_by(CACHE_LINE as usize) {
            if let Some(rec) = record::read(pm, pos, base + len)? {
                if rec.kind == Kind::Checkpoint {
                    return Err(TxError::Corrupted(format!(
                        "a checkpoint record in an operation log at {pos:#x}"
                    )));
                }
                newest = newest.max(rec.ts);
                if rec.ts > checkpoint {
                    pending.push(rec);
                }
            }
        }
    }
    pending.sort_by_key(|r| r.ts);
    if pending.windows(2).any(|w| w[0].ts == w[1].ts) {
        return Err(TxError::Corrupted(
            "two operation records with the same timestamp".into(),
        ));
    }
    Ok((newest, pending))
}

impl<P: Persist, R: Replay> Drop for Mvcc<P, R> {
    fn drop(&mut self) {
        if !std::thread::panicking() && !self.failed.load(Ordering::SeqCst) {
            let _ = self.quiesce();
        }
    }
}

impl<P: Persist, R: Replay> Engine for Mvcc<P, R> {
    type Tx<'e>
        = MvccTx<'e, P, R>
    where
        Self: 'e;

    fn name(&self) -> &'static str {
        "mvcc"
    }

    fn isolation(&self) -> Isolation {
        Isolation::Internal
    }

    fn transaction<Out, E>(
        &self,
        body: impl FnMut(&mut MvccTx<'_, P, R>) -> Result<Out, E>,
    ) -> Result<Out, E>
    where
        E: From<TxError>,
    {
        self.run(None, self.options.isolation, body)
    }

    fn transaction_op<Out, E>(
        &self,
        op: Op<'_>,
        body: impl FnMut(&mut MvccTx<'_, P, R>) -> Result<Out, E>,
    ) -> Result<Out, E>
    where
        E: From<TxError>,
    {
        self.run(Some(op), self.options.isolation, body)
    }

    fn counters(&self) -> pmem::Counters {
        self.pool.pm().stats().snapshot()
    }

    fn sync(&self) -> TxResult<()> {
        self.quiesce()
    }
}
