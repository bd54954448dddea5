//! The engine: open and recovery, the transaction loop, and what commits hand to the
//! reclaimer. Checkpoints, write-back and reclamation are in [`crate::reclaim`].

use crate::background::spawn_reclaimer;
use crate::chain::{CHUNK, Versions};
use crate::clock::Clock;
use crate::handoff::Requests;
use crate::lane::{Lane, NONE, Shared, WriteEntry};
use crate::layout::MvccLayout;
use crate::options::{Level, MvccOptions};
use crate::reclaim::{Ckpt, Retired};
use crate::record::{Kind, Record};
use crate::recover::{read_logs, refuse, store_actions, store_checkpoints};
use crate::table::Table;
use crate::txn::{MvccTx, Outcome, Replaying, Retry};
use crossbeam_utils::CachePadded;
use heap::{Action, Descriptor, Freeing, Heap};
use parking_lot::Mutex;
use pmem::integrity::Finding;
use pmem::{CACHE_LINE, Persist, Pool, Region};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use tx::api::{Engine, Isolation, NoReplay, Op, OpId, Replay, TxError, TxResult};
use tx::lanes::Lanes;
use tx::{RecoveryMode, RecoveryReport, pool_tag};

/// The MVCC engine over a pool on backend `P`; `R` re-executes logged operations during
/// recovery. Its shared state ([`Core`], reached through `Deref`) is shared with the
/// background reclaimer thread, which the engine stops and joins when it is dropped.
#[derive(Debug)]
pub struct Mvcc<P: Persist, R: Replay = NoReplay> {
    core: Arc<Core<P>>,
    pub(crate) lanes: Lanes<Lane>,
    pub(crate) replay: R,
    /// Set when recovery failed: the engine must not write anything on drop.
    failed: AtomicBool,
    /// What the recovery at open found and replayed.
    recovery: RecoveryReport,
    /// The background reclaimer, when it runs.
    background: Option<JoinHandle<()>>,
}

/// What the transactions of an engine and its background reclaimer share: the pool, the
/// heap, the version log and chunk table, the clock, the lanes' announcements, and the
/// checkpointer's state. An [`Mvcc`] dereferences to it: its methods are the engine's.
#[derive(Debug)]
pub struct Core<P: Persist> {
    pub(crate) pool: Pool<P>,
    pub(crate) layout: MvccLayout,
    pub(crate) heap: Heap,
    pub(crate) table: Table,
    pub(crate) versions: Versions,
    pub(crate) shared: Box<[CachePadded<Shared>]>,
    pub(crate) clock: Clock,
    /// Boundary of the newest durable checkpoint: OLog records at or before it may go.
    pub(crate) checkpointed: AtomicU64,
    pub(crate) ckpt: Mutex<Ckpt>,
    /// Heap metadata written in place and not yet written back.
    pub(crate) meta_dirty: Mutex<Vec<(u64, u64)>>,
    /// Heap actions read-modify-write shared bitmap words.
    pub(crate) actions: Mutex<()>,
    /// Blocks freed by committed transactions, with the commit timestamp: reusable once a
    /// durable checkpoint covers the free (and no snapshot can still reach them).
    pub(crate) frees: Mutex<Vec<(u64, Freeing)>>,
    /// Releases of frees to the heap started and finished: between the two, the blocks a
    /// checkpoint took out of `frees` are in neither `frees` nor the heap's free space, and
    /// [`Mvcc::allocated_blocks`] waits for none to be under way.
    pub(crate) releases_started: AtomicU64,
    pub(crate) releases_finished: AtomicU64,
    /// Versions and headers waiting for their grace period.
    pub(crate) retired: Mutex<VecDeque<Retired>>,
    /// A running checkpoint's or write-back's announcement (it reads version chains), or
    /// `NONE`.
    pub(crate) reclaimer: CachePadded<AtomicU64>,
    /// Requests from the lanes to the background reclaimer.
    pub(crate) requests: Requests,
    pub(crate) options: MvccOptions,
    pub(crate) tag: u16,
    pub(crate) user: Region,
    pub(crate) chunks: Region,
    pub(crate) stats: Stats,
}

impl<P: Persist, R: Replay> std::ops::Deref for Mvcc<P, R> {
    type Target = Core<P>;

    fn deref(&self) -> &Core<P> {
        &self.core
    }
}

