//! Reclamation, TimeStone's watermark-driven log management: best-effort trims of the
//! transient version log, checkpoints (TLog → CLog), delayed write-back (CLog → masters),
//! and grace periods from the quiescence detector.
//!
//! - **Watermarks** (checked by a lane before each transaction, never inside one): half
//!   its TLog share in use → a best-effort trim; three quarters of its TLog share or of its
//!   OLog in use → a checkpoint; a checkpoint that leaves the CLog three quarters full →
//!   a write-back.
//! - **Quiescence**: every lane announces a lower bound of its snapshot while it runs a
//!   transaction ([`crate::lane::Shared::active`]). The boundary of a trim or checkpoint is
//!   at most the smallest announcement, so no running or future transaction needs what they
//!   unlink; what they unlink is reused only once every announcement is newer than the
//!   unlinking (the grace period), so no reader still holds it.

use crate::chain::{Bytes, CHECKPOINTER, CHUNK, Header, Seen};
use crate::engine::{Core, write_back_lines};
use crate::handoff::Work;
use crate::lane::{Lane, NONE, merge_ranges};
use crate::layout::Watermark;
use crate::options::Mutant;
use crate::record::{self, Kind};
use crate::sort::sort_by_radix;
use crate::table::NO_HEADER;
use crate::txn::Retry;
use heap::{Action, Freeing, Heap};
use pmem::{CACHE_LINE, Persist, WriteClass};
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::Ordering;
use tx::api::{TxError, TxResult};

/// Checkpoint-log state (one checkpoint or write-back at a time).
#[derive(Debug)]
pub(crate) struct Ckpt {
    /// Next free offset in the CLog (everything before it is live until the next write-back).
    head: u64,
    /// Boundary of the newest durable checkpoint.
    last_t: u64,
    /// The persisted write-back watermark.
    watermark: Watermark,
    /// Headers whose chains kept versions newer than the last boundary.
    retained: Vec<(u32, u64)>,
    /// Headers checkpointed since the last write-back (and empty headers to take out).
    writeback: Vec<(u32, u64)>,
    /// Headers whose chains the last checkpoint emptied: if they stay empty until the next
    /// one, their content goes to the master and they leave the table (cold chunks are then
    /// read from the master directly).
    cooling: Vec<(u32, u64)>,
    /// Chunks with bytes in live CLog records.
    clog_chunks: NumberSet<u64>,
    /// The changed words of the checkpoint being built (kept for their capacity).
    diff: Diff,
    /// What the lanes listed since the last gathering (kept for its capacity).
    listed: Vec<(u32, u64)>,
    /// The radix sort's second buffer for `listed` (kept for its capacity).
    sorting: Vec<(u32, u64)>,
    scratch: Vec<u8>,
    /// Read-only and writing transactions counted at the previous checkpoint.
    counted: (u64, u64),
}

/// A reclaimer's announcement in the quiescence detector, withdrawn on drop.
struct Reclaiming<'a> {
    slot: &'a std::sync::atomic::AtomicU64,
}

impl Drop for Reclaiming<'_> {
    fn drop(&mut self) {
        self.slot.store(NONE, Ordering::SeqCst);
    }
}

/// Versions and headers unlinked at `time`, reusable after a grace period.
#[derive(Debug)]
pub(crate) struct Retired {
    time: u64,
    versions: Vec<u32>,
    headers: Vec<u32>,
}

impl Ckpt {
    pub(crate) fn new(last_t: u64, watermark: Watermark) -> Self {
        Ckpt {
            head: 0,
            last_t,
            watermark,
            retained: Vec::new(),
            writeback: Vec::new(),
            cooling: Vec::new(),
            clog_chunks: NumberSet::default(),
            diff: Diff::default(),
            listed: Vec::new(),
            sorting: Vec::new(),
            scratch: Vec::new(),
            counted: (0, 0),
        }
    }
}

/// Hashes a chunk or header number with one multiplication (Fibonacci hashing) and hands
/// hashbrown the product's top bits, the best mixed, as the low (bucket) bits, reversed so
/// that every table size gets the top bits: keys in arithmetic progression (chunk numbers of
/// one size class) spread at least as well as under a random hash. The keys are the
/// engine's own numbers, not chosen by an adversary, so SipHash's resistance to flooding
/// buys nothing here; it cost a checkpoint more than its sort.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NumberHasher(u64);

/// An odd constant near 2^64 / φ.
const FIBONACCI: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for NumberHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(FIBONACCI);
    }

    fn finish(&self) -> u64 {
        self.0.reverse_bits()
    }
}

/// A set of chunk or header numbers.
type NumberSet<T> = HashSet<T, BuildHasherDefault<NumberHasher>>;

/// The changed words a checkpoint record holds, in one buffer: `(addr, start, len)` per
/// range, its bytes at `bytes[start..start + len]` (no allocation per range).
#[derive(Debug, Default)]
struct Diff {
    ranges: Vec<(u64, usize, usize)>,
    bytes: Vec<u8>,
}

impl Diff {
    fn clear(&mut self) {
        self.ranges.clear();
        self.bytes.clear();
    }

    fn push(&mut self, addr: u64, bytes: &[u8]) {
        self.ranges.push((addr, self.bytes.len(), bytes.len()));
        self.bytes.extend_from_slice(bytes);
    }

    /// The words of `chunk` that differ between `old` and `new`, with `new`'s bytes.
    fn push_changes(&mut self, chunk: u64, old: &Bytes, new: &Bytes) {
        for (start, len) in changed_words(old, new) {
            self.push(chunk * CHUNK + start as u64, &new[start..start + len]);
        }
    }

    fn iter(&self) -> impl Iterator<Item = (u64, &[u8])> + Clone {
        self.ranges
            .iter()
            .map(|&(addr, start, len)| (addr, &self.bytes[start..start + len]))
    }
}

