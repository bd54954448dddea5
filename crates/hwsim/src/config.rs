//! Simulator configuration. Defaults follow the Silo paper's Table II where it is known
//! (8 cores at 2 GHz, L1D 32 KB/8-way/4 cycles, L2 256 KB/8-way/12 cycles, LLC 8 MB/16-way/28
//! cycles, FR-FCFS MC with a 64-entry ADR write queue, PCM 50/150 ns, 680 B/20-entry log buffer
//! with an 8-cycle access); the rest are documented assumptions (see `docs/hwsim.md`).

use serde::{Deserialize, Serialize};

/// Cache line size in bytes (fixed: every structure of the model is built on 64 B lines).
pub const LINE_BYTES: u64 = 64;

/// The whole machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Simulated cores (1..=64). A trace must have at least this many streams; extra streams
    /// are ignored.
    pub cores: usize,
    /// Core clock in GHz; every latency is kept in cycles of this clock.
    pub freq_ghz: f64,
    /// The simple core.
    pub core: CoreConfig,
    /// Private L1 data cache.
    pub l1: CacheConfig,
    /// Private L2.
    pub l2: CacheConfig,
    /// Shared last-level cache.
    pub llc: CacheConfig,
    /// One-way on-chip latency (cycles) between a core and the memory controller for traffic
    /// that bypasses the caches (log entries, log writes, flushes, write-backs leaving the LLC).
    pub path_cycles: u64,
    /// Memory controller, PCM and on-PM buffer.
    pub mem: MemConfig,
    /// Silo's structures.
    pub silo: SiloConfig,
    /// The Base design's parameters.
    pub base: BaseConfig,
    /// FWB's parameters.
    pub fwb: FwbConfig,
    /// MorLog's parameters.
    pub morlog: MorLogConfig,
    /// LAD's parameters.
    pub lad: LadConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cores: 8,
            freq_ghz: 2.0,
            core: CoreConfig::default(),
            l1: CacheConfig {
                size_bytes: 32 << 10,
                ways: 8,
                latency: 4,
            },
            l2: CacheConfig {
                size_bytes: 256 << 10,
                ways: 8,
                latency: 12,
            },
            llc: CacheConfig {
                size_bytes: 8 << 20,
                ways: 16,
                latency: 28,
            },
            path_cycles: 32,
            mem: MemConfig::default(),
            silo: SiloConfig::default(),
            base: BaseConfig::default(),
            fwb: FwbConfig::default(),
            morlog: MorLogConfig::default(),
            lad: LadConfig::default(),
        }
    }
}

/// The in-order core.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CoreConfig {
    /// Cycles per `Compute` instruction.
    pub cpi: u64,
    /// Loads that may be outstanding at once (1 = blocking loads).
    pub mlp: usize,
    /// Store-buffer entries; stores retire into it and drain to the L1 in order.
    pub store_buffer: usize,
    /// Dirty LLC victims a core may have waiting for the memory controller's write queue
    /// before it stalls (the write-back buffer).
    pub writeback_buffer: usize,
}

impl Default for CoreConfig {
    fn default() -> Self {
        CoreConfig {
            cpi: 1,
            mlp: 1,
            store_buffer: 32,
            writeback_buffer: 16,
        }
    }
}

/// One cache level (64 B lines, write-back, write-allocate, LRU).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    /// Capacity in bytes.
    pub size_bytes: u64,
    /// Associativity.
    pub ways: usize,
    /// Access latency in cycles (added to the latencies of the levels above on a miss there).
    pub latency: u64,
}

impl CacheConfig {
    /// Number of sets.
    pub fn sets(&self) -> usize {
        (self.size_bytes / LINE_BYTES) as usize / self.ways.max(1)
    }
}

