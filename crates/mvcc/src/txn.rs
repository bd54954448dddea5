//! A transaction of the MVCC engine: snapshot reads through the version chains, writes to
//! private copies of locked chunks (or in place, into blocks the transaction allocated),
//! and the commit protocol (push, stamp, validate, one OLog append and one fence, publish).

use crate::chain::{Bytes, CHUNK, Lock, Seen};
use crate::engine::Mvcc;
use crate::lane::{Lane, NONE, Shared, WriteEntry, merge_ranges};
use crate::options::{Level, Mutant};
use crate::record::{self, Kind};
use crate::table::{FRESH, NO_HEADER, Table};
use heap::Action;
use parking_lot::MutexGuard;
use pmem::{Persist, WriteClass};
use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use tx::api::{Lifecycle, OpId, Replay, Tx, TxError, TxResult};

/// What a failed attempt needs before it is run again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retry {
    /// A conflict with a concurrent transaction: back off.
    Conflict,
    /// This many free versions in the lane's TLog.
    Versions(u32),
    /// Room in the lane's OLog (a checkpoint).
    Olog,
    /// Free heap space: an allocation found none while blocks freed by committed
    /// transactions wait for a checkpoint or a write-back before they may be reused.
    Space,
}

/// How a transaction attempt ended, for the retry loop.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    pub(crate) retry: Cell<Option<Retry>>,
    /// Earlier attempts of this transaction that ended asking for [`Retry::Space`]; at
    /// [`SPACE_RETRIES`], out of space is final.
    pub(crate) space_retries: Cell<u32>,
}

/// Attempts a transaction may end asking for space (each preceded by a release of the
/// deferred frees) before `OutOfSpace` is final. More than one: a thread racing this one
/// may take the space a release freed, then free its own old block (an upsert), which the
/// next release hands back.
pub(crate) const SPACE_RETRIES: u32 = 3;

/// Recovery's re-execution of one logged commit.
#[derive(Debug)]
pub(crate) struct Replaying {
    /// The logged commit timestamp.
    pub(crate) ts: u64,
    /// The blocks the logged commit allocated, `(addr, len)`, handed out in order.
    pub(crate) allocs: VecDeque<(u64, u64)>,
    /// Blocks handed out so far, `(addr, len)`: written in place.
    pub(crate) blocks: Vec<(u64, u64)>,
}

/// A transaction of the MVCC engine.
#[derive(Debug)]
pub struct MvccTx<'a, P: Persist, R: Replay> {
    engine: &'a Mvcc<P, R>,
    /// The engine's chunk table, PM backend and pool length, resolved once at begin: the
    /// common read uses nothing else of the engine, so it loads none of the pointers on
    /// the way to them (engine → core → table / pool → backend).
    table: &'a Table,
    pm: &'a P,
    pool_len: u64,
    /// The pool's pointer tag, resolved at begin: every pointer a structure decodes is
    /// checked against it, so it is one load from the transaction, not three.
    tag: u16,
    lane: usize,
    /// The lane's shared slot (announcement, in-flight timestamp, counts), resolved at
    /// begin: commit and drop store to it without the engine → core → slice walk.
    shared: &'a Shared,
    state: MutexGuard<'a, Lane>,
    snapshot: u64,
    level: Level,
    op: Option<OpId>,
    pub(crate) replaying: Option<Box<Replaying>>,
    outcome: &'a Outcome,
    failed: bool,
    /// Reads are recorded for validation at commit.
    tracking: bool,
    /// Reads need neither the read set nor the write set: reads are not tracked, nothing
    /// has been written through a chain yet and the attempt has not failed (the one flag
    /// [`Tx::read_raw`]'s common case checks).
    plain_reads: bool,
    /// As `plain_reads`, but reads are tracked: a read inside one chunk notes the chunk and
    /// reads it as a plain read would (an update's reads before its first write, inline).
    noted_reads: bool,
}

