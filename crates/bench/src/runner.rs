//! The benchmark runner: one (engine, workload, threads) configuration on a fresh pool.
//!
//! Setup is untimed. Then `runs` timed runs of `ops` operations each (split over the
//! threads, which start together at a barrier); throughput is the median over runs; latency
//! percentiles pool every timed operation; PM traffic is the seam's counter delta over the
//! timed runs, divided per operation and per commit.

use crate::choice::{
    BenchOps, EngineChoice, EngineVisitor, OpenError, WorkloadChoice, WorkloadVisitor,
    with_engine_ops, with_workload,
};
use crate::measure::Summary;
use pmem::{Counters, WriteClass};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Barrier;
use std::time::Instant;
use tx::{Engine, TxError};
use workloads::{OpKind, Params, Workload};

/// One configuration to measure.
#[derive(Clone, Debug, Serialize)]
pub struct RunSpec {
    /// Engine.
    pub engine: EngineChoice,
    /// Workload.
    pub workload: WorkloadChoice,
    /// Workload parameters (`params.threads` is the thread count).
    pub params: Params,
    /// Operations per timed run, over all threads.
    pub ops: u64,
    /// Untimed operations before the first run, over all threads.
    pub warmup_ops: u64,
    /// Timed runs.
    pub runs: usize,
    /// Directory for the pool file.
    pub pool_dir: PathBuf,
    /// Pool size in bytes.
    pub pool_size: u64,
}

/// Per-operation PM traffic.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Traffic {
    /// Fences per operation.
    pub fences_per_op: f64,
    /// Cache lines flushed per operation.
    pub flushes_per_op: f64,
    /// Fences per committed update transaction (`None` without commits or counters).
    pub fences_per_commit: Option<f64>,
    /// Flushed lines per committed update transaction.
    pub flushes_per_commit: Option<f64>,
    /// PM bytes stored per operation, all classes.
    pub pm_bytes_per_op: f64,
    /// Log bytes per operation.
    pub log_bytes_per_op: f64,
    /// User bytes requested per operation.
    pub user_bytes_per_op: f64,
    /// PM bytes per user byte.
    pub write_amplification: Option<f64>,
    /// Flushed and streamed lines' bytes per user byte.
    pub media_write_amplification: Option<f64>,
}

/// The result of one configuration.
#[derive(Clone, Debug, Serialize)]
pub struct Measurement {
    /// Engine.
    pub engine: String,
    /// Workload (with parameters in its name).
    pub workload: String,
    /// Threads.
    pub threads: usize,
    /// Timed operations in total.
    pub ops: u64,
    /// Operations per second, over runs.
    pub throughput: Summary,
    /// Latency percentiles in nanoseconds: p50, p99, p99.9.
    pub latency_ns: [u64; 3],
    /// PM traffic.
    pub traffic: Traffic,
    /// Raw counter delta over the timed runs.
    pub counters: Counters,
    /// Operations by kind.
    pub mix: BTreeMap<String, u64>,
    /// The engine's own event counters over the timed runs (empty for most engines; see
    /// `tx::Engine::event_counters`). Gauges such as `headers` hold their value at the end.
    pub events: BTreeMap<String, u64>,
    /// Whether the workload's invariant checker passed after the runs.
    pub checked: bool,
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The engine could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The workload could not be built.
    #[error("workload: {0}")]
    Workload(String),
    /// An operation failed.
    #[error("operation failed: {0}")]
    Operation(#[from] TxError),
    /// The invariant checker failed after the run.
    #[error("invariant check failed after the run: {0}")]
    Check(String),
    /// The configuration does not exist (the raw reference has only some workloads and one
    /// thread).
    #[error("not measurable: {0}")]
    Unsupported(String),
}

/// Runs `spec`, calling `progress(done_ops)` now and then.
pub fn run(spec: &RunSpec, progress: &(dyn Fn(u64) + Sync)) -> Result<Measurement, RunError> {
    if let EngineChoice::Raw(durability) = spec.engine {
        return crate::raw::run(spec, durability, progress);
    }
    let name = crate::scratch::unique_name("bench");
    let path = spec.pool_dir.join(name);
    with_engine_ops(
        spec.engine,
        &path,
        spec.pool_size,
        BenchOps::of(spec.workload, &spec.params),
        OnEngine { spec, progress },
    )?
}

struct OnEngine<'a> {
    spec: &'a RunSpec,
    progress: &'a (dyn Fn(u64) + Sync),
}

