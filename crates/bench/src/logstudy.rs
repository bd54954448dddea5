//! The log-writer study of "Logging in persistent memory: to cache, or not to cache?" (Li,
//! Ogleari and Zhao, MemSys 2017), redone on this machine with Ferrite's [`LogWriter`].
//!
//! Each update of a large array (random 8-byte elements, far larger than the last-level
//! cache) first appends a log record of `record` bytes (4 B to 256 B) to a log ring, then
//! stores the new value in place, as the paper's micro-benchmark does. Records are made
//! durable every `batch` updates (seal + fence): `batch = 1` is per-update durability (undo
//! style), larger batches are a transaction's worth of records committed together (redo
//! style), where packing records into whole lines can pay off. Every mode writes the same
//! bytes; the study reports nanoseconds per update for each mode, record size and batch.
//!
//! A fifth runner does the same loop without the log writes (same array stores, same fences
//! at the same places): its time is the update's cost without logging, and each mode's time
//! minus it is the cost of the log writes alone, which is what the paper compares (the
//! update's whole time per byte logged is larger for small records whatever the log writes
//! cost, since the array store and the fence are paid per update).
//!
//! Each mode's ring is larger than the last-level cache (64 MiB; this machine's L3 is
//! 32 MiB) and its write position carries on from one configuration to the next, so the log
//! keeps moving onto lines it has not written recently, as the paper's 8 MB log (as large as
//! its 8 MB LLC) did. A small ring rewritten from its start at every configuration would
//! have measured cacheable stores into lines still in L2 or L3.
//!
//! [`pollution`] is a proxy for the paper's cache-pollution claim (no hardware counters
//! here): the time to re-read an application's cache-resident working set after logging a
//! given number of bytes cacheably or non-temporally.

use crate::measure::Summary;
use pmem::{
    CACHE_LINE, CreateOptions, Native, NativeOptions, Persist, PersistMode, Pool, PoolError,
    WriteClass,
};
use serde::Serialize;
use std::path::Path;
use std::time::Instant;
use tx::logwriter::{LogMode, LogWriter};

/// Record sizes of the sweep (the paper's 4 B to 256 B).
pub const RECORD_SIZES: [usize; 7] = [4, 8, 16, 32, 64, 128, 256];
/// Batches of the sweep: per-update durability, and eight records per commit.
pub const BATCHES: [usize; 2] = [1, 8];
/// The modes compared.
pub const MODES: [LogMode; 4] = [
    LogMode::Cacheable,
    LogMode::NonTemporal,
    LogMode::Packed,
    LogMode::Auto,
];

/// How much to measure.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct StudySettings {
    /// Bytes of the updated array.
    pub array_bytes: u64,
    /// Updates per timed run.
    pub updates: u64,
    /// Timed runs (the median is reported).
    pub runs: usize,
    /// Bytes of each mode's log ring.
    pub ring_bytes: u64,
    /// The cache-pollution proxy's sizes.
    pub pollution: PollutionSettings,
}

/// Sizes of the cache-pollution proxy ([`pollution`]).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct PollutionSettings {
    /// Bytes of the application's working set, re-read after logging.
    pub working_set: u64,
    /// Bytes logged between the two reads.
    pub logged: u64,
    /// Timed runs per mode (the median is reported).
    pub runs: usize,
}

impl Default for StudySettings {
    fn default() -> Self {
        StudySettings {
            array_bytes: 64 << 20,
            updates: 200_000,
            runs: 9,
            ring_bytes: 64 << 20,
            pollution: PollutionSettings {
                // Half of this machine's 1 MiB L2, then four times the L2 logged: a cacheable
                // log of that size evicts the set from L2, a non-temporal one need not.
                working_set: 512 << 10,
                logged: 4 << 20,
                runs: 15,
            },
        }
    }
}

impl StudySettings {
    /// Small and fast, for tests: numbers are indicative only.
    pub fn quick() -> Self {
        StudySettings {
            array_bytes: 4 << 20,
            updates: 5_000,
            runs: 3,
            ring_bytes: 4 << 20,
            pollution: PollutionSettings {
                working_set: 256 << 10,
                logged: 1 << 20,
                runs: 3,
            },
        }
    }
}