/// Memory controller, PCM and the on-PM buffer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemConfig {
    /// Write-queue entries (inside the ADR persistence domain).
    pub write_queue: usize,
    /// Read-queue entries (reads waiting for their bank; exceeding it only counts an event).
    pub read_queue: usize,
    /// Write-drain high watermark: at this occupancy the MC switches to draining writes.
    pub drain_high: usize,
    /// Write-drain low watermark: draining stops at this occupancy.
    pub drain_low: usize,
    /// PCM banks (256 B-line interleaved). 4: NVMain's PCM configuration
    /// (`PCM_ISSCC_2012_4GB.config`: 1 channel, 1 rank, 4 banks; its capacity grows with the
    /// rows, so the paper's 16 GB keeps 4 banks), the simulator the paper used with gem5.
    pub banks: usize,
    /// Media read latency (ns) per access.
    pub read_ns: f64,
    /// Media write (programming) time (ns): one write pulse (see [`MediaModel`] for what
    /// it is charged per).
    pub write_ns: f64,
    /// Data-bus time (ns) per 64 B transferred (800 MHz DDR, 64-bit: 5 ns).
    pub burst_ns: f64,
    /// On-PM buffer lines (0 = no buffer: every request is written to the media at once).
    pub onpm_lines: usize,
    /// On-PM buffer line in bytes: 256 like an Optane XPLine.
    pub onpm_line_bytes: u64,
    /// Whether the baselines (Base, FWB, MorLog, LAD) write through the on-PM buffer too.
    /// Off in the paper-faithful configuration: Silo (HPCA'23, §III-E) presents coalescing
    /// in-place updates and evictions in a 256 B on-PM buffer as part of Silo's design, and
    /// its baselines are the published designs, none of which has it. On, the buffer also
    /// merges the baselines' sequential log appends and line writes. Silo and Ideal (the
    /// upper bound) always have it.
    pub baselines_use_onpm_buffer: bool,
    /// How long a media write holds its bank (see [`MediaModel`]).
    pub media: MediaModel,
    /// The write queue merges a write into a queued, not yet issued write of the same 64 B
    /// block (one entry, one bus burst), as gem5's memory controller does for writes to a
    /// queued burst and as Silo's Fig. 9 case 2 does for an in-place update meeting an
    /// eviction of its line. A write still needs a free entry to be accepted.
    pub merge_writes: bool,
    /// FR-FCFS with write-drain watermarks (NVMain's FRFCFS-WQF, gem5's write mode): once
    /// the write queue reaches `drain_high`, the controller issues only writes until it is
    /// down to `drain_low`, and a read miss arriving meanwhile waits for the drain to end
    /// (unless a queued write or the on-PM buffer holds its line). `false`: reads are never
    /// held by a drain (they only wait for their bank).
    pub reads_wait_for_drain: bool,
    /// Write pausing (Qureshi et al., HPCA'10): a read that finds its bank programming a
    /// media write pauses it, is served, and the write resumes (its end moves by the read's
    /// time); reads are not held by write drains either. Off in the paper-faithful
    /// configuration: NVMain's FRFCFS-WQF scheduler, which the paper used, has no pausing.
    pub write_pausing: bool,
    /// At the end of a run, every line still dirty in the caches is written back and
    /// charged to the write traffic and the media work (the caches of a finished run still
    /// owe PM their data; designs that clean lines at commit, LAD and Base, paid it during
    /// the run). Throughput is not affected: it is measured to the last commit.
    pub final_drain: bool,
}

/// How a media write (an on-PM-buffer line leaving for the PCM cells, or a request when
/// there is no buffer) holds its bank. PM write *bytes programmed* are counted the same way
/// in every model: the 8 B words whose data differs from the cells (bit-level write
/// reduction, which the paper's slides invoke for an eviction after in-place updates: "CE
/// will not write twice").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MediaModel {
    /// NVMain's stock PCM timing (`PCM_ISSCC_2012_4GB.config`, the simulator the paper ran
    /// with gem5): a write to the cells costs one write pulse `write_ns` per request —
    /// here per 256 B row leaving the on-PM buffer, or per request without a buffer —
    /// whatever its size and data, with no comparison read. The paper-faithful default.
    NvmainRow,
    /// Per 64 B block with data-comparison writes (Yang et al., ISCAS'07; Zhou et al.,
    /// ISCA'09): every media write first reads the row (`read_ns`), then programs each 64 B
    /// block holding a changed word for `write_ns`; blocks that only repeat the cells' data
    /// cost nothing more.
    BlockDcw,
    /// Programming time proportional to the bytes written, no comparison read: `write_ns`
    /// per 64 B of written words (8 B granules), as a PCM whose program bandwidth is
    /// power-limited would take (NVMain's PCM configuration is built on a PRAM chip of
    /// 40 MB/s program bandwidth): an 8 B in-place update costs an eighth of a line.
    Proportional,
}