impl<'a, P: Persist, R: Replay> MvccTx<'a, P, R> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        engine: &'a Mvcc<P, R>,
        lane: usize,
        shared: &'a Shared,
        state: MutexGuard<'a, Lane>,
        snapshot: u64,
        level: Level,
        op: Option<OpId>,
        outcome: &'a Outcome,
    ) -> Self {
        debug_assert!(state.reservations.is_empty() && state.frees.is_empty());
        debug_assert!(
            state.writes.is_empty(),
            "a lane's write set is empty between attempts"
        );
        debug_assert!(
            std::ptr::eq(shared, &*engine.shared[lane]),
            "the lane's own slot"
        );
        let tracking = level != Level::Snapshot || op.is_some();
        let pm = engine.pool.pm();
        MvccTx {
            engine,
            table: &engine.table,
            pm,
            pool_len: pm.len(),
            tag: engine.tag,
            lane,
            shared,
            state,
            snapshot,
            level,
            op,
            replaying: None,
            outcome,
            failed: false,
            tracking,
            plain_reads: !tracking,
            noted_reads: tracking,
        }
    }

    /// The snapshot this transaction reads.
    pub fn snapshot(&self) -> u64 {
        self.snapshot
    }

    /// How many chunk reads this attempt validates at commit (0 when it does not track
    /// reads); a chunk read again right after itself counts once.
    pub fn tracked_reads(&self) -> usize {
        self.state.reads.len()
    }

    fn fail<T>(&mut self, why: Retry) -> TxResult<T> {
        self.failed = true;
        self.plain_reads = false;
        self.noted_reads = false;
        self.outcome.retry.set(Some(why));
        Err(TxError::Conflict)
    }

    fn conflict<T>(&mut self) -> TxResult<T> {
        self.fail(Retry::Conflict)
    }

    fn owner(&self) -> u64 {
        self.lane as u64 + 1
    }

    fn tracks_reads(&self) -> bool {
        self.tracking && self.replaying.is_none()
    }

    /// Copies bytes of chunk `chunk` (not in the write set) as this snapshot sees them.
    fn read_chunk(&mut self, chunk: u64, offset: usize, dst: &mut [u8]) -> TxResult<()> {
        self.note_read(chunk);
        self.read_in_chunk(chunk * CHUNK + offset as u64, dst)
    }

    /// Records a read of `chunk` for validation, if reads are tracked. A chunk read again
    /// right away (a node's fields, one by one) is validated once.
    #[inline(always)]
    fn note_read(&mut self, chunk: u64) {
        if self.tracking && self.state.reads.last() != Some(&chunk) {
            self.state.reads.push(chunk);
        }
    }

    /// Copies bytes of a chunk through its header `r`, as this snapshot sees them: the base
    /// at once when the chain is empty (most headers most of the time), else the chain.
    /// Out of line: the common read, inlined into every caller, only tests the header bit
    /// and copies the master.
    #[inline(never)]
    fn read_header(&mut self, r: u32, offset: usize, dst: &mut [u8]) -> TxResult<()> {
        let engine = self.engine;
        if engine
            .table
            .header(r)
            .read_current(&engine.versions, self.snapshot, offset, dst)
        {
            return Ok(());
        }
        self.read_chain(r, offset, dst)
    }

    /// [`MvccTx::read_header`] when the chain has versions (kept out of line).
    #[inline(never)]
    fn read_chain(&mut self, r: u32, offset: usize, dst: &mut [u8]) -> TxResult<()> {
        let engine = self.engine;
        match engine
            .table
            .header(r)
            .read_at(&engine.versions, self.snapshot, offset, dst)
        {
            Seen::Copied { newest } if newest || self.level != Level::Linearizable => Ok(()),
            _ => self.conflict(),
        }
    }

    /// Reads `[addr, addr + dst.len())` chunk by chunk: from the write set, a version chain
    /// or the master (kept out of `read_raw`, whose common case stays small).
    #[inline(never)]
    fn read_versions(&mut self, addr: u64, dst: &mut [u8]) -> TxResult<()> {
        let mut done = 0usize;
        while done < dst.len() {
            let at = addr + done as u64;
            let (chunk, offset) = (at / CHUNK, (at % CHUNK) as usize);
            let n = (CHUNK as usize - offset).min(dst.len() - done);
            let piece = &mut dst[done..done + n];
            match self.state.find(chunk) {
                Some(i) => piece.copy_from_slice(&self.state.writes[i].data[offset..offset + n]),
                None => self.read_chunk(chunk, offset, piece)?,
            }
            done += n;
        }
        Ok(())
    }

    /// Every read [`Tx::read_raw`]'s common case does not take: a failed attempt, tracked
    /// reads, a transaction that has written, or a read spanning chunks (kept out of line).
    #[inline(never)]
    fn read_tracked_or_spanning(&mut self, addr: u64, dst: &mut [u8]) -> TxResult<()> {
        if self.failed {
            return Err(TxError::Conflict);
        }
        let len = dst.len() as u64;
        // The pool's length, resolved at begin, as in `read_raw`'s common case.
        if addr.checked_add(len).is_none_or(|end| end > self.pool_len) {
            return Err(TxError::OutOfBounds { addr, len });
        }
        if len == 0 {
            // Possibly at the pool's end, past the last chunk's slot.
            return Ok(());
        }
        if addr % CHUNK + len <= CHUNK {
            // One chunk (an update's reads, tracked or not): the write set, else as
            // `read_chunk` reads it, without the chunk-by-chunk loop.
            let (chunk, offset) = (addr / CHUNK, (addr % CHUNK) as usize);
            if let Some(i) = self.state.find(chunk) {
                dst.copy_from_slice(&self.state.writes[i].data[offset..offset + dst.len()]);
                return Ok(());
            }
            self.note_read(chunk);
            return self.read_in_chunk(addr, dst);
        }
        if !self.tracking && self.reads_masters(addr, len) {
            self.pm.read(addr, dst);
            return Ok(());
        }
        self.read_versions(addr, dst)
    }

    /// A plain read (see `plain_reads`) of an in-bounds range that spans chunks whose header
    /// bits did not show at once that it reads the masters (`read_raw` tests that inline): the
    /// masters when none of its chunks has a header, else chunk by chunk (kept out of line,
    /// and out of `read_tracked_or_spanning`'s checks).
    #[inline(never)]
    fn read_plain_spanning(&mut self, addr: u64, dst: &mut [u8]) -> TxResult<()> {
        let last = (addr + dst.len() as u64 - 1) / CHUNK;
        if self.table.reads_masters(addr / CHUNK, last) {
            self.pm.read(addr, dst);
            return Ok(());
        }
        self.read_versions(addr, dst)
    }

    /// Reads `dst` at `addr`, inside one chunk this transaction has not written: the master
    /// if the chunk has no header, as for any engine, else through its header. Always
    /// inlined: out of line, its call (six saved registers, a result through memory) cost
    /// more than the header-bit test it wraps.
    #[inline(always)]
    fn read_in_chunk(&mut self, addr: u64, dst: &mut [u8]) -> TxResult<()> {
        match self.table.reader_slot(addr / CHUNK) {
            NO_HEADER | FRESH => {
                self.pm.read(addr, dst);
                Ok(())
            }
            r => self.read_header(r, (addr % CHUNK) as usize, dst),
        }
    }

    /// Whether every chunk of `[addr, addr + len)` reads as its master for this transaction:
    /// none has a header, and none is in the write set.
    fn reads_masters(&self, addr: u64, len: u64) -> bool {
        let (first, last) = (addr / CHUNK, (addr + len.max(1) - 1) / CHUNK);
        self.engine.table.reads_masters(first, last)
            && (self.state.writes.is_empty()
                || (first..=last).all(|chunk| self.state.find(chunk).is_none()))
    }

    /// Locks chunk `chunk` for writing and adds its newest version to the write set.
    fn lock_chunk(&mut self, chunk: u64) -> TxResult<usize> {
        let engine = self.engine;
        let pm = engine.pool.pm();
        let (href, header) = loop {
            let href = engine.table.get_or_create(chunk, || {
                let mut master = [0u8; CHUNK as usize];
                pm.read(chunk * CHUNK, &mut master);
                master
            })?;
            let header = engine.table.header(href);
            match header.lock(self.owner()) {
                Lock::Taken => break (href, header),
                Lock::Busy => return self.conflict(),
                Lock::Retired => continue,
            }
        };
        let mut data: Bytes = [0; CHUNK as usize];
        let newest = header.newest(&engine.versions, &mut data);
        // First committer wins: a version newer than the snapshot means a concurrent
        // transaction already changed the chunk.
        if self.replaying.is_none() && newest > self.snapshot {
            header.unlock();
            return self.conflict();
        }
        self.plain_reads = false;
        self.noted_reads = false;
        Ok(self.state.push_write(WriteEntry {
            chunk,
            header: href,
            data,
            mask: 0,
        }))
    }

    /// Whether `[addr, addr + len)` lies in a block this transaction allocated.
    fn in_own_block(&self, addr: u64, len: u64) -> bool {
        let inside = |(start, size): (u64, u64)| start <= addr && addr + len <= start + size;
        match &self.replaying {
            Some(replaying) => replaying.blocks.iter().any(|&b| inside(b)),
            None => self
                .state
                .reservations
                .iter()
                .any(|r| inside((r.addr, r.size))),
        }
    }

    /// Writes `src` at `addr` (in chunk `chunk`) straight to the master if the chunk has no
    /// header (TimeStone writes new objects in place): nobody can reach the block yet, and
    /// the master's other bytes do not change.
    fn write_fresh(&mut self, chunk: u64, addr: u64, src: &[u8]) -> bool {
        let table = &self.engine.table;
        if !table.try_fresh(chunk) {
            return false;
        }
        self.engine.pool.pm().write(addr, src, WriteClass::User);
        table.end_fresh(chunk);
        self.state.note_fresh(addr, src.len() as u64);
        true
    }

    /// Whether no chunk this transaction read changed between its snapshot and `ts`.
    fn validate(&self, ts: u64) -> bool {
        let engine = self.engine;
        let state = &*self.state;
        state.reads.iter().all(|&chunk| {
            state.find(chunk).is_some()
                || match engine.table.slot(chunk) {
                    NO_HEADER | FRESH => true,
                    r => !engine
                        .table
                        .header(r)
                        .changed_after(&engine.versions, self.snapshot, ts),
                }
        })
    }

    /// Unlocks the write set after an abort; its headers go on the dirty list, so a
    /// checkpoint takes out those left without versions.
    fn release_locks(&mut self) {
        let engine = self.engine;
        for w in &self.state.writes {
            engine.table.header(w.header).unlock();
        }
        if !self.state.writes.is_empty() {
            self.shared
                .dirty
                .lock()
                .extend(self.state.writes.iter().map(|w| (w.header, w.chunk)));
        }
    }

    fn commit_live(&mut self) -> TxResult<()> {
        let engine = self.engine;
        let pm = engine.pool.pm();
        if pm.is_poisoned() {
            return Err(TxError::Poisoned);
        }
        let needed = self.state.writes.len() as u32;
        if (self.state.free.len() as u32) < needed {
            return self.fail(Retry::Versions(needed));
        }
        // The lane's list, kept for its capacity (lost only on a failed commit).
        let mut actions: Vec<Action> = std::mem::take(&mut self.state.actions);
        actions.clear();
        let state = &*self.state;
        actions.extend(
            state
                .reservations
                .iter()
                .map(|r| engine.heap.publish_action(r)),
        );
        actions.extend(state.frees.iter().map(|f| engine.heap.free_action(f)));
        if actions.len() > record::MAX_ACTIONS {
            return Err(TxError::InvalidArgument(format!(
                "a transaction may make at most {} heap changes",
                record::MAX_ACTIONS
            )));
        }
        merge_ranges(&mut self.state.fresh);
        // A declared operation writes its logical record unless its reads fail validation
        // (rare): the physical record is sized only when it is the one to be written.
        let logical = self.op.map(|_| {
            record::encoded_len(self.state.args.len(), std::iter::empty(), actions.len()).0 as u64
        });
        let need = match logical {
            Some(len) => self.olog_room(len)?,
            None => self.physical_need(actions.len())?,
        };
        self.state
            .olog
            .drop_covered(engine.checkpointed.load(Ordering::Acquire));
        let Some(mut pos) = self.state.olog.fit(need) else {
            return self.fail(Retry::Olog);
        };

        // Push (after announcing a lower bound of the timestamp to checkpointers), stamp.
        let shared = self.shared;
        shared
            .inflight
            .store(engine.clock.now(), engine.clock.inflight_order());
        let pushed = self.push_all();
        let ts = engine.clock.stamp();
        for &r in &pushed {
            engine.versions.stamp(r, ts);
        }
        engine.clock.wait_past(ts);
        // Validation looks for versions stamped in `(snapshot, ts]` by others: when no
        // other commit stamped since the snapshot (one thread, or no concurrent writer),
        // there are none, and the read set is not walked.
        let valid = !self.tracks_reads()
            || engine.clock.only_stamp_since(self.snapshot, ts)
            || self.validate(ts);
        if !valid && self.level != Level::Snapshot {
            self.unpush(&pushed);
            return self.conflict();
        }
        let as_op = valid && self.op.is_some();
        if !as_op && logical.is_some() {
            // Validation failed at `Snapshot`: the commit goes ahead as data, whose record
            // is sized now (the lane's OLog has not changed since `fit`).
            let fits = self
                .physical_need(actions.len())
                .map(|need| self.state.olog.fit(need));
            match fits {
                Ok(Some(at)) => pos = at,
                Ok(None) => {
                    self.unpush(&pushed);
                    return self.fail(Retry::Olog);
                }
                Err(error) => {
                    self.unpush(&pushed);
                    return Err(error);
                }
            }
        }

        // The record, one fence: the durability point. A physical record's bytes are
        // gathered only when one is written.
        let ranges = match (as_op, self.op) {
            (true, Some(_)) => Vec::new(),
            _ => self.physical_ranges(),
        };
        let state = &mut *self.state;
        let at = state.base + pos;
        let mut scratch = std::mem::take(&mut state.scratch);
        let prev = record::link(ts, state.olog.newest());
        match (as_op, self.op) {
            (true, Some(op)) => record::encode(
                at,
                Kind::Logical,
                ts,
                prev,
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
                prev,
                0,
                &[],
                ranges.iter().map(|(a, b)| (*a, &b[..])),
                &actions,
                &mut scratch,
            ),
        }
        let len = scratch.len() as u64;
        pm.write(at, &scratch, WriteClass::Log);
        pm.flush(at, len);
        engine.stats.olog_bytes.fetch_add(len, Ordering::Relaxed);
        if engine.options.mutant != Mutant::NoCommitFence {
            pm.fence();
        }
        state.scratch = scratch;
        if pm.is_poisoned() {
            self.unpush(&pushed);
            return Err(TxError::Poisoned);
        }
        pm.durability_point();

        engine.apply_actions(&actions);
        engine.clock.wait_visible(ts);
        self.publish(&pushed, ts);
        self.state.pushed = pushed;
        self.state.olog.push(ts, pos, len);
        let counter = if as_op {
            &engine.stats.commits_logical
        } else {
            &engine.stats.commits_physical
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.state.reservations.clear();
        engine.defer_frees(ts, self.state.frees.drain(..));
        let copied: u64 = self
            .state
            .writes
            .iter()
            .map(|w| u64::from(w.mask.count_ones()))
            .sum();
        let in_place: u64 = self.state.fresh.iter().map(|&(_, n)| n).sum();
        pm.stats().record_user_bytes(copied + in_place);
        engine
            .stats
            .new_object_bytes
            .fetch_add(in_place, Ordering::Relaxed);
        engine
            .stats
            .tlog_bytes
            .fetch_add(u64::from(needed) * CHUNK, Ordering::Relaxed);
        self.state.writes.clear();
        self.state.actions = actions;
        Ok(())
    }

    /// `len` bytes, unless the lane's whole OLog is smaller (a typed error).
    fn olog_room(&self, len: u64) -> TxResult<u64> {
        let capacity = self.state.olog.size();
        if len > capacity {
            return Err(TxError::LogFull {
                needed: len,
                capacity,
            });
        }
        Ok(len)
    }

    /// The OLog bytes this commit's physical record takes (checked against the OLog's size
    /// and the record format's range count).
    fn physical_need(&mut self, actions: usize) -> TxResult<u64> {
        let (len, count) = self.physical_len(actions);
        if count > u32::MAX as usize {
            return Err(TxError::InvalidArgument("too many written ranges".into()));
        }
        self.olog_room(len as u64)
    }

    /// The encoded length and range count of this commit's physical record (the write
    /// set's spans and the in-place ranges, `fresh` already merged), without its bytes.
    fn physical_len(&mut self, actions: usize) -> (usize, usize) {
        let state = &mut *self.state;
        let mut spans = std::mem::take(&mut state.spans);
        crate::engine::written_spans(&state.writes, &mut spans);
        spans.extend_from_slice(&state.fresh);
        let len = record::encoded_len_of(0, spans.iter().map(|&(_, n)| n as usize), actions);
        state.spans = spans;
        len
    }

    /// The bytes a physical record holds, in the order recovery writes them: the bytes
    /// written in place (read back from the masters), then each locked chunk's written
    /// bytes. The two may overlap — a block written in place, then its chunk locked (a
    /// neighbour sharing it was written) and the block written again through the write set
    /// — and the write set's bytes are then the newer ones: a chunk in the write set is
    /// never written in place again. (Sorted by address, an in-place range starting at or
    /// before the write set's went after it and recovery replayed the older bytes.)
    fn physical_ranges(&self) -> Vec<(u64, Vec<u8>)> {
        let pm = self.engine.pool.pm();
        let mut ranges: Vec<(u64, Vec<u8>)> = self
            .state
            .fresh
            .iter()
            .map(|&(addr, len)| {
                let mut bytes = vec![0u8; len as usize];
                pm.read(addr, &mut bytes);
                (addr, bytes)
            })
            .collect();
        ranges.extend(crate::engine::written_ranges(&self.state.writes));
        ranges
    }

    /// Pushes every private copy as an unstamped version of its chunk.
    fn push_all(&mut self) -> Vec<u32> {
        let engine = self.engine;
        let state = &mut *self.state;
        let mut pushed = std::mem::take(&mut state.pushed);
        pushed.clear();
        for w in &state.writes {
            let r = state.free.pop().expect("checked before pushing");
            engine.versions.check_ownership(r, true);
            engine
                .table
                .header(w.header)
                .push(&engine.versions, r, &w.data);
            pushed.push(r);
        }
        pushed
    }

    /// Takes the pushed versions back after a failed commit (readers skip them; they are
    /// reused after a grace period).
    fn unpush(&mut self, pushed: &[u32]) {
        let engine = self.engine;
        for (w, &r) in self.state.writes.iter().zip(pushed) {
            engine.table.header(w.header).unpush(&engine.versions, r);
        }
        engine.retire_versions(pushed.to_vec());
        // Release: a checkpointer that reads NONE sees the versions marked aborted.
        self.shared.inflight.store(NONE, Ordering::Release);
    }

    /// After the commit is durable: versions committed, locks released, chunks listed for
    /// the next checkpoint.
    fn publish(&mut self, pushed: &[u32], ts: u64) {
        let engine = self.engine;
        for (w, &r) in self.state.writes.iter().zip(pushed) {
            engine.versions.publish(r, ts);
            engine.table.header(w.header).unlock();
        }
        self.list_for_checkpoint();
        // Release: a checkpointer that reads NONE sees the versions published.
        self.shared.inflight.store(NONE, Ordering::Release);
    }

    /// Lists the written chunks and the in-place ranges for the next checkpoint.
    fn list_for_checkpoint(&mut self) {
        let shared = self.shared;
        let state = &*self.state;
        if !state.writes.is_empty() {
            shared
                .dirty
                .lock()
                .extend(state.writes.iter().map(|w| (w.header, w.chunk)));
        }
        if !state.fresh.is_empty() {
            shared.fresh.lock().extend_from_slice(&state.fresh);
        }
    }

    /// Recovery's commit: the versions get the logged timestamp; nothing is logged.
    fn commit_replay(&mut self) -> TxResult<()> {
        let replaying = self.replaying.as_ref().expect("replaying");
        if !replaying.allocs.is_empty() {
            return Err(TxError::Corrupted(format!(
                "re-executed operation allocated {} fewer blocks than logged",
                replaying.allocs.len()
            )));
        }
        let ts = replaying.ts;
        let needed = self.state.writes.len() as u32;
        if (self.state.free.len() as u32) < needed {
            return self.fail(Retry::Versions(needed));
        }
        let pushed = self.push_all();
        let engine = self.engine;
        for (w, &r) in self.state.writes.iter().zip(&pushed) {
            engine.versions.publish(r, ts);
            engine.table.header(w.header).unlock();
        }
        self.state.pushed = pushed;
        merge_ranges(&mut self.state.fresh);
        self.list_for_checkpoint();
        self.state.writes.clear();
        Ok(())
    }
}

