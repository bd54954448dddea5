//! The substrate micro-benchmark: what the basic persistence operations cost on this machine.
//!
//! Everything is measured through the persistence seam of a native pool (a file on tmpfs by
//! default), so the numbers are what Ferrite's engines pay, including the seam's bounds
//! checks and accounting, not the bare instructions:
//! - persisting 64 bytes (store a line, flush it, fence) with each flush instruction the CPU
//!   implements;
//! - a non-temporal copy plus fence against stores plus flush plus fence, for 64 B to 4 KiB;
//! - a fence with nothing pending, and a fence completing one 8-byte non-temporal store.
//!
//! Pools are forced into ADR mode: under eADR or msync the flushes being measured would not
//! be executed at all.

use crate::measure::{Summary, median_of_runs, ns_per_iteration};
use pmem::{
    CACHE_LINE, CpuFeatures, CreateOptions, FlushInstr, LatencyModel, Native, NativeInfo,
    NativeOptions, Persist, PersistMode, Pool, PoolError, Region, WriteClass,
};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Bytes of the region the benchmarks sweep: several times a typical L2, so a persist loop
/// keeps finding lines it dirtied one pass ago rather than lines that are still hot.
pub const REGION_BYTES: u64 = 8 << 20;
/// Transfer sizes of the copy comparison.
pub const COPY_SIZES: [u64; 7] = [64, 128, 256, 512, 1024, 2048, 4096];
/// Fewest iterations a timed batch runs, whatever the scale (keeps clock granularity small
/// against the batch).
pub const MIN_ITERATIONS: u64 = 256;

/// Layout name of the benchmark's scratch pools.
const LAYOUT: &str = "ferrite-bench-substrate";
/// Cache lines in the swept region.
const REGION_LINES: u64 = REGION_BYTES / CACHE_LINE;
/// Header, root page and slack around the swept region.
const POOL_BYTES: u64 = REGION_BYTES + (1 << 20);
/// Bare fences per run at scale 1 (a fence with nothing pending is cheap).
const BARE_FENCES: u64 = 1 << 20;

/// How long to measure.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Timed runs per number; the number reported is their median.
    pub runs: usize,
    /// Multiplier on each run's iteration count (1.0 sweeps the region once per run).
    pub iterations_scale: f64,
}

impl Default for Settings {
    /// Seven runs, each sweeping the whole region once.
    fn default() -> Self {
        Settings {
            runs: 7,
            iterations_scale: 1.0,
        }
    }
}

impl Settings {
    /// A few short runs, for tests and smoke checks: the numbers are noisy.
    pub fn quick() -> Self {
        Settings {
            runs: 3,
            iterations_scale: 0.02,
        }
    }

    /// The iteration count of one run for a benchmark whose full-scale count is `base`.
    pub fn iterations(&self, base: u64) -> u64 {
        let scaled = (base as f64 * self.iterations_scale).round();
        // `as` saturates for out-of-range floats and maps NaN to 0; the floor handles both.
        (scaled as u64).max(MIN_ITERATIONS)
    }
}

/// Facts about the machine the numbers were taken on.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// `model name` from `/proc/cpuinfo` ("unknown" when absent).
    pub cpu_model: String,
    /// Logical CPUs available to this process.
    pub logical_cpus: usize,
    /// Persistence-related CPUID features.
    pub features: CpuFeatures,
    /// Flush instructions this CPU implements, best first.
    pub supported_flushes: Vec<FlushInstr>,
    /// The flush instruction Ferrite uses by default here.
    pub best_flush: FlushInstr,
    /// What the native backend reported for the pool of the copy and fence benchmarks.
    pub backend: NativeInfo,
    /// Directory the scratch pools were created in.
    pub pool_dir: String,
}

/// Cost of persisting 64 bytes with one flush instruction.
#[derive(Clone, Debug, Serialize)]
pub struct PersistCost {
    /// The flush instruction.
    pub flush: FlushInstr,
    /// Nanoseconds per store + flush + fence of one line.
    pub ns: Summary,
}

