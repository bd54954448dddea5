//! The page micro-benchmark of NVthreads (EuroSys'17, §5): threads modify a percentage of
//! each of their pages inside one critical section per round; NVthreads (page tracking and
//! one redo record per section, `eval/pagebench.c`) against the same work on the
//! fine-grained `undo` engine of `tx`, where every 8-byte store's old value is logged and
//! persisted before the store (the store-level tracking of Atlas and Mnemosyne).

use super::{
    PAGE_BENCH_PROGRAM, PoolSizes, ProgramError, Programs, Settings, Stats, Variant, median, run,
    runtime_env, seconds,
};
use crate::scratch::child_command;
use nvthreads_programs::Link;
use pmem::{CreateOptions, LatencyModel, NativeOptions, Pool};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Instant;
use tx::{Engine, EngineOptions, PPtr, Tx, TxError, Undo};

/// The page micro-benchmark's shape.
#[derive(Clone, Copy, Debug)]
pub struct PageBench {
    /// Threads (4 in the paper).
    pub threads: usize,
    /// Pages in all (1000 in the paper).
    pub pages: u64,
}

/// The paper's configuration.
pub const PAGE_BENCH: PageBench = PageBench {
    threads: 4,
    pages: 1000,
};

/// The percentages of each page modified, as in the paper's figure.
pub const PAGE_PERCENTS: [u64; 6] = [5, 10, 25, 50, 75, 100];

/// Emulated latencies, ns per 4 KiB page written (the paper: 1000).
const PAGE_LATENCIES: [u64; 2] = [0, 1000];

/// One point of the page micro-benchmark: seconds per round of each engine.
#[derive(Clone, Copy, Debug)]
pub struct PagePoint {
    /// Emulated NVM latency, ns per 4 KiB written.
    pub latency_ns: u64,
    /// Percent of each page modified per round.
    pub percent: u64,
    /// Plain pthreads, seconds per round (median).
    pub pthreads_s: f64,
    /// NVthreads with every `malloc` persistent, seconds per round (median).
    pub nvthreads_s: f64,
    /// The `undo` engine, seconds per round (median).
    pub undo_s: f64,
    /// Bytes of redo records NVthreads wrote (all rounds of one run).
    pub nvthreads_logged: u64,
    /// Rounds of one NVthreads run.
    pub nvthreads_rounds: u64,
}

impl PagePoint {
    /// NVthreads against pthreads.
    pub fn nvthreads_slowdown(&self) -> f64 {
        self.nvthreads_s / self.pthreads_s
    }

    /// The undo engine against pthreads.
    pub fn undo_slowdown(&self) -> f64 {
        self.undo_s / self.pthreads_s
    }

    /// How much faster NVthreads is than the undo engine.
    pub fn speedup(&self) -> f64 {
        self.undo_s / self.nvthreads_s
    }
}

/// The latencies measured (quick: the paper's 1000 ns only).
pub fn latencies(quick: bool) -> &'static [u64] {
    if quick {
        &PAGE_LATENCIES[1..]
    } else {
        &PAGE_LATENCIES
    }
}

/// Rounds per run of pthreads, NVthreads and undo, so each run stays short: pthreads is
/// fast, NVthreads pays per page, the fine-grained engine per 8-byte store.
fn page_rounds(percent: u64, quick: bool) -> (u64, u64, u64) {
    let words = PAGE_BENCH.pages * (512 * percent / 100);
    let scale = if quick { 8 } else { 1 };
    let undo = (1_000_000 / words / scale).clamp(2, 200);
    ((200 / scale).max(10), (30 / scale).max(4), undo)
}