impl MediaModel {
    /// Every model, the paper-faithful one first.
    pub const ALL: [MediaModel; 3] = [
        MediaModel::NvmainRow,
        MediaModel::BlockDcw,
        MediaModel::Proportional,
    ];

    /// Its name in configurations and reports.
    pub fn name(self) -> &'static str {
        match self {
            MediaModel::NvmainRow => "nvmain-row",
            MediaModel::BlockDcw => "block-dcw",
            MediaModel::Proportional => "proportional",
        }
    }

    /// Parses [`MediaModel::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
}

impl Default for MemConfig {
    fn default() -> Self {
        MemConfig {
            write_queue: 64,
            read_queue: 64,
            drain_high: 48,
            drain_low: 16,
            banks: 4,
            read_ns: 50.0,
            write_ns: 150.0,
            burst_ns: 5.0,
            onpm_lines: 64,
            onpm_line_bytes: 256,
            baselines_use_onpm_buffer: false,
            media: MediaModel::NvmainRow,
            merge_writes: true,
            reads_wait_for_drain: true,
            write_pausing: false,
            final_drain: true,
        }
    }
}

/// Silo's log buffer and log region.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SiloConfig {
    /// Log-buffer entries per core.
    pub entries: usize,
    /// Bytes per entry slot (680 B / 20 in the paper; only reported).
    pub entry_bytes: u64,
    /// Log-buffer access latency in cycles (the paper sweeps 8..=128).
    pub buffer_latency: u64,
    /// Undo record size written on overflow or failure (metadata + old word).
    pub undo_record_bytes: u64,
    /// Redo record size written on failure (metadata + new word).
    pub redo_record_bytes: u64,
    /// Bytes of one overflow batch write (one on-PM-buffer line).
    pub batch_bytes: u64,
    /// Not in the paper (off by default): the log controller merges the queued in-place
    /// updates of one 64 B line into one masked write (one bus burst instead of one per word).
    pub coalesce_lus: bool,
}

impl Default for SiloConfig {
    fn default() -> Self {
        SiloConfig {
            entries: 20,
            entry_bytes: 34,
            buffer_latency: 8,
            undo_record_bytes: 18,
            redo_record_bytes: 18,
            batch_bytes: 256,
            coalesce_lus: false,
        }
    }
}

impl SiloConfig {
    /// Undo records per overflow batch (⌊256 / 18⌋ = 14).
    pub fn records_per_batch(&self) -> usize {
        (self.batch_bytes / self.undo_record_bytes.max(1)).max(1) as usize
    }
}

/// The Base design.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BaseConfig {
    /// Bytes of one undo+redo log record (tid, txid, address, old word, new word, padded).
    pub record_bytes: u64,
}

impl Default for BaseConfig {
    fn default() -> Self {
        BaseConfig { record_bytes: 32 }
    }
}

/// FWB ("steal but no force", HPCA'18): per-store undo+redo records through a small log
/// buffer into a circular PM log, with force-write-back scans so the log can wrap.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FwbConfig {
    /// Log-buffer entries per core (records not yet accepted by the MC); ≈15 [unverified].
    pub log_buffer: usize,
    /// Bytes of one undo+redo record (torn bit, tid, txid, address, old and new word: ≈26 B,
    /// padded to 32).
    pub record_bytes: u64,
    /// Records packed into one log write (2 × 32 B = one 64 B line write).
    pub records_per_write: usize,
    /// Bytes of each core's circular PM log; a force-write-back scan starts when half of it
    /// holds live records, and stores stall when it is full.
    pub log_bytes: u64,
}

