//! The persistent side of the runtime: a pool holding the heap's home image, a redo log of
//! byte runs, and two checked words (commit epoch and log lap). Pure Rust over the
//! persistence seam, so it runs unchanged on the native backend and on the crash simulator.
//!
//! Protocol (`docs/nvthreads.md` §5):
//! - **append**: encode the runs of one merge as a record tagged (lap `K`, epoch `C + 1`),
//!   write it at the log tail, flush it, fence. It is not yet committed.
//! - **commit** (a global commit point): one 8-byte store of `C + 1` into the commit word,
//!   flush, fence. Every record of epoch `C + 1` is now durable, all or nothing.
//! - **checkpoint** (only with no uncommitted record): replay the lap's records into the home
//!   image, flush, fence, then one 8-byte store of `K + 1` into the lap word. The log is empty
//!   from then on: records of older laps are ignored.
//! - **recovery** = checkpoint, except that the scan stops at the first record that is torn,
//!   of another lap, or of an epoch above `C` (written but never committed).
//!
//! Replay writes absolute bytes and the lap word changes only after the home image is
//! durable, so recovery can be interrupted and rerun any number of times.

#![forbid(unsafe_code)]

use crate::error::NvtError;
use crate::record::{self, Run};
use pmem::checked;
use pmem::{CreateOptions, Persist, Pool, WriteClass};

/// Pool layout name.
pub const LAYOUT: &str = "ferrite-nvthreads";
/// Page size of the heap (the unit of tracking, and of the heap's geometry).
pub const PAGE: u64 = 4096;
/// Runtime header magic.
pub const MAGIC: [u8; 8] = *b"NVTHRDS1";
/// Runtime format version: 2 since the commit and lap words are `pmem::checked` words (CRC
/// of value then offset; version 1 hashed offset then value).
pub const VERSION: u32 = 2;
/// Runtime header length (one cache line).
pub const HEADER_LEN: u64 = 64;
/// Offset of the commit word from the start of the root region.
pub const COMMIT_WORD: u64 = 64;
/// Offset of the lap word from the start of the root region.
pub const LAP_WORD: u64 = 128;
/// The commit word, as its errors name it.
const COMMIT_WHAT: &str = "commit word";
/// The lap word, as its errors name it.
const LAP_WHAT: &str = "lap word";
/// The first lap of a fresh pool.
pub const FIRST_LAP: u64 = 1;