/// One measured configuration.
#[derive(Clone, Debug, Serialize)]
pub struct StudyPoint {
    /// Log mode.
    pub mode: LogMode,
    /// Record size in bytes.
    pub record: usize,
    /// Records per fence.
    pub batch: usize,
    /// Nanoseconds per update.
    pub ns_per_update: Summary,
    /// Cache lines flushed per update.
    pub flushes_per_update: f64,
    /// Non-temporal bytes per update.
    pub nt_bytes_per_update: f64,
}

/// The same update loop without log writes, measured beside the modes of one configuration.
#[derive(Clone, Debug, Serialize)]
pub struct BaselinePoint {
    /// Record size of the configuration (no record is written).
    pub record: usize,
    /// Updates per fence.
    pub batch: usize,
    /// Nanoseconds per update.
    pub ns_per_update: Summary,
}

/// The whole sweep.
#[derive(Clone, Debug, Serialize)]
pub struct StudyResults {
    /// Settings used.
    pub settings: StudySettings,
    /// Every point.
    pub points: Vec<StudyPoint>,
    /// The loop without log writes, per configuration.
    pub baseline: Vec<BaselinePoint>,
    /// The cache-pollution proxy.
    pub pollution: Option<PollutionResults>,
}

impl StudyResults {
    /// The fastest of the three fixed modes for `(record, batch)`.
    pub fn winner(&self, record: usize, batch: usize) -> Option<&StudyPoint> {
        self.points
            .iter()
            .filter(|p| p.record == record && p.batch == batch && p.mode != LogMode::Auto)
            .min_by(|a, b| a.ns_per_update.median.total_cmp(&b.ns_per_update.median))
    }

    /// The point for one configuration.
    pub fn point(&self, mode: LogMode, record: usize, batch: usize) -> Option<&StudyPoint> {
        self.points
            .iter()
            .find(|p| p.mode == mode && p.record == record && p.batch == batch)
    }

    /// Median nanoseconds per update of one configuration.
    pub fn median_ns(&self, mode: LogMode, record: usize, batch: usize) -> Option<f64> {
        self.point(mode, record, batch)
            .map(|p| p.ns_per_update.median)
    }

    /// The update loop without log writes at one configuration.
    pub fn baseline(&self, record: usize, batch: usize) -> Option<&Summary> {
        self.baseline
            .iter()
            .find(|b| b.record == record && b.batch == batch)
            .map(|b| &b.ns_per_update)
    }

    /// Nanoseconds per update spent on the log writes of one configuration: the mode's
    /// median minus the median of the loop without them (may be negative within the noise).
    pub fn log_ns(&self, mode: LogMode, record: usize, batch: usize) -> Option<f64> {
        Some(self.median_ns(mode, record, batch)? - self.baseline(record, batch)?.median)
    }

    /// The range [`Self::log_ns`] can take over the runs: the mode's fastest run minus the
    /// slowest loop without log writes, and its slowest minus the fastest.
    pub fn log_ns_range(&self, mode: LogMode, record: usize, batch: usize) -> Option<(f64, f64)> {
        let runs = &self.point(mode, record, batch)?.ns_per_update;
        let loop_alone = self.baseline(record, batch)?;
        Some((runs.min - loop_alone.max, runs.max - loop_alone.min))
    }

    /// The fastest fixed mode at `(record, batch)` when its median is below every run of
    /// each other fixed mode; `None` when the runs of two modes overlap (a tie on this
    /// machine's noise) or nothing was measured.
    pub fn clear_winner(&self, record: usize, batch: usize) -> Option<LogMode> {
        let best = self.winner(record, batch)?;
        self.points
            .iter()
            .filter(|p| p.record == record && p.batch == batch)
            .filter(|p| p.mode != LogMode::Auto && p.mode != best.mode)
            .all(|p| best.ns_per_update.median < p.ns_per_update.min)
            .then_some(best.mode)
    }

    /// The record sizes measured, ascending.
    pub fn records(&self) -> Vec<usize> {
        distinct(self.points.iter().map(|p| p.record))
    }

