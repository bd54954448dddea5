//! Silo (Zhang & Hua, HPCA'23): speculative hardware logging.
//!
//! * **Log generator** (per core, at the L1): every non-silent transactional store produces an
//!   undo+redo entry (word address, old word, new word) sent over the bypass path to the core's
//!   battery-backed **log buffer** at the MC; the store does not wait for it. Silent stores
//!   (old == new) produce nothing.
//! * **Merging**: an entry for a word the running transaction already logged merges into the
//!   live entry (the oldest old value stays, the newest new value wins); merging never crosses
//!   transactions.
//! * **Flush-bit**: when a line reaches PM by a cache eviction carrying an entry's newest value
//!   (the write-back was captured after the entry's last store: `WriteReq::seq > entry.seq`),
//!   the entry's flush-bit is set: PM already has the new value, the old value is kept for undo.
//!   A later store to the word clears it again (the PM copy is stale once more).
//! * **Commit**: the commit request follows the entries over the path; once it and the
//!   transaction's last entry have arrived, the buffer acknowledges (after its access latency
//!   for the entry); at that instant the core's persistent commit register is set. Then
//!   entries with flush-bit 1 free at once and the others queue an 8 B in-place update (LU) to
//!   the MC write queue; each frees when its LU is accepted. LUs coalesce with evictions in the
//!   on-PM buffer.
//! * **Overflow**: a new entry finding no free slot waits while entries of committed
//!   transactions (or entries already retiring) are draining; if every slot holds a live entry
//!   of the running transaction, the oldest ones (up to ⌊256/18⌋ = 14) retire: their 18 B undo
//!   records go to the core's PM log region in one batched write, and those with flush-bit 0
//!   write their new word in place (LU). A retiring entry frees when both are accepted; the
//!   entries that follow take the freed slots while the rest of the batch drains. The core
//!   stalls only while no slot is free. A transaction whose entries fill the buffer exactly
//!   does not overflow.
//! * **Failure**: the battery flushes, per entry still in a buffer, the undo record (entries of
//!   uncommitted transactions) or the redo record (entries of committed transactions with
//!   flush-bit 0) to the log region.
//! * **Recovery**: redo records of committed transactions (txid ≤ commit register) in log
//!   order, then undo records of uncommitted ones, newest first (so the oldest old value wins).
//!   Records of committed transactions' undo and uncommitted ones' redo are ignored.

use super::{Design, Stall, Step, StoreInfo, Wake};
use crate::config::{Config, SiloConfig};
use crate::engine::Ctx;
use crate::mem::{Payload, WriteKind, WriteReq};
use crate::metrics::LogStats;
use crate::pm::{LogRecord, PmImage, RecordKind};
use std::collections::VecDeque;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Belongs to the running transaction, or to a committed one before commit processing.
    Live,
    /// Committed; its LU waits for the write queue.
    LuQueued,
    /// Retired by overflow: `undo` / `lu` tell which of its writes are still to be accepted.
    Retiring { undo: bool, lu: bool },
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    txid: u64,
    word: u64,
    old: u64,
    new: u64,
    flush: bool,
    /// Order stamp of the last store merged into the entry.
    seq: u64,
    /// Allocation order (the buffer is FIFO).
    order: u64,
    state: State,
}

#[derive(Clone, Debug)]
struct SiloCore {
    slots: Vec<Option<Entry>>,
    /// Free slots (a stack; slot numbers carry no meaning, age is `Entry::order`).
    free: Vec<usize>,
    /// Allocated slots with their entries' order stamps, oldest first. Entries freed out of
    /// order stay until they reach the front; a pair whose slot now holds another entry (or
    /// none) is stale and skipped.
    fifo: VecDeque<(usize, u64)>,
    /// Slots holding live entries of the running transaction.
    running_live: usize,
    /// Per slot: the word of its entry (`NO_WORD` when free). Compact copies of the slots'
    /// keys, scanned instead of the entries (a store, a write-back, an in-place update).
    slot_words: Vec<u64>,
    /// Per slot: the word of its entry if it is a live entry of the running transaction
    /// (the entries a store can merge into), else `NO_WORD`.
    live_words: Vec<u64>,
    next_order: u64,
    txid: u64,
    committed: u64,
    /// Latest arrival of one of the running transaction's entries at the buffer.
    last_arrival: u64,
    tx_entries: u64,
    tx_overflowed: bool,
    committing: bool,
    /// A store waiting for room (its word).
    waiting: Option<u64>,
}

