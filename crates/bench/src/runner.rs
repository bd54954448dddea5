//! The benchmark runner: one (engine, workload, threads) configuration on a fresh pool.
//!
//! Setup is untimed. Then `runs` timed runs of `ops` operations each (split over the
//! threads, which start together at a barrier); throughput is the median over runs; latency
//! percentiles pool every timed operation; PM traffic is the seam's counter delta over the
//! timed runs, divided per operation and per commit.
//!
//! [`run_interleaved`] measures several engines on one configuration with their timed runs
//! taken in turn (engine A's first run, B's first, …, A's second, …), each engine on its own
//! pool kept open throughout, so that a change of the machine's speed during the
//! measurement hits every engine alike instead of the one measured at that moment.

use crate::choice::{
    BenchOps, EngineChoice, EngineVisitor, OpenError, WorkloadChoice, WorkloadVisitor,
    with_engine_ops, with_workload,
};
use crate::measure::Summary;
use pmem::{Counters, LatencyModel, WriteClass};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Barrier;
use std::sync::mpsc::{Receiver, Sender, channel};
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
    /// Emulated PM cost charged by Ferrite's pools (none by default): a spin per cache line
    /// written back and per fence, as the seeds' DRAM-based PM emulators did. PMDK writes
    /// PM through its own library, so it cannot be charged and is not measured with it.
    pub pm_latency: LatencyModel,
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

impl Measurement {
    /// Cache lines written back over the timed runs, flushed or streamed (a streamed run
    /// counted in whole lines): what an emulated PM cost charges per line (`pmem::native`).
    pub fn lines_written_back(&self) -> u64 {
        self.counters.media_bytes() / pmem::CACHE_LINE
    }
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
    /// Loading the workload's initial content (or laying out the raw reference) failed,
    /// before the first measured operation.
    #[error("loading the workload: {0}")]
    Setup(TxError),
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
    run_in_turn(spec, &Turn::Always, progress)
}

/// Runs every spec of `specs` (one configuration on several engines) with their timed runs
/// interleaved: each engine opens, sets up and warms up in turn, then the engines take turns
/// run by run (the first engine of each round moving one place on, so none is always first
/// after the same neighbour), then each checks its structure. Only one engine works at any
/// moment; all pools stay open until the last check. `progress(index, done_ops)` reports
/// spec `index`'s operations. Results come back in the order of `specs`.
pub fn run_interleaved(
    specs: &[RunSpec],
    progress: &(dyn Fn(usize, u64) + Sync),
) -> Vec<Result<Measurement, RunError>> {
    if !room_for_every_pool(specs) {
        return specs
            .iter()
            .enumerate()
            .map(|(index, spec)| run(spec, &|n| progress(index, n)))
            .collect();
    }
    interleave(specs.len(), &|index, turn| {
        run_in_turn(&specs[index], turn, &|n| progress(index, n))
    })
}

/// Whether the pools of all `specs` fit in their directories at once (pools are allocated
/// whole). When they do not, the specs run one after another, each pool removed before the
/// next is made, as a lone run would; an unknown amount of room counts as enough.
fn room_for_every_pool(specs: &[RunSpec]) -> bool {
    let mut wanted: BTreeMap<&std::path::Path, u64> = BTreeMap::new();
    for spec in specs {
        *wanted.entry(&spec.pool_dir).or_default() += spec.pool_size;
    }
    wanted.into_iter().all(|(dir, bytes)| {
        rustix::fs::statvfs(dir)
            .map(|room| bytes <= room.f_bavail.saturating_mul(room.f_frsize))
            .unwrap_or(true)
    })
}

