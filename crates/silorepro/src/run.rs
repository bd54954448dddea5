//! Running the plan: trace generation, independent simulations spread over host threads, and
//! the rows, summaries and sweeps built from them.

use crate::results::{DesignSummary, RunRow, Sweep, SweepPoint, geomean};
use crate::spec::ReproSpec;
use hwsim::{Config, DesignKind, simulate};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use trace::Trace;
use tracegen::{StoreDiscipline, TraceSpec, generate, group_transactions};

/// A named trace.
pub(crate) struct Workload {
    pub(crate) name: String,
    pub(crate) trace: Trace,
}

/// One independent simulation.
#[derive(Clone, Debug)]
pub(crate) struct Job {
    pub(crate) trace: usize,
    pub(crate) design: DesignKind,
    pub(crate) config: Config,
    pub(crate) variant: String,
    /// Relative cost, to start the longest jobs first.
    pub(crate) cost: u64,
}

/// Generates the workload traces at the plan's largest core count.
pub(crate) fn workload_traces(spec: &ReproSpec) -> Result<Vec<Workload>, String> {
    traces_of(spec, spec.discipline, spec.transactions)
}

/// The workload traces of `discipline` with `transactions` per core, at the plan's largest
/// core count.
fn traces_of(
    spec: &ReproSpec,
    discipline: StoreDiscipline,
    transactions: u64,
) -> Result<Vec<Workload>, String> {
    let cores = spec.max_cores() as u32;
    spec.workloads
        .iter()
        .map(|&w| {
            let mut t = TraceSpec::new(w)
                .with_cores(cores)
                .with_transactions(transactions)
                .with_discipline(discipline);
            if let Some(keys) = spec.keys {
                t = t.with_keys(keys);
            }
            let trace = generate(&t).map_err(|e| e.to_string())?;
            Ok(Workload {
                name: w.name().to_string(),
                trace,
            })
        })
        .collect()
}

/// The workload traces with 16× smaller instances (sensitivity to the data-set size), with
/// the sensitivity runs' transactions.
pub(crate) fn small_traces(spec: &ReproSpec) -> Result<Vec<Workload>, String> {
    if !spec.sensitivity {
        return Ok(Vec::new());
    }
    let cores = spec.max_cores() as u32;
    spec.workloads
        .iter()
        .map(|&w| {
            let keys = (spec.keys.unwrap_or(w.default_keys()) / 16).max(64);
            let t = TraceSpec::new(w)
                .with_cores(cores)
                .with_transactions(spec.sensitivity_transactions.min(spec.transactions))
                .with_keys(keys)
                .with_discipline(spec.discipline);
            let trace = generate(&t).map_err(|e| e.to_string())?;
            Ok(Workload {
                name: w.name().to_string(),
                trace,
            })
        })
        .collect()
}

/// The first `spec.sensitivity_transactions` transactions of each workload trace: the
/// machine variants of the sensitivity study run on these, beside a reference run of the
/// paper-faithful machine on the same prefixes.
pub(crate) fn prefix_traces(spec: &ReproSpec, workloads: &[Workload]) -> Vec<Workload> {
    if !spec.sensitivity {
        return Vec::new();
    }
    let transactions = spec.sensitivity_transactions.min(spec.transactions);
    workloads
        .iter()
        .map(|w| Workload {
            name: w.name.clone(),
            trace: group_transactions(&w.trace, 1, transactions),
        })
        .collect()
}

/// The workload traces in the other store discipline, as long as the main ones (the
/// sensitivity grid's cells of that discipline run on them).
pub(crate) fn other_discipline_traces(spec: &ReproSpec) -> Result<Vec<Workload>, String> {
    if !spec.sensitivity {
        return Ok(Vec::new());
    }
    traces_of(spec, other_discipline(spec.discipline), spec.transactions)
}

/// The discipline the main traces do not have.
pub(crate) fn other_discipline(discipline: StoreDiscipline) -> StoreDiscipline {
    match discipline {
        StoreDiscipline::Pmdk => StoreDiscipline::WriteMinimal,
        StoreDiscipline::WriteMinimal => StoreDiscipline::Pmdk,
    }
}

