//! The persistent side of the runtime: a pool holding the heap's home image, a redo log cut
//! into lanes, and one checked word (the log's lap). Pure Rust over the persistence seam, so
//! it runs unchanged on the native backend and on the crash simulator.
//!
//! Protocol (`docs/nvthreads.md` §5):
//! - **append**: every thread appends to a lane of its own, so threads never wait for each
//!   other to log. A record carries a sequence number (its replay order across lanes) and a
//!   group. A record of group 0 commits by itself: once its fence returns it is durable, all
//!   or nothing. A record of group `g` (a section that was merged while still open, or one
//!   that depends on such a section) commits only with a *close* record naming `g`.
//! - **checkpoint** (exclusive: no append runs meanwhile): replay the lap's committed records
//!   into the home image in sequence order, flush, fence, then one 8-byte store of `K + 1`
//!   into the lap word; the records not committed yet are written again at the start of their
//!   lanes in the new lap. Records of older laps are ignored from then on.
//! - **recovery** = checkpoint, except that a lane's scan stops at its first torn record and
//!   records not committed are dropped (their sections never ended); an intact record of the
//!   lap after where a lane's scan stopped is damage, not a torn tail, and the pool is
//!   refused unchanged.
//!
//! Replay writes absolute bytes and the lap word changes only after the home image is
//! durable, so recovery can be interrupted and rerun any number of times.

#![forbid(unsafe_code)]

use crate::error::NvtError;
use crate::record::{self, Entry, Kind, Meta};
use pmem::checked;
use pmem::{CACHE_LINE, CreateOptions, Persist, Pool, WriteClass};
use std::collections::HashSet;

/// Pool layout name.
pub const LAYOUT: &str = "ferrite-nvthreads";
/// Page size of the heap (the unit of tracking, and of the heap's geometry).
pub const PAGE: u64 = 4096;
/// Runtime header magic.
pub const MAGIC: [u8; 8] = *b"NVTHRDS1";
/// Runtime format version: 4 since the heap metadata carries a checksum; 3 cut the log into
/// lanes written concurrently, whose records carry a sequence number and a group (version 2
/// had one log and a commit word; version 1 also hashed its checked words offset first).
pub const VERSION: u32 = 4;
/// Runtime header length (one cache line).
pub const HEADER_LEN: u64 = 64;
/// Offset of the lap word from the start of the root region (a cache line of its own).
pub const LAP_WORD: u64 = 64;
/// The lap word, as its errors name it.
pub(crate) const LAP_WHAT: &str = "lap word";

thread_local! {
    /// The record an append encodes before writing it to its lane, kept across appends so
    /// that appending allocates nothing once it has grown to the largest record.
    static ENCODED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}
/// The first lap of a fresh pool.
pub const FIRST_LAP: u64 = 1;
/// Most lanes a log is cut into.
pub const MAX_LANES: u32 = 64;

/// Sizes of a new pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Heap size in bytes (a multiple of [`PAGE`]).
    pub heap_len: u64,
    /// Log size in bytes (a multiple of 64 per lane).
    pub log_len: u64,
    /// Lanes the log is cut into (1..=[`MAX_LANES`]).
    pub lanes: u32,
    /// Virtual address the heap is mapped at by every run of the program.
    pub base_addr: u64,
}

impl Config {
    /// Pool size: header area and root page, heap, log, rounded up to 4 KiB and to the
    /// smallest pool.
    pub fn pool_size(&self) -> u64 {
        let raw = 2 * PAGE + self.heap_len + self.log_len;
        raw.div_ceil(PAGE).max(pmem::header::MIN_POOL_SIZE / PAGE) * PAGE
    }

    /// The lanes of a log of `log_len` bytes: one per 64 KiB, between 1 and 16.
    pub fn lanes_for(log_len: u64) -> u32 {
        (log_len / (64 << 10)).clamp(1, 16) as u32
    }

    fn validate(&self) -> Result<(), NvtError> {
        let bad = |what: String| Err(NvtError::InvalidArgument(what));
        if self.heap_len < 2 * PAGE || !self.heap_len.is_multiple_of(PAGE) {
            return bad(format!(
                "heap size {} is not ≥ 8 KiB and page-aligned",
                self.heap_len
            ));
        }
        if self.lanes == 0 || self.lanes > MAX_LANES {
            return bad(format!("{} lanes (1 to {MAX_LANES})", self.lanes));
        }
        let lane = self.log_len / u64::from(self.lanes);
        let aligned = self
            .log_len
            .is_multiple_of(u64::from(self.lanes) * record::RECORD_ALIGN);
        if lane < 512 || !aligned {
            return bad(format!(
                "log size {} is not ≥ 512 bytes and 64-aligned per lane ({} lanes)",
                self.log_len, self.lanes
            ));
        }
        if !self.base_addr.is_multiple_of(PAGE) || self.base_addr == 0 {
            return bad(format!(
                "base address {:#x} is not page-aligned",
                self.base_addr
            ));
        }
        Ok(())
    }
}

/// Where everything is, as absolute pool offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Home image of the heap.
    pub heap_off: u64,
    /// Heap size.
    pub heap_len: u64,
    /// Start of the log.
    pub log_off: u64,
    /// Log size.
    pub log_len: u64,
    /// Lanes of the log.
    pub lanes: u32,
    /// Bytes of each lane.
    pub lane_len: u64,
    /// Fixed virtual address of the heap.
    pub base_addr: u64,
    /// The lap word.
    pub lap_word: u64,
}

