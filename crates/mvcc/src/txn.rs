//! A transaction of the MVCC engine: snapshot reads through the version chains, writes to
//! private copies of locked chunks, and the commit path (one OLog append, one fence).

use crate::chunks::{CHUNK, PENDING, Seen, Version};
use crate::engine::{Lane, Mvcc, NONE, WriteEntry, written_ranges};
use crate::options::{Level, Mutant};
use crate::record::{self, Kind};
use heap::{Action, Freeing, Reservation};
use parking_lot::MutexGuard;
use pmem::{Persist, WriteClass};
use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use tx::api::{Lifecycle, OpId, Replay, Tx, TxError, TxResult};

/// How a transaction attempt ended, for the retry loop.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// The attempt hit a conflict: retry it.
    pub(crate) conflict: Cell<bool>,
    /// The lane's log is filling up: checkpoint after the transaction.
    pub(crate) checkpoint: Cell<bool>,
}

/// A transaction of the MVCC engine.
#[derive(Debug)]
pub struct MvccTx<'a, P: Persist, R: Replay> {
    engine: &'a Mvcc<P, R>,
    lane: usize,
    state: MutexGuard<'a, Lane>,
    snapshot: u64,
    level: Level,
    op: Option<OpId>,
    /// Recovery: the commit timestamp to reuse and the logged blocks to hand out.
    pub(crate) replaying: Option<(u64, VecDeque<u64>)>,
    reservations: Vec<Reservation>,
    frees: Vec<Freeing>,
    outcome: &'a Outcome,
    conflicted: bool,
}

impl<'a, P: Persist, R: Replay> MvccTx<'a, P, R> {
    pub(crate) fn new(
        engine: &'a Mvcc<P, R>,
        lane: usize,
        state: MutexGuard<'a, Lane>,
        snapshot: u64,
        level: Level,
        op: Option<OpId>,
        outcome: &'a Outcome,
    ) -> Self {
        MvccTx {
            engine,
            lane,
            state,
            snapshot,
            level,
            op,
            replaying: None,
            reservations: Vec::new(),
            frees: Vec::new(),
            outcome,
            conflicted: false,
        }
    }

    /// The snapshot this transaction reads.
    pub fn snapshot(&self) -> u64 {
        self.snapshot
    }

    fn conflict<T>(&mut self) -> TxResult<T> {
        self.conflicted = true;
        self.outcome.conflict.set(true);
        Err(TxError::Conflict)
    }

    fn tracks_reads(&self) -> bool {
        self.replaying.is_none() && (self.level != Level::Snapshot || self.op.is_some())
    }

    /// Copies bytes of chunk `index` (not in the write set) as this snapshot sees them.
    fn read_chunk(&mut self, index: u64, offset: usize, dst: &mut [u8]) -> TxResult<()> {
        if self.tracks_reads() {
            self.state.reads.push(index);
        }
        let engine = self.engine;
        let master = index * CHUNK + offset as u64;
        if engine.table.is_clean(index) && self.level != Level::Linearizable {
            // The master is the only version; a write-back running meanwhile (it rewrites
            // masters) sends the read down the chain path instead.
            let epoch = engine.wb_epoch.load(Ordering::Acquire);
            if epoch.is_multiple_of(2) {
                engine.pool.pm().read(master, dst);
                std::sync::atomic::fence(Ordering::Acquire);
                if engine.wb_epoch.load(Ordering::Relaxed) == epoch {
                    return Ok(());
                }
            }
        }
        let Some(chunk) = engine.table.get(index) else {
            engine.pool.pm().read(master, dst);
            return Ok(());
        };
        let mut spins = 0u32;
        loop {
            let seen = chunk.chain.read().read_at(self.snapshot, offset, dst);
            match seen {
                Seen::Copied(newest) => {
                    if !newest && self.level == Level::Linearizable {
                        return self.conflict();
                    }
                    return Ok(());
                }
                Seen::Pending => {
                    spins += 1;
                    if spins > 64 {
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                }
                Seen::TooOld => return self.conflict(),
            }
        }
    }

    /// Locks chunk `index` for writing and adds its newest version to the write set.
    fn lock_chunk(&mut self, index: u64) -> TxResult<usize> {
        let engine = self.engine;
        let pm = engine.pool.pm();
        let chunk = engine.table.get_or_create(index, || {
            let mut master = [0u8; CHUNK as usize];
            pm.read(index * CHUNK, &mut master);
            master
        });
        let me = self.lane as u64 + 1;
        if chunk
            .owner
            .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return self.conflict();
        }
        engine.table.set_clean(index, false);
        let chain = chunk.chain.read();
        let head = &chain.versions[0];
        // First committer wins: a version newer than the snapshot means a concurrent
        // transaction already changed the chunk.
        if head.ts & PENDING != 0 || (self.replaying.is_none() && head.ts > self.snapshot) {
            drop(chain);
            chunk.owner.store(0, Ordering::Release);
            return self.conflict();
        }
        let data = head.data;
        drop(chain);
        Ok(self.state.push_write(WriteEntry {
            index,
            data,
            mask: 0,
        }))
    }