impl EngineVisitor for OnEngine<'_> {
    type Output = Result<Measurement, RunError>;

    fn visit<E: Engine>(self, engine: &E) -> Self::Output {
        let visitor = OnWorkload {
            spec: self.spec,
            progress: self.progress,
            engine,
        };
        with_workload(self.spec.workload, &self.spec.params, visitor).map_err(RunError::Workload)?
    }
}

struct OnWorkload<'a, E: Engine> {
    spec: &'a RunSpec,
    progress: &'a (dyn Fn(u64) + Sync),
    engine: &'a E,
}

impl<E: Engine> WorkloadVisitor for OnWorkload<'_, E> {
    type Output = Result<Measurement, RunError>;

    fn visit<W: Workload>(self, workload: W) -> Self::Output {
        measure(self.spec, self.engine, &workload, self.progress)
    }
}

/// Every this many operations of a thread, one is timed for the latency percentiles (timing
/// every operation would add two clock reads to each and compress the faster engines' lead).
const LATENCY_SAMPLE: u64 = 8;

/// What one thread saw in one run.
struct ThreadLog {
    latencies: Vec<u32>,
    /// Operations by kind, indexed by [`OpKind::index`].
    mix: [u64; OpKind::ALL.len()],
    /// When the thread passed the start barrier and when it finished.
    span: (Instant, Instant),
}

/// What the timing loop measures: operations by (thread, index), the work they defer, and the
/// counters they move. An engine running a workload is one; a raw reference another.
pub(crate) trait Subject: Sync {
    /// Runs operation `index` of `thread`.
    fn run_op(&self, thread: usize, index: u64) -> Result<OpKind, TxError>;
    /// Completes the work the operations deferred (charged to them).
    fn sync(&self) -> Result<(), TxError>;
    /// PM traffic so far.
    fn counters(&self) -> Counters;
    /// Own event counters so far, by name.
    fn event_counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// A workload running on an engine.
struct OnEngineWorkload<'a, E, W> {
    engine: &'a E,
    workload: &'a W,
}

impl<E: Engine, W: Workload> Subject for OnEngineWorkload<'_, E, W> {
    #[inline]
    fn run_op(&self, thread: usize, index: u64) -> Result<OpKind, TxError> {
        self.workload.run_op(self.engine, thread, index)
    }

    fn sync(&self) -> Result<(), TxError> {
        self.engine.sync()
    }

    fn counters(&self) -> Counters {
        self.engine.counters()
    }

    fn event_counters(&self) -> Vec<(&'static str, u64)> {
        self.engine.event_counters()
    }
}