    /// The batches measured, ascending.
    pub fn batches(&self) -> Vec<usize> {
        distinct(self.points.iter().map(|p| p.batch))
    }

    /// The fastest fixed mode at every record size of `batch`, ascending by size.
    pub fn winners(&self, batch: usize) -> Vec<(usize, LogMode)> {
        self.records()
            .into_iter()
            .filter_map(|record| Some((record, self.winner(record, batch)?.mode)))
            .collect()
    }

    /// The clear winners of `batch` ([`StudyResults::clear_winner`]; `None` for a tie) at
    /// every record size, with consecutive sizes of the same outcome merged.
    pub fn winner_ranges(&self, batch: usize) -> Vec<WinnerRange> {
        let mut ranges: Vec<WinnerRange> = Vec::new();
        let outcomes = self
            .records()
            .into_iter()
            .filter(|&record| self.winner(record, batch).is_some())
            .map(|record| (record, self.clear_winner(record, batch)));
        for (record, mode) in outcomes {
            match ranges.last_mut() {
                Some(range) if range.mode == mode => range.last = record,
                _ => ranges.push(WinnerRange {
                    mode,
                    first: record,
                    last: record,
                }),
            }
        }
        ranges
    }

    /// At each record size of `batch`: how much slower Auto was than the fastest fixed mode
    /// (0.05 = 5 %; never negative), and whether clearly: Auto's median above every run of
    /// that mode.
    pub fn auto_excess(&self, batch: usize) -> Vec<AutoExcess> {
        self.records()
            .into_iter()
            .filter_map(|record| {
                let best = self.winner(record, batch)?.ns_per_update;
                let auto = self.median_ns(LogMode::Auto, record, batch)?;
                (best.median > 0.0).then(|| AutoExcess {
                    record,
                    excess: (auto / best.median - 1.0).max(0.0),
                    clear: auto > best.max,
                })
            })
            .collect()
    }
}

/// Record sizes `first..=last` (consecutive in the sweep) where `mode` was clearly the
/// fastest, or (`mode == None`) where no mode was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct WinnerRange {
    /// The clearly fastest fixed mode; `None`: the fastest modes' runs overlapped.
    pub mode: Option<LogMode>,
    /// Smallest record size of the range.
    pub first: usize,
    /// Largest record size of the range.
    pub last: usize,
}

/// How much slower Auto was than the fastest fixed mode at one record size.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct AutoExcess {
    /// Record size in bytes.
    pub record: usize,
    /// Auto's time over the fastest fixed mode's, minus one (never negative).
    pub excess: f64,
    /// Whether Auto's median was above every run of the fastest fixed mode (otherwise the
    /// excess is within that mode's run-to-run spread).
    pub clear: bool,
}

/// The distinct values, ascending.
fn distinct(values: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut values: Vec<usize> = values.collect();
    values.sort_unstable();
    values.dedup();
    values
}

/// Runs the sweep with scratch pools in `dir`; `progress` is called after each point.
pub fn run(
    dir: &Path,
    settings: &StudySettings,
    progress: &dyn Fn(usize, usize),
) -> Result<StudyResults, PoolError> {
    let ring_bytes = settings.ring_bytes.next_multiple_of(CACHE_LINE);
    let pool_size =
        (MODES.len() as u64 * ring_bytes + settings.array_bytes + (1 << 20)).next_multiple_of(4096);
    let mut options = CreateOptions::new("ferrite-logstudy", pool_size);
    options.native = NativeOptions {
        mode: Some(PersistMode::Adr),
        ..NativeOptions::default()
    };
    let path = dir.join(format!("ferrite-logstudy-{}.pool", std::process::id()));
    let pool = Pool::create(&path, &options);
    let _ = std::fs::remove_file(&path);
    let pool = pool?;
    // Touch every page first, so no timed update takes a page fault.
    let arena = pool.arena();
    pool.pm().fill(arena.offset, arena.len, 0, WriteClass::User);
    let total = MODES.len() * RECORD_SIZES.len() * BATCHES.len();
    let mut points = Vec::with_capacity(total);
    let mut baseline = Vec::with_capacity(total / MODES.len());
    // One set of runners for the whole sweep: ring positions and update numbers carry on.
    let mut runners = runners(arena.offset, ring_bytes);
    for batch in BATCHES {
        for record in RECORD_SIZES {
            let (measured, without_log) =
                measure_interleaved(&pool, settings, &mut runners, record, batch);
            points.extend(measured);
            baseline.push(without_log);
            progress(points.len(), total);
        }
    }
    let pollution = pollution(&pool, ring_bytes, &settings.pollution);
    Ok(StudyResults {
        settings: *settings,
        points,
        baseline,
        pollution: Some(pollution),
    })
}

