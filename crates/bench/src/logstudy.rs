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

use crate::measure::Summary;
use pmem::{
    CreateOptions, Native, NativeOptions, Persist, PersistMode, Pool, PoolError, WriteClass,
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
const RING_BYTES: u64 = 4 << 20;

/// How much to measure.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct StudySettings {
    /// Bytes of the updated array.
    pub array_bytes: u64,
    /// Updates per timed run.
    pub updates: u64,
    /// Timed runs (the median is reported).
    pub runs: usize,
}

impl Default for StudySettings {
    fn default() -> Self {
        StudySettings {
            array_bytes: 64 << 20,
            updates: 200_000,
            runs: 5,
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

/// The whole sweep.
#[derive(Clone, Debug, Serialize)]
pub struct StudyResults {
    /// Settings used.
    pub settings: StudySettings,
    /// Every point.
    pub points: Vec<StudyPoint>,
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

    /// The winners of `batch` with consecutive sizes of the same winner merged.
    pub fn winner_ranges(&self, batch: usize) -> Vec<WinnerRange> {
        let mut ranges: Vec<WinnerRange> = Vec::new();
        for (record, mode) in self.winners(batch) {
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
    /// (0.05 = 5 %; never negative).
    pub fn auto_excess(&self, batch: usize) -> Vec<AutoExcess> {
        self.records()
            .into_iter()
            .filter_map(|record| {
                let best = self.winner(record, batch)?.ns_per_update.median;
                let auto = self.median_ns(LogMode::Auto, record, batch)?;
                (best > 0.0).then(|| AutoExcess {
                    record,
                    excess: (auto / best - 1.0).max(0.0),
                })
            })
            .collect()
    }
}

/// Record sizes `first..=last` (consecutive in the sweep) where `mode` was the fastest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct WinnerRange {
    /// The fastest fixed mode.
    pub mode: LogMode,
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
    let pool_size =
        (MODES.len() as u64 * RING_BYTES + settings.array_bytes + (1 << 20)).next_multiple_of(4096);
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
    for batch in BATCHES {
        for record in RECORD_SIZES {
            points.extend(measure_interleaved(&pool, settings, record, batch));
            progress(points.len(), total);
        }
    }
    Ok(StudyResults {
        settings: *settings,
        points,
    })
}

/// One update loop of a mode, with its own log ring, ring position and writer.
struct Runner {
    mode: LogMode,
    writer: LogWriter,
    /// Pool offset of this mode's ring of `RING_BYTES`.
    ring: u64,
    head: u64,
    next: u64,
    samples: Vec<f64>,
}

/// Measures every mode at one (record, batch), alternating modes run by run so slow drifts
/// of the machine (frequency, the other core's load) hit every mode alike.
fn measure_interleaved(
    pool: &Pool<Native>,
    settings: &StudySettings,
    record: usize,
    batch: usize,
) -> Vec<StudyPoint> {
    let pm = pool.pm();
    let mut runners = runners(pool.arena().offset);
    let mut deltas = vec![pmem::Counters::default(); runners.len()];
    let count = runners.len();
    for round in 0..=settings.runs {
        // Rotate which mode goes first, so no mode always follows the same neighbour.
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
    runners
        .iter()
        .zip(&deltas)
        .map(|(runner, delta)| StudyPoint {
            mode: runner.mode,
            record,
            batch,
            ns_per_update: Summary::of(&runner.samples).unwrap_or(Summary {
                median: 0.0,
                min: 0.0,
                max: 0.0,
                runs: 0,
            }),
            flushes_per_update: per(delta.flushed_lines),
            nt_bytes_per_update: per(delta.nt_total()),
        })
        .collect()
}

/// The modes' runners over an arena at `arena`. Each mode updates its own sequence of array
/// elements (disjoint update numbers) and appends to its own ring, so no mode runs on lines
/// another mode just brought into the cache or flushed out of it. (With one shared ring,
/// every mode appended at the same ring offsets the mode before it had just written.)
fn runners(arena: u64) -> Vec<Runner> {
    MODES
        .iter()
        .enumerate()
        .map(|(index, &mode)| Runner {
            mode,
            writer: LogWriter::new(mode),
            ring: arena + index as u64 * RING_BYTES,
            head: 0,
            next: (index as u64) << 40,
            samples: Vec::new(),
        })
        .collect()
}

/// Pool offset of the updated array: after every mode's ring.
fn array_offset(arena: u64) -> u64 {
    arena + MODES.len() as u64 * RING_BYTES
}

fn run_updates(
    pool: &Pool<Native>,
    settings: &StudySettings,
    runner: &mut Runner,
    record: usize,
    batch: usize,
) {
    let pm = pool.pm();
    let ring = runner.ring;
    let array = array_offset(pool.arena().offset);
    let elements = settings.array_bytes / 8;
    let mut bytes = vec![0u8; record];
    for u in runner.next..runner.next + settings.updates {
        bytes
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = (u as u8).wrapping_add(i as u8));
        if runner.head + record as u64 > RING_BYTES {
            runner.head = 0;
        }
        runner.writer.append(pm, ring + runner.head, &bytes);
        runner.head += record as u64;
        if (u + 1).is_multiple_of(batch as u64) {
            runner.writer.seal(pm);
            pm.fence();
        }
        pm.write_u64(array + 8 * (mix(u) % elements), u, WriteClass::User);
    }
    runner.writer.seal(pm);
    pm.fence();
    runner.next += settings.updates;
}

/// Scatters update numbers over the array (a multiplicative hash; the low bits of a
/// sequential counter would walk the array in order and let the prefetcher hide misses).
fn mix(u: u64) -> u64 {
    (u ^ (u >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9) >> 7
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_appends_to_a_ring_of_its_own_before_the_array() {
        let arena = 4096;
        let runners = runners(arena);
        assert_eq!(runners.len(), MODES.len());
        let mut rings: Vec<(u64, u64)> = runners
            .iter()
            .map(|r| (r.ring, r.ring + RING_BYTES))
            .collect();
        rings.sort_unstable();
        assert!(rings[0].0 >= arena);
        for pair in rings.windows(2) {
            assert!(pair[0].1 <= pair[1].0, "rings overlap: {rings:?}");
        }
        assert!(rings.last().expect("rings").1 <= array_offset(arena));
        // Each mode also updates its own array elements.
        let mut starts: Vec<u64> = runners.iter().map(|r| r.next).collect();
        starts.dedup();
        assert_eq!(starts.len(), MODES.len());
    }
}