    /// Whether every chunk this transaction read is unchanged since its snapshot (called
    /// under the sequencer lock, so every commit with a smaller timestamp is visible).
    fn validate(&self) -> bool {
        let state = &*self.state;
        state.reads.iter().all(|&index| {
            state.find(index).is_some()
                || self
                    .engine
                    .table
                    .get(index)
                    .is_none_or(|chunk| chunk.chain.read().head_ts() <= self.snapshot)
        })
    }

    fn release_locks(&mut self) {
        for w in &self.state.writes {
            if let Some(chunk) = self.engine.table.get(w.index) {
                chunk.owner.store(0, Ordering::Release);
            }
        }
    }

    fn commit_live(&mut self) -> TxResult<()> {
        let engine = self.engine;
        let pm = engine.pool.pm();
        if pm.is_poisoned() {
            return Err(TxError::Poisoned);
        }
        let mut actions: Vec<Action> = self
            .reservations
            .iter()
            .map(|r| engine.heap.publish_action(r))
            .collect();
        actions.extend(self.frees.iter().map(|f| engine.heap.free_action(f)));
        if actions.len() > record::MAX_ACTIONS {
            return Err(TxError::InvalidArgument(format!(
                "a transaction may make at most {} heap changes",
                record::MAX_ACTIONS
            )));
        }
        let ranges = written_ranges(&self.state.writes);
        let ranges_iter = || ranges.iter().map(|(a, b)| (*a, &b[..]));
        let (physical, count) = record::encoded_len(0, ranges_iter(), actions.len());
        if count > u32::MAX as usize {
            return Err(TxError::InvalidArgument("too many written ranges".into()));
        }
        let logical = self.op.map_or(0, |_| {
            record::encoded_len(self.state.args.len(), std::iter::empty(), actions.len()).0
        });
        let need = physical.max(logical) as u64;
        let pos = engine.reserve_olog(&mut self.state, need)?;
        let (ts, as_op) = match self.sequence() {
            Some(sequenced) => sequenced,
            None => return self.conflict(),
        };
        let state = &mut *self.state;
        let at = state.base + pos;
        let mut scratch = std::mem::take(&mut state.scratch);
        match (as_op, self.op) {
            (true, Some(op)) => record::encode(
                at,
                Kind::Logical,
                ts,
                op.0,
                &state.args,
                std::iter::empty(),
                &actions,
                &mut scratch,
            ),
            _ => record::encode(
                at,
                Kind::Physical,
                ts,
                0,
                &[],
                ranges_iter(),
                &actions,
                &mut scratch,
            ),
        }
        let len = scratch.len() as u64;
        pm.write(at, &scratch, WriteClass::Log);
        pm.flush(at, len);
        if engine.options.mutant != Mutant::NoCommitFence {
            pm.fence();
        }
        state.scratch = scratch;
        if pm.is_poisoned() {
            self.unpublish();
            return Err(TxError::Poisoned);
        }
        pm.durability_point();
        self.finish(ts, &actions);
        self.state.records.push_back((ts, pos, len));
        engine.shared[self.lane]
            .inflight
            .store(NONE, Ordering::SeqCst);
        let counter = if as_op {
            &engine.stats.commits_logical
        } else {
            &engine.stats.commits_physical
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.reservations.clear();
        for freeing in self.frees.drain(..) {
            engine.heap.finish_free(&freeing);
        }
        let user: u64 = self
            .state
            .writes
            .iter()
            .map(|w| u64::from(w.mask.count_ones()))
            .sum();
        pm.stats().record_user_bytes(user);
        if self.state.used() * 2 > self.state.size {
            self.outcome.checkpoint.set(true);
        }
        self.state.writes.clear();
        Ok(())
    }

    /// Takes the commit timestamp, validates, and installs the write set as pending
    /// versions. Returns `None` on a failed validation that must abort, else the timestamp
    /// and whether the commit may be logged as its operation.
    fn sequence(&mut self) -> Option<(u64, bool)> {
        let engine = self.engine;
        let _seq = engine.seq.lock();
        let ts = engine.clock.load(Ordering::Relaxed) + 1;
        let valid = !self.tracks_reads() || self.validate();
        if !valid && self.level != Level::Snapshot {
            return None;
        }
        for w in &self.state.writes {
            let chunk = engine
                .table
                .get(w.index)
                .expect("locked chunks have headers");
            chunk.chain.write().versions.insert(
                0,
                Version {
                    ts: ts | PENDING,
                    data: w.data,
                },
            );
        }
        engine.shared[self.lane]
            .inflight
            .store(ts, Ordering::SeqCst);
        engine.clock.store(ts, Ordering::Release);
        Some((ts, valid && self.op.is_some()))
    }

    /// Removes this transaction's pending versions (the commit failed after sequencing).
    fn unpublish(&mut self) {
        let engine = self.engine;
        for w in &self.state.writes {
            let chunk = engine
                .table
                .get(w.index)
                .expect("locked chunks have headers");
            chunk.chain.write().versions.remove(0);
        }
        engine.shared[self.lane]
            .inflight
            .store(NONE, Ordering::SeqCst);
    }

    /// After the commit is durable: heap actions in place, versions published, locks
    /// released, chunks marked dirty.
    fn finish(&mut self, ts: u64, actions: &[Action]) {
        let engine = self.engine;
        let pm = engine.pool.pm();
        if !actions.is_empty() {
            let _serialised = engine.actions.lock();
            for action in actions {
                action.store(pm);
            }
            engine
                .meta_dirty
                .lock()
                .extend(actions.iter().map(|a| (a.addr(), a.len())));
        }
        for w in &self.state.writes {
            let chunk = engine
                .table
                .get(w.index)
                .expect("locked chunks have headers");
            chunk.chain.write().versions[0].ts = ts;
            chunk.owner.store(0, Ordering::Release);
        }
        let shared = &engine.shared[self.lane];
        shared
            .dirty
            .lock()
            .extend(self.state.writes.iter().map(|w| w.index));
        engine
            .dirty_versions
            .fetch_add(self.state.writes.len() as u64, Ordering::Relaxed);
    }

    /// Recovery's commit: the versions get the logged timestamp; nothing is logged.
    fn commit_replay(&mut self) -> TxResult<()> {
        let (ts, allocs) = self.replaying.as_ref().expect("replaying");
        if !allocs.is_empty() {
            return Err(TxError::Corrupted(format!(
                "re-executed operation allocated {} fewer blocks than logged",
                allocs.len()
            )));
        }
        let ts = *ts;
        let engine = self.engine;
        for w in &self.state.writes {
            let chunk = engine
                .table
                .get(w.index)
                .expect("locked chunks have headers");
            chunk
                .chain
                .write()
                .versions
                .insert(0, Version { ts, data: w.data });
            chunk.owner.store(0, Ordering::Release);
        }
        engine.shared[self.lane]
            .dirty
            .lock()
            .extend(self.state.writes.iter().map(|w| w.index));
        engine.clock.fetch_max(ts, Ordering::SeqCst);
        self.state.writes.clear();
        Ok(())
    }
}

impl<P: Persist, R: Replay> Drop for MvccTx<'_, P, R> {
    fn drop(&mut self) {
        self.engine.shared[self.lane]
            .snapshot
            .store(NONE, Ordering::SeqCst);
    }
}