/// One update loop: a mode with its own log ring, ring position and writer, or (no writer)
/// the loop without log writes.
struct Runner {
    mode: Option<LogMode>,
    writer: Option<LogWriter>,
    /// Pool offset of this mode's ring of `ring_bytes`.
    ring: u64,
    ring_bytes: u64,
    head: u64,
    next: u64,
    samples: Vec<f64>,
}

/// Measures every mode and the loop without log writes at one (record, batch), alternating
/// them run by run so slow drifts of the machine (frequency, the other core's load) hit
/// every one alike.
fn measure_interleaved(
    pool: &Pool<Native>,
    settings: &StudySettings,
    runners: &mut [Runner],
    record: usize,
    batch: usize,
) -> (Vec<StudyPoint>, BaselinePoint) {
    let pm = pool.pm();
    let mut deltas = vec![pmem::Counters::default(); runners.len()];
    let count = runners.len();
    for runner in runners.iter_mut() {
        runner.samples.clear();
    }
    for round in 0..=settings.runs {
        // Rotate which runner goes first, so none always follows the same neighbour.
        for step in 0..count {
            let which = (round + step) % count;
            let (runner, delta) = (&mut runners[which], &mut deltas[which]);
            let before = pm.stats().snapshot();
            let start = Instant::now();
            run_updates(pool, settings, runner, record, batch);
            let ns = start.elapsed().as_nanos() as f64 / settings.updates as f64;
            // Round 0 warms caches and the ring; it is not reported.
            if round > 0 {
                runner.samples.push(ns);
                *delta = delta.plus(&pm.stats().snapshot().since(&before));
            }
        }
    }
    let per = |n: u64| n as f64 / (settings.updates * settings.runs.max(1) as u64) as f64;
    let summary = |samples: &[f64]| {
        Summary::of(samples).unwrap_or(Summary {
            median: 0.0,
            min: 0.0,
            max: 0.0,
            runs: 0,
        })
    };
    let mut baseline = None;
    let mut points = Vec::with_capacity(MODES.len());
    for (runner, delta) in runners.iter().zip(&deltas) {
        match runner.mode {
            Some(mode) => points.push(StudyPoint {
                mode,
                record,
                batch,
                ns_per_update: summary(&runner.samples),
                flushes_per_update: per(delta.flushed_lines),
                nt_bytes_per_update: per(delta.nt_total()),
            }),
            None => {
                baseline = Some(BaselinePoint {
                    record,
                    batch,
                    ns_per_update: summary(&runner.samples),
                })
            }
        }
    }
    let baseline = baseline.expect("runners() includes the loop without log writes");
    (points, baseline)
}

/// The modes' runners over an arena at `arena`, then the runner without log writes. Each
/// updates its own sequence of array elements (disjoint update numbers) and each mode appends
/// to its own ring, so no mode runs on lines another mode just brought into the cache or
/// flushed out of it. (With one shared ring, every mode appended at the same ring offsets
/// the mode before it had just written.)
fn runners(arena: u64, ring_bytes: u64) -> Vec<Runner> {
    let modes = MODES.iter().map(|&mode| Some(mode)).chain([None]);
    modes
        .enumerate()
        .map(|(index, mode)| Runner {
            mode,
            writer: mode.map(LogWriter::new),
            ring: arena + index as u64 * ring_bytes,
            ring_bytes,
            head: 0,
            next: (index as u64) << 40,
            samples: Vec::new(),
        })
        .collect()
}

/// Pool offset of the updated array: after every mode's ring.
fn array_offset(arena: u64, ring_bytes: u64) -> u64 {
    arena + MODES.len() as u64 * ring_bytes
}