impl Geometry {
    /// Pool offset of lane `lane`.
    pub fn lane_off(&self, lane: usize) -> u64 {
        self.log_off + lane as u64 * self.lane_len
    }
}

/// The volatile state of the log. The runtime keeps it in memory shared by all its
/// processes: the lap changes only under the exclusive checkpoint, a lane's tail only while
/// its appender holds the lane.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JournalState {
    /// Current lap `K` (mirror of the lap word).
    pub lap: u64,
    /// Bytes used in each lane in this lap.
    pub tails: Vec<u64>,
}

/// What recovery found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Whether the previous run closed the pool cleanly.
    pub was_clean: bool,
    /// Committed records replayed into the home image.
    pub records: u64,
    /// Bytes replayed.
    pub bytes: u64,
    /// Valid records dropped because their group was never closed.
    pub uncommitted: u64,
}

/// What a checkpoint did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Checkpoint {
    /// Committed records replayed into the home image.
    pub applied: u64,
    /// Records not committed yet, written again in the new lap.
    pub kept: u64,
}

/// A deliberate bug, for proving that the crash tests can fail. Always `None` outside tests.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// The correct protocol.
    #[default]
    None,
    /// Records are fenced but never flushed.
    NoLogFlush,
    /// Replay takes every valid record as committed, closed group or not.
    GroupsIgnored,
    /// The checkpoint advances the lap before the home image is durable.
    EarlyLapBump,
    /// Recovery accepts records of any lap.
    NoLapCheck,
    /// The checkpoint writes the kept records over the old lap before advancing the lap, so
    /// a crash in between can leave older records of other lanes replayed over newer bytes.
    RewriteBeforeLapBump,
    /// Replay goes lane by lane instead of in sequence order.
    NoSeqOrder,
}

impl Mutation {
    /// Every mutant.
    pub const MUTANTS: [Mutation; 6] = [
        Mutation::NoLogFlush,
        Mutation::GroupsIgnored,
        Mutation::EarlyLapBump,
        Mutation::NoLapCheck,
        Mutation::RewriteBeforeLapBump,
        Mutation::NoSeqOrder,
    ];
}

/// A valid record found by a scan: where its body lies in its lane's bytes.
#[derive(Clone, Debug)]
pub(crate) struct Scanned {
    pub(crate) lane: usize,
    pub(crate) meta: Meta,
    body: std::ops::Range<usize>,
}

/// What a replay reuses from record to record: the entries of the record being applied,
/// and the image of a masked page.
#[derive(Debug, Default)]
struct ReplayBuffers<'b> {
    entries: Vec<Entry<'b>>,
    page: Vec<u8>,
}

/// The home lines a replay wrote, to flush once each: a list, and a direct-mapped filter of
/// lines already in it that keeps the lines written again and again (a ledger's balances, a
/// counter) from being listed once per write. A line is left out only if the filter says it
/// is listed, so every written line is listed at least once. The filter covers 256 KiB of
/// contiguous home lines without a collision (4096 slots, 32 KiB, one allocation per
/// replay): with 256 slots, a ledger of 4096 balances and four 16 KiB journal rings (about
/// 1,500 lines) evicted each other and the list held a line per write or so, whose sort was
/// about a tenth of a checkpoint's instructions.
#[derive(Debug)]
struct LineSet {
    lines: Vec<u64>,
    listed: Box<[u64]>,
}

impl LineSet {
    const FILTER: usize = 4096;

    fn insert(&mut self, line: u64) {
        let slot = &mut self.listed[line as usize % Self::FILTER];
        if *slot != line {
            *slot = line;
            self.lines.push(line);
        }
    }
}

impl Default for LineSet {
    fn default() -> Self {
        LineSet {
            lines: Vec::new(),
            listed: vec![u64::MAX; Self::FILTER].into_boxed_slice(),
        }
    }
}

/// A lap's records as scanned: each lane's bytes, read from the pool in one piece per lane
/// (a checkpoint knows the tails) or a record at a time (recovery), and every valid
/// record's place in them. Nothing is allocated per record.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    lanes: Vec<Vec<u8>>,
    pub(crate) records: Vec<Scanned>,
    /// Where each lane's scan stopped.
    pub(crate) ends: Vec<u64>,
}

impl Scan {
    /// The lap `lap`'s records of every lane of the log `geo` describes, read a record at
    /// a time as far as they are valid (as recovery reads them; read only).
    pub(crate) fn read<P: Persist>(pm: &P, geo: &Geometry, lap: u64) -> Scan {
        let mut scan = Scan::default();
        for lane in 0..geo.lanes as usize {
            let mut bytes = Vec::new();
            let end = scan_lane(pm, geo, lane, (lap, false), &mut bytes, &mut scan.records);
            scan.lanes.push(bytes);
            scan.ends.push(end);
        }
        scan
    }

    pub(crate) fn body(&self, record: &Scanned) -> &[u8] {
        &self.lanes[record.lane][record.body.clone()]
    }
}

/// An open NVthreads pool.
#[derive(Debug)]
pub struct Journal<P: Persist> {
    pool: Pool<P>,
    geo: Geometry,
    mutation: Mutation,
    /// Called after every fence of append, checkpoint and recovery (the runtime's
    /// `NVT_CRASH_AT` crash points).
    fence_hook: Option<fn()>,
}