/// One transaction-size trace: `workload`'s operations grouped `ops` per transaction so
/// that a transaction's live log entries are about `multiple` × the log buffer.
pub(crate) struct SizeTrace {
    pub(crate) workload: Workload,
    pub(crate) base: String,
    pub(crate) multiple: u32,
    pub(crate) ops: u32,
    /// Mean and largest live log entries (distinct changed words) per transaction.
    pub(crate) live_mean: f64,
    pub(crate) live_max: u64,
}

/// The transaction-size traces, named `{workload}-x{multiple}`: for each workload, its
/// trace's first `spec.size_operations` operations per core, grouped into transactions of
/// `ceil(multiple × entries / mean live entries per operation)` operations (Silo's Fig. 14
/// scales write sets to 1–16× the log buffer).
pub(crate) fn size_traces(spec: &ReproSpec, workloads: &[Workload]) -> Vec<SizeTrace> {
    let entries = spec.config.silo.entries as f64;
    let mut out = Vec::new();
    for w in workloads {
        let per_op = live_entries(&w.trace, 1, 2_000).0.max(0.5);
        for &multiple in &spec.size_multiples {
            let ops = (f64::from(multiple) * entries / per_op).ceil().max(1.0) as u32;
            let groups = (spec.size_operations / u64::from(ops)).max(1);
            let trace = group_transactions(&w.trace, ops, groups);
            let (live_mean, live_max) = live_entries(&trace, usize::MAX, u64::MAX);
            out.push(SizeTrace {
                workload: Workload {
                    name: format!("{}-x{multiple}", w.name),
                    trace,
                },
                base: w.name.clone(),
                multiple,
                ops,
                live_mean,
                live_max,
            });
        }
    }
    out
}