impl<P: Persist, R: Replay> Drop for MvccTx<'_, P, R> {
    fn drop(&mut self) {
        // The lane's lists are left empty (committed, aborted or abandoned alike).
        self.state.reservations.clear();
        self.state.frees.clear();
        self.shared.active.store(NONE, Ordering::Release);
    }
}

impl<P: Persist, R: Replay> Lifecycle for MvccTx<'_, P, R> {
    fn commit(&mut self) -> TxResult<()> {
        if self.failed {
            return Err(TxError::Conflict);
        }
        if self.replaying.is_some() {
            return self.commit_replay();
        }
        if self.state.writes.is_empty()
            && self.state.reservations.is_empty()
            && self.state.frees.is_empty()
        {
            // Only this lane's holder stores the count: no read-modify-write needed.
            let reads = &self.shared.reads;
            reads.store(reads.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            return Ok(());
        }
        self.commit_live()
    }

    fn abort(&mut self) {
        self.release_locks();
        self.state.writes.clear();
        self.state.by_chunk.clear();
        // Bytes written in place stay in the masters, unflushed. A header made for one of
        // their chunks since (by this attempt or another transaction) took them into its
        // base, which a checkpoint reads as the content at its last boundary, durable in
        // the masters and the CLog: a later commit that writes the same bytes through the
        // chain (this transaction's retry) then differs from the base nowhere there, its
        // record leaves them out, and a crash would lose them. So the next checkpoint
        // flushes them before its record, as it does for committed in-place ranges.
        if !self.state.fresh.is_empty() {
            self.shared
                .fresh
                .lock()
                .extend_from_slice(&self.state.fresh);
        }
        for r in self.state.reservations.drain(..) {
            self.engine.heap.cancel(&r);
        }
        for f in self.state.frees.drain(..) {
            self.engine.heap.cancel_free(&f);
        }
    }
}