impl<P: Persist, R: Replay> Lifecycle for MvccTx<'_, P, R> {
    fn commit(&mut self) -> TxResult<()> {
        if self.conflicted {
            return Err(TxError::Conflict);
        }
        if self.replaying.is_some() {
            return self.commit_replay();
        }
        if self.state.writes.is_empty() && self.reservations.is_empty() && self.frees.is_empty() {
            return Ok(());
        }
        self.commit_live()
    }

    fn abort(&mut self) {
        self.release_locks();
        self.state.writes.clear();
        self.state.index.clear();
        for r in self.reservations.drain(..) {
            self.engine.heap.cancel(&r);
        }
        for f in self.frees.drain(..) {
            self.engine.heap.cancel_free(&f);
        }
    }
}

impl<P: Persist, R: Replay> Tx for MvccTx<'_, P, R> {
    fn read_raw(&mut self, addr: u64, dst: &mut [u8]) -> TxResult<()> {
        if self.conflicted {
            return Err(TxError::Conflict);
        }
        let len = dst.len() as u64;
        if !self.engine.pool.pm().check_range(addr, len) {
            return Err(TxError::OutOfBounds { addr, len });
        }
        let mut done = 0usize;
        while done < dst.len() {
            let at = addr + done as u64;
            let (index, offset) = (at / CHUNK, (at % CHUNK) as usize);
            let n = (CHUNK as usize - offset).min(dst.len() - done);
            let piece = &mut dst[done..done + n];
            match self.state.find(index) {
                Some(i) => piece.copy_from_slice(&self.state.writes[i].data[offset..offset + n]),
                None => self.read_chunk(index, offset, piece)?,
            }
            done += n;
        }
        Ok(())
    }

    fn write_raw(&mut self, addr: u64, src: &[u8]) -> TxResult<()> {
        if self.conflicted {
            return Err(TxError::Conflict);
        }
        let len = src.len() as u64;
        if !self.engine.writable(addr, len) {
            return Err(TxError::OutOfBounds { addr, len });
        }
        let mut done = 0usize;
        while done < src.len() {
            let at = addr + done as u64;
            let (index, offset) = (at / CHUNK, (at % CHUNK) as usize);
            let n = (CHUNK as usize - offset).min(src.len() - done);
            let i = match self.state.find(index) {
                Some(i) => i,
                None => self.lock_chunk(index)?,
            };
            let entry = &mut self.state.writes[i];
            entry.data[offset..offset + n].copy_from_slice(&src[done..done + n]);
            let bits = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << offset
            };
            entry.mask |= bits;
            done += n;
        }
        Ok(())
    }

    fn alloc_raw(&mut self, size: u64) -> TxResult<u64> {
        if let Some((_, allocs)) = &mut self.replaying {
            return allocs.pop_front().ok_or_else(|| {
                TxError::Corrupted("re-executed operation allocates more blocks than logged".into())
            });
        }
        let engine = self.engine;
        let mut system = |actions: &[Action]| engine.system_commit(actions);
        let reservation = engine.heap.reserve(size, &mut system)?;
        self.reservations.push(reservation);
        Ok(reservation.addr)
    }

    fn free_raw(&mut self, addr: u64) -> TxResult<()> {
        if self.replaying.is_some() {
            // The free's heap action was re-applied before re-execution started.
            return Ok(());
        }
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