impl SiloCore {
    fn live(&mut self, word: u64) -> Option<&mut Entry> {
        let slot = self.live_words.iter().position(|&w| w == word)?;
        let e = self.slots[slot].as_mut();
        debug_assert!(
            e.as_ref()
                .is_some_and(|e| e.state == State::Live && e.txid == self.txid)
        );
        e
    }

    /// The slot's entry is no longer a live entry of the running transaction.
    fn unlive(&mut self, slot: usize) {
        self.live_words[slot] = NO_WORD;
        self.running_live -= 1;
    }

    fn free_slot(&self) -> Option<usize> {
        self.free.last().copied()
    }

    /// Puts a new live entry of the running transaction into a free slot.
    fn alloc(&mut self, entry: Entry) -> usize {
        let slot = self.free.pop().expect("a free slot");
        self.slots[slot] = Some(entry);
        self.slot_words[slot] = entry.word;
        self.live_words[slot] = entry.word;
        self.fifo.push_back((slot, entry.order));
        self.running_live += 1;
        slot
    }

    /// Frees a slot.
    fn release(&mut self, slot: usize) {
        debug_assert!(self.slots[slot].is_some(), "freeing a free slot");
        debug_assert_eq!(self.live_words[slot], NO_WORD, "freeing a live entry");
        self.slots[slot] = None;
        self.slot_words[slot] = NO_WORD;
        self.free.push(slot);
        while let Some(&(s, order)) = self.fifo.front() {
            if self.slots[s].is_some_and(|e| e.order == order) {
                break;
            }
            self.fifo.pop_front();
        }
    }

    fn has_room_for(&mut self, word: u64) -> bool {
        self.live(word).is_some() || self.free_slot().is_some()
    }

    /// Slots holding entries, oldest first.
    fn by_age(&self) -> Vec<usize> {
        self.fifo
            .iter()
            .filter(|&&(s, order)| self.slots[s].is_some_and(|e| e.order == order))
            .map(|&(s, _)| s)
            .collect()
    }
}

/// A free slot's word (no 8-byte-aligned word address has its low bits set).
const NO_WORD: u64 = u64::MAX;

/// Work for the log controller's path into the write queue.
#[derive(Clone, Debug)]
enum Job {
    /// In-place update of one entry's new word.
    Lu {
        core: usize,
        slot: usize,
        order: u64,
    },
    /// One batched write of undo records of retiring entries.
    Undo {
        core: usize,
        entries: Vec<(usize, u64)>,
    },
}

/// The Silo design.
#[derive(Clone, Debug)]
pub struct Silo {
    cfg: SiloConfig,
    path: u64,
    cores: Vec<SiloCore>,
    jobs: VecDeque<Job>,
    stats: LogStats,
}

impl Silo {
    /// Silo for `cfg`.
    pub fn new(cfg: &Config) -> Self {
        let core = SiloCore {
            slots: vec![None; cfg.silo.entries],
            free: (0..cfg.silo.entries).rev().collect(),
            fifo: VecDeque::new(),
            running_live: 0,
            slot_words: vec![NO_WORD; cfg.silo.entries],
            live_words: vec![NO_WORD; cfg.silo.entries],
            next_order: 0,
            txid: 0,
            committed: 0,
            last_arrival: 0,
            tx_entries: 0,
            tx_overflowed: false,
            committing: false,
            waiting: None,
        };
        Silo {
            cfg: cfg.silo.clone(),
            path: cfg.path_cycles,
            cores: vec![core; cfg.cores],
            jobs: VecDeque::new(),
            stats: LogStats::default(),
        }
    }