impl<P: Persist> Journal<P> {
    /// Formats a fresh pool on `pm` (exactly `config.pool_size()` bytes).
    pub fn create(pm: P, config: &Config) -> Result<(Self, JournalState), NvtError> {
        config.validate()?;
        let pool = Pool::format(pm, &CreateOptions::new(LAYOUT, config.pool_size()))?;
        Self::create_in(pool, config)
    }

    /// Initialises a pool formatted with layout [`LAYOUT`] and `config.pool_size()` bytes
    /// (for native pools made by `Pool::create`).
    pub fn create_in(pool: Pool<P>, config: &Config) -> Result<(Self, JournalState), NvtError> {
        let journal = Self::init(pool, config)?;
        let state = journal.empty_state(FIRST_LAP);
        Ok((journal, state))
    }

    /// Opens a pool created by [`Journal::create`] and recovers it: replays every committed
    /// record into the home image and starts a new lap. On any error the pool stays marked
    /// unclean.
    pub fn open(pm: P) -> Result<(Self, JournalState, Recovery), NvtError> {
        Self::open_with(pm, Mutation::None)
    }

    /// [`Journal::open`] with a bug injected into recovery and everything after (tests only).
    #[doc(hidden)]
    pub fn open_with(
        pm: P,
        mutation: Mutation,
    ) -> Result<(Self, JournalState, Recovery), NvtError> {
        let pool = Pool::attach(pm, LAYOUT)?;
        Self::open_in(pool, mutation, None)
    }

    /// Recovers an attached pool (for native pools opened by `Pool::open`). `fence_hook`, if
    /// given, runs after every fence from recovery on.
    pub fn open_in(
        pool: Pool<P>,
        mutation: Mutation,
        fence_hook: Option<fn()>,
    ) -> Result<(Self, JournalState, Recovery), NvtError> {
        let geo = match geometry_of(&pool) {
            Ok(geo) => geo,
            Err(error) => {
                pool.mark_unclean_on_drop();
                return Err(error);
            }
        };
        let journal = Journal {
            pool,
            geo,
            mutation,
            fence_hook,
        };
        match journal.recover() {
            Ok((state, recovery)) => Ok((journal, state, recovery)),
            Err(error) => {
                journal.pool.mark_unclean_on_drop();
                Err(error)
            }
        }
    }

    fn empty_state(&self, lap: u64) -> JournalState {
        JournalState {
            lap,
            tails: vec![0; self.geo.lanes as usize],
        }
    }

    fn recover(&self) -> Result<(JournalState, Recovery), NvtError> {
        let word = self.pool.pm().read_u64(self.geo.lap_word);
        let lap = checked::open(word, self.geo.lap_word, LAP_WHAT)?;
        let scan = self.scan(lap, None);
        self.refuse_damage(lap, &scan)?;
        let (committed, pending) = self.split_committed(&scan);
        let mut recovery = Recovery {
            records: committed.len() as u64,
            uncommitted: pending.len() as u64,
            ..Recovery::default()
        };
        recovery.bytes = self.replay(&scan, &committed)?;
        self.write_lap(lap + 1)?;
        recovery.was_clean = self.pool.was_clean();
        Ok((self.empty_state(lap + 1), recovery))
    }

    /// Writes the runtime header and the lap word on a freshly formatted pool.
    fn init(pool: Pool<P>, config: &Config) -> Result<Self, NvtError> {
        match write_runtime_header(&pool, config) {
            Ok(geo) => Ok(Journal {
                pool,
                geo,
                mutation: Mutation::None,
                fence_hook: None,
            }),
            Err(error) => {
                pool.mark_unclean_on_drop();
                Err(error)
            }
        }
    }

    /// Runs `hook` after every later fence of append, checkpoint and recovery.
    pub fn set_fence_hook(&mut self, hook: Option<fn()>) {
        self.fence_hook = hook;
    }

    fn fenced(&self) {
        if let Some(hook) = self.fence_hook {
            hook();
        }
    }

    /// Injects a bug (tests only).
    #[doc(hidden)]
    pub fn set_mutation(&mut self, mutation: Mutation) {
        self.mutation = mutation;
    }

    /// The injected bug (tests only).
    #[doc(hidden)]
    pub fn mutation(&self) -> Mutation {
        self.mutation
    }

    fn mutated(&self, mutation: Mutation) -> bool {
        self.mutation == mutation
    }

    /// Where everything is.
    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// The underlying pool.
    pub fn pool(&self) -> &Pool<P> {
        &self.pool
    }

    /// Reads `dst.len()` bytes of the home image at heap offset `offset`.
    pub fn read_home(&self, offset: u64, dst: &mut [u8]) {
        assert!(
            offset + dst.len() as u64 <= self.geo.heap_len,
            "home read past the heap"
        );
        self.pool.pm().read(self.geo.heap_off + offset, dst);
    }