/// Non-temporal copy against cached stores plus flush, for one transfer size.
#[derive(Clone, Debug, Serialize)]
pub struct CopyCost {
    /// Bytes per operation.
    pub bytes: u64,
    /// `write_nt` + fence: nanoseconds per operation.
    pub nt_ns: Summary,
    /// `write_nt` + fence: throughput.
    pub nt_gb_per_s: Summary,
    /// `write` + `flush` + fence: nanoseconds per operation.
    pub store_flush_ns: Summary,
    /// `write` + `flush` + fence: throughput.
    pub store_flush_gb_per_s: Summary,
}

impl CopyCost {
    /// Whether the non-temporal copy was faster (by median) than store + flush.
    pub fn nt_faster(&self) -> bool {
        self.nt_ns.median < self.store_flush_ns.median
    }
}

/// What a fence costs.
#[derive(Clone, Debug, Serialize)]
pub struct FenceCost {
    /// A fence with no flush or non-temporal store pending.
    pub bare_ns: Summary,
    /// One 8-byte non-temporal store followed by the fence that completes it.
    pub after_nt_store_ns: Summary,
}

/// Everything the substrate benchmark measured.
#[derive(Clone, Debug, Serialize)]
pub struct SubstrateResults {
    /// Where the numbers come from.
    pub machine: Machine,
    /// How long each number was measured.
    pub settings: Settings,
    /// Persist cost per supported flush instruction, best instruction first.
    pub persist_64b: Vec<PersistCost>,
    /// Flush instruction used by the store + flush side of the copy comparison.
    pub copy_flush: FlushInstr,
    /// Copy comparison, one entry per size of [`COPY_SIZES`].
    pub copy: Vec<CopyCost>,
    /// Fence costs.
    pub fence: FenceCost,
}

impl SubstrateResults {
    /// The persist cost of `flush`, if it was measured.
    pub fn persist_cost(&self, flush: FlushInstr) -> Option<&PersistCost> {
        self.persist_64b.iter().find(|cost| cost.flush == flush)
    }
}

/// Flush instructions this CPU implements, best first.
pub fn supported_flushes() -> Vec<FlushInstr> {
    FlushInstr::ALL
        .into_iter()
        .filter(|flush| flush.is_supported())
        .collect()
}

/// Progress steps [`run_in`] reports: one per flush instruction, per copy size, and one for
/// the fences.
pub fn planned_steps() -> usize {
    supported_flushes().len() + COPY_SIZES.len() + 1
}

/// Runs the benchmark in [`pmem::DEFAULT_POOL_DIR`] without progress reports.
pub fn run(settings: &Settings) -> Result<SubstrateResults, PoolError> {
    run_in(Path::new(pmem::DEFAULT_POOL_DIR), settings, &mut |_| {})
}

/// Runs the benchmark with scratch pools in a fresh temporary directory under `dir` (removed
/// afterwards, also on error). `progress` is called after each of the [`planned_steps`]
/// steps with a short description of what was just measured.
pub fn run_in(
    dir: &Path,
    settings: &Settings,
    progress: &mut dyn FnMut(&str),
) -> Result<SubstrateResults, PoolError> {
    let scratch = crate::scratch::ScratchDir::new_in(dir, "ferrite-bench-")?;
    let flushes = supported_flushes();
    let mut persist_64b = Vec::with_capacity(flushes.len());
    for &flush in &flushes {
        let pool = ScratchPool::create(scratch.path(), "persist", flush)?;
        let ns = pool.measure(settings, REGION_LINES, persist_line::<Native>);
        pool.close()?;
        progress(&format!("persist 64 B with {}", flush.name()));
        persist_64b.push(PersistCost { flush, ns });
    }
    let best_flush = FlushInstr::best_available();
    let pool = ScratchPool::create(scratch.path(), "copy-fence", best_flush)?;
    let copy = measure_copies(&pool, settings, progress);
    let fence = measure_fences(&pool, settings);
    progress("fences");
    let backend = pool.pool.pm().info();
    pool.close()?;
    Ok(SubstrateResults {
        machine: Machine {
            cpu_model: cpu_model_name(),
            logical_cpus: std::thread::available_parallelism().map_or(1, usize::from),
            features: CpuFeatures::detect(),
            supported_flushes: flushes,
            best_flush,
            backend,
            pool_dir: dir.display().to_string(),
        },
        settings: *settings,
        persist_64b,
        copy_flush: best_flush,
        copy,
        fence,
    })
}

