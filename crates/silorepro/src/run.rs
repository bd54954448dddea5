//! Running the plan: trace generation, independent simulations spread over host threads, and
//! the rows, summaries and sweeps built from them.

use crate::results::{DesignSummary, RunRow, Sweep, SweepPoint, geomean};
use crate::spec::ReproSpec;
use hwsim::{Config, DesignKind, simulate};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use trace::Trace;
use tracegen::{ElementFill, SiloWorkload, TraceSpec, generate};

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
    let cores = spec.max_cores() as u32;
    spec.workloads
        .iter()
        .map(|&w| {
            let mut t = TraceSpec::new(w)
                .with_cores(cores)
                .with_transactions(spec.transactions);
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

/// The workload traces with 16× smaller instances (sensitivity to the data-set size).
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
                .with_transactions(spec.transactions)
                .with_keys(keys);
            let trace = generate(&t).map_err(|e| e.to_string())?;
            Ok(Workload {
                name: w.name().to_string(),
                trace,
            })
        })
        .collect()
}

/// Live log entries per transaction at a multiple `k` of the log buffer: an Array swap of two
/// elements with random contents writes every word of both, so an element of
/// `entries × k × 4` bytes gives `entries × k` changed words.
pub(crate) fn size_trace_spec(spec: &ReproSpec, multiple: u32) -> TraceSpec {
    let value_size = (spec.config.silo.entries as u32 * multiple * 4).next_multiple_of(8);
    let keys = (spec.size_data_bytes / u64::from(value_size)).max(64);
    let mut t = TraceSpec::new(SiloWorkload::Array)
        .with_cores(spec.sweep_cores as u32)
        .with_transactions(spec.size_transactions)
        .with_keys(keys)
        .with_fill(ElementFill::Random);
    t.value_size = value_size;
    t
}

/// The transaction-size traces, named `array-x{k}`.
pub(crate) fn size_traces(spec: &ReproSpec) -> Result<Vec<Workload>, String> {
    spec.size_multiples
        .iter()
        .map(|&k| {
            let trace = generate(&size_trace_spec(spec, k)).map_err(|e| e.to_string())?;
            Ok(Workload {
                name: format!("array-x{k}"),
                trace,
            })
        })
        .collect()
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
    let m = simulate(&job.config, job.design, &w.trace).map_err(|e| e.to_string())?;
    Ok(RunRow::from_metrics(&m, &w.name, &job.variant, &job.config))
}

/// Events of the first `cores` streams of a trace (a job's cost).
pub(crate) fn events(trace: &Trace, cores: usize) -> u64 {
    (0..cores.min(trace.cores()))
        .map(|i| trace.stream_events(i))
        .sum()
}

/// Fills `vs_fwb`, `vs_base`, `vs_ideal` of the main runs.
pub(crate) fn normalise(rows: &mut [RunRow]) {
    let throughput = |rows: &[RunRow], w: &str, d: &str, c: usize| {
        rows.iter()
            .find(|r| r.workload == w && r.design == d && r.cores == c)
            .map_or(0.0, |r| r.throughput)
    };
    let refs: Vec<(f64, f64, f64)> = rows
        .iter()
        .map(|r| {
            (
                throughput(rows, &r.workload, "fwb", r.cores),
                throughput(rows, &r.workload, "base", r.cores),
                throughput(rows, &r.workload, "ideal", r.cores),
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
        for design in &spec.designs {
            let mine: Vec<&RunRow> = rows
                .iter()
                .filter(|r| r.design == design.name() && r.cores == cores)
                .collect();
            let fwb = |w: &str| {
                rows.iter()
                    .find(|r| r.design == "fwb" && r.cores == cores && r.workload == w)
            };
            let rel = |f: &dyn Fn(&RunRow) -> f64| {
                geomean(mine.iter().filter_map(|r| {
                    let b = fwb(&r.workload)?;
                    let per_tx = |x: &RunRow| f(x) / x.committed_tx.max(1) as f64;
                    Some(per_tx(r) / per_tx(b).max(f64::MIN_POSITIVE))
                }))
            };
            out.push(DesignSummary {
                design: design.name().to_string(),
                cores,
                vs_fwb: geomean(mine.iter().map(|r| r.vs_fwb)),
                vs_base: geomean(mine.iter().map(|r| r.vs_base)),
                vs_ideal: geomean(mine.iter().map(|r| r.vs_ideal)),
                write_bytes_vs_fwb: rel(&|r| r.write_bytes as f64),
                write_requests_vs_fwb: rel(&|r| r.write_requests as f64),
                media_writes_vs_fwb: rel(&|r| r.media_writes as f64),
                bytes_per_tx: mine.iter().map(|r| r.bytes_per_tx()).sum::<f64>()
                    / mine.len().max(1) as f64,
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