    /// Appends one record (`meta`'s kind, `body` encoded by [`record::data_body`] or
    /// [`record::close_body`]) to `lane` at `*tail`, in lap `lap`: durable (flushed and
    /// fenced) on return, and committed if its group is 0 (a durability point). `LaneFull`
    /// when it does not fit in the lane's free space (the caller checkpoints and retries);
    /// `LogFull` when it does not fit in an empty lane. Returns the record's size. The caller
    /// is the lane's only appender and no checkpoint runs meanwhile.
    pub fn append(
        &self,
        lane: usize,
        tail: &mut u64,
        meta: Meta,
        body: &[u8],
    ) -> Result<u64, NvtError> {
        let len = record::record_len(body.len() as u64);
        if len > self.geo.lane_len {
            return Err(NvtError::LogFull {
                needed: len,
                free: self.geo.lane_len,
                pending: 0,
            });
        }
        if *tail + len > self.geo.lane_len {
            return Err(NvtError::LaneFull {
                lane,
                needed: len,
                free: self.geo.lane_len - *tail,
            });
        }
        let pm = self.pool.pm();
        let at = self.geo.lane_off(lane) + *tail;
        let write = |bytes: &mut Vec<u8>| {
            record::encode_into(meta, body, bytes);
            pm.write(at, bytes, WriteClass::Log);
        };
        // The thread's buffer is gone once its thread-locals are destroyed (an append at
        // exit): such an append encodes into a buffer of its own.
        if ENCODED
            .try_with(|bytes| write(&mut bytes.borrow_mut()))
            .is_err()
        {
            write(&mut Vec::new());
        }
        if !self.mutated(Mutation::NoLogFlush) {
            pm.flush(at, len);
        }
        pm.fence();
        self.fenced();
        if meta.group == 0 || meta.kind == Kind::Close {
            pm.durability_point();
        }
        *tail += len;
        Ok(len)
    }

    /// [`Journal::append`] of a data record of `entries` to `lane` of `state`.
    pub fn append_data(
        &self,
        state: &mut JournalState,
        lane: usize,
        seq: u64,
        group: u64,
        entries: &[Entry<'_>],
    ) -> Result<u64, NvtError> {
        let meta = Meta {
            lap: state.lap,
            seq,
            group,
            kind: Kind::Data,
        };
        self.append(
            lane,
            &mut state.tails[lane],
            meta,
            &record::data_body(entries),
        )
    }

    /// [`Journal::append`] of a close record of `groups` to `lane` of `state`: every record
    /// of those groups commits with it.
    pub fn append_close(
        &self,
        state: &mut JournalState,
        lane: usize,
        seq: u64,
        groups: &[u64],
    ) -> Result<u64, NvtError> {
        let meta = Meta {
            lap: state.lap,
            seq,
            group: 0,
            kind: Kind::Close,
        };
        self.append(
            lane,
            &mut state.tails[lane],
            meta,
            &record::close_body(groups),
        )
    }

    /// Whether any lane is more than half full (time for a checkpoint).
    pub fn wants_checkpoint(&self, state: &JournalState) -> bool {
        state.tails.iter().any(|&tail| tail > self.geo.lane_len / 2)
    }

    /// Replays the lap's committed records into the home image in sequence order, advances
    /// the lap, and writes the records not committed yet (groups still open) again at the
    /// start of their lanes in the new lap, flushed and fenced; they keep their sequence
    /// numbers and groups and commit with their close records. Exclusive: no append runs
    /// meanwhile. `LogFull` if the kept records alone do not fit in their lane (nothing is
    /// changed then).
    ///
    /// Advancing the lap before overwriting the old lap matters: a crash while the kept
    /// records are written could otherwise leave the old lap valid in some lanes and not in
    /// others, and recovery would replay older records of one lane over newer bytes of
    /// another ([`Mutation::RewriteBeforeLapBump`]).
    pub fn checkpoint(&self, state: &mut JournalState) -> Result<Checkpoint, NvtError> {
        let scan = self.scan(state.lap, Some(&state.tails));
        for (lane, (&end, &tail)) in scan.ends.iter().zip(&state.tails).enumerate() {
            if end != tail {
                return Err(NvtError::Corrupted(format!(
                    "lane {lane} scan ends at {end}, its tail is {tail}"
                )));
            }
        }
        let (committed, pending) = self.split_committed(&scan);
        let tails = self.kept_tails(&pending)?;
        let report = Checkpoint {
            applied: committed.len() as u64,
            kept: pending.len() as u64,
        };
        let next_lap = state.lap + 1;
        if self.mutated(Mutation::EarlyLapBump) {
            self.write_lap(next_lap)?;
        }
        self.replay(&scan, &committed)?;
        if self.mutated(Mutation::RewriteBeforeLapBump) {
            self.rewrite_kept(&scan, &pending, next_lap);
        }
        if !self.mutated(Mutation::EarlyLapBump) {
            self.write_lap(next_lap)?;
        }
        if !self.mutated(Mutation::RewriteBeforeLapBump) {
            self.rewrite_kept(&scan, &pending, next_lap);
        }
        state.lap = next_lap;
        state.tails = tails;
        Ok(report)
    }

    /// The lane tails after the kept records are written again, or `LogFull`.
    fn kept_tails(&self, pending: &[&Scanned]) -> Result<Vec<u64>, NvtError> {
        let mut tails = vec![0u64; self.geo.lanes as usize];
        for record in pending {
            tails[record.lane] += record::record_len(record.body.len() as u64);
        }
        for (lane, &tail) in tails.iter().enumerate() {
            if tail > self.geo.lane_len {
                return Err(NvtError::LogFull {
                    needed: tail,
                    free: self.geo.lane_len,
                    pending: pending.iter().filter(|r| r.lane == lane).count() as u64,
                });
            }
        }
        Ok(tails)
    }

    /// Writes `pending` at the start of their lanes in lap `lap`, each flushed and fenced
    /// before the next is written: a lane's records of a lap become durable in lane order
    /// (as appends do), so a crash leaves at most the last one torn and recovery can tell a
    /// torn tail from damage in the middle of a lane (`docs/nvthreads.md` §6). Records are
    /// kept only for sections still open at the checkpoint: the extra fences are rare.
    fn rewrite_kept(&self, scan: &Scan, pending: &[&Scanned], lap: u64) {
        let pm = self.pool.pm();
        let mut tails = vec![0u64; self.geo.lanes as usize];
        for record in pending {
            let meta = Meta { lap, ..record.meta };
            let bytes = record::encode_with_body(meta, scan.body(record));
            let at = self.geo.lane_off(record.lane) + tails[record.lane];
            pm.write(at, &bytes, WriteClass::Log);
            pm.flush(at, bytes.len() as u64);
            pm.fence();
            self.fenced();
            tails[record.lane] += bytes.len() as u64;
        }
    }

    /// [`split_committed`] under this journal's mutation.
    fn split_committed<'s>(&self, scan: &'s Scan) -> (Vec<&'s Scanned>, Vec<&'s Scanned>) {
        split_committed(scan, self.mutation)
    }