    fn room_wait() -> Step {
        Step::block(Wake::Poll, Stall::LogBuffer)
    }

    /// No slot is free: retire the oldest live entries of the running transaction if every
    /// slot holds one; otherwise slots are already on their way to being freed.
    fn make_room(&mut self, ctx: &mut Ctx<'_>, core: usize) {
        let c = &mut self.cores[core];
        if c.running_live < c.slots.len() {
            return;
        }
        let batch: Vec<usize> = c
            .fifo
            .iter()
            .filter(|&&(s, order)| c.slots[s].is_some_and(|e| e.order == order))
            .take(self.cfg.records_per_batch())
            .map(|&(s, _)| s)
            .collect();
        batch.iter().for_each(|&s| c.unlive(s));
        let mut entries = Vec::with_capacity(batch.len());
        for slot in batch {
            let e = c.slots[slot].as_mut().expect("occupied");
            e.state = State::Retiring {
                undo: true,
                lu: !e.flush,
            };
            entries.push((slot, e.order));
            if e.flush {
                // PM already has its newest value from an eviction: the LU is skipped, as
                // at commit.
                self.stats.updates_skipped += 1;
            } else {
                self.jobs.push_back(Job::Lu {
                    core,
                    slot,
                    order: e.order,
                });
            }
        }
        self.stats.overflow_batches += 1;
        self.stats.overflowed_entries += entries.len() as u64;
        if !std::mem::replace(&mut c.tx_overflowed, true) {
            self.stats.overflow_tx += 1;
        }
        self.jobs.push_front(Job::Undo { core, entries });
        self.background(ctx);
    }

    fn commit(&mut self, ctx: &mut Ctx<'_>, core: usize) {
        let c = &mut self.cores[core];
        c.committed = c.txid;
        let pm = ctx.pm();
        pm.committed[core] = c.txid;
        pm.logs[core].clear(); // truncation: overflow records of this tx are now garbage
        for slot in c.by_age() {
            let e = c.slots[slot].as_mut().expect("occupied");
            if e.txid != c.txid || e.state != State::Live {
                continue;
            }
            let flush = e.flush;
            c.unlive(slot);
            let e = c.slots[slot].as_mut().expect("occupied");
            if flush {
                c.release(slot);
                self.stats.updates_skipped += 1;
            } else {
                e.state = State::LuQueued;
                self.jobs.push_back(Job::Lu {
                    core,
                    slot,
                    order: e.order,
                });
            }
        }
        self.background(ctx);
    }

    fn entry(&mut self, core: usize, slot: usize, order: u64) -> Option<&mut Entry> {
        self.cores[core].slots[slot]
            .as_mut()
            .filter(|e| e.order == order)
    }

    /// Whether a job belongs to an overflow retirement (its slot is needed now).
    fn retiring(&mut self, job: &Job) -> bool {
        match *job {
            Job::Undo { .. } => true,
            Job::Lu { core, slot, order } => self
                .entry(core, slot, order)
                .is_some_and(|e| matches!(e.state, State::Retiring { .. })),
        }
    }

    /// Whether a queued job still has work (an LU may have been cancelled by an eviction).
    fn job_live(&mut self, job: &Job) -> bool {
        match *job {
            Job::Lu { core, slot, order } => self.entry(core, slot, order).is_some_and(|e| {
                matches!(e.state, State::LuQueued | State::Retiring { lu: true, .. })
            }),
            Job::Undo { .. } => true,
        }
    }