/// One timed run of `settings.updates` updates. Besides the log writes it does only what
/// every runner does alike: fill the record (a few bytes' loop), the ring-wrap test, the
/// array store and the fences.
fn run_updates(
    pool: &Pool<Native>,
    settings: &StudySettings,
    runner: &mut Runner,
    record: usize,
    batch: usize,
) {
    let pm = pool.pm();
    let ring = runner.ring;
    let array = array_offset(pool.arena().offset, runner.ring_bytes);
    let elements = settings.array_bytes / 8;
    let mut bytes = vec![0u8; record];
    for u in runner.next..runner.next + settings.updates {
        bytes
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = (u as u8).wrapping_add(i as u8));
        if runner.head + record as u64 > runner.ring_bytes {
            runner.head = 0;
        }
        if let Some(writer) = runner.writer.as_mut() {
            writer.append(pm, ring + runner.head, std::hint::black_box(&bytes));
        }
        runner.head += record as u64;
        if (u + 1).is_multiple_of(batch as u64) {
            if let Some(writer) = runner.writer.as_mut() {
                writer.seal(pm);
            }
            pm.fence();
        }
        pm.write_u64(array + 8 * (mix(u) % elements), u, WriteClass::User);
    }
    if let Some(writer) = runner.writer.as_mut() {
        writer.seal(pm);
    }
    pm.fence();
    runner.next += settings.updates;
}