fn measure_copies(
    pool: &ScratchPool,
    settings: &Settings,
    progress: &mut dyn FnMut(&str),
) -> Vec<CopyCost> {
    COPY_SIZES
        .iter()
        .map(|&bytes| {
            let base = REGION_BYTES / bytes;
            let nt_ns = pool.measure(settings, base, |pm, region, i| {
                copy_nt(pm, region, bytes, i);
            });
            let store_flush_ns = pool.measure(settings, base, |pm, region, i| {
                copy_store_flush(pm, region, bytes, i);
            });
            progress(&format!("copy {bytes} B"));
            CopyCost {
                bytes,
                nt_ns,
                nt_gb_per_s: nt_ns.to_gb_per_s(bytes),
                store_flush_ns,
                store_flush_gb_per_s: store_flush_ns.to_gb_per_s(bytes),
            }
        })
        .collect()
}

fn measure_fences(pool: &ScratchPool, settings: &Settings) -> FenceCost {
    FenceCost {
        bare_ns: pool.measure(settings, BARE_FENCES, |pm, _, _| pm.fence()),
        after_nt_store_ns: pool.measure(settings, REGION_LINES, fence_after_nt_store::<Native>),
    }
}

/// One iteration of the persist benchmark: dirty line `i` of the sweep, write it back, fence.
fn persist_line<P: Persist>(pm: &P, region: Region, i: u64) {
    let off = region.offset + (i % REGION_LINES) * CACHE_LINE;
    let mut line = [0x5Au8; CACHE_LINE as usize];
    // Vary the stored bytes so no layer could treat the store as redundant.
    line[..8].copy_from_slice(&i.to_le_bytes());
    pm.write(off, &line, WriteClass::User);
    pm.flush(off, CACHE_LINE);
    pm.fence();
}

/// Offset of the `i`-th `bytes`-sized slot of the sweep (slots are line-aligned, since every
/// copy size is a multiple of the line size).
fn copy_slot(region: Region, bytes: u64, i: u64) -> u64 {
    region.offset + (i % (REGION_BYTES / bytes)) * bytes
}

/// The source of every copy; its contents do not matter.
static COPY_SOURCE: [u8; 4096] = [0xC3; 4096];

fn copy_nt<P: Persist>(pm: &P, region: Region, bytes: u64, i: u64) {
    let off = copy_slot(region, bytes, i);
    pm.write_nt(off, &COPY_SOURCE[..bytes as usize], WriteClass::User);
    pm.fence();
}

fn copy_store_flush<P: Persist>(pm: &P, region: Region, bytes: u64, i: u64) {
    let off = copy_slot(region, bytes, i);
    pm.write(off, &COPY_SOURCE[..bytes as usize], WriteClass::User);
    pm.flush(off, bytes);
    pm.fence();
}

fn fence_after_nt_store<P: Persist>(pm: &P, region: Region, i: u64) {
    let off = region.offset + (i % REGION_LINES) * CACHE_LINE;
    pm.write_nt(off, &i.to_le_bytes(), WriteClass::User);
    pm.fence();
}

/// A native pool in ADR mode with a given flush instruction, its sweep region pre-faulted.
/// Its file is removed when it is closed (the enclosing temporary directory removes it on
/// an error path).
struct ScratchPool {
    pool: Pool<Native>,
    region: Region,
    path: PathBuf,
}

impl ScratchPool {
    fn create(dir: &Path, purpose: &str, flush: FlushInstr) -> Result<Self, PoolError> {
        let mut options = CreateOptions::new(LAYOUT, POOL_BYTES);
        options.native = NativeOptions {
            mode: Some(PersistMode::Adr),
            flush: Some(flush),
            latency: LatencyModel::NONE,
        };
        let path = dir.join(format!("{purpose}-{}.pool", flush.name()));
        let pool = Pool::create(&path, &options)?;
        let region = Region {
            offset: pool.arena().offset,
            len: REGION_BYTES,
        };
        // Touch every page now so page faults do not land in the first timed run.
        pool.pm()
            .fill(region.offset, region.len, 0, WriteClass::User);
        pool.pm().persist(region.offset, region.len);
        Ok(ScratchPool { pool, region, path })
    }