impl Default for FwbConfig {
    fn default() -> Self {
        FwbConfig {
            log_buffer: 15,
            record_bytes: 32,
            records_per_write: 2,
            log_bytes: 1 << 20,
        }
    }
}

/// MorLog (ISCA'20): one eager undo+redo entry for the first store to a word, the newest redo
/// of words stored again kept in a volatile redo buffer until commit, selective log-data
/// encoding.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MorLogConfig {
    /// Undo coalescing window in cycles (MorLog waits the minimum L1→NVM traversal time
    /// before writing an undo record); 0 = l1 + l2 + llc latencies + the on-chip path.
    pub undo_window: u64,
    /// Redo-buffer entries per core (words whose newest redo is held on chip); when it is
    /// full the oldest redo entry is written to the log early.
    pub redo_buffer: usize,
    /// Mixed log-buffer entries per core (records not yet accepted by the MC).
    pub log_buffer: usize,
    /// Per-record metadata bytes (address 6 B, tid + txid 3 B, DLDC dirty-byte mask 1 B).
    pub meta_bytes: u64,
    /// How a record's data parts are encoded.
    pub encoding: LogEncoding,
    /// Log writes carry at most this many bytes (records are packed).
    pub write_bytes: u64,
    /// Bytes of each core's circular PM log (force-write-back scan at half, stall when full).
    pub log_bytes: u64,
}

impl Default for MorLogConfig {
    fn default() -> Self {
        MorLogConfig {
            undo_window: 0,
            redo_buffer: 32,
            log_buffer: 16,
            meta_bytes: 10,
            encoding: LogEncoding::Slde,
            write_bytes: 64,
            log_bytes: 1 << 20,
        }
    }
}

/// MorLog's encoding of a record's data (ISCA'20, §4: selective log data encoding).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogEncoding {
    /// Differential log data compression: only the bytes that changed.
    Dldc,
    /// DLDC or frequent-pattern compression of the word, whichever is smaller (MorLog runs
    /// both and keeps the smaller).
    Slde,
}

/// LAD (MICRO'19): speculative lines staged in the MC's persistent write queue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LadConfig {
    /// Most write-queue entries speculative lines may hold at once (the rest stays for
    /// normal writes, so overflow logging can always make progress); more → undo logging.
    pub spec_limit: usize,
    /// Cycles between two tx-dirty lines leaving the L1 in the commit walk (pipelined).
    pub issue_interval: u64,
    /// Bytes of one overflow undo record (old 64 B line + 8 B metadata).
    pub undo_record_bytes: u64,
}

impl Default for LadConfig {
    fn default() -> Self {
        LadConfig {
            spec_limit: 48,
            issue_interval: 1,
            undo_record_bytes: 72,
        }
    }
}

/// Largest latency in cycles a configuration may give (a millisecond at 1 GHz).
pub const MAX_LATENCY_CYCLES: u64 = 1_000_000;
/// Largest core clock a configuration may give, GHz.
pub const MAX_FREQ_GHZ: f64 = 100.0;
/// Largest media latency in nanoseconds.
pub const MAX_LATENCY_NS: f64 = 1_000_000.0;
/// Largest cache a configuration may give (1 GiB).
pub const MAX_CACHE_BYTES: u64 = 1 << 30;
/// Largest queue, buffer or on-PM buffer a configuration may give, in entries.
pub const MAX_ENTRIES: u64 = 1 << 20;

fn at_most(name: &str, value: u64, max: u64, unit: &str) -> Result<(), ConfigError> {
    if value <= max {
        Ok(())
    } else {
        Err(ConfigError::Invalid(format!(
            "{name} = {value} (at most {max} {unit})"
        )))
    }
}