    fn request(&mut self, ctx: &mut Ctx<'_>, job: &Job) -> WriteReq {
        match *job {
            Job::Lu { core, slot, order } => {
                let e = *self.entry(core, slot, order).expect("live job");
                let mut data = Payload::default();
                let i = ((e.word >> 3) & 7) as usize;
                data.mask = 1 << i;
                data.words[i] = e.new;
                // The data was captured by the entry's last store.
                WriteReq {
                    data: ctx.attach(data),
                    seq: e.seq,
                    log_words: true,
                    ..WriteReq::new(e.word, 8, WriteKind::InPlace, core)
                }
            }
            Job::Undo { core, ref entries } => {
                let bytes = (entries.len() as u64 * self.cfg.undo_record_bytes)
                    .next_multiple_of(8)
                    .min(self.cfg.batch_bytes);
                let addr = ctx.log_addr(core, bytes);
                WriteReq::new(addr, bytes, WriteKind::Log, core)
            }
        }
    }

    /// Option `coalesce_lus`: the queued LUs of committed entries of the same core and 64 B
    /// line as `job` join its write as one masked request. The scan stops at a second entry
    /// of a word already in the write, and a word whose LU is left behind (an overflow LU of
    /// a retiring entry) is not taken later in the scan, so the LUs of one word stay in order.
    fn take_line_mates(&mut self, ctx: &mut Ctx<'_>, job: &Job, req: &mut WriteReq) -> Vec<Job> {
        let Job::Lu { core, .. } = *job else {
            return Vec::new();
        };
        let line = req.addr >> 6;
        let mut words = 1u8 << ((req.addr >> 3) & 7);
        let mut left_behind = 0u8;
        let mut taken = Vec::new();
        for (i, mate) in self.jobs.iter().enumerate().take(4 * self.cfg.entries) {
            let Job::Lu {
                core: c,
                slot,
                order,
            } = *mate
            else {
                continue;
            };
            let Some(e) = self.cores[c].slots[slot].filter(|e| e.order == order) else {
                continue;
            };
            if c != core || e.word >> 6 != line {
                continue;
            }
            let bit = 1u8 << ((e.word >> 3) & 7);
            if e.state != State::LuQueued || left_behind & bit != 0 {
                left_behind |= bit;
                continue;
            }
            if words & bit != 0 {
                break;
            }
            words |= bit;
            req.seq = req.seq.min(e.seq);
            if let Some(data) = ctx.payload_mut(req.data) {
                data.mask |= bit;
                data.words[((e.word >> 3) & 7) as usize] = e.new;
            }
            taken.push(i);
        }
        req.addr = line << 6;
        req.bytes = 8 * u64::from(words.count_ones());
        taken
            .into_iter()
            .rev()
            .map(|i| self.jobs.remove(i).expect("index from the scan"))
            .collect()
    }

    /// The job's write was accepted: record its effect and free finished entries.
    fn completed(&mut self, ctx: &mut Ctx<'_>, job: Job) {
        match job {
            Job::Lu { core, slot, order } => {
                self.stats.in_place_updates += 1;
                let e = *self.entry(core, slot, order).expect("live job");
                // PM now has the word's newest value unless a later store made a newer entry
                // (data-comparison writes then find nothing to write for it in the line).
                let c = &self.cores[core];
                let newer =
                    c.slot_words.iter().enumerate().any(|(s, &w)| {
                        w == e.word && c.slots[s].is_some_and(|n| n.order > e.order)
                    });
                if !newer {
                    ctx.persisted_words(e.word >> 6, 1 << ((e.word >> 3) & 7));
                }
                let e = self.entry(core, slot, order).expect("live job");
                match e.state {
                    State::Retiring { undo, .. } => {
                        e.flush = true;
                        e.state = State::Retiring { undo, lu: false };
                        if !undo {
                            self.cores[core].release(slot);
                        }
                    }
                    _ => self.cores[core].release(slot),
                }
            }
            Job::Undo { core, entries } => {
                for (slot, order) in entries {
                    let e = self.entry(core, slot, order).expect("retiring entry");
                    let record = LogRecord {
                        kind: RecordKind::Undo,
                        txid: e.txid,
                        word: e.word,
                        old: e.old,
                        new: e.new,
                    };
                    let State::Retiring { lu, .. } = e.state else {
                        unreachable!("undo job for a non-retiring entry")
                    };
                    e.state = State::Retiring { undo: false, lu };
                    if !lu {
                        self.cores[core].release(slot);
                    }
                    self.stats.undo_records += 1;
                    ctx.pm().append(core, record);
                }
            }
        }
    }