/// Runs `driver(index, turn)` for every index below `count`, each on its own thread, one at
/// a time: a driver works only between receiving its turn and passing it on
/// ([`Turn::pass`]) or returning. Results in index order.
pub(crate) fn interleave<R: Send>(
    count: usize,
    driver: &(dyn Fn(usize, &Turn) -> R + Sync),
) -> Vec<R> {
    let (done_tx, done_rx) = channel();
    std::thread::scope(|scope| {
        let mut gos = Vec::with_capacity(count);
        let drivers: Vec<_> = (0..count)
            .map(|index| {
                let (go_tx, go_rx) = channel();
                gos.push(go_tx);
                let turn = Turn::Given(Baton {
                    go: go_rx,
                    done: done_tx.clone(),
                });
                scope.spawn(move || {
                    let _finished = Finished(&turn);
                    turn.wait();
                    driver(index, &turn)
                })
            })
            .collect();
        drop(done_tx);
        hand_out_turns(&gos, &done_rx);
        drivers
            .into_iter()
            .map(|driver| {
                driver
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

/// Gives each driver that has not finished one turn per round, round after round, until
/// every driver has finished; round `r` starts with driver `r mod n`.
fn hand_out_turns(gos: &[Sender<()>], done: &Receiver<Step>) {
    let mut running = vec![true; gos.len()];
    let mut round = 0;
    while running.contains(&true) {
        for offset in 0..gos.len() {
            let index = (round + offset) % gos.len();
            if !running[index] {
                continue;
            }
            if gos[index].send(()).is_err() {
                running[index] = false;
                continue;
            }
            // Only this driver works now, so the next report is its own.
            match done.recv() {
                Ok(Step::Passed) => {}
                Ok(Step::Finished) | Err(_) => running[index] = false,
            }
        }
        round += 1;
    }
}

/// What a driver reports when it hands its turn back.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// It finished a step and waits for its next turn.
    Passed,
    /// It has nothing more to do.
    Finished,
}

/// When a measurement may do its next step (open and warm up, one timed run, check).
pub(crate) enum Turn {
    /// Whenever it likes: it runs alone.
    Always,
    /// When an interleaving coordinator hands it the baton.
    Given(Baton),
}

/// A driver's end of the coordinator's channels.
pub(crate) struct Baton {
    go: Receiver<()>,
    done: Sender<Step>,
}

impl Turn {
    /// Waits for this measurement's turn.
    fn wait(&self) {
        if let Turn::Given(baton) = self {
            // A coordinator that has gone away hands out no turns: run on.
            let _ = baton.go.recv();
        }
    }

    /// Ends this step and waits for the next turn.
    pub(crate) fn pass(&self) {
        self.report(Step::Passed);
        self.wait();
    }

    fn report(&self, step: Step) {
        if let Turn::Given(baton) = self {
            let _ = baton.done.send(step);
        }
    }
}

/// Reports a driver's end when it returns or unwinds, so the coordinator never waits for a
/// driver that has stopped.
struct Finished<'a>(&'a Turn);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.0.report(Step::Finished);
    }
}

fn run_in_turn(
    spec: &RunSpec,
    turn: &Turn,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Measurement, RunError> {
    if let EngineChoice::Raw(durability) = spec.engine {
        return crate::raw::run(spec, durability, turn, progress);
    }
    if spec.engine == EngineChoice::Pmdk && spec.pm_latency.is_enabled() {
        return Err(RunError::Unsupported(
            "PMDK writes PM through its own library, which emulated PM latency cannot charge"
                .into(),
        ));
    }
    let name = crate::scratch::unique_name("bench");
    let path = spec.pool_dir.join(name);
    with_engine_ops(
        spec.engine,
        &path,
        spec.pool_size,
        spec.pm_latency,
        BenchOps::of(spec.workload, &spec.params),
        OnEngine {
            spec,
            turn,
            progress,
        },
    )?
}

struct OnEngine<'a> {
    spec: &'a RunSpec,
    turn: &'a Turn,
    progress: &'a (dyn Fn(u64) + Sync),
}

impl EngineVisitor for OnEngine<'_> {
    type Output = Result<Measurement, RunError>;

    fn visit<E: Engine>(self, engine: &E) -> Self::Output {
        let visitor = OnWorkload {
            spec: self.spec,
            turn: self.turn,
            progress: self.progress,
            engine,
        };
        with_workload(self.spec.workload, &self.spec.params, visitor).map_err(RunError::Workload)?
    }
}

struct OnWorkload<'a, E: Engine> {
    spec: &'a RunSpec,
    turn: &'a Turn,
    progress: &'a (dyn Fn(u64) + Sync),
    engine: &'a E,
}