/// Counters of the engine's own events.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) commits_logical: AtomicU64,
    pub(crate) commits_physical: AtomicU64,
    pub(crate) conflicts: AtomicU64,
    pub(crate) checkpoints: AtomicU64,
    pub(crate) trims: AtomicU64,
    pub(crate) writebacks: AtomicU64,
    pub(crate) replayed: AtomicU64,
    pub(crate) tlog_bytes: AtomicU64,
    pub(crate) olog_bytes: AtomicU64,
    pub(crate) clog_bytes: AtomicU64,
    pub(crate) writeback_bytes: AtomicU64,
    pub(crate) new_object_bytes: AtomicU64,
    pub(crate) checkpointed_versions: AtomicU64,
    pub(crate) coalesced_versions: AtomicU64,
    pub(crate) cooled: AtomicU64,
    pub(crate) inline_reclaims: AtomicU64,
    pub(crate) background_reclaims: AtomicU64,
    pub(crate) settles: AtomicU64,
}

/// The name under which `Engine::event_counters` reports the bytes copied into the version
/// log (TimeStone's denominator of write amplification).
pub const TLOG_BYTES_EVENT: &str = "tlog_bytes";
/// The name of the operation-log bytes written (records appended at commit).
pub const OLOG_BYTES_EVENT: &str = "olog_bytes";
/// The name of the checkpoint-log bytes written (checkpoint records).
pub const CLOG_BYTES_EVENT: &str = "clog_bytes";
/// The name of the bytes written back to masters (write-backs and cooling).
pub const WRITEBACK_BYTES_EVENT: &str = "writeback_bytes";
/// The name of the bytes written in place into blocks allocated by the writing
/// transaction (TimeStone's newly allocated masters, flushed before the next checkpoint).
pub const NEW_OBJECT_BYTES_EVENT: &str = "new_object_bytes";

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
    /// Best-effort reclamations (versions dropped without a checkpoint).
    pub trims: u64,
    /// Write-backs of checkpointed chunks to their masters.
    pub writebacks: u64,
    /// Operations re-executed or re-applied by the last recovery.
    pub replayed: u64,
    /// Bytes copied into the transient version log (64 per version): TimeStone's
    /// denominator of write amplification.
    pub tlog_bytes: u64,
    /// Operation-log bytes written at commit (record headers, arguments or ranges,
    /// allocator actions).
    pub olog_bytes: u64,
    /// Checkpoint-log bytes written (checkpoint records).
    pub clog_bytes: u64,
    /// Bytes stored into masters by write-backs and cooling (the changed words only).
    pub writeback_bytes: u64,
    /// Bytes committed transactions wrote in place into blocks they allocated.
    pub new_object_bytes: u64,
    /// Versions that became a checkpoint's content.
    pub checkpointed_versions: u64,
    /// Versions reclaimed without ever reaching PM (superseded before a checkpoint).
    pub coalesced_versions: u64,
    /// Headers of cold chunks written back and taken out between write-backs.
    pub cooled: u64,
    /// Trims and checkpoints a lane ran itself before a transaction (the background
    /// reclaimer off, or back-pressure: its version log or OLog 7/8 full).
    pub inline_reclaims: u64,
    /// Trims and checkpoints the background reclaimer ran.
    pub background_reclaims: u64,
    /// Checkpoints with a write-back the background reclaimer ran on its own after a
    /// quiet, read-mostly interval, so reads went back to the masters (§5.10).
    pub settles: u64,
    /// Chunks with a control header now.
    pub headers: u64,
    /// The clock: `"tsc"` or `"counter"`.
    pub clock: &'static str,
    /// The TSC uncertainty boundary in cycles (0 for the counter).
    pub clock_boundary: u64,
    /// How a transaction orders its announcement before its clock read: `"membarrier"`
    /// (a compiler fence; reclaimers run the expedited private membarrier) or `"seqcst"`.
    pub announcement_fence: &'static str,
}