    /// An eviction of `line` captured at `seq` reached PM: flag the entries it covers.
    fn line_persisted(&mut self, line: u64, seq: u64) {
        for c in &mut self.cores {
            for slot in 0..c.slots.len() {
                if c.slot_words[slot] >> 6 != line {
                    continue;
                }
                let e = c.slots[slot].as_mut().expect("occupied");
                if e.seq > seq {
                    continue;
                }
                e.flush = true;
                match e.state {
                    State::LuQueued => {
                        c.release(slot);
                        self.stats.updates_skipped += 1;
                    }
                    State::Retiring { undo, lu: true } => {
                        self.stats.updates_skipped += 1;
                        e.state = State::Retiring { undo, lu: false };
                        if !undo {
                            c.release(slot);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

impl Design for Silo {
    fn name(&self) -> &'static str {
        "silo"
    }

    fn uses_onpm_buffer(&self, _cfg: &Config) -> bool {
        true // coalescing in-place updates with evictions is Silo's (§III-E)
    }

    fn tx_begin(&mut self, _ctx: &mut Ctx<'_>, core: usize) -> Step {
        let c = &mut self.cores[core];
        c.txid += 1;
        c.last_arrival = 0;
        c.tx_entries = 0;
        c.tx_overflowed = false;
        Step::Done
    }

    fn pre_store(&mut self, ctx: &mut Ctx<'_>, core: usize, st: &StoreInfo) -> Step {
        // The store may update the L1 only once its entry has a place: otherwise an eviction
        // could carry uncommitted data to PM with no undo information anywhere.
        if st.silent || self.cores[core].has_room_for(st.word) {
            return Step::Done;
        }
        self.cores[core].waiting = Some(st.word);
        self.make_room(ctx, core);
        // The retirement's writes may have been accepted at once (an idle write queue),
        // freeing slots now: no MC change would follow to wake a waiting core.
        if self.cores[core].free_slot().is_some() {
            self.cores[core].waiting = None;
            return Step::Done;
        }
        Self::room_wait()
    }

    fn post_store(&mut self, _ctx: &mut Ctx<'_>, core: usize, st: &StoreInfo) -> Step {
        self.stats.tx_stores += 1;
        if st.silent {
            self.stats.silent_ignored += 1;
            return Step::Done;
        }
        self.stats.generated += 1;
        let c = &mut self.cores[core];
        c.last_arrival = c.last_arrival.max(st.perform_at + self.path);
        if let Some(e) = c.live(st.word) {
            e.new = st.new;
            e.seq = st.seq;
            e.flush = false;
            self.stats.merged += 1;
            return Step::Done;
        }
        c.alloc(Entry {
            txid: c.txid,
            word: st.word,
            old: st.old,
            new: st.new,
            flush: false,
            seq: st.seq,
            order: c.next_order,
            state: State::Live,
        });
        c.next_order += 1;
        c.tx_entries += 1;
        self.stats.appended += 1;
        self.stats.max_entries_per_tx = self.stats.max_entries_per_tx.max(c.tx_entries);
        // A full buffer retires nothing yet: overflow is an entry that finds no slot
        // (`pre_store`), and a transaction whose entries fill the buffer exactly fits.
        Step::Done
    }

    fn tx_end(&mut self, ctx: &mut Ctx<'_>, core: usize) -> Step {
        let c = &mut self.cores[core];
        c.committing = true;
        // The controller acknowledges once the last entry is written into the buffer (its
        // arrival plus the buffer's access latency) and the commit request is there: the
        // log generator sends it over the same path as the entries, so it reaches the MC
        // one path trip after `TxEnd` at the earliest (as Base's commit message does).
        let request = ctx.now() + self.path;
        let ack = request.max(c.last_arrival + self.cfg.buffer_latency);
        Step::block(Wake::At(ack), Stall::Commit)
    }

    fn resume(&mut self, ctx: &mut Ctx<'_>, core: usize) -> Step {
        let c = &mut self.cores[core];
        if std::mem::take(&mut c.committing) {
            self.commit(ctx, core);
            return Step::Done;
        }
        if c.waiting.is_some() {
            // While the core waits nothing is appended, so its word still has no live entry
            // and the retirement `pre_store` started (if every slot was live) is under way:
            // only a freed slot can let the store go.
            if c.free_slot().is_some() {
                c.waiting = None;
                return Step::Done;
            }
            return Self::room_wait();
        }
        Step::Done
    }

    fn on_accepted(&mut self, _ctx: &mut Ctx<'_>, req: &WriteReq) {
        if matches!(req.kind, WriteKind::WriteBack | WriteKind::Flush) {
            self.line_persisted(req.addr >> 6, req.seq);
        }
    }

    fn background(&mut self, ctx: &mut Ctx<'_>) {
        // Post-commit in-place updates are already persistent in the battery-backed buffer,
        // so the log controller feeds them to the write queue only below its drain
        // watermark (they never start a drain that would hold the cores' reads), unless a
        // store waits for a slot. An overflow retirement at the head of `jobs` is never held
        // by the watermark, but `jobs` is one FIFO queue for all cores and both kinds: a held
        // in-place update at its head also holds every retirement queued behind it (a known
        // model issue, see docs/hwsim.md, "Known model issues").
        let limit = ctx.config().mem.drain_high.saturating_sub(1).max(1);
        let urgent = self.cores.iter().any(|c| c.waiting.is_some());
        while let Some(job) = self.jobs.front().cloned() {
            if !self.job_live(&job) {
                self.jobs.pop_front();
                continue;
            }
            if ctx.wq_free() == 0 {
                return;
            }
            if !urgent && ctx.wq_queued() >= limit && !self.retiring(&job) {
                return;
            }
            let mut req = self.request(ctx, &job);
            self.jobs.pop_front();
            let merged = if self.cfg.coalesce_lus {
                self.take_line_mates(ctx, &job, &mut req)
            } else {
                Vec::new()
            };
            let accepted = ctx.try_write(req);
            debug_assert!(accepted, "the write queue had room");
            self.completed(ctx, job);
            for mate in merged {
                self.completed(ctx, mate);
            }
        }
    }

    fn failure_flush(&mut self, pm: &mut PmImage) {
        for (core, c) in self.cores.iter().enumerate() {
            for slot in c.by_age() {
                let e = c.slots[slot].expect("occupied");
                let kind = if e.txid > c.committed {
                    RecordKind::Undo
                } else if !e.flush {
                    RecordKind::Redo
                } else {
                    continue;
                };
                self.stats.failure_records += 1;
                pm.append(
                    core,
                    LogRecord {
                        kind,
                        txid: e.txid,
                        word: e.word,
                        old: e.old,
                        new: e.new,
                    },
                );
            }
        }
    }

    fn recover(&self, pm: &mut PmImage) {
        let cores = pm.logs.len();
        for core in 0..cores {
            let committed = pm.committed[core];
            let redo: Vec<LogRecord> = pm.logs[core]
                .iter()
                .filter(|r| r.kind == RecordKind::Redo && r.txid <= committed)
                .copied()
                .collect();
            redo.iter().for_each(|r| pm.write(r.word, r.new));
        }
        for core in 0..cores {
            let committed = pm.committed[core];
            let undo: Vec<LogRecord> = pm.logs[core]
                .iter()
                .rev()
                .filter(|r| r.kind == RecordKind::Undo && r.txid > committed)
                .copied()
                .collect();
            undo.iter().for_each(|r| pm.write(r.word, r.old));
        }
    }

    fn log_stats(&self) -> Option<LogStats> {
        Some(self.stats)
    }
}