impl<E: Engine> WorkloadVisitor for OnWorkload<'_, E> {
    type Output = Result<Measurement, RunError>;

    fn visit<W: Workload>(self, workload: W) -> Self::Output {
        measure(self.spec, self.engine, &workload, self.turn, self.progress)
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
    turn: &Turn,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Measurement, RunError> {
    workload.setup(engine).map_err(RunError::Setup)?;
    let mut measurement = measure_subject(
        spec,
        workload.name(),
        &OnEngineWorkload { engine, workload },
        turn,
        progress,
    )?;
    let content = workload.check(engine).map_err(RunError::Check)?;
    if spec.params.threads.max(1) == 1 {
        compare_with_model(workload, &content, indexes_run(spec))?;
    }
    measurement.checked = true;
    Ok(measurement)
}

/// Operation indexes one thread ran over the warm-up and the timed runs of `spec` (each
/// thread runs `0..indexes_run`; see [`measure_subject`]).
pub(crate) fn indexes_run(spec: &RunSpec) -> u64 {
    let threads = spec.params.threads.max(1) as u64;
    spec.warmup_ops.div_ceil(threads) + spec.runs.max(1) as u64 * spec.ops.div_ceil(threads)
}

/// Checks a single-threaded run's content against the workload's model of operations
/// `0..indexes` of thread 0 applied to its initial content. The structural check alone
/// cannot see an engine that lost or never applied an operation's writes when the result
/// is still well formed (Array swaps left undone are still a permutation; an upsert that
/// kept its old value is still a valid map entry). With several threads the order of
/// operations is not known, and only the structural check applies.
fn compare_with_model<W: Workload>(
    workload: &W,
    content: &W::Model,
    indexes: u64,
) -> Result<(), RunError> {
    let mut model = workload.initial_model();
    for index in 0..indexes {
        workload.apply_to_model(&mut model, 0, index);
    }
    if *content != model {
        return Err(RunError::Check(format!(
            "the content differs from the model of the {indexes} operations run \
             (the structure is well formed, so an operation's writes were lost or misapplied)"
        )));
    }
    Ok(())
}

/// Warms `subject` up, then times `spec.runs` runs of it (everything after its setup and
/// before its check), each in its own `turn`; the check that follows takes one more.
pub(crate) fn measure_subject<S: Subject>(
    spec: &RunSpec,
    workload: String,
    subject: &S,
    turn: &Turn,
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
        turn.pass();
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
    turn.pass();
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

/// The nearest-rank `p` quantile of `sorted` (ascending): the smallest value with at least
/// `p` of the values at or below it; 0 for no values.
fn nearest_rank(sorted: &[u32], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    u64::from(sorted[index])
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
    let percentile = |p: f64| nearest_rank(&latencies, p);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A subject that logs which subject ran each operation and notices two subjects working
    /// at once.
    struct Logged<'a> {
        id: usize,
        log: &'a Mutex<Vec<usize>>,
        active: &'a AtomicUsize,
    }

    impl Subject for Logged<'_> {
        fn run_op(&self, _thread: usize, _index: u64) -> Result<OpKind, TxError> {
            assert_eq!(self.active.fetch_add(1, Ordering::SeqCst), 0, "two at once");
            self.log.lock().unwrap().push(self.id);
            std::thread::yield_now();
            self.active.fetch_sub(1, Ordering::SeqCst);
            Ok(OpKind::Read)
        }

        fn sync(&self) -> Result<(), TxError> {
            Ok(())
        }

        fn counters(&self) -> Counters {
            Counters::default()
        }
    }

    fn spec(ops: u64, warmup_ops: u64, runs: usize) -> RunSpec {
        RunSpec {
            engine: EngineChoice::Mem,
            workload: WorkloadChoice::Hash,
            params: Params::default(),
            ops,
            warmup_ops,
            runs,
            pool_dir: PathBuf::from("/dev/shm"),
            pool_size: 0,
            pm_latency: LatencyModel::NONE,
        }
    }

    /// The log as (subject, operations in a row) blocks.
    fn blocks(log: &[usize]) -> Vec<(usize, usize)> {
        let mut blocks: Vec<(usize, usize)> = Vec::new();
        for &id in log {
            match blocks.last_mut() {
                Some((last, count)) if *last == id => *count += 1,
                _ => blocks.push((id, 1)),
            }
        }
        blocks
    }

    /// A subject whose every operation moves the counters by a known amount: 2 fences,
    /// 3 flushed lines, 8 user bytes stored in place and 16 log bytes streamed, and a commit
    /// for every odd operation index; `sync` adds one fence (deferred work). It records the
    /// indexes it ran and sleeps `op_sleep` per operation.
    struct Counting {
        counters: Mutex<Counters>,
        indexes: Mutex<Vec<(usize, u64)>>,
        op_sleep: std::time::Duration,
    }

    impl Counting {
        fn new(op_sleep: std::time::Duration) -> Self {
            Counting {
                counters: Mutex::new(Counters::default()),
                indexes: Mutex::new(Vec::new()),
                op_sleep,
            }
        }
    }

    impl Subject for Counting {
        fn run_op(&self, thread: usize, index: u64) -> Result<OpKind, TxError> {
            std::thread::sleep(self.op_sleep);
            let mut c = self.counters.lock().unwrap();
            c.fences += 2;
            c.flushed_lines += 3;
            c.user_bytes += 8;
            c.stored_bytes[WriteClass::User.index()] += 8;
            c.nt_bytes[WriteClass::Log.index()] += 16;
            c.durability_points += index % 2;
            self.indexes.lock().unwrap().push((thread, index));
            Ok(if index % 2 == 1 {
                OpKind::Update
            } else {
                OpKind::Read
            })
        }

        fn sync(&self) -> Result<(), TxError> {
            self.counters.lock().unwrap().fences += 1;
            Ok(())
        }

        fn counters(&self) -> Counters {
            *self.counters.lock().unwrap()
        }
    }

    /// The per-operation and per-commit figures are the timed runs' counter deltas (warm-up
    /// excluded, each run's deferred work included) divided by the timed operations and by
    /// the commits, as docs/bench-json.md defines them.
    #[test]
    fn traffic_is_the_timed_delta_per_operation_and_per_commit() {
        let subject = Counting::new(std::time::Duration::ZERO);
        let m = measure_subject(
            &spec(10, 4, 3),
            "w".into(),
            &subject,
            &Turn::Always,
            &|_| {},
        )
        .unwrap();
        let indexes: Vec<u64> = subject
            .indexes
            .lock()
            .unwrap()
            .iter()
            .map(|i| i.1)
            .collect();
        assert_eq!(
            indexes,
            (0..34).collect::<Vec<_>>(),
            "runs follow the warm-up"
        );
        assert_eq!(m.ops, 30);
        // Timed: 30 operations (indexes 4..34, 15 of them odd) and 3 syncs.
        assert_eq!(m.counters.fences, 63);
        assert_eq!(m.counters.durability_points, 15);
        let t = m.traffic;
        assert_eq!(t.fences_per_op, 63.0 / 30.0);
        assert_eq!(t.flushes_per_op, 3.0);
        assert_eq!(t.fences_per_commit, Some(63.0 / 15.0));
        assert_eq!(t.flushes_per_commit, Some(6.0));
        assert_eq!(t.pm_bytes_per_op, 24.0);
        assert_eq!(t.log_bytes_per_op, 16.0);
        assert_eq!(t.user_bytes_per_op, 8.0);
        assert_eq!(t.write_amplification, Some(3.0));
        // 90 flushed lines and 480 streamed bytes (8 whole lines) over 240 user bytes.
        assert_eq!(
            t.media_write_amplification,
            Some((90.0 * 64.0 + 512.0) / 240.0)
        );
        let mix: Vec<(&str, u64)> = m.mix.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(mix, [("Read", 15), ("Update", 15)]);
    }

    /// With several threads each runs `ops / threads` rounded up, on its own indexes, and a
    /// run's throughput is that run's operations over its own time (not all runs' operations).
    #[test]
    fn threads_split_the_operations_and_throughput_is_per_run() {
        let subject = Counting::new(std::time::Duration::from_millis(2));
        let spec = RunSpec {
            params: Params {
                threads: 2,
                ..Params::default()
            },
            ..spec(9, 2, 3)
        };
        let m = measure_subject(&spec, "w".into(), &subject, &Turn::Always, &|_| {}).unwrap();
        assert_eq!(m.ops, 30, "9 per run rounded up to 5 per thread, 3 runs");
        let mut indexes = subject.indexes.lock().unwrap().clone();
        indexes.sort_unstable();
        let want: Vec<(usize, u64)> = (0..2).flat_map(|t| (0..16).map(move |i| (t, i))).collect();
        assert_eq!(indexes, want, "each thread: 1 warm-up, then 3 runs of 5");
        // Two threads, each sleeping at least 2 ms per operation: at most 1000 operations
        // per second per run; dividing all runs' operations by one run's time would give
        // three times that.
        assert!(m.throughput.max <= 1000.0, "{:?}", m.throughput);
        assert!(m.throughput.median > 50.0, "{:?}", m.throughput);
        assert_eq!(m.throughput.runs, 3);
    }

    /// Runs operations `0..ops` of thread 0 except `skip` on `workload` over a volatile
    /// engine, asserts that the workload's structural check passes, and returns whether the
    /// comparison with the model of operations `0..ops` does.
    fn matches_model<W: Workload>(workload: &W, ops: u64, skip: Option<u64>) -> bool {
        let engine = tx::MemEngine::new(16 << 20);
        workload.setup(&engine).unwrap();
        for index in (0..ops).filter(|&index| Some(index) != skip) {
            workload.run_op(&engine, 0, index).unwrap();
        }
        let content = workload
            .check(&engine)
            .expect("the structure stays well formed");
        compare_with_model(workload, &content, ops).is_ok()
    }

    /// A run whose operation lost its writes leaves a well-formed structure that the
    /// workloads' own checks accept; the single-threaded comparison with the model rejects it.
    #[test]
    fn a_lost_operation_fails_the_check_after_a_single_threaded_run() {
        let params = Params {
            keys: 64,
            update_percent: 100,
            ..Params::default()
        };
        let array = workloads::array::ArrayWorkload::new(params.clone());
        assert!(matches_model(&array, 40, None));
        assert!(!matches_model(&array, 40, Some(17)));
        let hash = workloads::hash::silo_hash(params);
        assert!(matches_model(&hash, 40, None));
        assert!(!matches_model(&hash, 40, Some(39)));
        let spec = RunSpec {
            params: Params {
                threads: 3,
                ..Params::default()
            },
            ..spec(10, 5, 2)
        };
        assert_eq!(
            indexes_run(&spec),
            2 + 2 * 4,
            "per thread, as measure_subject runs"
        );
    }

    #[test]
    fn latency_percentiles_are_nearest_ranks() {
        let values: Vec<u32> = (1..=1000).collect();
        assert_eq!(nearest_rank(&values, 0.50), 500);
        assert_eq!(nearest_rank(&values, 0.99), 990);
        assert_eq!(nearest_rank(&values, 0.999), 999);
        assert_eq!(nearest_rank(&[7], 0.999), 7);
        assert_eq!(nearest_rank(&[1, 2, 3], 0.5), 2);
        assert_eq!(nearest_rank(&[], 0.5), 0);
    }

    #[test]
    fn interleaved_subjects_take_their_runs_in_rotating_turns_one_at_a_time() {
        let log = Mutex::new(Vec::new());
        let active = AtomicUsize::new(0);
        let spec = spec(3, 2, 3);
        let results = interleave(3, &|id, turn| {
            let subject = Logged {
                id,
                log: &log,
                active: &active,
            };
            measure_subject(&spec, format!("s{id}"), &subject, turn, &|_| {})
                .map(|m| (m.workload, m.throughput.runs))
        });
        let names: Vec<_> = results.into_iter().map(Result::unwrap).collect();
        assert_eq!(
            names,
            [("s0".into(), 3), ("s1".into(), 3), ("s2".into(), 3)],
            "results in index order"
        );
        let warm = |id| (id, 2);
        let run = |id| (id, 3);
        assert_eq!(
            blocks(&log.lock().unwrap()),
            [
                warm(0),
                warm(1),
                warm(2),
                run(1),
                run(2),
                run(0),
                run(2),
                run(0),
                run(1),
                run(0),
                run(1),
                run(2),
            ],
            "warm-ups in order, then one run each per round, each round starting one later"
        );
    }

    #[test]
    fn a_driver_that_stops_early_leaves_the_others_their_turns() {
        let log = Mutex::new(Vec::new());
        let active = AtomicUsize::new(0);
        let spec = spec(2, 0, 2);
        let results = interleave(2, &|id, turn| {
            if id == 0 {
                return Err(RunError::Unsupported("stops at once".into()));
            }
            let subject = Logged {
                id,
                log: &log,
                active: &active,
            };
            measure_subject(&spec, "s".into(), &subject, turn, &|_| {})
        });
        assert!(matches!(results[0], Err(RunError::Unsupported(_))));
        assert_eq!(results[1].as_ref().unwrap().throughput.runs, 2);
        assert_eq!(log.lock().unwrap().len(), 4);
    }

    #[test]
    fn pools_that_do_not_fit_together_are_measured_one_after_another() {
        let sized = |pool_size| RunSpec {
            pool_size,
            ..spec(1, 0, 1)
        };
        assert!(room_for_every_pool(&[sized(1 << 20), sized(1 << 20)]));
        assert!(!room_for_every_pool(&[sized(u64::MAX / 2), sized(1 << 20)]));
    }

    #[test]
    fn engines_measured_together_each_report_their_own_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let specs: Vec<RunSpec> = [EngineChoice::Mem, crate::engines::REDO]
            .into_iter()
            .map(|engine| RunSpec {
                engine,
                params: Params {
                    keys: 500,
                    ..Params::default()
                },
                pool_dir: dir.path().to_owned(),
                pool_size: 64 << 20,
                ..spec(400, 100, 2)
            })
            .collect();
        let results = run_interleaved(&specs, &|_, _| {});
        let engines: Vec<String> = results
            .into_iter()
            .map(|m| {
                let m = m.unwrap();
                assert!(m.checked);
                assert_eq!(m.throughput.runs, 2);
                m.engine
            })
            .collect();
        assert_eq!(
            engines,
            [specs[0].engine.to_string(), specs[1].engine.to_string()]
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "pools removed"
        );
    }
}