/// Sizes of a new pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Heap size in bytes (a multiple of [`PAGE`]).
    pub heap_len: u64,
    /// Log size in bytes (a multiple of 64).
    pub log_len: u64,
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

    fn validate(&self) -> Result<(), NvtError> {
        let bad = |what: String| Err(NvtError::InvalidArgument(what));
        if self.heap_len < 2 * PAGE || !self.heap_len.is_multiple_of(PAGE) {
            return bad(format!(
                "heap size {} is not ≥ 8 KiB and page-aligned",
                self.heap_len
            ));
        }
        if self.log_len < 1024 || !self.log_len.is_multiple_of(record::RECORD_ALIGN) {
            return bad(format!(
                "log size {} is not ≥ 1 KiB and 64-aligned",
                self.log_len
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
    /// Fixed virtual address of the heap.
    pub base_addr: u64,
    /// The commit word.
    pub commit_word: u64,
    /// The lap word.
    pub lap_word: u64,
}

/// The volatile state of the log, kept by the caller (the runtime keeps it in memory shared
/// by all its processes and changes it only while holding the commit token).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JournalState {
    /// Last committed epoch `C` (mirror of the commit word).
    pub committed: u64,
    /// Current lap `K` (mirror of the lap word).
    pub lap: u64,
    /// Log bytes used in this lap.
    pub tail: u64,
    /// Records appended since the last commit.
    pub pending: u64,
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
    /// Valid records skipped because their epoch was never committed.
    pub uncommitted: u64,
}

/// A deliberate bug, for proving that the crash tests can fail. Always `None` outside tests.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// The correct protocol.
    #[default]
    None,
    /// Records are fenced but never flushed before the commit word.
    NoLogFlush,
    /// Every record is committed on its own (an open section's merge becomes durable before
    /// the section ends).
    CommitPerRecord,
    /// The checkpoint advances the lap before the home image is durable.
    EarlyLapBump,
    /// Recovery accepts records of any lap.
    NoLapCheck,
    /// Compaction rewrites the pending records over the old lap before advancing the lap, so
    /// a crash in between can leave an older committed record valid in front of torn ones.
    CompactBeforeLapBump,
}

impl Mutation {
    /// Every mutant.
    pub const MUTANTS: [Mutation; 5] = [
        Mutation::NoLogFlush,
        Mutation::CommitPerRecord,
        Mutation::EarlyLapBump,
        Mutation::NoLapCheck,
        Mutation::CompactBeforeLapBump,
    ];
}

/// An open NVthreads pool.
#[derive(Debug)]
pub struct Journal<P: Persist> {
    pool: Pool<P>,
    geo: Geometry,
    mutation: Mutation,
    /// Called after every fence of append, commit, checkpoint and recovery (the runtime's
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
        let state = JournalState {
            committed: 0,
            lap: FIRST_LAP,
            tail: 0,
            pending: 0,
        };
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

    fn recover(&self) -> Result<(JournalState, Recovery), NvtError> {
        let pm = self.pool.pm();
        let (commit_word, lap_word) = (self.geo.commit_word, self.geo.lap_word);
        let mut state = JournalState {
            committed: checked::open(pm.read_u64(commit_word), commit_word, COMMIT_WHAT)?,
            lap: checked::open(pm.read_u64(lap_word), lap_word, LAP_WHAT)?,
            tail: 0,
            pending: 0,
        };
        let mut recovery = self.replay_lap(&mut state, true)?;
        recovery.was_clean = self.pool.was_clean();
        Ok((state, recovery))
    }

    /// Writes the runtime header and the two words on a freshly formatted pool.
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

    /// Runs `hook` after every later fence of append, commit, checkpoint and recovery.
    pub fn set_fence_hook(&mut self, hook: Option<fn()>) {
        self.fence_hook = hook;
    }

    fn fenced(&self) {
        if let Some(hook) = self.fence_hook {
            hook();
        }
    }

    /// Whether the injected bug is `mutation`.
    fn mutated(&self, mutation: Mutation) -> bool {
        self.mutation == mutation
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

    /// Appends one record holding `runs` for epoch `committed + 1`, durable (flushed and
    /// fenced) on return but not committed. When the record does not fit, makes room first:
    /// a checkpoint when nothing is pending, else a compaction (the pending records move to
    /// the start of a new lap). `LogFull` only if the pending records and this one together
    /// exceed the log. Returns the record's size.
    pub fn append(&self, state: &mut JournalState, runs: &[Run<'_>]) -> Result<u64, NvtError> {
        let len = record::record_len(record::body_len(runs));
        if state.tail + len > self.geo.log_len && len <= self.geo.log_len {
            if state.pending == 0 {
                self.checkpoint(state)?;
            } else {
                self.compact(state)?;
            }
        }
        if state.tail + len > self.geo.log_len {
            return Err(NvtError::LogFull {
                needed: len,
                free: self.geo.log_len - state.tail,
                pending: state.pending,
            });
        }
        let bytes = record::encode(state.lap, state.committed + 1, runs);
        debug_assert_eq!(bytes.len() as u64, len);
        let pm = self.pool.pm();
        let at = self.geo.log_off + state.tail;
        pm.write(at, &bytes, WriteClass::Log);
        if !self.mutated(Mutation::NoLogFlush) {
            pm.flush(at, len);
        }
        pm.fence();
        self.fenced();
        state.tail += len;
        state.pending += 1;
        if self.mutated(Mutation::CommitPerRecord) {
            self.commit(state)?;
        }
        Ok(len)
    }

    /// The global commit point: if records are pending, flips the commit word to the next
    /// epoch (one failure-atomic 8-byte store, persisted) and declares the durability point.
    /// Returns whether an epoch was committed; an epoch past the 48 bits of the commit word
    /// is refused (`Checked`) and nothing is written.
    pub fn commit(&self, state: &mut JournalState) -> Result<bool, NvtError> {
        if state.pending == 0 {
            return Ok(false);
        }
        let next = state.committed + 1;
        let sealed = checked::seal(next, self.geo.commit_word, COMMIT_WHAT)?;
        let pm = self.pool.pm();
        pm.write_u64(self.geo.commit_word, sealed, WriteClass::Log);
        pm.persist(self.geo.commit_word, 8);
        self.fenced();
        pm.durability_point();
        state.committed = next;
        state.pending = 0;
        Ok(true)
    }

    /// Checkpoints when nothing is pending and more than half the log is used.
    pub fn maybe_checkpoint(&self, state: &mut JournalState) -> Result<bool, NvtError> {
        if state.pending != 0 || state.tail <= self.geo.log_len / 2 {
            return Ok(false);
        }
        self.checkpoint(state)?;
        Ok(true)
    }

    /// Replays the lap into the home image and starts a new lap. Nothing may be pending.
    pub fn checkpoint(&self, state: &mut JournalState) -> Result<u64, NvtError> {
        assert_eq!(state.pending, 0, "checkpoint with uncommitted records");
        Ok(self.replay_lap(state, false)?.records)
    }

    /// Makes room while records are pending (a section is open elsewhere, so no checkpoint
    /// is allowed): replays the lap's committed records into the home image (fence), advances
    /// the lap (persisted: from here on the old lap, its pending records included, is
    /// ignored, which loses nothing a crash could not lose anyway, since they are
    /// uncommitted), then writes the pending records again at the start of the new lap,
    /// flushed and fenced. The commit word is untouched: the moved records keep their epoch
    /// `C + 1` and commit with the next flip.
    ///
    /// Advancing the lap before overwriting the old lap's start matters: a crash while the
    /// moved records are written could otherwise leave an old committed record intact in
    /// front of torn ones, and recovery would replay it over newer bytes
    /// ([`Mutation::CompactBeforeLapBump`]).
    pub fn compact(&self, state: &mut JournalState) -> Result<(), NvtError> {
        let mut pos = 0u64;
        let mut last_epoch = 0u64;
        let mut pending: Vec<Vec<u8>> = Vec::new();
        while let Some((head, body)) = self.read_record(pos, state.lap) {
            if head.epoch > state.committed {
                if head.epoch != state.committed + 1 {
                    return Err(NvtError::Corrupted(format!(
                        "pending record at log offset {pos} has epoch {}, expected {}",
                        head.epoch,
                        state.committed + 1
                    )));
                }
                pending.push(body);
            } else {
                if !pending.is_empty() || head.epoch < last_epoch {
                    return Err(NvtError::Corrupted(format!(
                        "committed record at log offset {pos} (epoch {}) out of order",
                        head.epoch
                    )));
                }
                last_epoch = head.epoch;
                self.apply_record(&body)?;
            }
            pos += record::record_len(head.body_len);
        }
        if pos != state.tail || pending.len() as u64 != state.pending {
            return Err(NvtError::Corrupted(format!(
                "log scan ends at {pos} with {} pending records; expected {} and {}",
                pending.len(),
                state.tail,
                state.pending
            )));
        }
        let pm = self.pool.pm();
        pm.fence();
        self.fenced();
        let next_lap = state.lap + 1;
        if !self.mutated(Mutation::CompactBeforeLapBump) {
            self.write_lap(next_lap)?;
        }
        state.lap = next_lap;
        state.tail = 0;
        for body in &pending {
            let bytes = record::encode_with_body(next_lap, state.committed + 1, body);
            let at = self.geo.log_off + state.tail;
            pm.write(at, &bytes, WriteClass::Log);
            pm.flush(at, bytes.len() as u64);
            state.tail += bytes.len() as u64;
        }
        pm.fence();
        self.fenced();
        if self.mutated(Mutation::CompactBeforeLapBump) {
            self.write_lap(next_lap)?;
        }
        Ok(())
    }

    /// Zeroes `len` bytes of the home image at heap offset `offset` and makes them durable
    /// (flush, fence). Only with nothing pending and after a checkpoint, so that no record
    /// of the lap can write there again (the runtime clears another executable's globals).
    pub fn clear_home(&self, offset: u64, len: u64) {
        assert!(offset + len <= self.geo.heap_len, "clearing past the heap");
        let pm = self.pool.pm();
        let at = self.geo.heap_off + offset;
        pm.fill(at, len, 0, WriteClass::User);
        pm.flush(at, len);
        pm.fence();
        self.fenced();
    }

    /// Writes a record's runs into the home image and flushes them (no fence).
    fn apply_record(&self, body: &[u8]) -> Result<u64, NvtError> {
        let pm = self.pool.pm();
        let mut bytes = 0;
        for run in record::parse_body(body, self.geo.heap_len)? {
            let at = self.geo.heap_off + run.offset;
            pm.write(at, run.bytes, WriteClass::User);
            pm.flush(at, run.bytes.len() as u64);
            bytes += run.bytes.len() as u64;
        }
        Ok(bytes)
    }

    /// Replays the committed records of the current lap into the home image, makes them
    /// durable, then advances the lap (an empty log). `recovering` only changes what a
    /// record above the commit epoch means: garbage of a crashed run, or a bug.
    fn replay_lap(&self, state: &mut JournalState, recovering: bool) -> Result<Recovery, NvtError> {
        let pm = self.pool.pm();
        let next_lap = state.lap + 1;
        if self.mutated(Mutation::EarlyLapBump) {
            self.write_lap(next_lap)?;
        }
        let mut recovery = Recovery::default();
        let mut pos = 0u64;
        let mut last_epoch = 0u64;
        while let Some((head, body)) = self.read_record(pos, state.lap) {
            let len = record::record_len(head.body_len);
            if head.epoch > state.committed {
                if !recovering {
                    return Err(NvtError::Corrupted(format!(
                        "record at log offset {pos} has epoch {} above the committed {}",
                        head.epoch, state.committed
                    )));
                }
                recovery.uncommitted += 1;
                break;
            }
            if head.epoch < last_epoch {
                return Err(NvtError::Corrupted(format!(
                    "record at log offset {pos} has epoch {} after epoch {last_epoch}",
                    head.epoch
                )));
            }
            last_epoch = head.epoch;
            recovery.bytes += self.apply_record(&body)?;
            recovery.records += 1;
            pos += len;
        }
        pm.fence();
        self.fenced();
        if !self.mutated(Mutation::EarlyLapBump) {
            self.write_lap(next_lap)?;
        }
        state.lap = next_lap;
        state.tail = 0;
        Ok(recovery)
    }

    fn write_lap(&self, lap: u64) -> Result<(), NvtError> {
        let sealed = checked::seal(lap, self.geo.lap_word, LAP_WHAT)?;
        let pm = self.pool.pm();
        pm.write_u64(self.geo.lap_word, sealed, WriteClass::Meta);
        pm.persist(self.geo.lap_word, 8);
        self.fenced();
        Ok(())
    }

    /// The record at log offset `pos` if it is a whole record of lap `lap` (CRC-valid);
    /// `None` for the end of the lap (zeros, a torn record, another lap, no room).
    fn read_record(&self, pos: u64, lap: u64) -> Option<(record::Header, Vec<u8>)> {
        if pos + record::HEADER_LEN > self.geo.log_len {
            return None;
        }
        let pm = self.pool.pm();
        let mut header = [0u8; record::HEADER_LEN as usize];
        pm.read(self.geo.log_off + pos, &mut header);
        let head = record::decode_header(&header)?;
        let lap_ok = head.lap == lap || self.mutated(Mutation::NoLapCheck);
        if !lap_ok || pos + record::record_len(head.body_len) > self.geo.log_len {
            return None;
        }
        let mut body = vec![0u8; head.body_len as usize];
        pm.read(self.geo.log_off + pos + record::HEADER_LEN, &mut body);
        record::crc_matches(&header, &head, &body).then_some((head, body))
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
    out[56..60].copy_from_slice(&(PAGE as u32).to_le_bytes());
    let crc = crc32fast::hash(&out[..60]);
    out[60..64].copy_from_slice(&crc.to_le_bytes());
    out
}

fn read_geometry<P: Persist>(pool: &Pool<P>) -> Result<Geometry, NvtError> {
    let root = pool.root().offset;
    let mut bytes = [0u8; HEADER_LEN as usize];
    pool.pm().read(root, &mut bytes);
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
    let geo = Geometry {
        heap_off: u64_at(16),
        heap_len: u64_at(24),
        log_off: u64_at(32),
        log_len: u64_at(40),
        base_addr: u64_at(48),
        commit_word: root + COMMIT_WORD,
        lap_word: root + LAP_WORD,
    };
    let arena = pool.arena();
    let heap_ok = arena.contains(geo.heap_off, geo.heap_len) && geo.heap_len.is_multiple_of(PAGE);
    let log_ok =
        arena.contains(geo.log_off, geo.log_len) && geo.log_off >= geo.heap_off + geo.heap_len;
    if !heap_ok || !log_ok || u64::from(u32_at(56)) != PAGE || !geo.base_addr.is_multiple_of(PAGE) {
        return Err(NvtError::Corrupted(format!(
            "runtime header geometry {geo:?}"
        )));
    }
    Ok(geo)
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
    let log_len = (arena.len / 4 / record::RECORD_ALIGN) * record::RECORD_ALIGN;
    let config = Config {
        heap_len: (arena.len - log_len) / PAGE * PAGE,
        log_len,
        base_addr: crate::DEFAULT_BASE_ADDR,
    };
    write_runtime_header(pool, &config)
}

/// Writes the runtime header and the two words: everything but the magic, flush, fence, then
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
        base_addr: config.base_addr,
        commit_word: root + COMMIT_WORD,
        lap_word: root + LAP_WORD,
    };
    let header = encode_header(&geo);
    let pm = pool.pm();
    let commit_word = checked::seal(0, geo.commit_word, COMMIT_WHAT)?;
    let lap_word = checked::seal(FIRST_LAP, geo.lap_word, LAP_WHAT)?;
    pm.write_u64(geo.commit_word, commit_word, WriteClass::Meta);
    pm.write_u64(geo.lap_word, lap_word, WriteClass::Meta);
    pm.write(root + 8, &header[8..], WriteClass::Meta);
    pm.flush(root, HEADER_LEN);
    pm.flush(geo.commit_word, 8);
    pm.flush(geo.lap_word, 8);
    pm.fence();
    pm.write(root, &header[..8], WriteClass::Meta);
    pm.persist(root, 8);
    Ok(geo)
}