/// Scatters update numbers over the array (a multiplicative hash; the low bits of a
/// sequential counter would walk the array in order and let the prefetcher hide misses).
fn mix(u: u64) -> u64 {
    (u ^ (u >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9) >> 7
}

/// The cache-pollution proxy: nanoseconds per line to re-read the application's working set
/// after logging, for each way of logging and for no logging at all.
#[derive(Clone, Debug, Serialize)]
pub struct PollutionResults {
    /// Sizes used.
    pub settings: PollutionSettings,
    /// Samples kept although this thread was switched out during them, after
    /// `PROXY_ATTEMPTS` tries (0 when /proc could not say).
    pub disturbed: usize,
    /// Record size of the logging between the reads.
    pub record: usize,
    /// Records per fence of that logging.
    pub batch: usize,
    /// Re-read time with nothing logged in between: the working set's cache-resident speed.
    pub nothing_logged: Summary,
    /// Re-read time after logging with ordinary stores and write-backs (cacheable).
    pub cacheable: Summary,
    /// Re-read time after logging with streaming stores (non-temporal).
    pub non_temporal: Summary,
    /// Re-read time after logging with ordinary stores and no write-back, as the paper's
    /// cacheable log did (not durable: a control for what the write-backs change).
    pub stores_only: Summary,
    /// Rounds (one run of each variant, adjacent in time) where the re-read after cacheable
    /// logging was slower than the one after non-temporal logging.
    pub cacheable_slower_rounds: usize,
}

impl PollutionResults {
    /// Whether the re-read after cacheable logging was clearly slower than after
    /// non-temporal logging: slower in so many of the paired rounds that a fair coin would
    /// do as well less than once in twenty (one-sided sign test). Pairing by round keeps a
    /// busy spell of the machine, which slows both neighbours, from deciding it.
    pub fn cacheable_clearly_slower(&self) -> bool {
        sign_test_p(self.cacheable_slower_rounds, self.settings.runs) < 0.05
    }
}

/// The probability that a fair coin shows at least `wins` heads in `rounds` tosses.
pub fn sign_test_p(wins: usize, rounds: usize) -> f64 {
    if rounds == 0 {
        return 1.0;
    }
    let mut tail = 0.0;
    for k in wins..=rounds {
        // C(rounds, k) / 2^rounds, in floating point (rounds is small).
        let choose = (0..k).fold(1.0, |c, i| c * (rounds - i) as f64 / (i + 1) as f64);
        tail += choose;
    }
    tail / 2f64.powi(rounds as i32)
}

/// Record size and batch of the proxy's logging: whole lines, eight per fence, so neither
/// way writes partial lines and the proxy compares where the bytes go, not how.
const POLLUTION_RECORD: usize = 64;
const POLLUTION_BATCH: usize = 8;

/// Measures the proxy: (1) chase a pointer cycle through every line of a working set of
/// `working_set` bytes (the application's data, in ordinary memory), which leaves it in the
/// caches; (2) log `logged` bytes into the cacheable mode's ring or the non-temporal mode's
/// ring, or nothing; (3) time a second chase of the same cycle. The cycle visits the lines in
/// a random order, so the prefetchers cannot hide misses and the time per line is the
/// latency of wherever the line now is. Cacheable log lines are allocated in the caches and
/// can evict the working set; streamed ones bypass them. The three variants are interleaved
/// in rotating order. This measures a latency, not a miss rate: it is a proxy for the
/// paper's LLC-miss claim, valid at this machine's cache sizes.
pub fn pollution(
    pool: &Pool<Native>,
    ring_bytes: u64,
    settings: &PollutionSettings,
) -> PollutionResults {
    let pm = pool.pm();
    let chain = pointer_cycle(settings.working_set);
    let arena = pool.arena().offset;
    let logged = settings.logged.min(ring_bytes);
    let record = vec![0x5au8; POLLUTION_RECORD];
    // The rings of `runners`: index 0 is cacheable, index 1 non-temporal. The stores-only
    // variant reuses the cacheable ring (each sample rewrites it from its start anyway).
    let variants: [ProxyLog; 4] = [
        ProxyLog::Nothing,
        ProxyLog::Writer(LogMode::Cacheable, arena),
        ProxyLog::Writer(LogMode::NonTemporal, arena + ring_bytes),
        ProxyLog::StoresOnly(arena),
    ];
    let mut samples: [Vec<f64>; 4] = Default::default();
    let mut disturbed = 0usize;
    for round in 0..=settings.runs {
        for step in 0..variants.len() {
            let which = (round + step) % variants.len();
            // A sample during which this thread was switched out is retaken: whatever ran
            // on this core meanwhile used its L2 too, which would charge another program's
            // cache use to the logging (and the logging variants take long enough to be
            // preempted on a busy machine, the nothing-logged one hardly ever).
            let mut ns = 0.0;
            for attempt in 0..PROXY_ATTEMPTS {
                let switches = context_switches();
                ns = reread_after_logging(pm, &chain, variants[which], logged, &record);
                if switches.is_none() || context_switches() == switches {
                    break;
                }
                if attempt + 1 == PROXY_ATTEMPTS {
                    disturbed += 1;
                }
            }
            if round > 0 {
                samples[which].push(ns);
            }
        }
    }
    let summary = |s: &[f64]| {
        Summary::of(s).unwrap_or(Summary {
            median: 0.0,
            min: 0.0,
            max: 0.0,
            runs: 0,
        })
    };
    let cacheable_slower_rounds = samples[1]
        .iter()
        .zip(&samples[2])
        .filter(|(cached, streamed)| cached > streamed)
        .count();
    PollutionResults {
        settings: *settings,
        disturbed,
        record: POLLUTION_RECORD,
        batch: POLLUTION_BATCH,
        nothing_logged: summary(&samples[0]),
        cacheable: summary(&samples[1]),
        non_temporal: summary(&samples[2]),
        stores_only: summary(&samples[3]),
        cacheable_slower_rounds,
    }
}

/// Tries per proxy sample before one disturbed by a context switch is kept.
pub const PROXY_ATTEMPTS: usize = 20;

/// What the proxy does between the two reads.
#[derive(Clone, Copy)]
enum ProxyLog {
    /// Nothing.
    Nothing,
    /// Logs with a [`LogWriter`] of this mode into the ring at this offset.
    Writer(LogMode, u64),
    /// Ordinary stores and fences without write-backs into the ring at this offset.
    StoresOnly(u64),
}

/// One proxy sample: warm the working set, log `logged` bytes as `variant` says, then time
/// the re-read; nanoseconds per line.
fn reread_after_logging(
    pm: &Native,
    chain: &[u64],
    variant: ProxyLog,
    logged: u64,
    record: &[u8],
) -> f64 {
    std::hint::black_box(chase(chain));
    let (mut writer, ring) = match variant {
        ProxyLog::Nothing => (None, None),
        ProxyLog::Writer(mode, ring) => (Some(LogWriter::new(mode)), Some(ring)),
        ProxyLog::StoresOnly(ring) => (None, Some(ring)),
    };
    if let Some(ring) = ring {
        let mut at = 0;
        let mut appended = 0usize;
        while at + record.len() as u64 <= logged {
            match writer.as_mut() {
                Some(writer) => writer.append(pm, ring + at, record),
                None => pm.write(ring + at, record, WriteClass::Log),
            }
            at += record.len() as u64;
            appended += 1;
            if appended.is_multiple_of(POLLUTION_BATCH) {
                if let Some(writer) = writer.as_mut() {
                    writer.seal(pm);
                }
                pm.fence();
            }
        }
        if let Some(writer) = writer.as_mut() {
            writer.seal(pm);
        }
        pm.fence();
    }
    let start = Instant::now();
    std::hint::black_box(chase(chain));
    start.elapsed().as_nanos() as f64 / (chain.len() / WORDS_PER_LINE) as f64
}

/// This thread's context switches so far (voluntary and not), from /proc; `None` where
/// /proc does not say.
fn context_switches() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/thread-self/status").ok()?;
    let count = |key: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(key))?;
        line[key.len()..].trim().parse().ok()
    };
    Some(count("voluntary_ctxt_switches:")? + count("nonvoluntary_ctxt_switches:")?)
}