/// The union of two strictly increasing lists, strictly increasing.
fn merge_sorted<T: Ord + Copy>(a: &[T], b: &[T]) -> Vec<T> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => {
                out.push(a[i]);
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                out.push(b[j]);
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

/// The 8-byte words that differ between `old` and `new`, merged into runs `(start, len)` in
/// bytes from the chunk start, lowest first (an iterator over a word mask: no allocation).
fn changed_words(old: &Bytes, new: &Bytes) -> ChangedWords {
    let mut mask = 0u16;
    for (word, (a, b)) in old.chunks_exact(8).zip(new.chunks_exact(8)).enumerate() {
        if a != b {
            mask |= 1 << word;
        }
    }
    ChangedWords { mask }
}

/// The runs of set bits of a mask of changed words (bit i = word i of a chunk).
struct ChangedWords {
    mask: u16,
}

impl Iterator for ChangedWords {
    type Item = (usize, usize);

    fn next(&mut self) -> Option<(usize, usize)> {
        if self.mask == 0 {
            return None;
        }
        let start = self.mask.trailing_zeros();
        let run = (self.mask >> start).trailing_ones();
        self.mask &= !(((1u16 << run) - 1) << start);
        Some((start as usize * 8, run as usize * 8))
    }
}

/// The region `MVCC_VERIFY=<offset>:<len>` names (read once).
#[cfg(debug_assertions)]
fn verify_region() -> Option<(u64, u64)> {
    static REGION: std::sync::OnceLock<Option<(u64, u64)>> = std::sync::OnceLock::new();
    *REGION.get_or_init(|| {
        let spec = std::env::var("MVCC_VERIFY").ok()?;
        let (off, len) = spec.split_once(':')?;
        Some((off.parse().ok()?, len.parse().ok()?))
    })
}

/// How many transactions a lane with `capacity` versions runs after a hand-off before the
/// next (`Core::prepare`): none below 1 024 versions, so small version logs hand off
/// before every transaction as the watermarks are crossed; at most 7, so a lane's requests
/// and refills lag by a handful of transactions, a negligible share of the 1/8 of the log
/// between the checkpoint and back-pressure marks (the back-pressure mark itself is checked
/// before every transaction, and a commit short of versions or OLog room still retries with
/// its need).
fn hand_off_stride(capacity: u32) -> u32 {
    (capacity / 1024).min(7)
}

/// The longest an allocation that found no space waits for older snapshots to end before
/// it releases the deferred frees ([`Core::release_deferred_frees`]).
const SPACE_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Bytes of a checkpoint record's entry for one chunk, at most (header and 64 bytes).
const MAX_ENTRY: u64 = 8 + CHUNK;

impl<P: Persist> Core<P> {
    /// Runs before each transaction on the lane: takes back versions whose grace period
    /// ended, and reclaims by the watermarks until `need` is satisfied.
    pub(crate) fn prepare(&self, state: &mut Lane, need: Option<Retry>) -> TxResult<()> {
        if need == Some(Retry::Space) {
            return self.release_deferred_frees();
        }
        let capacity = state.capacity;
        let used = state.tlog_used();
        // The common case costs a few comparisons: nothing asked for, below every watermark.
        if need.is_none() && used * 2 <= capacity && state.olog.used() * 4 <= state.olog.size() * 3
        {
            return Ok(());
        }
        if need.is_none() && self.requests.serving() {
            // Between hand-offs a lane checks only its version log's back-pressure mark:
            // the hand-off's lock, refill and OLog bookkeeping run once every few
            // transactions (`hand_off_stride`), not before every one above 1/2.
            if state.hand_off_in > 0 && used * 8 <= capacity * 7 {
                state.hand_off_in -= 1;
                return Ok(());
            }
            if self.hand_off(state) {
                state.hand_off_in = hand_off_stride(capacity);
                return Ok(());
            }
        }
        state.hand_off_in = 0;
        self.refill(state);
        state
            .olog
            .drop_covered(self.checkpointed.load(Ordering::Acquire));
        let wanted = match need {
            Some(Retry::Versions(n)) if n > capacity * 3 / 4 => {
                return Err(TxError::InvalidArgument(format!(
                    "a transaction writes {n} chunks; the version log holds {} per lane \
                     (raise MvccOptions::tlog_versions)",
                    capacity * 3 / 4
                )));
            }
            Some(Retry::Versions(n)) => n.max(capacity / 4),
            _ => capacity / 4,
        };
        let olog_full = state.olog.used() * 4 > state.olog.size() * 3 || need == Some(Retry::Olog);
        let used = state.tlog_used();
        // Each reclamation runs once per eighth of the share used since the last one (a
        // trim or checkpoint that freed little is not repeated on every transaction).
        let grown = used >= state.used_at_reclaim + capacity / 8;
        if olog_full || (used * 4 > capacity * 3 && grown) {
            self.stats.inline_reclaims.fetch_add(1, Ordering::Relaxed);
            self.checkpoint_and_release()?;
            state
                .olog
                .drop_covered(self.checkpointed.load(Ordering::Acquire));
            state.used_at_reclaim = used;
        } else if used * 2 > capacity && grown {
            self.stats.inline_reclaims.fetch_add(1, Ordering::Relaxed);
            self.trim();
            state.used_at_reclaim = used;
        }
        let mut rounds = 0u32;
        loop {
            let olog_ok = need != Some(Retry::Olog) || state.olog.used() * 2 <= state.olog.size();
            if state.free.len() as u32 >= wanted && olog_ok {
                return Ok(());
            }
            self.free_expired();
            self.refill(state);
            state.used_at_reclaim = state.used_at_reclaim.min(state.tlog_used());
            if state.free.len() as u32 >= wanted && olog_ok {
                return Ok(());
            }
            // Others' transactions hold the boundary or the grace period back: let them
            // finish, then reclaim again.
            rounds += 1;
            std::thread::yield_now();
            if rounds.is_multiple_of(4) {
                self.stats.inline_reclaims.fetch_add(1, Ordering::Relaxed);
                self.checkpoint_and_release()?;
                state
                    .olog
                    .drop_covered(self.checkpointed.load(Ordering::Acquire));
            }
        }
    }

    /// With a background reclaimer: takes back what it freed, asks it for the work the
    /// watermarks call for, and returns whether the lane may go on without reclaiming
    /// itself. Back-pressure: a lane whose version log or OLog is 7/8 full reclaims itself.
    fn hand_off(&self, state: &mut Lane) -> bool {
        self.refill(state);
        let checkpointed = self.checkpointed.load(Ordering::Acquire);
        state.olog.drop_covered(checkpointed);
        let (capacity, used) = (state.capacity, state.tlog_used());
        let (olog_used, olog_size) = (state.olog.used(), state.olog.size());
        if used * 8 > capacity * 7 || olog_used * 8 > olog_size * 7 {
            return false;
        }
        state.used_at_reclaim = state.used_at_reclaim.min(used);
        let grown = used >= state.used_at_reclaim + capacity / 8;
        if olog_used * 4 > olog_size * 3 && state.asked_at != checkpointed {
            // Asked once per checkpoint: the next one frees this lane's covered records.
            self.requests.request(Work::Checkpoint);
            state.asked_at = checkpointed;
        } else if used * 4 > capacity * 3 && grown {
            self.requests.request(Work::Checkpoint);
            state.used_at_reclaim = used;
        } else if used * 2 > capacity && grown {
            self.requests.request(Work::Trim);
            state.used_at_reclaim = used;
        }
        true
    }

    /// Moves versions back from the lane's grace-period return list.
    fn refill(&self, state: &mut Lane) {
        let mut returned = self.shared[state.index].returned.lock();
        state.free.append(&mut returned);
    }

    /// Announces a reclaimer that reads version chains until the guard drops.
    fn reclaiming(&self) -> Reclaiming<'_> {
        self.reclaimer.store(self.clock.floor(), Ordering::SeqCst);
        Reclaiming {
            slot: &self.reclaimer,
        }
    }

    /// The newest time at or before which every commit has published its versions.
    fn reachable(&self) -> u64 {
        let now = self.clock.now();
        let floor = self
            .shared
            .iter()
            .map(|s| s.inflight.load(Ordering::SeqCst))
            .min()
            .unwrap_or(NONE);
        if floor == NONE {
            now
        } else {
            now.min(floor - 1)
        }
    }

    /// The quiescence detector: the oldest announcement of a running transaction ([`NONE`]
    /// when none runs).
    fn grace_floor(&self) -> u64 {
        // The heavy side of the announcement's asymmetric fence: every announcement stored
        // before a transaction's clock read is visible now, and the clock this reclaimer
        // read before it bounds every transaction whose announcement it misses.
        if !crate::fence::heavy() {
            return 0;
        }
        self.shared
            .iter()
            .map(|s| s.active.load(Ordering::SeqCst))
            .min()
            .unwrap_or(NONE)
    }

    /// The oldest announcement of anyone who may still hold a reference to a version or a
    /// header: running transactions and a running checkpoint or write-back.
    fn reference_floor(&self) -> u64 {
        self.grace_floor()
            .min(self.reclaimer.load(Ordering::SeqCst))
    }

    /// Chunk content at `snapshot` as the checkpointer reads it.
    fn content_at(&self, header: &Header, snapshot: u64, out: &mut Bytes) -> TxResult<()> {
        match header.content_at(&self.versions, snapshot, out) {
            Seen::Copied { .. } => Ok(()),
            Seen::TooOld => Err(self.reclaimed(snapshot)),
        }
    }

    /// Hands versions unlinked just now to the grace-period list.
    pub(crate) fn retire_versions(&self, versions: Vec<u32>) {
        self.retire(versions, Vec::new());
    }

    fn retire(&self, versions: Vec<u32>, headers: Vec<u32>) {
        if versions.is_empty() && headers.is_empty() {
            return;
        }
        let time = self.clock.retire_time();
        self.retired.lock().push_back(Retired {
            time,
            versions,
            headers,
        });
    }

    /// Returns everything whose grace period has ended: every running transaction was
    /// announced after it was unlinked.
    pub(crate) fn free_expired(&self) {
        let per_lane = self.options.tlog_versions;
        let mut retired = self.retired.lock();
        // Read the floor only now: every batch in the list was unlinked before it, so a
        // reader that might still hold one of them is announced in it. (A floor read before
        // the lock could predate a batch pushed meanwhile and free it under a reader.)
        let floor = self.reference_floor();
        while retired
            .front()
            .is_some_and(|b| floor == NONE || b.time < floor)
        {
            let batch = retired.pop_front().expect("checked");
            let mut by_lane: Vec<Vec<u32>> = vec![Vec::new(); self.shared.len()];
            for r in batch.versions {
                self.versions.check_ownership(r, false);
                by_lane[((r - 1) / per_lane) as usize].push(r);
            }
            for (lane, versions) in by_lane.into_iter().enumerate() {
                if !versions.is_empty() {
                    self.shared[lane].returned.lock().extend(versions);
                }
            }
            for h in batch.headers {
                self.table.release(h);
            }
        }
    }

    /// Best-effort reclamation: drops versions no snapshot can need, without a checkpoint
    /// (skipped if a checkpoint is running).
    pub(crate) fn trim(&self) {
        let Some(mut ck) = self.ckpt.try_lock() else {
            return;
        };
        let _reading = self.reclaiming();
        // Never past the last checkpoint: the next one still reads each chunk's content at
        // that time (its diff, the write-back), which a chunk that was busy then keeps only
        // in its chain.
        let boundary = self.reachable().min(self.grace_floor()).min(ck.last_t);
        let dirty = self.gather_dirty(&mut ck);
        let mut retired = Vec::new();
        for &(href, _) in &dirty {
            let header = self.table.header(href);
            if header.try_lock(CHECKPOINTER) {
                header.trim(&self.versions, boundary, &mut retired);
                header.unlock();
            }
        }
        ck.retained = dirty;
        drop(ck);
        self.stats
            .coalesced_versions
            .fetch_add(retired.len() as u64, Ordering::Relaxed);
        self.stats.trims.fetch_add(1, Ordering::Relaxed);
        self.retire_versions(retired);
    }

    /// The retained headers and every lane's dirty list, sorted, without duplicates. The
    /// retained list is kept sorted (every checkpoint and trim leaves it in this order), so
    /// only what the lanes listed since is sorted — by radix on the header reference, then
    /// by chunk among the pairs of one reference (`sort.rs`) — then merged in.
    fn gather_dirty(&self, ck: &mut Ckpt) -> Vec<(u32, u64)> {
        let mut listed = std::mem::take(&mut ck.listed);
        listed.clear();
        for shared in self.shared.iter() {
            listed.append(&mut shared.dirty.lock());
        }
        sort_by_radix(&mut listed, &mut ck.sorting, |&(href, _)| u64::from(href));
        listed.dedup();
        let mut retained = std::mem::take(&mut ck.retained);
        if !retained.is_sorted_by(|a, b| a < b) {
            retained.sort_unstable();
            retained.dedup();
        }
        let dirty = merge_sorted(&retained, &listed);
        ck.listed = listed;
        dirty
    }

    /// A checkpoint, then the frees it made reusable.
    pub(crate) fn checkpoint_and_release(&self) -> TxResult<u64> {
        let (boundary, ready) = {
            let mut ck = self.ckpt.lock();
            let _reading = self.reclaiming();
            let boundary = self.checkpoint_once(&mut ck)?;
            (boundary, self.ready_frees(boundary, &ck))
        };
        self.finish_frees(ready);
        Ok(boundary)
    }

    /// Hands frees `ready_frees` took out of the list to the heap (without `ckpt`: the heap
    /// takes `ckpt` inside its own lock to create or return runs).
    fn finish_frees(&self, ready: Vec<Freeing>) {
        if ready.is_empty() {
            return;
        }
        for freeing in ready {
            self.heap.finish_free(&freeing);
        }
        // Ends the release `ready_frees` started (`Mvcc::allocated_blocks`).
        self.releases_finished.fetch_add(1, Ordering::SeqCst);
    }

    /// Checkpoints until every commit so far is covered, then writes back and takes out
    /// every header the checkpoints left empty (no transaction of the calling thread may be
    /// running): what remains deferred afterwards is only the write-back of chunks that
    /// still have versions.
    pub(crate) fn checkpoint_all(&self) -> TxResult<()> {
        let target = self.clock.now();
        while self.checkpoint_and_release()? < target {
            std::thread::yield_now();
        }
        let mut ck = self.ckpt.lock();
        let _reading = self.reclaiming();
        self.cool(&mut ck, Vec::new());
        Ok(())
    }

    /// One checkpoint: for every chunk with versions, the newest one at or before the
    /// boundary becomes its base and goes to the CLog (the changed words), older ones are
    /// unlinked. Returns the boundary.
    fn checkpoint_once(&self, ck: &mut Ckpt) -> TxResult<u64> {
        let pm = self.pool.pm();
        // Boundaries never go back (a new announcement may lie a TSC boundary behind the
        // last one); everything at or before the last boundary is already in the CLog.
        let boundary = self.reachable().min(self.grace_floor()).max(ck.last_t);
        let dirty = self.gather_dirty(ck);
        let mut fresh: Vec<(u64, u64)> = Vec::new();
        for shared in self.shared.iter() {
            fresh.append(&mut shared.fresh.lock());
        }
        merge_ranges(&mut fresh);
        if boundary <= ck.last_t && fresh.is_empty() && self.meta_dirty.lock().is_empty() {
            // Nothing can be covered that the last record does not cover already.
            ck.retained = dirty;
            return Ok(ck.last_t);
        }
        let meta = std::mem::take(&mut *self.meta_dirty.lock());
        if pm.is_poisoned() {
            return Err(TxError::Poisoned);
        }
        // Make room first: a write-back after the cuts below would put the new bases into
        // the masters before the record that covers them is durable.
        let bound = record::HEADER_LEN as u64 + dirty.len() as u64 * MAX_ENTRY;
        if ck.head + bound > self.layout.clog_size {
            self.write_back(ck)?;
        }
        let mut diff = std::mem::take(&mut ck.diff);
        diff.clear();
        let (mut old, mut new): (Bytes, Bytes) = ([0; CHUNK as usize], [0; CHUNK as usize]);
        let dirty: Vec<(u32, u64)> = dirty
            .into_iter()
            .filter(|&(href, chunk)| self.table.slot(chunk) == href) // not taken out since
            .collect();
        let mut retired = Vec::new();
        let mut emptied = Vec::new();
        // Whatever the chunks hold, the record fits (`MAX_ENTRY` bounds each chunk's
        // ranges): each chain is then read and cut in one walk, nothing can fail in between.
        let fused = ck.head + bound <= self.layout.clog_size;
        for &(href, chunk) in &dirty {
            let header = self.table.header(href);
            if fused && header.try_lock(CHECKPOINTER) {
                let before = retired.len();
                let cut = header.checkpoint(
                    &self.versions,
                    (ck.last_t, boundary),
                    (&mut old, &mut new),
                    &mut retired,
                );
                header.unlock();
                match cut {
                    Ok(cut) => self.count_cut(cut, retired.len() - before),
                    Err(_) => return Err(self.reclaimed(ck.last_t)),
                }
            } else {
                // The record's content is read as a reader at the boundary would (no
                // lock): a chunk a writer holds right now is covered all the same, and cut
                // next time (fused) or below. Versions at or before the boundary no longer
                // change, so the cuts below may come after this pass.
                self.content_at(header, ck.last_t, &mut old)?;
                self.content_at(header, boundary, &mut new)?;
            }
            diff.push_changes(chunk, &old, &new);
            if fused {
                self.after_cut(ck, header, (href, chunk), &mut emptied);
            }
        }
        // Fail before anything changes: after a cut, the versions the record must cover
        // exist nowhere else.
        let (len, _) = record::encoded_len(0, diff.iter(), 0);
        let len = len as u64;
        if ck.head + len > self.layout.clog_size {
            debug_assert!(!fused, "a record within its bound");
            ck.retained = dirty;
            self.meta_dirty.lock().extend(meta);
            if let Some(shared) = self.shared.first() {
                shared.fresh.lock().extend(fresh);
            }
            return Err(TxError::LogFull {
                needed: len,
                capacity: self.layout.clog_size - ck.head,
            });
        }
        if !fused {
            for (href, chunk) in dirty {
                let header = self.table.header(href);
                // Reclaiming needs the lock; a busy chunk is reclaimed next time.
                if header.try_lock(CHECKPOINTER) {
                    let before = retired.len();
                    let cut = header.cut(&self.versions, boundary, &mut retired);
                    header.unlock();
                    self.count_cut(cut, retired.len() - before);
                }
                self.after_cut(ck, header, (href, chunk), &mut emptied);
            }
        }
        // What the record covers is durable before it: the heap metadata of the covered
        // commits and the blocks written in place (their operations leave the OLog).
        if self.options.mutant == Mutant::NoFreshFlush {
            fresh.clear();
        }
        let mut lines: Vec<u64> = meta
            .iter()
            .chain(&fresh)
            .flat_map(|&(addr, len)| pmem::lines_covering(addr, len))
            .collect();
        if !lines.is_empty() {
            write_back_lines(pm, &mut lines);
            pm.fence();
        }
        // A boundary that did not move covers nothing new (the diff between the content at
        // `last_t` and at the same time is empty): the flush above was the work, and no
        // record is written. One would carry the time `last_t`, which equals the watermark
        // right after a write-back; recovery reads such a record at the log's start as
        // dead, and the live ones after it as a chain with a gap (damage, a refused open).
        if boundary > ck.last_t {
            let at = self.layout.clog + ck.head;
            let mut scratch = std::mem::take(&mut ck.scratch);
            record::encode(
                at,
                Kind::Checkpoint,
                boundary,
                0,
                0,
                &[],
                diff.iter(),
                &[],
                &mut scratch,
            );
            pm.write(at, &scratch, WriteClass::Log);
            pm.flush(at, len);
            pm.fence();
            self.stats.clog_bytes.fetch_add(len, Ordering::Relaxed);
            ck.scratch = scratch;
            if pm.is_poisoned() {
                return Err(TxError::Poisoned);
            }
            ck.head = (ck.head + len).next_multiple_of(CACHE_LINE);
            ck.last_t = boundary;
            self.checkpointed.store(ck.last_t, Ordering::Release);
            for (addr, bytes) in diff.iter() {
                let (first, last) = (addr / CHUNK, (addr + bytes.len() as u64 - 1) / CHUNK);
                ck.clog_chunks.extend(first..=last);
            }
            self.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
        } else {
            debug_assert!(
                diff.iter().next().is_none(),
                "nothing changed between a time and itself"
            );
            if pm.is_poisoned() {
                return Err(TxError::Poisoned);
            }
        }
        ck.diff = diff;
        self.retire_versions(retired);
        let read_mostly = self.read_mostly_since_last(ck);
        if ck.head * 4 > self.layout.clog_size * 3 || read_mostly {
            self.write_back(ck)?;
            self.verify(ck, "after checkpoint + write-back");
        } else {
            self.cool(ck, emptied);
            self.verify(ck, "after checkpoint + cool");
        }
        Ok(boundary)
    }

    /// Counts a chain's cut: one version became the base, the older ones it unlinked
    /// (`unlinked` in all, itself included) were coalesced into it.
    fn count_cut(&self, cut: Option<u64>, unlinked: usize) {
        if cut.is_some() {
            let stats = &self.stats;
            stats.checkpointed_versions.fetch_add(1, Ordering::Relaxed);
            let coalesced = unlinked as u64 - 1;
            stats
                .coalesced_versions
                .fetch_add(coalesced, Ordering::Relaxed);
        }
    }

    /// Files a checkpointed chunk (or one made and never used): the next write-back writes
    /// it and takes it out if its chain is empty by then.
    fn after_cut(
        &self,
        ck: &mut Ckpt,
        header: &Header,
        entry: (u32, u64),
        emptied: &mut Vec<(u32, u64)>,
    ) {
        ck.writeback.push(entry);
        if header.is_empty() {
            emptied.push(entry);
        } else {
            ck.retained.push(entry);
        }
    }

    /// The error of a checkpoint that finds the content at `snapshot` of a chunk reclaimed.
    fn reclaimed(&self, snapshot: u64) -> TxError {
        TxError::Corrupted(format!(
            "the versions of a chunk at checkpoint time {snapshot} were reclaimed"
        ))
    }

    /// Whether at least 7 in 8 of the transactions since the previous checkpoint only read
    /// (and [`crate::MvccOptions::read_mostly_writeback`] is on): then the write-back the
    /// full CLog would force later runs now, while few chunks are being written, and the
    /// empty headers it takes out stop costing every read of their chunks. Any share
    /// between 1 in 20 and 1 in 2 writing tells the read-mostly workloads (1 in 50) from
    /// the update-heavy ones (4 in 5, 1 in 1) alike.
    fn read_mostly_since_last(&self, ck: &mut Ckpt) -> bool {
        let now = self.transactions_so_far();
        let (reads, writes) = (now.0 - ck.counted.0, now.1 - ck.counted.1);
        ck.counted = now;
        self.is_read_mostly(reads, writes)
    }

    /// Above [`crate::MvccOptions::cool_headers`] headers in use: writes the content of the
    /// headers that stayed empty since the previous checkpoint to their masters and takes them out of the table; `emptied` cool down until the
    /// next one. The checkpoint log still holds that content until the next write-back
    /// (which flushes nothing more for them), so a freed block is reused only once none of
    /// its chunks has bytes in a live record ([`Core::ready_frees`]).
    fn cool(&self, ck: &mut Ckpt, emptied: Vec<(u32, u64)>) {
        if self.table.live() <= u64::from(self.options.cool_headers) {
            // No pressure on the table: the write-back takes the empty headers out.
            ck.cooling = emptied;
            return;
        }
        let pm = self.pool.pm();
        let recent: NumberSet<u32> = emptied.iter().map(|&(href, _)| href).collect();
        let mut removed = NumberSet::default();
        let (mut content, mut master): (Bytes, Bytes) = ([0; CHUNK as usize], [0; CHUNK as usize]);
        for (href, chunk) in std::mem::replace(&mut ck.cooling, emptied) {
            if recent.contains(&href) || self.table.slot(chunk) != href {
                continue;
            }
            let header = self.table.header(href);
            if !header.try_retire() {
                continue;
            }
            header.base(&mut content);
            pm.read(chunk * CHUNK, &mut master);
            for (start, len) in changed_words(&master, &content) {
                let addr = chunk * CHUNK + start as u64;
                pm.write(addr, &content[start..start + len], WriteClass::User);
                pm.flush(addr, len as u64);
                self.stats
                    .writeback_bytes
                    .fetch_add(len as u64, Ordering::Relaxed);
            }
            self.table.remove(chunk, href);
            removed.insert(href);
        }
        if !removed.is_empty() {
            ck.writeback.retain(|(href, _)| !removed.contains(href));
            self.stats
                .cooled
                .fetch_add(removed.len() as u64, Ordering::Relaxed);
            self.retire(Vec::new(), removed.into_iter().collect());
        }
    }

    /// Debug builds, `MVCC_VERIFY=<offset>:<len>` set: checks that what recovery would
    /// rebuild for that region right now (the masters plus the live CLog records) equals
    /// the content at the newest checkpoint; on a difference it prints `mvcc verify: …`
    /// with the chunk's chain to stderr and aborts (the SIGKILL tests run their children
    /// with it).
    fn verify(&self, ck: &Ckpt, when: &str) {
        #[cfg(debug_assertions)]
        if let Some((off, len)) = verify_region()
            && let Err(report) = self.recovery_view_matches(off, len, ck)
        {
            eprintln!("mvcc verify: {when}: {report}");
            std::process::abort();
        }
        #[cfg(not(debug_assertions))]
        let _ = (ck, when);
    }

    #[cfg(debug_assertions)]
    fn recovery_view_matches(&self, off: u64, len: u64, ck: &Ckpt) -> Result<(), String> {
        let pm = self.pool.pm();
        let mut image = vec![0u8; len as usize];
        pm.read(off, &mut image);
        let mark = self.layout.read_watermark(pm).map_err(|e| e.to_string())?;
        let end = self.layout.clog + self.layout.clog_size;
        let mut records = Vec::new();
        for pos in (self.layout.clog..end).step_by(CACHE_LINE as usize) {
            if let Ok(Some(r)) = record::read(pm, pos, end)
                && r.ts > mark.value
            {
                records.push(r);
            }
        }
        records.sort_by_key(|r| r.ts);
        for (addr, bytes) in records.iter().flat_map(|r| &r.ranges) {
            for (i, b) in bytes.iter().enumerate() {
                let a = addr + i as u64;
                if (off..off + len).contains(&a) {
                    image[(a - off) as usize] = *b;
                }
            }
        }
        let newest = records.last().map_or(mark.value, |r| r.ts);
        let mut content: Bytes = [0; CHUNK as usize];
        for chunk in off / CHUNK..(off + len) / CHUNK {
            let slot = self.table.slot(chunk);
            let chain = match slot {
                NO_HEADER | crate::table::FRESH => {
                    pm.read(chunk * CHUNK, &mut content);
                    String::new()
                }
                href => {
                    let header = self.table.header(href);
                    let _ = header.content_at(&self.versions, newest, &mut content);
                    header.describe(&self.versions)
                }
            };
            let at = (chunk * CHUNK - off) as usize;
            if image[at..at + CHUNK as usize] != content {
                return Err(format!(
                    "chunk {chunk:#x}: recovery would read {:?}, the content at {newest} is \
                     {:?} (slot {slot}, last checkpoint {}, {mark:?}, {} live records; \
                     chain {chain})",
                    &image[at..at + 16],
                    &content[..16],
                    ck.last_t,
                    records.len()
                ));
            }
        }
        Ok(())
    }

    /// Frees committed at or before `boundary` that may be reused now: none of the block's
    /// chunks has bytes in a live CLog record (recovery would put them back over what a
    /// new owner writes in place). A large span also waits until none of its chunks has a
    /// header: its chunks may become a run, whose bitmap is written in place outside any
    /// log.
    fn ready_frees(&self, boundary: u64, ck: &Ckpt) -> Vec<Freeing> {
        let mut ready = Vec::new();
        let mut frees = self.frees.lock();
        frees.retain(|(ts, freeing)| {
            let reusable = *ts <= boundary && self.reusable(freeing, ck);
            if reusable {
                ready.push(*freeing);
            }
            !reusable
        });
        if !ready.is_empty() {
            // Starts a release while `frees` is still locked: a reader that counts the
            // deferred frees after this sees it (`Mvcc::allocated_blocks`).
            self.releases_started.fetch_add(1, Ordering::SeqCst);
        }
        ready
    }

    /// Takes no heap lock: it runs under `ckpt`, and the heap calls `system_commit` (which
    /// takes `ckpt`) while holding its own lock to create a run.
    fn reusable(&self, freeing: &Freeing, ck: &Ckpt) -> bool {
        let span = Heap::freeing_is_span(freeing);
        (freeing.addr / CHUNK..(freeing.addr + freeing.len).div_ceil(CHUNK))
            .all(|c| !ck.clog_chunks.contains(&c) && (!span || self.table.slot(c) == NO_HEADER))
    }

    /// Writes every checkpointed base back to its master, then moves the watermark to the
    /// last checkpoint (the CLog is empty afterwards) and takes empty headers out.
    pub(crate) fn write_back(&self, ck: &mut Ckpt) -> TxResult<()> {
        let pm = self.pool.pm();
        sort_by_radix(&mut ck.writeback, &mut ck.sorting, |&(href, _)| {
            u64::from(href)
        });
        ck.writeback.dedup();
        let mut lines = Vec::new();
        let (mut content, mut master): (Bytes, Bytes) = ([0; CHUNK as usize], [0; CHUNK as usize]);
        ck.writeback
            .retain(|&(href, chunk)| self.table.slot(chunk) == href);
        for &(href, chunk) in &ck.writeback {
            // The content at the last checkpoint, whether or not its versions were cut.
            self.content_at(self.table.header(href), ck.last_t, &mut content)?;
            pm.read(chunk * CHUNK, &mut master);
            for (start, len) in changed_words(&master, &content) {
                let addr = chunk * CHUNK + start as u64;
                pm.write(addr, &content[start..start + len], WriteClass::User);
                self.stats
                    .writeback_bytes
                    .fetch_add(len as u64, Ordering::Relaxed);
                lines.push(chunk);
            }
        }
        if self.options.mutant == Mutant::EarlyWatermark {
            ck.watermark = self.layout.write_watermark(pm, ck.watermark, ck.last_t);
        }
        write_back_lines(pm, &mut lines);
        pm.fence();
        if pm.is_poisoned() {
            return Err(TxError::Poisoned);
        }
        ck.watermark = self.layout.write_watermark(pm, ck.watermark, ck.last_t);
        ck.head = 0;
        ck.clog_chunks.clear();
        ck.cooling.clear();
        let mut headers = Vec::new();
        for (href, chunk) in std::mem::take(&mut ck.writeback) {
            if self.table.header(href).try_retire() {
                self.table.remove(chunk, href);
                headers.push(href);
            }
        }
        self.retire(Vec::new(), headers);
        self.stats.writebacks.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Whether `reads` read-only and `writes` writing transactions make a read-mostly
    /// interval: at least 7 in 8 only read, and the option on.
    pub(crate) fn is_read_mostly(&self, reads: u64, writes: u64) -> bool {
        self.options.read_mostly_writeback && reads > 0 && reads >= 7 * writes
    }

    /// Read-only and writing transactions committed so far.
    pub(crate) fn transactions_so_far(&self) -> (u64, u64) {
        let reads: u64 = self
            .shared
            .iter()
            .map(|s| s.reads.load(Ordering::Relaxed))
            .sum();
        let writes = self.stats.commits_logical.load(Ordering::Relaxed)
            + self.stats.commits_physical.load(Ordering::Relaxed);
        (reads, writes)
    }

    /// Whether a settle would checkpoint or write back anything: chunks listed since the
    /// last checkpoint (or kept from it), blocks written in place, heap metadata, or
    /// checkpointed chunks not written back yet. Without any, a settle would only append an
    /// empty checkpoint record: reads alone write nothing.
    pub(crate) fn has_settling_work(&self) -> bool {
        let pending = {
            let ck = self.ckpt.lock();
            !ck.writeback.is_empty() || !ck.retained.is_empty()
        };
        pending
            || !self.meta_dirty.lock().is_empty()
            || self
                .shared
                .iter()
                .any(|s| !s.dirty.lock().is_empty() || !s.fresh.lock().is_empty())
    }

    /// A checkpoint of what is committed, then a write-back of everything checkpointed:
    /// the headers it leaves empty leave the table, so reads of their chunks go to the
    /// masters again. The reclaimer runs it after a quiet, read-mostly interval — a bulk
    /// load followed by reads, say — instead of waiting for a full version log to force a
    /// checkpoint (§5.10). What it writes back, the full checkpoint log would have forced
    /// later; a chunk written again after it is written back once more.
    pub(crate) fn settle(&self) -> TxResult<()> {
        self.checkpoint_and_release()?;
        {
            let mut ck = self.ckpt.lock();
            let _reading = self.reclaiming();
            if !ck.writeback.is_empty() {
                self.write_back(&mut ck)?;
            }
        }
        self.stats.settles.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// For an allocation that found no space: a checkpoint (covering the frees committed
    /// so far), a write-back (the checkpoint log then holds none of the freed blocks'
    /// chunks, and empty headers leave the table), another checkpoint, which releases
    /// the frees that became reusable, and a wait for releases other threads started.
    pub(crate) fn release_deferred_frees(&self) -> TxResult<()> {
        self.wait_for_older_snapshots();
        self.checkpoint_and_release()?;
        {
            let mut ck = self.ckpt.lock();
            let _reading = self.reclaiming();
            // A free waits while its lines have bytes in a live CLog record, and only a
            // write-back empties `clog_chunks`, also when no checkpointed base is left to
            // write (cooling took their headers out of `writeback`).
            if !ck.writeback.is_empty() || !ck.clog_chunks.is_empty() {
                self.write_back(&mut ck)?;
            }
        }
        self.checkpoint_and_release()?;
        // Frees another thread (or the background reclaimer) took out of the list are in
        // the heap before the retry looks for space.
        self.wait_for_started_releases();
        Ok(())
    }

    /// Before a release for an allocation that found no space: waits (at most
    /// [`SPACE_WAIT`]) until no running transaction's snapshot, and no unpublished commit,
    /// is older than now, so that the checkpoint can cover every free committed so far.
    /// A thread descheduled in the middle of a short transaction otherwise holds the
    /// boundary back, and the allocation fails while those frees are about to be
    /// reusable. Bounded, because a running transaction may itself wait for something the
    /// calling thread holds (a lock of the application's, taken around its transaction).
    /// The calling thread runs no transaction here (its lane announces nothing).
    fn wait_for_older_snapshots(&self) {
        if self.frees.lock().is_empty() {
            return;
        }
        let target = self.clock.now();
        let deadline = std::time::Instant::now() + SPACE_WAIT;
        // Each look costs a `membarrier` (`grace_floor`): after a few yields, look every
        // 50 µs (a descheduled thread is back within a scheduler tick or so).
        for looks in 0u32.. {
            if self.reachable().min(self.grace_floor()) >= target
                || std::time::Instant::now() >= deadline
            {
                return;
            }
            if looks < 16 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
    }

    /// Checkpoints every commit and writes everything back: the next open replays nothing,
    /// and every free committed so far is reusable (none waits for a checkpoint or for its
    /// lines to leave the CLog).
    pub fn quiesce(&self) -> TxResult<()> {
        self.checkpoint_all()?;
        let ready = {
            let mut ck = self.ckpt.lock();
            let _reading = self.reclaiming();
            self.write_back(&mut ck)?;
            // The write-back emptied the CLog and took empty headers out: the frees that
            // waited only for that are reusable at the last boundary.
            let boundary = ck.last_t;
            self.ready_frees(boundary, &ck)
        };
        self.finish_frees(ready);
        self.free_expired();
        Ok(())
    }

    /// Whether the heap may return the empty run whose chunk is `(start, len)` to free space
    /// now: only once none of its lines has a header or bytes in a live CLog record, as for a
    /// freed span ([`Core::reusable`]). A new owner writes the chunk in place (a new run's
    /// bitmap outside any log, a fresh block's first bytes), and a stale header's write-back
    /// or cooling, or a CLog replay, would put the old run's bytes over it. Called by the heap
    /// with its lock held: `ckpt` after the heap's lock, as in [`Core::system_commit`].
    pub(crate) fn may_return_run(&self, start: u64, len: u64) -> bool {
        if self.options.mutant == Mutant::ReturnAnyRun {
            return true;
        }
        let ck = self.ckpt.lock();
        let _reading = self.reclaiming();
        (start / CHUNK..(start + len).div_ceil(CHUNK))
            .all(|c| self.table.slot(c) == NO_HEADER && !ck.clog_chunks.contains(&c))
    }

    /// The heap's run creation, made durable at once. The run's chunks were free large
    /// space, which is reused only once no header and no live CLog record covers it; if one
    /// does anyway, everything is written back first, so no recovery or write-back can put
    /// old bytes over the new bitmap.
    pub(crate) fn system_commit(&self, actions: &[Action]) -> TxResult<()> {
        let pm = self.pool.pm();
        let chunks_of = |action: &Action| {
            let (addr, len) = (action.addr(), action.len());
            addr / CHUNK..(addr + len).div_ceil(CHUNK)
        };
        {
            let mut ck = self.ckpt.lock();
            let _reading = self.reclaiming();
            let stale = |ck: &Ckpt| {
                actions
                    .iter()
                    .flat_map(chunks_of)
                    .any(|c| self.table.slot(c) != NO_HEADER || ck.clog_chunks.contains(&c))
            };
            if stale(&ck) {
                self.write_back(&mut ck)?;
                if stale(&ck) {
                    return Err(TxError::Corrupted(
                        "run creation over chunks that still have versions".into(),
                    ));
                }
            }
        }
        let _serialised = self.actions.lock();
        heap::apply_durably(pm, actions);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Bytes, Diff, MAX_ENTRY, NumberHasher, changed_words, merge_sorted};
    use crate::record;
    use rand::{Rng, SeedableRng};
    use std::hash::Hasher;

    /// The runs of differing words, found word by word.
    fn runs_by_scanning(old: &Bytes, new: &Bytes) -> Vec<(usize, usize)> {
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

    #[test]
    fn changed_words_are_the_runs_of_every_word_mask() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for mask in 0u16..256 {
            let old: Bytes = std::array::from_fn(|_| rng.random());
            let mut new = old;
            for word in 0..8 {
                if mask & (1 << word) != 0 {
                    // One byte of the word differs (anywhere in it).
                    new[word * 8 + rng.random_range(0..8)] ^= 1 << rng.random_range(0..8);
                }
            }
            let runs: Vec<_> = changed_words(&old, &new).collect();
            assert_eq!(runs, runs_by_scanning(&old, &new), "mask {mask:#010b}");
            let words: u32 = runs.iter().map(|&(_, len)| len as u32 / 8).sum();
            assert_eq!(words, mask.count_ones());
        }
    }

    /// What lets a checkpoint cut each chain as it reads it: once the record's bound fits,
    /// no chunk's ranges can make the record longer than the bound.
    #[test]
    fn every_word_mask_of_a_chunk_encodes_within_its_entry_bound() {
        let old: Bytes = [0; 64];
        let mut worst = 0;
        for mask in 0u16..256 {
            let new: Bytes = std::array::from_fn(|i| u8::from(mask & (1 << (i / 8)) != 0));
            let mut diff = Diff::default();
            for (start, len) in changed_words(&old, &new) {
                diff.push(64 + start as u64, &new[start..start + len]);
            }
            let (len, _) = record::encoded_len(0, diff.iter(), 0);
            let entry = (len - record::HEADER_LEN) as u64;
            assert!(entry <= MAX_ENTRY, "mask {mask:#010b}: {entry} bytes");
            worst = worst.max(entry);
        }
        assert_eq!(worst, MAX_ENTRY, "the bound is tight");
    }

    #[test]
    fn merging_two_sorted_lists_is_sorting_their_union() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for _ in 0..200 {
            let (n, m) = (rng.random_range(0..30), rng.random_range(0..30));
            let mut list = |n: usize| {
                let mut v: Vec<(u32, u64)> = (0..n)
                    .map(|_| (rng.random_range(0..40), rng.random_range(0..3)))
                    .collect();
                v.sort_unstable();
                v.dedup();
                v
            };
            let (a, b) = (list(n), list(m));
            let mut expected = [a.clone(), b.clone()].concat();
            expected.sort_unstable();
            expected.dedup();
            assert_eq!(merge_sorted(&a, &b), expected, "{a:?} {b:?}");
        }
    }

    #[test]
    fn a_diff_hands_back_each_range_with_its_own_bytes() {
        let mut diff = Diff::default();
        diff.push(640, &[1, 2, 3, 4, 5, 6, 7, 8]);
        diff.push(72, &[9; 24]);
        let got: Vec<(u64, Vec<u8>)> = diff.iter().map(|(a, b)| (a, b.to_vec())).collect();
        assert_eq!(
            got,
            [(640, vec![1, 2, 3, 4, 5, 6, 7, 8]), (72, vec![9; 24])]
        );
        diff.clear();
        assert_eq!(diff.iter().count(), 0);
    }

    #[test]
    fn strided_numbers_spread_over_the_low_bits_of_the_hash() {
        // Chunk numbers of blocks of one size class share their low bits; hashbrown takes
        // the bucket from the hash's low bits, so those must come from the whole key. A
        // random hash fills about 647 of 1 024 buckets with 1 024 keys; the identity would
        // fill 1 024 / stride.
        for stride in [1u64, 2, 4, 64, 4096, 1 << 20] {
            let buckets: std::collections::HashSet<u64> = (0..1024u64)
                .map(|k| {
                    let mut h = NumberHasher::default();
                    h.write_u64(k * stride);
                    h.finish() & 1023
                })
                .collect();
            assert!(
                buckets.len() > 600,
                "stride {stride}: {} of 1024 buckets",
                buckets.len()
            );
        }
    }
}