/// Every latency × percentage point, each engine measured `settings.runs` times.
pub fn page_benchmark(
    programs: &Programs,
    settings: &Settings,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<PagePoint>, ProgramError> {
    let mut points = Vec::new();
    for &latency_ns in latencies(settings.quick) {
        for &percent in &PAGE_PERCENTS {
            let (plain_rounds, nvt_rounds, undo_rounds) = page_rounds(percent, settings.quick);
            progress(&format!("pages {percent}% pthreads"));
            let (pthreads_s, _) = page_round_time(
                programs,
                settings,
                Variant::Pthreads,
                percent,
                plain_rounds,
                0,
            )?;
            progress(&format!("pages {percent}% nvthreads, {latency_ns} ns/page"));
            let (nvthreads_s, stats) = page_round_time(
                programs,
                settings,
                Variant::PersistentMalloc,
                percent,
                nvt_rounds,
                latency_ns,
            )?;
            progress(&format!("pages {percent}% undo, {latency_ns} ns/page"));
            let undo_s = undo_round_time(settings, percent, undo_rounds, latency_ns)?;
            points.push(PagePoint {
                latency_ns,
                percent,
                pthreads_s,
                nvthreads_s,
                undo_s,
                nvthreads_logged: stats.log_bytes,
                nvthreads_rounds: nvt_rounds,
            });
        }
    }
    Ok(points)
}

/// Median seconds per round of the C page benchmark (`rounds` rounds per run) under
/// `variant` (`Pthreads`, or `PersistentMalloc` with `ns_per_page` of emulated latency),
/// with the counters of the last run.
pub fn page_round_time(
    programs: &Programs,
    settings: &Settings,
    variant: Variant,
    percent: u64,
    rounds: u64,
    ns_per_page: u64,
) -> Result<(f64, Stats), ProgramError> {
    let mut per_round = Vec::new();
    let mut stats = Stats::default();
    for _ in 0..settings.runs {
        let link = match variant {
            Variant::Pthreads => Link::Pthreads,
            _ => Link::Runtime,
        };
        let mut command = child_command(programs.path(PAGE_BENCH_PROGRAM, link, false));
        command.args([
            PAGE_BENCH.threads.to_string(),
            PAGE_BENCH.pages.to_string(),
            percent.to_string(),
            rounds.to_string(),
        ]);
        let pool = programs.pool(PAGE_BENCH_PROGRAM);
        if link == Link::Runtime {
            // As in the paper (log truncation disabled), no checkpoint runs while the benchmark
            // is measured: the log holds twice the whole run (a checkpoint starts at half),
            // at most one page image per page and round.
            let log_mb = (2 * rounds * PAGE_BENCH.pages * 4200) >> 20;
            let sizes = PoolSizes {
                malloc_bytes: PAGE_BENCH.pages * 4096 + (1 << 20),
                persistent: variant == Variant::PersistentMalloc,
                ns_per_page,
                log_mb: Some(log_mb + 64),
            };
            runtime_env(&mut command, &pool, sizes);
        }
        let what = format!("pagebench {percent}% ({})", variant.name());
        let output = run(command, &what);
        let _ = std::fs::remove_file(&pool);
        let output = output?;
        per_round.push(seconds(&output.lines, &what)? / rounds as f64);
        stats = output.stats;
    }
    Ok((median(&per_round), stats))
}

/// Why the fine-grained side of the benchmark failed.
fn undo_error(context: &str, error: impl std::fmt::Display) -> ProgramError {
    ProgramError::Run {
        name: "page benchmark on the undo engine".to_owned(),
        detail: format!("{context}: {error}"),
    }
}

/// The fine-grained side of the micro-benchmark: the same work as `pagebench.c` on the
/// `undo` engine (4 threads, disjoint pages, one transaction per thread and round, every
/// 8-byte read-modify-write a `Tx` read and write, so each store's old value is logged and
/// persisted before it is made). Median seconds per round.
pub fn undo_round_time(
    settings: &Settings,
    percent: u64,
    rounds: u64,
    latency_ns: u64,
) -> Result<f64, ProgramError> {
    let words = 512 * percent / 100;
    let mut per_round = Vec::new();
    for run in 0..settings.runs {
        let path = settings.scratch.join(format!("undo-{percent}-{run}.pool"));
        let _ = std::fs::remove_file(&path);
        let mut create = CreateOptions::new("ferrite-nvthreads-eval", 192 << 20);
        let from_env = NativeOptions::default()
            .try_with_env_overrides()
            .map_err(|e| undo_error("the environment", e))?;
        create.native = NativeOptions {
            latency: LatencyModel {
                line_writeback_ns: latency_ns.div_ceil(64),
                fence_ns: 0,
            },
            ..from_env
        };
        let pool = Pool::create(&path, &create)
            .map_err(|e| undo_error(&format!("creating {}", path.display()), e))?;
        let engine_options = EngineOptions {
            lanes: PAGE_BENCH.threads as u32,
            lane_size: 24 << 20,
            chunk_shift: 22,
            ..EngineOptions::default()
        };
        let engine = Undo::create(pool, &engine_options)
            .map_err(|e| undo_error("formatting the undo engine", e))?;
        let region: PPtr = engine
            .transaction(|tx| tx.alloc_zeroed::<()>(PAGE_BENCH.pages * 4096))
            .map_err(|e| undo_error("allocating the pages", e))?;
        let seconds = timed_rounds(&engine, region, words, rounds)?;
        per_round.push(seconds / rounds as f64);
        drop(engine);
        let _ = std::fs::remove_file(&path);
    }
    Ok(median(&per_round))
}

/// One thread's rounds: one transaction per round over its pages `first..last`, each
/// modifying `words` consecutive words (wrapping) from a random start.
fn thread_rounds(
    engine: &Undo<pmem::Native>,
    region: PPtr,
    (first, last): (u64, u64),
    words: u64,
    rounds: u64,
    seed: u64,
) -> Result<(), TxError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for round in 0..rounds {
        engine.transaction(|tx| {
            for page in first..last {
                let start = rng.random_range(0..512);
                for w in 0..words {
                    let field = page * 4096 + (start + w) % 512 * 8;
                    let old = tx.read_u64(region, field)?;
                    let new = old
                        .wrapping_add((round + 1) * 0x1_0000_0001)
                        .wrapping_add(w);
                    tx.write_u64(region, field, new)?;
                }
            }
            Ok::<(), TxError>(())
        })?;
    }
    Ok(())
}

/// Runs `rounds` rounds on every thread at once; returns the seconds from the common start
/// to the last thread's end.
fn timed_rounds(
    engine: &Undo<pmem::Native>,
    region: PPtr,
    words: u64,
    rounds: u64,
) -> Result<f64, ProgramError> {
    let threads = PAGE_BENCH.threads as u64;
    let pages = PAGE_BENCH.pages;
    let barrier = std::sync::Barrier::new(PAGE_BENCH.threads + 1);
    let (elapsed, results) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                let span = (pages * t / threads, pages * (t + 1) / threads);
                scope.spawn(move || {
                    barrier.wait();
                    thread_rounds(engine, region, span, words, rounds, 0x9a9e + t)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        (start.elapsed(), results)
    });
    for result in results {
        match result {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(undo_error("a transaction failed", error)),
            Err(_) => return Err(undo_error("a thread panicked", "see stderr")),
        }
    }
    Ok(elapsed.as_secs_f64())
}