const WORDS_PER_LINE: usize = (CACHE_LINE / 8) as usize;

/// A working set of `bytes` (at least two lines) where the first word of each line holds the
/// word index of the next line of one random cycle through all lines.
fn pointer_cycle(bytes: u64) -> Vec<u64> {
    let lines = ((bytes / CACHE_LINE) as usize).max(2);
    let mut order: Vec<usize> = (0..lines).collect();
    // Fisher-Yates with a fixed-seed generator (splitmix64): the same cycle every run.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for i in (1..lines).rev() {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        order.swap(i, (z % (i as u64 + 1)) as usize);
    }
    let mut words = vec![0u64; lines * WORDS_PER_LINE];
    for pair in 0..lines {
        let (from, to) = (order[pair], order[(pair + 1) % lines]);
        words[from * WORDS_PER_LINE] = (to * WORDS_PER_LINE) as u64;
    }
    words
}

/// Follows the cycle once around; each load depends on the one before.
fn chase(words: &[u64]) -> u64 {
    let mut at = 0usize;
    for _ in 0..words.len() / WORDS_PER_LINE {
        at = std::hint::black_box(words[at]) as usize;
    }
    at as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const RING: u64 = 1 << 20;

    #[test]
    fn every_mode_appends_to_a_ring_of_its_own_before_the_array() {
        let arena = 4096;
        let runners = runners(arena, RING);
        assert_eq!(runners.len(), MODES.len() + 1);
        let logging: Vec<&Runner> = runners.iter().filter(|r| r.writer.is_some()).collect();
        assert_eq!(logging.len(), MODES.len());
        let mut rings: Vec<(u64, u64)> = logging.iter().map(|r| (r.ring, r.ring + RING)).collect();
        rings.sort_unstable();
        assert!(rings[0].0 >= arena);
        for pair in rings.windows(2) {
            assert!(pair[0].1 <= pair[1].0, "rings overlap: {rings:?}");
        }
        assert!(rings.last().expect("rings").1 <= array_offset(arena, RING));
        // Each runner, the one without log writes included, updates its own array elements.
        let mut starts: Vec<u64> = runners.iter().map(|r| r.next).collect();
        starts.dedup();
        assert_eq!(starts.len(), MODES.len() + 1);
        // The pollution proxy logs into the cacheable and non-temporal rings.
        assert_eq!(runners[0].mode, Some(LogMode::Cacheable));
        assert_eq!(runners[1].mode, Some(LogMode::NonTemporal));
        assert_eq!(runners[1].ring, arena + RING);
    }

    #[test]
    fn context_switches_are_counted_and_grow_with_a_sleep() {
        let before = context_switches().expect("/proc/thread-self/status on Linux");
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(context_switches().expect("status") > before);
    }

    #[test]
    fn sign_test_tails() {
        assert_eq!(sign_test_p(0, 5), 1.0);
        assert!((sign_test_p(5, 5) - 1.0 / 32.0).abs() < 1e-12);
        assert!((sign_test_p(4, 5) - 6.0 / 32.0).abs() < 1e-12);
        // 12 of 15: p = 576 / 32768 < 0.05; 11 of 15: 1941 / 32768 > 0.05.
        assert!((sign_test_p(12, 15) - 576.0 / 32768.0).abs() < 1e-12);
        assert!(sign_test_p(11, 15) > 0.05);
    }

    /// The log position carries on from one configuration to the next: a ring restarted at
    /// its start for every configuration rewrote lines the previous configuration had just
    /// written (still in the caches, for a cacheable log), not the paper's fresh 8 MB log.
    #[test]
    fn ring_positions_carry_on_across_configurations() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("carry.pool");
        let ring_bytes = 64 << 10;
        let settings = StudySettings {
            array_bytes: 64 << 10,
            updates: 100,
            runs: 1,
            ring_bytes,
            pollution: StudySettings::quick().pollution,
        };
        let size = (MODES.len() as u64 * ring_bytes + settings.array_bytes + (1 << 20))
            .next_multiple_of(4096);
        let mut options = CreateOptions::new("carry", size);
        options.native = NativeOptions {
            mode: Some(PersistMode::Adr),
            ..NativeOptions::default()
        };
        let pool = Pool::create(&path, &options).expect("pool");
        let mut runners = runners(pool.arena().offset, ring_bytes);
        measure_interleaved(&pool, &settings, &mut runners, 16, 1);
        // Two rounds (warm-up and one timed) of 100 records of 16 B.
        assert!(runners.iter().all(|r| r.head == 2 * 100 * 16));
        measure_interleaved(&pool, &settings, &mut runners, 32, 1);
        assert!(runners.iter().all(|r| r.head == 2 * 100 * (16 + 32)));
    }

    #[test]
    fn pointer_cycle_visits_every_line_once() {
        let words = pointer_cycle(64 * 1000);
        let lines = words.len() / WORDS_PER_LINE;
        assert_eq!(lines, 1000);
        let mut seen = vec![false; lines];
        let mut at = 0usize;
        for _ in 0..lines {
            assert!(at.is_multiple_of(WORDS_PER_LINE));
            assert!(
                !seen[at / WORDS_PER_LINE],
                "line {} twice",
                at / WORDS_PER_LINE
            );
            seen[at / WORDS_PER_LINE] = true;
            at = words[at] as usize;
        }
        assert_eq!(at, 0, "back at the start after one cycle");
        assert_eq!(chase(&words), 0);
    }

    /// The sweep runs end to end at tiny sizes, and every configuration gets a point per mode
    /// and one loop without log writes.
    #[test]
    fn tiny_sweep_measures_every_configuration_and_the_proxy() {
        let dir = tempfile::tempdir().expect("temp dir");
        let settings = StudySettings {
            array_bytes: 1 << 20,
            updates: 200,
            runs: 1,
            ring_bytes: 64 << 10,
            pollution: PollutionSettings {
                working_set: 16 << 10,
                logged: 32 << 10,
                runs: 1,
            },
        };
        let results = run(dir.path(), &settings, &|_, _| {}).expect("sweep");
        let configurations = RECORD_SIZES.len() * BATCHES.len();
        assert_eq!(results.points.len(), configurations * MODES.len());
        assert_eq!(results.baseline.len(), configurations);
        for batch in BATCHES {
            for record in RECORD_SIZES {
                assert!(results.baseline(record, batch).is_some());
                assert!(results.log_ns(LogMode::Cacheable, record, batch).is_some());
                // Every mode wrote every byte: streamed modes at least the record.
                let nt = results
                    .point(LogMode::NonTemporal, record, batch)
                    .expect("point")
                    .nt_bytes_per_update;
                assert!((nt - record as f64).abs() < 1e-9, "{record} B: {nt}");
            }
        }
        let proxy = results.pollution.expect("proxy");
        assert_eq!(proxy.cacheable.runs, 1);
        assert!(proxy.nothing_logged.median > 0.0);
    }
}