    /// One untimed warm-up run, then the median of `settings.runs` timed runs of
    /// `settings.iterations(base)` iterations of `body`, in nanoseconds per iteration.
    fn measure(
        &self,
        settings: &Settings,
        base: u64,
        body: impl Fn(&Native, Region, u64),
    ) -> Summary {
        let iterations = settings.iterations(base);
        // The concrete backend type, not `dyn Persist`: engines are generic over the seam, so
        // an indirect call per operation would be a cost they never pay.
        let pm = self.pool.pm();
        let one_run = || ns_per_iteration(iterations, |i| body(pm, self.region, i));
        one_run();
        median_of_runs(settings.runs, one_run)
    }

    fn close(self) -> Result<(), PoolError> {
        self.pool.close()?;
        Ok(std::fs::remove_file(&self.path)?)
    }
}

/// The CPU's marketing name from `/proc/cpuinfo`.
fn cpu_model_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| model_name_of(&text))
        .unwrap_or_else(|| "unknown".to_owned())
}

fn model_name_of(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(key, _)| key.trim() == "model name")
        .map(|(_, value)| value.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_name_is_read_from_the_first_processor() {
        let text = "processor\t: 0\nvendor_id\t: X\nmodel name\t: Example CPU @ 3.0GHz\n\n\
                    processor\t: 1\nmodel name\t: Other\n";
        assert_eq!(model_name_of(text).as_deref(), Some("Example CPU @ 3.0GHz"));
        assert_eq!(model_name_of("processor : 0\n"), None);
    }

    #[test]
    fn iterations_scale_with_a_floor() {
        let settings = Settings {
            runs: 1,
            iterations_scale: 0.5,
        };
        assert_eq!(settings.iterations(10_000), 5_000);
        assert_eq!(settings.iterations(10), MIN_ITERATIONS);
        let broken = Settings {
            runs: 1,
            iterations_scale: f64::NAN,
        };
        assert_eq!(broken.iterations(10_000), MIN_ITERATIONS);
    }

    #[test]
    fn copy_slots_stay_inside_the_region_and_line_aligned() {
        let region = Region {
            offset: 8192,
            len: REGION_BYTES,
        };
        for bytes in COPY_SIZES {
            for i in [
                0,
                1,
                REGION_BYTES / bytes - 1,
                REGION_BYTES / bytes,
                u64::MAX,
            ] {
                let off = copy_slot(region, bytes, i);
                assert!(region.contains(off, bytes), "size {bytes} iteration {i}");
                assert_eq!(off % CACHE_LINE, 0);
            }
        }
    }

    #[test]
    fn quick_run_measures_everything_and_cleans_up() {
        let dir = tempfile::tempdir_in(pmem::DEFAULT_POOL_DIR).expect("scratch dir in /dev/shm");
        let mut steps = Vec::new();
        let results = run_in(dir.path(), &Settings::quick(), &mut |step| {
            steps.push(step.to_owned())
        })
        .expect("benchmark runs");
        assert_eq!(steps.len(), planned_steps());
        assert_eq!(results.persist_64b.len(), supported_flushes().len());
        assert!(results.persist_cost(FlushInstr::Clflush).is_some());
        assert_eq!(results.copy.len(), COPY_SIZES.len());
        let all_ns = results
            .persist_64b
            .iter()
            .map(|cost| cost.ns)
            .chain(
                results
                    .copy
                    .iter()
                    .flat_map(|c| [c.nt_ns, c.store_flush_ns]),
            )
            .chain([results.fence.bare_ns, results.fence.after_nt_store_ns]);
        for ns in all_ns {
            assert!(
                ns.min > 0.0 && ns.min <= ns.median && ns.median <= ns.max,
                "{ns:?}"
            );
            assert_eq!(ns.runs, Settings::quick().runs);
        }
        assert_eq!(results.machine.backend.mode, PersistMode::Adr);
        let left_over = std::fs::read_dir(dir.path())
            .expect("list scratch dir")
            .count();
        assert_eq!(left_over, 0, "the benchmark's temporary pools were removed");
        serde_json::to_string(&results).expect("results serialise");
    }
}