/// The byte ranges of a write set (sorted by chunk, adjacent ranges merged).
pub(crate) fn written_ranges(writes: &[WriteEntry]) -> Vec<(u64, Vec<u8>)> {
    let mut order: Vec<&WriteEntry> = writes.iter().collect();
    order.sort_unstable_by_key(|w| w.chunk);
    let mut ranges: Vec<(u64, Vec<u8>)> = Vec::new();
    for w in order {
        let mut mask = w.mask;
        while mask != 0 {
            let start = mask.trailing_zeros() as usize;
            let run = (!(mask >> start)).trailing_zeros() as usize;
            let addr = w.chunk * CHUNK + start as u64;
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

/// The spans `(addr, len)` of [`written_ranges`], into `out` (cleared first), without
/// copying any byte.
pub(crate) fn written_spans(writes: &[WriteEntry], out: &mut Vec<(u64, u64)>) {
    out.clear();
    for w in writes {
        let mut mask = w.mask;
        while mask != 0 {
            let start = mask.trailing_zeros();
            let run = (!(mask >> start)).trailing_zeros();
            out.push((w.chunk * CHUNK + u64::from(start), u64::from(run)));
            mask = if start + run >= 64 {
                0
            } else {
                mask & !(((1u64 << run) - 1) << start)
            };
        }
    }
    // Runs of distinct chunks never overlap: sorted, adjacent ones merge as in
    // `written_ranges`.
    out.sort_unstable();
    let mut kept = 0usize;
    for i in 0..out.len() {
        let (addr, len) = out[i];
        match kept.checked_sub(1).map(|last| &mut out[last]) {
            Some((at, n)) if *at + *n == addr => *n += len,
            _ => {
                out[kept] = (addr, len);
                kept += 1;
            }
        }
    }
    out.truncate(kept);
}

/// Writes back each distinct line of `lines` once, merging runs of adjacent lines.
pub(crate) fn write_back_lines<P: Persist>(pm: &P, lines: &mut Vec<u64>) {
    crate::sort::sort_by_radix(lines, &mut Vec::new(), |&line| line);
    lines.dedup();
    for run in lines.chunk_by(|a, b| b - a == 1) {
        pm.flush(run[0] * CACHE_LINE, run.len() as u64 * CACHE_LINE);
    }
}

/// What recovery found before the engine can run.
struct Scanned {
    layout: MvccLayout,
    heap: Heap,
    /// The write-back watermark after the CLog replay.
    watermark: crate::layout::Watermark,
    /// The newest timestamp of any intact record (or the watermark).
    newest: u64,
    /// Operations after the checkpoint, in timestamp order.
    pending: Vec<Record>,
    /// Torn tails discarded and damage salvaged.
    findings: Vec<Finding>,
}

impl<P: Persist, R: Replay> Mvcc<P, R> {
    /// Formats the engine area of a fresh pool (one [`Pool::create`] just made) and returns
    /// the engine. A pool whose engine area holds anything (any engine's area, or other
    /// data) is refused with [`TxError::AlreadyFormatted`] and left unchanged: `open` a pool
    /// that exists.
    pub fn create(pool: Pool<P>, options: &MvccOptions, replay: R) -> TxResult<Self> {
        check_options(options)?;
        tx::layout::refuse_formatted(pool.pm(), pool.arena())?;
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
    /// operations logged after the newest checkpoint, in timestamp order (recovery). Logs
    /// damaged in the middle (not a torn tail) are refused with `Corrupted`.
    ///
    /// The lanes, the log sizes and the heap's chunk size are the pool's, recorded by
    /// `create`; of `options` only the run-time fields apply. A pool of another engine is
    /// `WrongEngine`, one no engine formatted `Corrupted`.
    pub fn open(pool: Pool<P>, options: &MvccOptions, replay: R) -> TxResult<Self> {
        Self::open_with(pool, options, replay, RecoveryMode::Strict)
    }

    /// Opens the engine area of `pool` even if its logs are damaged: every intact record is
    /// replayed and [`Mvcc::recovery_report`] lists the damage skipped. An explicit choice
    /// for getting data out of a damaged pool; the result may mix states.
    pub fn salvage(pool: Pool<P>, options: &MvccOptions, replay: R) -> TxResult<Self> {
        Self::open_with(pool, options, replay, RecoveryMode::Salvage)
    }

    /// What the recovery at open found (torn tails discarded, damage salvaged) and how many
    /// records it replayed or re-executed.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    fn open_with(
        pool: Pool<P>,
        options: &MvccOptions,
        replay: R,
        mode: RecoveryMode,
    ) -> TxResult<Self> {
        check_options(options)?;
        // The announcement fence's registration, once per process, before any transaction.
        crate::fence::init();
        let scanned = match scan(&pool, mode) {
            Ok(scanned) => scanned,
            Err(error) => {
                tx::api::refused_open(&pool, &error);
                return Err(error);
            }
        };
        let Scanned {
            layout,
            heap,
            watermark,
            newest,
            pending,
            findings,
        } = scanned;
        let mut engine = Self::assemble(pool, options, replay, layout, heap, watermark);
        engine.recovery = RecoveryReport {
            replayed: pending.len(),
            findings,
        };
        if let Err(error) = engine.replay_all(pending) {
            engine.failed.store(true, Ordering::SeqCst);
            engine.pool.mark_unclean_on_drop();
            return Err(error);
        }
        // Every later timestamp exceeds every logged one.
        let clock = Clock::new(options.clock, newest.max(engine.clock.now()));
        Arc::get_mut(&mut engine.core)
            .expect("no reclaimer runs before recovery ends")
            .clock = clock;
        if options.background {
            engine.background = spawn_reclaimer(Arc::clone(&engine.core));
        }
        Ok(engine)
    }

    fn assemble(
        pool: Pool<P>,
        options: &MvccOptions,
        replay: R,
        layout: MvccLayout,
        heap: Heap,
        watermark: crate::layout::Watermark,
    ) -> Self {
        let per_lane = options.tlog_versions;
        let lanes = Lanes::new((0..layout.lane_count).map(|lane| {
            let (base, size) = layout.olog(lane as usize);
            Lane::new(
                lane as usize,
                base,
                size,
                lane * per_lane + 1..=(lane + 1) * per_lane,
            )
        }));
        let shared = (0..layout.lane_count)
            .map(|_| CachePadded::new(Shared::new()))
            .collect();
        let tag = pool_tag(&pool.header().uuid);
        let user = pool.root();
        let chunks = Region {
            offset: heap.layout().chunks,
            len: heap.layout().end() - heap.layout().chunks,
        };
        let checkpoint = watermark.value;
        let core = Core {
            table: Table::new(pool.pm().len(), options.max_headers),
            versions: Versions::new((layout.lane_count * per_lane) as usize),
            // Recovery's clock: a counter that follows the re-executed records.
            clock: Clock::recovery(watermark.value),
            pool,
            layout,
            heap,
            shared,
            checkpointed: AtomicU64::new(checkpoint),
            ckpt: Mutex::new(Ckpt::new(checkpoint, watermark)),
            meta_dirty: Mutex::new(Vec::new()),
            actions: Mutex::new(()),
            frees: Mutex::new(Vec::new()),
            releases_started: AtomicU64::new(0),
            releases_finished: AtomicU64::new(0),
            retired: Mutex::new(VecDeque::new()),
            reclaimer: CachePadded::new(AtomicU64::new(NONE)),
            requests: Requests::default(),
            options: *options,
            tag,
            user,
            chunks,
            stats: Stats::default(),
        };
        Mvcc {
            core: Arc::new(core),
            lanes,
            replay,
            failed: AtomicBool::new(false),
            recovery: RecoveryReport::default(),
            background: None,
        }
    }

    /// Re-executes the operations logged after the checkpoint, then checkpoints and writes
    /// back their effects so the logs are empty. The clock stays below each record's
    /// timestamp until it is re-executed, so a checkpoint that reclamation starts meanwhile
    /// covers only re-executed records.
    fn replay_all(&self, pending: Vec<Record>) -> TxResult<()> {
        let replayed_any = !pending.is_empty();
        for record in &pending {
            self.clock.advance(record.ts - 1);
            self.replay_one(record).map_err(|e| {
                TxError::Corrupted(format!(
                    "recovery could not re-execute the operation logged at {:#x} (ts {}): {e}",
                    record.pos, record.ts
                ))
            })?;
            self.stats.replayed.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(last) = pending.last() {
            self.clock.advance(last.ts);
        }
        if replayed_any {
            self.quiesce()?;
        }
        Ok(())
    }

    fn replay_one(&self, record: &Record) -> TxResult<()> {
        // A commit logs an operation only when its handler handles it: any other id is a
        // damaged record (with a valid CRC), never handed to a handler that may not expect it.
        if record.kind == Kind::Logical && !self.replay.handles(OpId(record.op)) {
            return Err(TxError::Corrupted(format!(
                "operation {} has no handler (a commit logs only operations its handler handles)",
                record.op
            )));
        }
        let mut need = None;
        let mut written_back = false;
        loop {
            let outcome = Outcome::default();
            let (lane, mut state) = self.lanes.acquire();
            self.prepare(&mut state, need.take())?;
            state.reset();
            let snapshot = self.clock.now();
            let shared = &self.shared[lane];
            let mut tx = MvccTx::new(
                self,
                lane,
                shared,
                state,
                snapshot,
                Level::Snapshot,
                None,
                &outcome,
            );
            // A logged operation's body allocates its blocks again and gets these, in order.
            // A physical record allocates nothing: its blocks are known from the start, and
            // its ranges inside them go in place, as they did when it ran (fresh writes). It
            // took no versions for them then, so it must not need any now: a record whose
            // new block spans more chunks than a transaction may lock would otherwise be
            // refused by recovery, after it committed.
            let blocks = self.allocations_of(record)?;
            let (allocs, blocks) = match record.kind {
                Kind::Logical => (blocks, Vec::new()),
                _ => (VecDeque::new(), Vec::from(blocks)),
            };
            tx.replaying = Some(Box::new(Replaying {
                ts: record.ts,
                allocs,
                blocks,
            }));
            let result = tx::api::run_transaction(tx, |tx| match record.kind {
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
            });
            match outcome.retry.get() {
                // More chunks than a transaction may lock. The commit wrote its new blocks in
                // place, without versions, but a commit with an older timestamp that wrote a
                // neighbour sharing one of their chunks — after the in-place write, before
                // this commit — was replayed first and left a header there, so the blocks'
                // writes now go through versions. Checkpointing and writing back everything
                // replayed so far (the clock sits below this record's timestamp) takes those
                // headers out; the blocks then go in place again, as when the commit ran, and
                // its other chunks are the ones it locked then.
                Some(Retry::Versions(n))
                    if result.is_err()
                        && !written_back
                        && n > self.options.tlog_versions * 3 / 4 =>
                {
                    written_back = true;
                    self.quiesce()?;
                }
                Some(retry @ Retry::Versions(_)) if result.is_err() => need = Some(retry),
                _ => return result,
            }
        }
    }

    /// The blocks a logged commit (operation or physical) allocated, `(addr, len)` in order,
    /// derived from its publish actions (the heap cannot tell: a later logged free may have
    /// released them).
    fn allocations_of(&self, record: &Record) -> TxResult<VecDeque<(u64, u64)>> {
        let layout = *self.heap.layout();
        let pm = self.pool.pm();
        let bad = |what: String| TxError::Corrupted(format!("logged heap action: {what}"));
        let mut out = VecDeque::new();
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
                    let word = (addr - layout.chunk_start(chunk))
                        .checked_sub(heap::layout::RUN_MARKER_LEN)
                        .ok_or_else(|| bad(format!("bit set in the run marker at {addr:#x}")))?
                        / 8;
                    let unit =
                        word * heap::layout::UNITS_PER_WORD + u64::from(mask.trailing_zeros());
                    if mask.count_ones() != 1 || unit >= geometry.units {
                        return Err(bad(format!("mask {mask:#x} at {addr:#x}")));
                    }
                    out.push_back((
                        layout.chunk_start(chunk) + geometry.data_offset + unit * geometry.unit,
                        geometry.unit,
                    ));
                }
                Action::Set { addr, value } if value != 0 => {
                    let chunk = addr
                        .checked_sub(layout.descriptors)
                        .map(|d| d / 8)
                        .filter(|&c| c < layout.chunk_count)
                        .ok_or_else(|| bad(format!("descriptor at {addr:#x}")))?;
                    let Descriptor::Large { span } = Descriptor::decode(value, chunk)? else {
                        return Err(bad(format!("descriptor {value:#x} is no large span")));
                    };
                    out.push_back((
                        layout.chunk_start(chunk),
                        u64::from(span) << layout.chunk_shift,
                    ));
                }
                _ => {}
            }
        }
        Ok(out)
    }
}

impl<P: Persist> Core<P> {
    /// Whether some release took frees out of the deferred list and has not finished them
    /// in the heap yet.
    pub(crate) fn release_in_progress(&self) -> bool {
        self.releases_finished.load(Ordering::SeqCst)
            != self.releases_started.load(Ordering::SeqCst)
    }

    /// Waits until every release started so far has finished in the heap (each is a
    /// handful of bitmap updates, run by whoever took the frees out of the list).
    pub(crate) fn wait_for_started_releases(&self) {
        let started = self.releases_started.load(Ordering::SeqCst);
        while self.releases_finished.load(Ordering::SeqCst) < started {
            std::thread::yield_now();
        }
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<P> {
        &self.pool
    }

    /// The heap.
    pub fn heap(&self) -> &Heap {
        &self.heap
    }

    /// Blocks allocated as committed transactions see them: the heap's count less the
    /// blocks freed by committed transactions that are not reusable yet.
    /// Exact while no transaction runs, even with the background reclaimer releasing frees.
    pub fn allocated_blocks(&self) -> u64 {
        loop {
            let started = self.releases_started.load(Ordering::SeqCst);
            if self.releases_finished.load(Ordering::SeqCst) == started {
                let deferred = self.frees.lock().len() as u64;
                let allocated = self.heap.usage().allocated_blocks;
                std::sync::atomic::fence(Ordering::SeqCst);
                // No release started since: none straddled the two reads.
                if self.releases_started.load(Ordering::SeqCst) == started {
                    return allocated - deferred;
                }
            }
            std::thread::yield_now();
        }
    }

    /// The engine's event counters.
    pub fn stats(&self) -> MvccStats {
        let s = &self.stats;
        let get = |a: &AtomicU64| a.load(Ordering::Acquire);
        MvccStats {
            commits_logical: get(&s.commits_logical),
            commits_physical: get(&s.commits_physical),
            conflicts: get(&s.conflicts),
            checkpoints: get(&s.checkpoints),
            trims: get(&s.trims),
            writebacks: get(&s.writebacks),
            replayed: get(&s.replayed),
            tlog_bytes: get(&s.tlog_bytes),
            olog_bytes: get(&s.olog_bytes),
            clog_bytes: get(&s.clog_bytes),
            writeback_bytes: get(&s.writeback_bytes),
            new_object_bytes: get(&s.new_object_bytes),
            checkpointed_versions: get(&s.checkpointed_versions),
            coalesced_versions: get(&s.coalesced_versions),
            cooled: get(&s.cooled),
            inline_reclaims: get(&s.inline_reclaims),
            background_reclaims: get(&s.background_reclaims),
            settles: get(&s.settles),
            headers: self.table.live(),
            clock: if self.clock.is_tsc() {
                "tsc"
            } else {
                "counter"
            },
            clock_boundary: self.clock.boundary(),
            announcement_fence: crate::fence::mode(),
        }
    }

    /// Whether `[addr, addr + len)` may be written: the root object or the heap's chunks.
    pub(crate) fn writable(&self, addr: u64, len: u64) -> bool {
        self.user.contains(addr, len) || self.chunks.contains(addr, len)
    }
}

impl<P: Persist, R: Replay> Mvcc<P, R> {
    /// Runs `body` at isolation `level` (instead of the engine's default).
    pub fn transaction_with<Out, E>(
        &self,
        level: Level,
        body: impl FnMut(&mut MvccTx<'_, P, R>) -> Result<Out, E>,
    ) -> Result<Out, E>
    where
        E: From<TxError>,
    {
        self.run(None, level, false, body)
    }

    fn run<Out, E>(
        &self,
        op: Option<Op<'_>>,
        level: Level,
        reads_only: bool,
        mut body: impl FnMut(&mut MvccTx<'_, P, R>) -> Result<Out, E>,
    ) -> Result<Out, E>
    where
        E: From<TxError>,
    {
        let _running = tx::api::enter(self).map_err(E::from)?;
        let mut attempt = 0u32;
        let mut need = None;
        let mut space_retries = 0;
        let id = op.map(|o| o.id).filter(|&id| self.replay.handles(id));
        loop {
            let outcome = Outcome::default();
            outcome.space_retries.set(space_retries);
            let (lane, mut state) = self.lanes.acquire();
            // Reclamation happens here, between transactions, never inside one; a read-only
            // transaction skips it (one that writes after all and lacks room retries with
            // its need, and prepares then).
            if !reads_only || need.is_some() {
                self.prepare(&mut state, need.take()).map_err(E::from)?;
            }
            state.reset();
            if let Some(op) = op {
                state.args.extend_from_slice(op.args);
            }
            // Announce a lower bound first (the lane's previous snapshot, less the clock's
            // uncertainty), then read the snapshot: a reclaimer that missed the announcement
            // computed its boundary from an earlier clock reading.
            let shared = &self.shared[lane];
            let bound = state.last_snapshot.saturating_sub(self.clock.boundary());
            shared.active.store(bound, Ordering::Relaxed);
            // Store → load order without a full fence: reclaimers run the heavy side before
            // they read announcements (`fence.rs`).
            crate::fence::light();
            let snapshot = self.clock.now();
            state.last_snapshot = snapshot;
            let tx = MvccTx::new(self, lane, shared, state, snapshot, level, id, &outcome);
            // A closure calling the body, not `&mut body`: through `&mut F`'s `FnMut` shim the
            // compiler emitted the body into the shim, out of line; this way it is inlined
            // into the loop, as a data-logging engine's body is.
            #[allow(clippy::redundant_closure)]
            let result = tx::api::run_transaction(tx, |tx| body(tx));
            match outcome.retry.get() {
                Some(Retry::Space) if result.is_err() => {
                    space_retries += 1;
                    need = Some(Retry::Space);
                }
                Some(retry) if result.is_err() => {
                    self.stats.conflicts.fetch_add(1, Ordering::Relaxed);
                    if retry == Retry::Conflict {
                        attempt += 1;
                        backoff(attempt);
                    } else {
                        need = Some(retry);
                    }
                }
                _ => return result,
            }
        }
    }

    /// Applies a durable commit's heap actions in place (written back before the checkpoint
    /// that covers the commit).
    pub(crate) fn apply_actions(&self, actions: &[Action]) {
        if actions.is_empty() {
            return;
        }
        let pm = self.pool.pm();
        {
            let _serialised = self.actions.lock();
            for action in actions {
                action.store(pm);
            }
        }
        self.meta_dirty
            .lock()
            .extend(actions.iter().map(|a| (a.addr(), a.len())));
    }

    /// Whether blocks freed by committed transactions wait for reuse, or are being handed to
    /// the heap right now: a release takes its frees out of the list before it finishes them
    /// in the heap, and a reservation in between finds neither the frees nor their space.
    pub(crate) fn has_deferred_frees(&self) -> bool {
        let frees = self.frees.lock();
        // A release counts itself started while it holds `frees` (`Core::ready_frees`).
        !frees.is_empty() || self.release_in_progress()
    }

    /// Keeps the blocks a commit at `ts` freed until a checkpoint covers the free.
    pub(crate) fn defer_frees(&self, ts: u64, frees: impl Iterator<Item = Freeing>) {
        if self.options.mutant == crate::options::Mutant::EagerFree {
            for freeing in frees {
                self.heap.finish_free(&freeing);
            }
            return;
        }
        let mut deferred = self.frees.lock();
        deferred.extend(frees.map(|f| (ts, f)));
    }
}

fn check_options(options: &MvccOptions) -> TxResult<()> {
    let versions = u64::from(options.lanes) * u64::from(options.tlog_versions);
    if options.tlog_versions < 8 || versions >= u64::from(u32::MAX) {
        return Err(TxError::InvalidArgument(format!(
            "mvcc needs 8 or more TLog versions per lane and fewer than 2^32 in all, got \
             {} × {}",
            options.lanes, options.tlog_versions
        )));
    }
    Ok(())
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

/// Recovery's first phase, before the engine exists: the logs are read and checked, then
/// the CLog is replayed, the pending operations' heap actions are stored and the heap is
/// rebuilt. Damage is refused before anything is written, unless salvaging.
fn scan<P: Persist>(pool: &Pool<P>, mode: RecoveryMode) -> TxResult<Scanned> {
    let pm = pool.pm();
    let layout = MvccLayout::read(pm, pool.arena())?;
    // A heap of another format version is refused before anything is written.
    heap::Layout::read(pm, layout.heap)?;
    let logs = read_logs(pm, &layout)?;
    if mode == RecoveryMode::Strict && logs.damage().next().is_some() {
        return Err(refuse(logs.damage()));
    }
    // Oldest first, so each byte ends with the value of the newest checkpoint that holds it.
    // (A chunk written in place since has no bytes in a live record: it had no header, and
    // a block is only reused, hence written in place, once no live CLog record holds its
    // chunks — `ready_frees` checks `clog_chunks`.)
    let mut lines = store_checkpoints(pm, &logs.checkpoints);
    write_back_lines(pm, &mut lines);
    pm.fence();
    let mut watermark = logs.watermark;
    if let Some(newest) = logs.checkpoints.last() {
        if pm.is_poisoned() {
            return Err(TxError::Poisoned);
        }
        watermark = layout.write_watermark(pm, watermark, newest.ts);
    }
    let mut lines = store_actions(pm, &logs.pending);
    write_back_lines(pm, &mut lines);
    pm.fence();
    let heap = Heap::open(pm, layout.heap)?;
    Ok(Scanned {
        layout,
        heap,
        watermark,
        newest: logs.newest,
        pending: logs.pending,
        findings: logs.findings,
    })
}

impl<P: Persist, R: Replay> Drop for Mvcc<P, R> {
    fn drop(&mut self) {
        if let Some(handle) = self.background.take() {
            self.requests.stop();
            if handle.join().is_err() {
                // The reclaimer panicked (a broken invariant): write nothing more.
                self.failed.store(true, Ordering::SeqCst);
                self.pool.mark_unclean_on_drop();
            }
        }
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
        self.run(None, self.options.isolation, false, body)
    }

    /// A transaction that only reads: the same snapshot and announcement, without the
    /// reclamation check before it.
    fn read_only<Out, E>(
        &self,
        body: impl FnMut(&mut MvccTx<'_, P, R>) -> Result<Out, E>,
    ) -> Result<Out, E>
    where
        E: From<TxError>,
    {
        self.run(None, self.options.isolation, true, body)
    }

    fn transaction_op<Out, E>(
        &self,
        op: Op<'_>,
        body: impl FnMut(&mut MvccTx<'_, P, R>) -> Result<Out, E>,
    ) -> Result<Out, E>
    where
        E: From<TxError>,
    {
        self.run(Some(op), self.options.isolation, false, body)
    }

    fn counters(&self) -> pmem::Counters {
        self.pool.pm().stats().snapshot()
    }

    fn event_counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.stats();
        vec![
            ("commits_logical", s.commits_logical),
            ("commits_physical", s.commits_physical),
            ("conflicts", s.conflicts),
            ("checkpoints", s.checkpoints),
            ("trims", s.trims),
            ("writebacks", s.writebacks),
            (TLOG_BYTES_EVENT, s.tlog_bytes),
            (OLOG_BYTES_EVENT, s.olog_bytes),
            (CLOG_BYTES_EVENT, s.clog_bytes),
            (WRITEBACK_BYTES_EVENT, s.writeback_bytes),
            (NEW_OBJECT_BYTES_EVENT, s.new_object_bytes),
            ("checkpointed_versions", s.checkpointed_versions),
            ("coalesced_versions", s.coalesced_versions),
            ("cooled_headers", s.cooled),
            ("inline_reclaims", s.inline_reclaims),
            ("background_reclaims", s.background_reclaims),
            ("settles", s.settles),
            ("headers", s.headers),
        ]
    }

    /// A checkpoint covering every commit so far: nothing is left to re-execute. The masters
    /// are rewritten only when the checkpoint log fills (TimeStone's delayed write-back) or
    /// a checkpoint ends a read-mostly interval (`docs/mvcc-format.md` §5.10);
    /// [`Core::quiesce`] also writes everything back.
    fn sync(&self) -> TxResult<()> {
        if std::env::var_os("MVCC_SYNC_QUIESCE").is_some() {
            return self.quiesce();
        }
        self.checkpoint_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(chunk: u64, mask: u64) -> WriteEntry {
        WriteEntry {
            chunk,
            header: 1,
            data: std::array::from_fn(|i| i as u8),
            mask,
        }
    }

    #[test]
    fn written_spans_are_the_written_ranges_without_their_bytes() {
        let masks = [
            u64::MAX,
            1,
            1 << 63,
            0xFF00,
            0xF0F0_0000_0000_00FF,
            0x8000_0000_0000_0001,
            0x5555_5555_5555_5555,
        ];
        let mut spans = vec![(9, 9)];
        for &a in &masks {
            for &b in &masks {
                // Out of order, adjacent chunks (runs merge across them) and a gap.
                let writes = [entry(11, a), entry(10, b), entry(13, a & b | 1)];
                written_spans(&writes, &mut spans);
                let ranges: Vec<(u64, u64)> = written_ranges(&writes)
                    .iter()
                    .map(|(addr, bytes)| (*addr, bytes.len() as u64))
                    .collect();
                assert_eq!(spans, ranges, "masks {a:#x} {b:#x}");
            }
        }
        written_spans(&[], &mut spans);
        assert!(spans.is_empty());
    }

    /// An engine with `options` on a fresh 1 MiB simulated pool.
    fn sim_engine(options: &crate::MvccOptions) -> Mvcc<crashsim::SimPm, tx::NoReplay> {
        use pmem::{CreateOptions, Pool};
        const POOL: u64 = 1 << 20;
        let pool = Pool::format(
            crashsim::SimPm::new(POOL, Default::default()),
            &CreateOptions::new("mvcc-release", POOL),
        )
        .expect("format");
        Mvcc::create(pool, options, tx::NoReplay).expect("create")
    }

    /// Blocks a checkpoint took out of the deferred frees are in neither count until it
    /// hands them to the heap: the count waits for that release instead of missing them.
    #[test]
    fn allocated_blocks_waits_out_a_release_under_way() {
        use tx::{Engine, Tx};
        let engine = sim_engine(&crate::MvccOptions::small());
        engine
            .transaction(|tx| tx.alloc::<()>(64).map(drop))
            .expect("allocate");
        assert_eq!(engine.allocated_blocks(), 1);
        engine.core.releases_started.fetch_add(1, Ordering::SeqCst);
        std::thread::scope(|s| {
            let counting = s.spawn(|| engine.allocated_blocks());
            std::thread::sleep(std::time::Duration::from_millis(100));
            assert!(!counting.is_finished(), "counted during a release");
            engine.core.releases_finished.fetch_add(1, Ordering::SeqCst);
            assert_eq!(counting.join().expect("count"), 1);
        });
    }

    /// An allocation that finds no space while another thread is handing frees it released
    /// to the heap (taken out of the deferred list, not yet finished) waits for that release
    /// and gets the space. It used to fail with `OutOfSpace` at once: the deferred list was
    /// empty, and the heap still counted the blocks as being freed.
    #[test]
    fn an_allocation_waits_for_a_release_under_way() {
        use tx::{Engine, Tx, TxError};
        // No background reclaimer: nothing else releases the free this test takes.
        let engine = sim_engine(&crate::MvccOptions::small().with_background(false));
        let mut blocks = Vec::new();
        loop {
            match engine.transaction(|tx| tx.alloc::<()>(1024)) {
                Ok(block) => blocks.push(block),
                Err(TxError::OutOfSpace { .. }) => break,
                Err(other) => panic!("allocating: {other}"),
            }
        }
        let block = blocks.pop().expect("a block");
        engine.transaction(|tx| tx.free(block)).expect("free");
        // What `Core::ready_frees` does: the free leaves the list, the release starts.
        let taken: Vec<heap::Freeing> = {
            let mut frees = engine.core.frees.lock();
            engine.core.releases_started.fetch_add(1, Ordering::SeqCst);
            frees.drain(..).map(|(_, freeing)| freeing).collect()
        };
        assert_eq!(taken.len(), 1);
        assert_eq!(engine.heap.usage().free_chunks, 0);
        std::thread::scope(|s| {
            let allocating = s.spawn(|| engine.transaction(|tx| tx.alloc::<()>(1024)));
            std::thread::sleep(std::time::Duration::from_millis(100));
            assert!(
                !allocating.is_finished(),
                "the allocation ended during the release: {:?}",
                allocating.join()
            );
            for freeing in &taken {
                engine.heap.finish_free(freeing);
            }
            engine.core.releases_finished.fetch_add(1, Ordering::SeqCst);
            let got = allocating.join().expect("allocating thread");
            assert!(got.is_ok(), "{got:?}");
        });
    }
}