    /// Writes every record's entries into the home image (flushed), then one fence. Returns
    /// the bytes replayed.
    fn replay(&self, scan: &Scan, records: &[&Scanned]) -> Result<u64, NvtError> {
        let mut bytes = 0;
        let mut lines = LineSet::default();
        let mut buffers = ReplayBuffers::default();
        for record in records {
            bytes += self.apply_record(scan.body(record), &mut lines, &mut buffers)?;
        }
        self.flush_lines(&mut lines.lines);
        self.pool.pm().fence();
        self.fenced();
        Ok(bytes)
    }

    /// Writes a data record's entries into the home image, noting the pool lines written in
    /// `lines` (to flush: no flush, no fence here).
    fn apply_record<'b>(
        &self,
        body: &'b [u8],
        lines: &mut LineSet,
        buffers: &mut ReplayBuffers<'b>,
    ) -> Result<u64, NvtError> {
        let pm = self.pool.pm();
        let mut bytes = 0;
        let mut written = |at: u64, len: u64| {
            for line in at / CACHE_LINE..(at + len).div_ceil(CACHE_LINE) {
                lines.insert(line);
            }
        };
        record::parse_body_into(body, self.geo.heap_len, &mut buffers.entries)?;
        for entry in &buffers.entries {
            match entry {
                Entry::Run(run) => {
                    let at = self.geo.heap_off + run.offset;
                    pm.write(at, run.bytes, WriteClass::User);
                    written(at, run.bytes.len() as u64);
                    bytes += run.bytes.len() as u64;
                }
                Entry::Masked(page) => {
                    let at = self.geo.heap_off + page.offset;
                    let image = &mut buffers.page;
                    image.resize(record::MASK_PAGE, 0);
                    pm.read(at, image);
                    page.for_each_byte(|offset, byte| image[offset] = byte);
                    pm.write(at, image, WriteClass::User);
                    written(at, image.len() as u64);
                    bytes += page.bytes.len() as u64;
                }
            }
        }
        Ok(bytes)
    }

    /// Flushes each pool line of `lines` once, neighbouring lines in one call. A replay
    /// writes the same home lines again and again (a ledger's balances, a counter); one
    /// flush of each after its last write, before the replay's fence, makes every write to
    /// it durable at that fence exactly as a flush after each write would.
    fn flush_lines(&self, lines: &mut [u64]) {
        lines.sort_unstable();
        let pm = self.pool.pm();
        let mut at = 0;
        while at < lines.len() {
            let first = lines[at];
            let mut last = first;
            while at < lines.len() && lines[at] <= last + 1 {
                last = last.max(lines[at]);
                at += 1;
            }
            pm.flush(first * CACHE_LINE, (last + 1 - first) * CACHE_LINE);
        }
    }

    /// Zeroes `len` bytes of the home image at heap offset `offset` and makes them durable
    /// (flush, fence). Only right after a checkpoint with nothing kept, so that no record of
    /// the lap can write there again (the runtime clears another executable's globals).
    pub fn clear_home(&self, offset: u64, len: u64) {
        assert!(offset + len <= self.geo.heap_len, "clearing past the heap");
        let pm = self.pool.pm();
        let at = self.geo.heap_off + offset;
        pm.fill(at, len, 0, WriteClass::User);
        pm.flush(at, len);
        pm.fence();
        self.fenced();
    }

    fn write_lap(&self, lap: u64) -> Result<(), NvtError> {
        let sealed = checked::seal(lap, self.geo.lap_word, LAP_WHAT)?;
        let pm = self.pool.pm();
        pm.write_u64(self.geo.lap_word, sealed, WriteClass::Meta);
        pm.persist(self.geo.lap_word, 8);
        self.fenced();
        Ok(())
    }

    /// The valid records of every lane in lap `lap`. `tails`: where the lanes end (a
    /// checkpoint's; each lane is then read in one piece), or `None` (recovery: read a
    /// record at a time, as far as they are valid).
    fn scan(&self, lap: u64, tails: Option<&[u64]>) -> Scan {
        let mut scan = Scan::default();
        for lane in 0..self.geo.lanes as usize {
            let mut bytes = match tails {
                Some(tails) => self.lane_prefix(lane, tails[lane].min(self.geo.lane_len)),
                None => Vec::new(),
            };
            let end = self.scan_lane(lane, lap, &mut bytes, &mut scan.records);
            scan.lanes.push(bytes);
            scan.ends.push(end);
        }
        scan
    }

    /// Appends the valid records of `lane` in lap `lap` to `found` (see [`scan_lane`]).
    fn scan_lane(
        &self,
        lane: usize,
        lap: u64,
        bytes: &mut Vec<u8>,
        found: &mut Vec<Scanned>,
    ) -> u64 {
        let any_lap = self.mutated(Mutation::NoLapCheck);
        scan_lane(
            self.pool.pm(),
            &self.geo,
            lane,
            (lap, any_lap),
            bytes,
            found,
        )
    }

    /// Refuses the lap's records if a lane's scan stopped at damage rather than at its torn
    /// tail: an intact record of lap `lap` after where the scan of that lane stopped.
    fn refuse_damage(&self, lap: u64, scan: &Scan) -> Result<(), NvtError> {
        let mut rest = Vec::new();
        for (lane, &end) in scan.ends.iter().enumerate() {
            damage_after(self.pool.pm(), &self.geo, lane, lap, end, &mut rest)?;
        }
        Ok(())
    }

    /// The first `len` bytes of `lane`, read in one piece into a zeroed allocation
    /// (`calloc`): memory fresh from the kernel is zero already and is not cleared again
    /// before the pool's bytes overwrite it (growing an empty vector cleared it first). The
    /// buffer is freed after the checkpoint, so no process keeps the log's size resident.
    fn lane_prefix(&self, lane: usize, len: u64) -> Vec<u8> {
        let mut bytes = vec![0u8; len as usize];
        self.pool.pm().read(self.geo.lane_off(lane), &mut bytes);
        bytes
    }

    /// Marks the pool cleanly closed (the next run's `crashed()` is false).
    pub fn close(self) -> Result<(), NvtError> {
        Ok(self.pool.close()?)
    }
}