impl<P: Persist, R: Replay> Tx for MvccTx<'_, P, R> {
    fn read_raw(&mut self, addr: u64, dst: &mut [u8]) -> TxResult<()> {
        let len = dst.len() as u64;
        if self.plain_reads && len != 0 {
            // The common read, by a transaction whose reads need no set: inside one chunk,
            // the master if the chunk has no header, as for any engine, else its header.
            // The pool's length, resolved at begin (as `check_range` reads it).
            if addr.checked_add(len).is_none_or(|end| end > self.pool_len) {
                return Err(TxError::OutOfBounds { addr, len });
            }
            if addr % CHUNK + len <= CHUNK {
                return self.read_in_chunk(addr, dst);
            }
            // A value across chunks (nearly always two on one page): one load of their
            // header bits, inline; anything else out of line.
            if self
                .table
                .masters_by_bits(addr / CHUNK, (addr + len - 1) / CHUNK)
            {
                self.pm.read(addr, dst);
                return Ok(());
            }
            return self.read_plain_spanning(addr, dst);
        }
        if self.noted_reads
            && addr % CHUNK + len <= CHUNK
            && len != 0
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.pool_len)
        {
            // What `read_tracked_or_spanning` does for one chunk while the write set is
            // empty and the attempt has not failed, without its call and checks.
            self.note_read(addr / CHUNK);
            return self.read_in_chunk(addr, dst);
        }
        self.read_tracked_or_spanning(addr, dst)
    }

    fn write_raw(&mut self, addr: u64, src: &[u8]) -> TxResult<()> {
        if self.failed {
            return Err(TxError::Conflict);
        }
        let len = src.len() as u64;
        if !self.engine.writable(addr, len) {
            return Err(TxError::OutOfBounds { addr, len });
        }
        let mut done = 0usize;
        while done < src.len() {
            let at = addr + done as u64;
            let (chunk, offset) = (at / CHUNK, (at % CHUNK) as usize);
            let n = (CHUNK as usize - offset).min(src.len() - done);
            let piece = &src[done..done + n];
            done += n;
            let i = match self.state.find(chunk) {
                Some(i) => i,
                None if self.in_own_block(at, n as u64) && self.write_fresh(chunk, at, piece) => {
                    continue;
                }
                None => self.lock_chunk(chunk)?,
            };
            let entry = &mut self.state.writes[i];
            entry.data[offset..offset + n].copy_from_slice(piece);
            entry.mask |= if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << offset
            };
        }
        Ok(())
    }

    fn alloc_raw(&mut self, size: u64) -> TxResult<u64> {
        if let Some(replaying) = &mut self.replaying {
            let (addr, len) = replaying.allocs.pop_front().ok_or_else(|| {
                TxError::Corrupted("re-executed operation allocates more blocks than logged".into())
            })?;
            replaying.blocks.push((addr, len));
            return Ok(addr);
        }
        let engine = self.engine;
        let mut system = |actions: &[Action]| engine.system_commit(actions);
        let may_return = |start: u64, len: u64| engine.may_return_run(start, len);
        // The heap's size class, not rounded up to whole chunks: an 80-byte node takes 96
        // bytes and may share a chunk with a neighbour (a false conflict at worst; a fresh
        // block on a chunk with a header is written through the chain). Rounded to 128, every
        // node's first line would sit on an even line, in half the cache's sets (§10).
        let reservation = match engine
            .heap
            .reserve_returning(size, &mut system, &may_return)
        {
            // Blocks freed by committed transactions may be waiting for reuse, or empty runs
            // for their chunks' versions to go: run again after the engine has checkpointed,
            // written back and released them.
            Err(TxError::OutOfSpace { .. })
                if self.outcome.space_retries.get() < SPACE_RETRIES
                    && (engine.has_deferred_frees() || engine.heap.has_empty_runs()) =>
            {
                return self.fail(Retry::Space);
            }
            other => other?,
        };
        self.state.reservations.push(reservation);
        Ok(reservation.addr)
    }

    fn free_raw(&mut self, addr: u64) -> TxResult<()> {
        if self.replaying.is_some() {
            // The free's heap action was re-applied before re-execution started.
            return Ok(());
        }
        match self.engine.heap.prepare_free(addr) {
            Ok(freeing) => {
                self.state.frees.push(freeing);
                Ok(())
            }
            // Another transaction freed the block this one read (running, or committed after
            // this snapshot, its free not yet reusable): a conflict, retried at a newer
            // snapshot. A block this transaction already frees is the caller's error.
            Err(heap::HeapError::BeingFreed(block))
                if !self.state.frees.iter().any(|f| f.addr == block) =>
            {
                self.conflict()
            }
            Err(error) => Err(error.into()),
        }
    }

    fn pool_tag(&self) -> u16 {
        self.tag
    }

    fn root_offset(&self) -> u64 {
        self.engine.user.offset
    }
}