/// Mean and largest number of distinct words changed per transaction (Silo's live log
/// entries after ignore + merge) over the first `cores` streams' first `max_tx`
/// transactions.
fn live_entries(trace: &Trace, cores: usize, max_tx: u64) -> (f64, u64) {
    let (mut sum, mut count, mut max) = (0u64, 0u64, 0u64);
    let mut words: Vec<u64> = Vec::new();
    for i in 0..trace.cores().min(cores) {
        let mut seen = 0;
        for event in trace.events(i) {
            match event {
                trace::Event::TxBegin => words.clear(),
                trace::Event::Store { addr, old, new, .. } if old != new => words.push(addr & !7),
                trace::Event::TxEnd => {
                    words.sort_unstable();
                    words.dedup();
                    let n = words.len() as u64;
                    (sum, count, max) = (sum + n, count + 1, max.max(n));
                    seen += 1;
                    if seen >= max_tx {
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    (sum as f64 / count.max(1) as f64, max)
}

/// Runs every job over `threads` host threads, longest first; rows in job order.
pub(crate) fn run_jobs(
    jobs: &[Job],
    traces: &[&Workload],
    threads: usize,
) -> Result<Vec<RunRow>, String> {
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(jobs[i].cost));
    let next = AtomicUsize::new(0);
    let rows: Mutex<Vec<Option<Result<RunRow, String>>>> =
        Mutex::new((0..jobs.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, jobs.len().max(1)) {
            scope.spawn(|| {
                while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let row = run_one(&jobs[i], traces);
                    rows.lock().expect("no worker panicked")[i] = Some(row);
                }
            });
        }
    });
    rows.into_inner()
        .expect("no worker panicked")
        .into_iter()
        .map(|r| r.expect("every job ran"))
        .collect()
}

fn run_one(job: &Job, traces: &[&Workload]) -> Result<RunRow, String> {
    let w = traces[job.trace];
    let cpu = thread_cpu_seconds();
    let m = simulate(&job.config, job.design, &w.trace).map_err(|e| e.to_string())?;
    let mut row = RunRow::from_metrics(&m, job.design, &w.name, &job.variant, &job.config);
    row.cpu_seconds = thread_cpu_seconds() - cpu;
    Ok(row)
}

/// CPU time of the calling thread (0 where the clock is unavailable): the simulations'
/// speed per host core, independent of what else the host runs.
pub(crate) fn thread_cpu_seconds() -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map_or(0.0, |t| t.tv_sec() as f64 + t.tv_nsec() as f64 * 1e-9)
}

/// Events of the first `cores` streams of a trace (a job's cost).
pub(crate) fn events(trace: &Trace, cores: usize) -> u64 {
    (0..cores.min(trace.cores()))
        .map(|i| trace.stream_events(i))
        .sum()
}

/// Fills `vs_fwb`, `vs_base`, `vs_ideal` of the main runs.
pub(crate) fn normalise(rows: &mut [RunRow]) {
    let throughput = |rows: &[RunRow], w: &str, d: DesignKind, c: usize| {
        rows.iter()
            .find(|r| r.workload == w && r.design == d && r.cores == c)
            .map_or(0.0, |r| r.throughput)
    };
    let refs: Vec<(f64, f64, f64)> = rows
        .iter()
        .map(|r| {
            (
                throughput(rows, &r.workload, DesignKind::Fwb, r.cores),
                throughput(rows, &r.workload, DesignKind::Base, r.cores),
                throughput(rows, &r.workload, DesignKind::Ideal, r.cores),
            )
        })
        .collect();
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    for (r, (fwb, base, ideal)) in rows.iter_mut().zip(refs) {
        r.vs_fwb = ratio(r.throughput, fwb);
        r.vs_base = ratio(r.throughput, base);
        r.vs_ideal = ratio(r.throughput, ideal);
    }
}

/// Geometric means per design and core count.
pub(crate) fn summarise(rows: &[RunRow], spec: &ReproSpec) -> Vec<DesignSummary> {
    let mut out = Vec::new();
    for &cores in &spec.cores {
        for &design in &spec.designs {
            let mine: Vec<&RunRow> = rows
                .iter()
                .filter(|r| r.design == design && r.cores == cores)
                .collect();
            let fwb = |w: &str| {
                rows.iter()
                    .find(|r| r.design == DesignKind::Fwb && r.cores == cores && r.workload == w)
            };
            let rel = |f: &dyn Fn(&RunRow) -> f64| {
                geomean(mine.iter().filter_map(|r| {
                    let b = fwb(&r.workload)?;
                    let per_tx = |x: &RunRow| f(x) / x.committed_tx.max(1) as f64;
                    Some(per_tx(r) / per_tx(b).max(f64::MIN_POSITIVE))
                }))
            };
            let mean = |f: &dyn Fn(&RunRow) -> f64| {
                mine.iter().map(|r| f(r)).sum::<f64>() / mine.len().max(1) as f64
            };
            out.push(DesignSummary {
                design,
                cores,
                vs_fwb: geomean(mine.iter().map(|r| r.vs_fwb)),
                vs_base: geomean(mine.iter().map(|r| r.vs_base)),
                vs_ideal: geomean(mine.iter().map(|r| r.vs_ideal)),
                write_bytes_vs_fwb: rel(&|r| r.programmed_bytes as f64),
                sent_bytes_vs_fwb: rel(&|r| (r.write_bytes + r.final_drain_bytes) as f64),
                write_requests_vs_fwb: rel(&|r| r.write_requests as f64),
                media_writes_vs_fwb: rel(&|r| r.media_writes as f64),
                bytes_per_tx: mean(&|r| r.bytes_per_tx()),
                programmed_per_tx: mean(&|r| r.programmed_per_tx()),
            });
        }
    }
    out
}

/// A sweep over `values`: each point's rows (`point(value)` picks them per workload) relative
/// to the reference rows (`reference(workload)`).
pub(crate) fn sweep(
    name: &str,
    reference: &str,
    values: &[u64],
    workloads: &[String],
    find: &dyn Fn(&str, u64) -> Option<RunRow>,
    base: &dyn Fn(&str, u64) -> Option<RunRow>,
) -> Sweep {
    let points = values
        .iter()
        .map(|&v| {
            let per: Vec<(String, f64, f64)> = workloads
                .iter()
                .filter_map(|w| {
                    let (r, b) = (find(w, v)?, base(w, v)?);
                    let t = r.throughput / b.throughput.max(f64::MIN_POSITIVE);
                    let bytes = r.bytes_per_tx() / b.bytes_per_tx().max(f64::MIN_POSITIVE);
                    Some((w.clone(), t, bytes))
                })
                .collect();
            SweepPoint {
                value: v,
                relative_throughput: geomean(per.iter().map(|p| p.1)),
                relative_write_bytes: geomean(per.iter().map(|p| p.2)),
                per_workload: per,
            }
        })
        .collect();
    Sweep {
        name: name.to_string(),
        reference: reference.to_string(),
        points,
    }
}