fn measure<E: Engine, W: Workload>(
    spec: &RunSpec,
    engine: &E,
    workload: &W,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Measurement, RunError> {
    workload.setup(engine)?;
    let mut measurement = measure_subject(
        spec,
        workload.name(),
        &OnEngineWorkload { engine, workload },
        progress,
    )?;
    workload.check(engine).map_err(RunError::Check)?;
    measurement.checked = true;
    Ok(measurement)
}

/// Warms `subject` up, then times `spec.runs` runs of it (everything after its setup and
/// before its check).
pub(crate) fn measure_subject<S: Subject>(
    spec: &RunSpec,
    workload: String,
    subject: &S,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Measurement, RunError> {
    let threads = spec.params.threads.max(1);
    let per_thread = |total: u64| total.div_ceil(threads as u64);
    let mut next_index = 0u64;
    run_ops(
        subject,
        threads,
        next_index,
        per_thread(spec.warmup_ops),
        &|_| {},
    )?;
    next_index += per_thread(spec.warmup_ops);
    // The setup's and warm-up's deferred persistence work is not charged to the first run.
    subject.sync()?;
    let before = subject.counters();
    let events_before: BTreeMap<&str, u64> = subject.event_counters().into_iter().collect();
    let mut rates = Vec::with_capacity(spec.runs);
    let mut logs = Vec::new();
    for run in 0..spec.runs.max(1) {
        let done = run as u64 * spec.ops;
        let report = |n: u64| progress(done + n);
        let mut run_logs = run_ops(subject, threads, next_index, per_thread(spec.ops), &report)?;
        // Deferred persistence work (redo's write-backs) belongs to these operations.
        subject.sync()?;
        let end = Instant::now();
        let start = run_logs.iter().map(|log| log.span.0).min().unwrap_or(end);
        let elapsed = end.duration_since(start).as_secs_f64().max(1e-9);
        next_index += per_thread(spec.ops);
        rates.push((per_thread(spec.ops) * threads as u64) as f64 / elapsed);
        logs.append(&mut run_logs);
    }
    let counters = subject.counters().since(&before);
    let events = subject
        .event_counters()
        .into_iter()
        .map(|(name, value)| {
            let delta = match name {
                "headers" => value,
                _ => value.saturating_sub(events_before.get(name).copied().unwrap_or(0)),
            };
            (name.to_string(), delta)
        })
        .collect();
    let ops = per_thread(spec.ops) * threads as u64 * spec.runs.max(1) as u64;
    let mut measurement = summarise(spec, workload, rates, logs, counters, ops);
    measurement.events = events;
    Ok(measurement)
}

/// Runs `count` operations per thread from `first_index`, all threads released together.
fn run_ops<S: Subject>(
    subject: &S,
    threads: usize,
    first_index: u64,
    count: u64,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Vec<ThreadLog>, RunError> {
    let barrier = Barrier::new(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let mut latencies = Vec::with_capacity((count / LATENCY_SAMPLE) as usize + 1);
                    let mut mix = [0u64; OpKind::ALL.len()];
                    barrier.wait();
                    let started = Instant::now();
                    for i in 0..count {
                        let index = first_index + i;
                        let kind = if i.is_multiple_of(LATENCY_SAMPLE) {
                            let start = Instant::now();
                            let kind = subject.run_op(thread, index)?;
                            latencies
                                .push(start.elapsed().as_nanos().min(u128::from(u32::MAX)) as u32);
                            kind
                        } else {
                            subject.run_op(thread, index)?
                        };
                        mix[kind.index()] += 1;
                        if thread == 0 && i % 4096 == 4095 {
                            progress((i + 1) * threads as u64);
                        }
                    }
                    Ok::<_, TxError>(ThreadLog {
                        latencies,
                        mix,
                        span: (started, Instant::now()),
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                    .map_err(RunError::from)
            })
            .collect()
    })
}

fn summarise(
    spec: &RunSpec,
    workload: String,
    rates: Vec<f64>,
    logs: Vec<ThreadLog>,
    counters: Counters,
    ops: u64,
) -> Measurement {
    let mut latencies: Vec<u32> = logs
        .iter()
        .flat_map(|l| l.latencies.iter().copied())
        .collect();
    latencies.sort_unstable();
    let percentile = |p: f64| -> u64 {
        if latencies.is_empty() {
            return 0;
        }
        let index = ((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1;
        u64::from(latencies[index])
    };
    let mut mix = BTreeMap::new();
    for log in &logs {
        for (kind, &n) in OpKind::ALL.iter().zip(&log.mix).filter(|(_, n)| **n > 0) {
            *mix.entry(format!("{kind:?}")).or_default() += n;
        }
    }
    let per_op = |value: u64| value as f64 / ops.max(1) as f64;
    let commits = counters.durability_points;
    let traffic = Traffic {
        fences_per_op: per_op(counters.fences),
        flushes_per_op: per_op(counters.flushed_lines),
        fences_per_commit: Counters::ratio(counters.fences, commits),
        flushes_per_commit: Counters::ratio(counters.flushed_lines, commits),
        pm_bytes_per_op: per_op(counters.pm_bytes()),
        log_bytes_per_op: per_op(counters.class_bytes(WriteClass::Log)),
        user_bytes_per_op: per_op(counters.user_bytes),
        write_amplification: (counters.pm_bytes() > 0)
            .then(|| counters.write_amplification())
            .flatten(),
        media_write_amplification: (counters.pm_bytes() > 0)
            .then(|| counters.media_write_amplification())
            .flatten(),
    };
    Measurement {
        engine: spec.engine.to_string(),
        workload,
        threads: spec.params.threads.max(1),
        ops,
        throughput: Summary::of(&rates).unwrap_or(Summary {
            median: 0.0,
            min: 0.0,
            max: 0.0,
            runs: 0,
        }),
        latency_ns: [percentile(0.50), percentile(0.99), percentile(0.999)],
        traffic,
        counters,
        mix,
        events: BTreeMap::new(),
        checked: false,
    }
}