/// Why a configuration cannot be simulated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// A value is out of range.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl Config {
    /// Checks the ranges the model relies on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if !(1..=64).contains(&self.cores) {
            return bad(format!("cores = {} (1..=64)", self.cores));
        }
        // Above the bound, nanosecond times convert to cycle counts that wrap the simulated
        // clock (1e300 GHz printed a PCM bus busy 10^16 % of the time).
        if !(self.freq_ghz > 0.0 && self.freq_ghz <= MAX_FREQ_GHZ) {
            return bad(format!(
                "freq_ghz = {:?} (above 0, at most {MAX_FREQ_GHZ} GHz)",
                self.freq_ghz
            ));
        }
        for (name, c) in [("l1", &self.l1), ("l2", &self.l2), ("llc", &self.llc)] {
            // `sets()` divides by at least 1 way, so name a zero associativity itself.
            if c.ways == 0 {
                return bad(format!("{name}: ways must be ≥ 1"));
            }
            let sets = c.sets();
            if sets == 0 || !sets.is_power_of_two() {
                return bad(format!("{name}: sets = {sets} must be a power of two ≥ 1"));
            }
            if c.ways > crate::cache::MAX_WAYS {
                return bad(format!("{name}: at most {} ways", crate::cache::MAX_WAYS));
            }
            // The cache holds `sets × ways` lines: a size that is not such a product was
            // silently rounded down (a 1000 B L1 simulated as 512 B under its given size).
            let modelled = sets as u64 * c.ways as u64 * LINE_BYTES;
            if modelled != c.size_bytes {
                return bad(format!(
                    "{name}: size_bytes = {} is not sets × ways × {LINE_BYTES} B with a power-of-two \
                     number of sets ({} ways: the nearest the model holds is {modelled} B)",
                    c.size_bytes, c.ways
                ));
            }
        }
        if self.core.store_buffer == 0 || self.core.mlp == 0 || self.core.writeback_buffer == 0 {
            return bad("store_buffer, mlp and writeback_buffer must be ≥ 1".into());
        }
        let m = &self.mem;
        // A read queue of 0 would count every read that waits for its bank as an overflow.
        if m.write_queue == 0 || m.read_queue == 0 || !(1..=64).contains(&m.banks) {
            return bad("mem: write_queue and read_queue must be ≥ 1 and banks in 1..=64".into());
        }
        if m.drain_low >= m.drain_high || m.drain_high > m.write_queue {
            return bad("need drain_low < drain_high ≤ write_queue".into());
        }
        if m.onpm_line_bytes != 256 {
            return bad("onpm_line_bytes must be 256 (word masks are 32 bits)".into());
        }
        self.validate_silo()?;
        self.validate_magnitudes()?;
        self.validate_baselines()
    }

    /// Upper bounds on latencies and on the sizes the model allocates: the timing model adds
    /// cycles in plain `u64` arithmetic and sizes its structures from these values, so a
    /// huge latency would wrap the clock and a huge queue or cache would abort the process
    /// on allocation. The bounds are far above any machine the model describes.
    fn validate_magnitudes(&self) -> Result<(), ConfigError> {
        let cycles = [
            ("core.cpi", self.core.cpi),
            ("l1.latency", self.l1.latency),
            ("l2.latency", self.l2.latency),
            ("llc.latency", self.llc.latency),
            ("path_cycles", self.path_cycles),
            ("silo.buffer_latency", self.silo.buffer_latency),
            ("morlog.undo_window", self.morlog.undo_window),
            ("lad.issue_interval", self.lad.issue_interval),
        ];
        for (name, value) in cycles {
            at_most(name, value, MAX_LATENCY_CYCLES, "cycles")?;
        }
        let m = &self.mem;
        for (name, ns) in [
            ("mem.read_ns", m.read_ns),
            ("mem.write_ns", m.write_ns),
            ("mem.burst_ns", m.burst_ns),
        ] {
            if !(0.0..=MAX_LATENCY_NS).contains(&ns) {
                // `{:?}`: 1e300 as itself, not as its 301 digits.
                return Err(ConfigError::Invalid(format!(
                    "{name} = {ns:?} (0..={MAX_LATENCY_NS} ns)"
                )));
            }
        }
        for (name, c) in [("l1", &self.l1), ("l2", &self.l2), ("llc", &self.llc)] {
            at_most(name, c.size_bytes, MAX_CACHE_BYTES, "bytes")?;
        }
        let entries = [
            ("core.mlp", self.core.mlp),
            ("core.store_buffer", self.core.store_buffer),
            ("core.writeback_buffer", self.core.writeback_buffer),
            ("mem.write_queue", m.write_queue),
            ("mem.read_queue", m.read_queue),
            ("mem.onpm_lines", m.onpm_lines),
            ("silo.entries", self.silo.entries),
            ("fwb.log_buffer", self.fwb.log_buffer),
            ("morlog.redo_buffer", self.morlog.redo_buffer),
            ("morlog.log_buffer", self.morlog.log_buffer),
            ("lad.spec_limit", self.lad.spec_limit),
        ];
        for (name, value) in entries {
            at_most(name, value as u64, MAX_ENTRIES, "entries")?;
        }
        Ok(())
    }

    /// Silo's log buffer and the sizes its log writes are made of: a zero size would make
    /// its overflow and failure writes cost nothing, and an overflow batch is one on-PM
    /// buffer line that holds at least one undo record.
    fn validate_silo(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_string()));
        let s = &self.silo;
        if s.entries == 0 || s.entry_bytes == 0 {
            return bad("silo.entries and silo.entry_bytes must be ≥ 1");
        }
        if s.undo_record_bytes == 0 || s.redo_record_bytes == 0 {
            return bad("silo.undo_record_bytes and silo.redo_record_bytes must be ≥ 1");
        }
        if !(s.undo_record_bytes..=256).contains(&s.batch_bytes) {
            return bad("silo.batch_bytes must hold one undo record and fit a 256 B line");
        }
        Ok(())
    }

    fn validate_baselines(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_string()));
        // A log record is one write request; beyond a 256 B line the MC and the on-PM
        // buffer would split nothing and charge it as one (2^40 B records also stalled the
        // host for minutes).
        if !(1..=256).contains(&self.base.record_bytes) {
            return bad("base.record_bytes must be in 1..=256");
        }
        let (f, m, l) = (&self.fwb, &self.morlog, &self.lad);
        if f.log_buffer == 0 || f.records_per_write == 0 || f.record_bytes == 0 {
            return bad("fwb: log_buffer, records_per_write and record_bytes must be ≥ 1");
        }
        if f.record_bytes * f.records_per_write as u64 > 256 {
            return bad("fwb: one log write must fit a 256 B line");
        }
        if f.log_bytes < 4 * f.record_bytes * f.records_per_write as u64 {
            return bad("fwb: log_bytes too small");
        }
        if m.redo_buffer == 0 || m.log_buffer == 0 || !(16..=256).contains(&m.write_bytes) {
            return bad("morlog: redo_buffer, log_buffer ≥ 1 and write_bytes in 16..=256");
        }
        if m.meta_bytes == 0 || m.log_bytes < 4 * m.write_bytes {
            return bad("morlog: meta_bytes ≥ 1 and log_bytes ≥ 4 writes");
        }
        // The largest record (metadata, an 8 B undo and an 8 B redo part) must fit one log
        // write: a pack is sent as at most 256 B, so a larger record was charged as less
        // traffic than it is, and one larger than the log never found room (a deadlock).
        if m.meta_bytes + 16 > m.write_bytes {
            return bad("morlog: meta_bytes + 16 (one undo+redo record) must fit write_bytes");
        }
        if l.spec_limit == 0 {
            return bad("lad: spec_limit must be ≥ 1 (it is capped at write_queue − 1)");
        }
        if l.undo_record_bytes == 0 || l.undo_record_bytes > 256 {
            return bad("lad: undo_record_bytes must be in 1..=256");
        }
        Ok(())
    }

    /// MorLog's undo coalescing window in cycles (the configured one, or the minimum
    /// L1→NVM traversal time).
    pub fn morlog_window(&self) -> u64 {
        match self.morlog.undo_window {
            0 => self.l1.latency + self.l2.latency + self.llc.latency + self.path_cycles,
            w => w,
        }
    }

    /// Converts nanoseconds to core cycles (rounded, at least 1 for a positive time).
    pub fn cycles(&self, ns: f64) -> u64 {
        if ns <= 0.0 {
            0
        } else {
            ((ns * self.freq_ghz).round() as u64).max(1)
        }
    }

    /// A one-core variant of this configuration.
    pub fn with_cores(&self, cores: usize) -> Config {
        Config {
            cores,
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_papers_and_valid() {
        let c = Config::default();
        c.validate().expect("default config is valid");
        assert_eq!(c.l1.sets(), 64);
        assert_eq!(c.l2.sets(), 512);
        assert_eq!(c.llc.sets(), 8192);
        assert_eq!(c.cycles(c.mem.read_ns), 100);
        assert_eq!(c.cycles(c.mem.write_ns), 300);
        assert_eq!(c.silo.records_per_batch(), 14);
        assert_eq!(c.silo.entries as u64 * c.silo.entry_bytes, 680);
    }

    #[test]
    fn config_round_trips_through_json_and_partial_json_fills_defaults() {
        let c = Config::default();
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<Config>(&json).unwrap(), c);
        let partial: Config =
            serde_json::from_str(r#"{"cores": 2, "silo": {"buffer_latency": 128}}"#).unwrap();
        assert_eq!(partial.cores, 2);
        assert_eq!(partial.silo.buffer_latency, 128);
        assert_eq!(partial.silo.entries, 20);
        assert!(serde_json::from_str::<Config>(r#"{"coars": 2}"#).is_err());
    }

    #[test]
    fn invalid_configs_are_rejected() {
        assert!(Config::default().with_cores(0).validate().is_err());
        assert!(Config::default().with_cores(65).validate().is_err());
        let mut c = Config::default();
        c.l1.ways = 3;
        assert!(c.validate().is_err());
    }

    #[test]
    fn a_cache_size_the_model_would_round_down_is_refused() {
        let mut c = Config::default();
        c.l1.size_bytes = 1000;
        let error = c.validate().expect_err("1000 B is not sets × ways × 64 B");
        assert!(
            error.to_string().contains("l1: size_bytes = 1000"),
            "{error}"
        );
        assert!(error.to_string().contains("512 B"), "{error}");
        let mut c = Config::default();
        c.llc.size_bytes = 12 << 20; // 12 MiB in 16 ways: 12288 sets, not a power of two
        assert!(c.validate().is_err());
        let mut c = Config::default();
        c.l2.size_bytes = 64 << 10; // 128 sets of 8 ways: held exactly
        c.validate().expect("a power-of-two size is held exactly");
    }

    #[test]
    fn a_clock_that_would_wrap_the_cycle_counts_is_refused() {
        for freq in [0.0, -1.0, f64::NAN, 1e12, 1e300, f64::INFINITY] {
            let c = Config {
                freq_ghz: freq,
                ..Config::default()
            };
            let error = c.validate().expect_err("out of range");
            assert!(error.to_string().contains("freq_ghz"), "{freq}: {error}");
            assert!(error.to_string().len() < 100, "a short number: {error}");
        }
        let c = Config {
            freq_ghz: MAX_FREQ_GHZ,
            ..Config::default()
        };
        c.validate().expect("the bound itself is allowed");
    }

    #[test]
    fn empty_memory_queues_are_refused() {
        for change in [
            (|m: &mut MemConfig| m.read_queue = 0) as fn(&mut MemConfig),
            |m| m.write_queue = 0,
        ] {
            let mut c = Config::default();
            change(&mut c.mem);
            let error = c.validate().expect_err("an empty queue");
            assert!(
                error.to_string().contains("read_queue must be ≥ 1"),
                "{error}"
            );
        }
    }

    #[test]
    fn zero_ways_are_named_as_such() {
        let mut c = Config::default();
        c.l1.ways = 0;
        let error = c.validate().expect_err("no ways");
        assert!(
            error.to_string().contains("l1: ways must be ≥ 1"),
            "{error}"
        );
    }

    #[test]
    fn silo_and_base_record_sizes_of_zero_are_refused() {
        let refused = |change: &dyn Fn(&mut Config)| {
            let mut c = Config::default();
            change(&mut c);
            c.validate().expect_err("a zero size").to_string()
        };
        assert!(refused(&|c| c.silo.batch_bytes = 0).contains("silo.batch_bytes"));
        assert!(refused(&|c| c.silo.batch_bytes = 512).contains("silo.batch_bytes"));
        assert!(refused(&|c| c.silo.undo_record_bytes = 0).contains("undo_record_bytes"));
        assert!(refused(&|c| c.silo.redo_record_bytes = 0).contains("redo_record_bytes"));
        assert!(refused(&|c| c.silo.entry_bytes = 0).contains("entry_bytes"));
        assert!(refused(&|c| c.base.record_bytes = 0).contains("base.record_bytes"));
    }

    #[test]
    fn log_records_larger_than_one_log_write_are_refused() {
        let refused = |change: &dyn Fn(&mut Config)| {
            let mut c = Config::default();
            change(&mut c);
            c.validate().expect_err("too large").to_string()
        };
        assert!(refused(&|c| c.base.record_bytes = 257).contains("base.record_bytes"));
        assert!(refused(&|c| c.base.record_bytes = 1 << 40).contains("base.record_bytes"));
        // 49 B of metadata + 16 B of data do not fit MorLog's 64 B log write.
        assert!(refused(&|c| c.morlog.meta_bytes = 49).contains("morlog: meta_bytes"));
        assert!(refused(&|c| c.morlog.meta_bytes = 1 << 20).contains("morlog: meta_bytes"));
        let mut at_the_bounds = Config::default();
        at_the_bounds.base.record_bytes = 256;
        at_the_bounds.morlog.meta_bytes = 48;
        at_the_bounds
            .validate()
            .expect("records that fill one log write are allowed");
    }

    #[test]
    fn latencies_and_sizes_beyond_the_bounds_are_refused() {
        let refused = |change: &dyn Fn(&mut Config)| {
            let mut c = Config::default();
            change(&mut c);
            c.validate().expect_err("out of range")
        };
        let error = refused(&|c| c.path_cycles = u64::MAX);
        assert!(error.to_string().contains("path_cycles"), "{error}");
        refused(&|c| c.core.cpi = MAX_LATENCY_CYCLES + 1);
        refused(&|c| c.l1.latency = u64::MAX);
        let error = refused(&|c| c.mem.write_ns = 1e300);
        assert!(
            error.to_string().contains("mem.write_ns = 1e300 "),
            "{error}"
        );
        let error = refused(&|c| c.mem.burst_ns = f64::NAN);
        assert!(error.to_string().contains("mem.burst_ns = NaN "), "{error}");
        refused(&|c| c.mem.read_ns = -1.0);
        refused(&|c| c.llc.size_bytes = 1 << 40);
        refused(&|c| c.mem.onpm_lines = 1 << 40);
        let error = refused(&|c| {
            c.mem.write_queue = 1 << 40;
            c.mem.read_queue = 1 << 40;
        });
        assert!(error.to_string().contains("mem.write_queue"), "{error}");
        let mut at_the_bounds = Config {
            path_cycles: MAX_LATENCY_CYCLES,
            ..Config::default()
        };
        at_the_bounds.mem.onpm_lines = MAX_ENTRIES as usize;
        at_the_bounds
            .validate()
            .expect("the bounds themselves are allowed");
    }
}