fn encode_header(geo: &Geometry) -> [u8; HEADER_LEN as usize] {
    let mut out = [0u8; HEADER_LEN as usize];
    out[0..8].copy_from_slice(&MAGIC);
    out[8..12].copy_from_slice(&VERSION.to_le_bytes());
    out[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
    out[16..24].copy_from_slice(&geo.heap_off.to_le_bytes());
    out[24..32].copy_from_slice(&geo.heap_len.to_le_bytes());
    out[32..40].copy_from_slice(&geo.log_off.to_le_bytes());
    out[40..48].copy_from_slice(&geo.log_len.to_le_bytes());
    out[48..56].copy_from_slice(&geo.base_addr.to_le_bytes());
    out[56..58].copy_from_slice(&(PAGE as u16).to_le_bytes());
    out[58..60].copy_from_slice(&(geo.lanes as u16).to_le_bytes());
    let crc = crc32fast::hash(&out[..60]);
    out[60..64].copy_from_slice(&crc.to_le_bytes());
    out
}

fn read_geometry<P: Persist>(pool: &Pool<P>) -> Result<Geometry, NvtError> {
    geometry_at(pool.pm(), pool.root().offset, pool.arena())
}

/// The geometry the runtime header at pool offset `root` describes, checked against the
/// pool's `arena` (read only).
pub(crate) fn geometry_at<P: Persist>(
    pm: &P,
    root: u64,
    arena: pmem::Region,
) -> Result<Geometry, NvtError> {
    let mut bytes = [0u8; HEADER_LEN as usize];
    pm.read(root, &mut bytes);
    let u16_at = |at: usize| u16::from_le_bytes(bytes[at..at + 2].try_into().expect("2"));
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4"));
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8"));
    if bytes[..8] != MAGIC {
        return Err(NvtError::Corrupted("runtime header has a bad magic".into()));
    }
    if crc32fast::hash(&bytes[..60]) != u32_at(60) {
        return Err(NvtError::Corrupted(
            "runtime header checksum mismatch".into(),
        ));
    }
    if u32_at(8) != VERSION || u64::from(u32_at(12)) != HEADER_LEN {
        return Err(NvtError::UnsupportedVersion {
            found: u32_at(8),
            supported: VERSION,
        });
    }
    let lanes = u32::from(u16_at(58));
    let log_len = u64_at(40);
    let geo = Geometry {
        heap_off: u64_at(16),
        heap_len: u64_at(24),
        log_off: u64_at(32),
        log_len,
        lanes,
        lane_len: log_len / u64::from(lanes.max(1)),
        base_addr: u64_at(48),
        lap_word: root + LAP_WORD,
    };
    let heap_ok = arena.contains(geo.heap_off, geo.heap_len) && geo.heap_len.is_multiple_of(PAGE);
    let log_ok =
        arena.contains(geo.log_off, geo.log_len) && geo.log_off >= geo.heap_off + geo.heap_len;
    let lanes_ok = (1..=MAX_LANES).contains(&lanes)
        && geo.lane_len.is_multiple_of(record::RECORD_ALIGN)
        && geo.lane_len * u64::from(lanes) == log_len;
    let page_ok = u64::from(u16_at(56)) == PAGE && geo.base_addr.is_multiple_of(PAGE);
    if !heap_ok || !log_ok || !lanes_ok || !page_ok {
        return Err(NvtError::Corrupted(format!(
            "runtime header geometry {geo:?}"
        )));
    }
    Ok(geo)
}

/// Splits scanned records into the committed data records, in replay order, and the
/// records not committed yet (of groups no close record names). `mutation`: a test's bug.
pub(crate) fn split_committed(scan: &Scan, mutation: Mutation) -> (Vec<&Scanned>, Vec<&Scanned>) {
    let closed: HashSet<u64> = scan
        .records
        .iter()
        .filter(|r| r.meta.kind == Kind::Close)
        .flat_map(|r| record::parse_close(scan.body(r)))
        .collect();
    let ignore_groups = mutation == Mutation::GroupsIgnored;
    let (mut committed, pending): (Vec<&Scanned>, Vec<&Scanned>) = scan
        .records
        .iter()
        .filter(|r| r.meta.kind == Kind::Data)
        .partition(|r| r.meta.group == 0 || ignore_groups || closed.contains(&r.meta.group));
    if mutation != Mutation::NoSeqOrder {
        committed.sort_by_key(|r| r.meta.seq);
    }
    (committed, pending)
}

/// Reads `lane` into `bytes` up to `end` (from where `bytes` ends).
fn load_lane<P: Persist>(pm: &P, geo: &Geometry, lane: usize, bytes: &mut Vec<u8>, end: u64) {
    let have = bytes.len();
    if end as usize > have {
        bytes.resize(end as usize, 0);
        pm.read(geo.lane_off(lane) + have as u64, &mut bytes[have..]);
    }
}

/// The header of the intact record at `pos` of a lane whose bytes from its start are
/// `bytes` (read further by `load` as needed): its magic, version and CRC verify, it lies
/// within the lane, and it belongs to lap `lap` (to any lap if `any_lap`).
fn intact_record(
    bytes: &mut Vec<u8>,
    load: &mut dyn FnMut(&mut Vec<u8>, u64),
    pos: u64,
    (lap, any_lap): (u64, bool),
    lane_len: u64,
) -> Option<record::Header> {
    const HEADER: usize = record::HEADER_LEN as usize;
    let start = pos as usize;
    load(bytes, pos + record::HEADER_LEN);
    // A copy: loading the body below may move `bytes`.
    let header: [u8; HEADER] = bytes[start..start + HEADER]
        .try_into()
        .expect("a header's bytes");
    let head = record::decode_header(&header)?;
    let lap_ok = head.meta.lap == lap || any_lap;
    if !lap_ok || pos + record::record_len(head.body_len) > lane_len {
        return None;
    }
    let body = start + HEADER..start + HEADER + head.body_len as usize;
    load(bytes, body.end as u64);
    record::crc_matches(&header, &head, &bytes[body]).then_some(head)
}

/// Appends the valid records of `lane` in lap `lap` (of any lap if `any_lap`, a test's
/// mutant) to `found`, in lane order, with `bytes` holding the lane from its start (read
/// further as needed); returns where the scan stopped: at the first record that is torn,
/// damaged, of another lap, or zeros. Whether it stopped at damage is for
/// [`damage_after`] to tell.
fn scan_lane<P: Persist>(
    pm: &P,
    geo: &Geometry,
    lane: usize,
    lap: (u64, bool),
    bytes: &mut Vec<u8>,
    found: &mut Vec<Scanned>,
) -> u64 {
    let mut load = |bytes: &mut Vec<u8>, end: u64| load_lane(pm, geo, lane, bytes, end);
    let mut pos = 0u64;
    while pos + record::HEADER_LEN <= geo.lane_len {
        let Some(head) = intact_record(bytes, &mut load, pos, lap, geo.lane_len) else {
            break;
        };
        let start = pos as usize + record::HEADER_LEN as usize;
        found.push(Scanned {
            lane,
            meta: head.meta,
            body: start..start + head.body_len as usize,
        });
        pos += record::record_len(head.body_len);
    }
    pos
}

/// `DamagedLog` if an intact record of lap `lap` lies in `lane` after `stop`, where the
/// lane's scan stopped. A lane's records of a lap are written one after the other, each
/// durable (flushed and fenced) before the next is written, and a crash ends the run; so a
/// crash can leave only the lane's last record torn, with nothing of the lap after it. An
/// intact record of the lap after a bad one therefore proves the bad one was complete once:
/// the media was damaged, and replaying around it would lose its section (or apply later
/// sections without it). `rest` is scratch space for the lane's bytes after `stop`.
pub(crate) fn damage_after<P: Persist>(
    pm: &P,
    geo: &Geometry,
    lane: usize,
    lap: u64,
    stop: u64,
    rest: &mut Vec<u8>,
) -> Result<(), NvtError> {
    let from = stop + record::RECORD_ALIGN;
    if from + record::HEADER_LEN > geo.lane_len || lane_ends_at(pm, geo, lane, lap, stop) {
        return Ok(());
    }
    // Overwritten whole by the read: no need to clear what an earlier lane left.
    rest.resize((geo.lane_len - from) as usize, 0);
    pm.read(geo.lane_off(lane) + from, rest);
    let rest_len = rest.len() as u64;
    let mut load = |_: &mut Vec<u8>, _: u64| {};
    let mut pos = 0;
    while pos + record::HEADER_LEN <= rest_len {
        let magic = rest[pos as usize..].starts_with(&record::MAGIC);
        if magic && intact_record(rest, &mut load, pos, (lap, false), rest_len).is_some() {
            return Err(NvtError::DamagedLog {
                lane,
                offset: geo.lane_off(lane) + stop,
                intact: geo.lane_off(lane) + from + pos,
            });
        }
        pos += record::RECORD_ALIGN;
    }
    Ok(())
}

/// Whether `lane` plainly ends at `stop`, where its scan of lap `lap` stopped, so that it
/// need not be read further (a start-up reads only the lanes' used parts): the line there
/// is all zeros (no lap has written that far: the unused lanes and a fresh lane's end), or
/// an intact record of an earlier lap lies there (the usual end of a lane after a
/// checkpoint: a record of the lap written there would have replaced its header line, or,
/// torn, broken its CRC). What it cannot tell from these: damage that zeroes a whole line,
/// or brings back an older record's exact bytes — not a flipped bit.
fn lane_ends_at<P: Persist>(pm: &P, geo: &Geometry, lane: usize, lap: u64, stop: u64) -> bool {
    let at = geo.lane_off(lane) + stop;
    let mut line = [0u8; record::RECORD_ALIGN as usize];
    pm.read(at, &mut line);
    line == [0; record::RECORD_ALIGN as usize] || older_record_at(pm, geo, at, lap, stop)
}

/// Whether an intact record of a lap before `lap` lies at pool offset `at`, lane offset
/// `stop`.
fn older_record_at<P: Persist>(pm: &P, geo: &Geometry, at: u64, lap: u64, stop: u64) -> bool {
    let mut load = |bytes: &mut Vec<u8>, end: u64| {
        let have = bytes.len();
        bytes.resize(end as usize, 0);
        pm.read(at + have as u64, &mut bytes[have..]);
    };
    let head = intact_record(
        &mut Vec::new(),
        &mut load,
        0,
        (lap, true),
        geo.lane_len - stop,
    );
    head.is_some_and(|head| head.meta.lap < lap)
}

/// The geometry of an attached pool; initialises the runtime header first if an earlier
/// creation was interrupted after the pool's own format (nothing can have been logged then).
fn geometry_of<P: Persist>(pool: &Pool<P>) -> Result<Geometry, NvtError> {
    let mut magic = [0u8; 8];
    pool.pm().read(pool.root().offset, &mut magic);
    if magic != [0; 8] {
        return read_geometry(pool);
    }
    let arena = pool.arena();
    let quarter = arena.len / 4;
    let lanes = Config::lanes_for(quarter);
    let unit = u64::from(lanes) * record::RECORD_ALIGN;
    let log_len = quarter / unit * unit;
    let config = Config {
        heap_len: (arena.len - log_len) / PAGE * PAGE,
        log_len,
        lanes,
        base_addr: crate::DEFAULT_BASE_ADDR,
    };
    write_runtime_header(pool, &config)
}

/// Writes the runtime header and the lap word: everything but the magic, flush, fence, then
/// the magic (same line as the rest of the header, so it cannot persist before it).
fn write_runtime_header<P: Persist>(pool: &Pool<P>, config: &Config) -> Result<Geometry, NvtError> {
    config.validate()?;
    let root = pool.root().offset;
    let arena = pool.arena();
    if config.heap_len + config.log_len > arena.len {
        return Err(NvtError::InvalidArgument(format!(
            "heap {} + log {} exceed the arena of {} bytes",
            config.heap_len, config.log_len, arena.len
        )));
    }
    let geo = Geometry {
        heap_off: arena.offset,
        heap_len: config.heap_len,
        log_off: arena.offset + config.heap_len,
        log_len: config.log_len,
        lanes: config.lanes,
        lane_len: config.log_len / u64::from(config.lanes),
        base_addr: config.base_addr,
        lap_word: root + LAP_WORD,
    };
    let header = encode_header(&geo);
    let lap_word = checked::seal(FIRST_LAP, geo.lap_word, LAP_WHAT)?;
    let pm = pool.pm();
    pm.write_u64(geo.lap_word, lap_word, WriteClass::Meta);
    pm.write(root + 8, &header[8..], WriteClass::Meta);
    pm.flush(root, HEADER_LEN);
    pm.flush(geo.lap_word, 8);
    pm.fence();
    pm.write(root, &header[..8], WriteClass::Meta);
    pm.persist(root, 8);
    Ok(geo)
}

#[cfg(test)]
mod tests {
    use super::LineSet;

    #[test]
    fn the_line_set_lists_every_line_and_repeats_only_on_filter_collisions() {
        let mut set = LineSet::default();
        // A ledger's two balances written by thousands of records: listed once each.
        for _ in 0..1000 {
            set.insert(7);
            set.insert(900);
        }
        assert_eq!(set.lines, vec![7, 900]);
        // Lines sharing a filter slot evict each other: listed again, never lost.
        let slots = LineSet::FILTER as u64;
        for line in [3, 3 + slots, 3, 3 + 2 * slots] {
            set.insert(line);
        }
        let mut listed = set.lines.clone();
        listed.sort_unstable();
        listed.dedup();
        assert_eq!(listed, vec![3, 7, 900, 3 + slots, 3 + 2 * slots]);
        assert_eq!(set.lines.len(), 2 + 4);
    }
}
