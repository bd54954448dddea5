//! Running the plan: trace generation, independent simulations spread over host threads, and
//! the rows, summaries and sweeps built from them.

use crate::results::{DesignSummary, RunRow, Sweep, SweepPoint, geomean};
use crate::spec::ReproSpec;
use hwsim::{Config, DesignKind, Metrics, simulate};
use std::collections::HashMap;
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

/// The plan's traces, generated together over the host threads: the workloads at the
/// plan's largest core count, the same in the other store discipline and with 16× smaller
/// instances (those two only for the sensitivity study).
pub(crate) struct PlanTraces {
    pub(crate) workloads: Vec<Workload>,
    pub(crate) others: Vec<Workload>,
    pub(crate) smalls: Vec<Workload>,
}

/// Generates the [`PlanTraces`] of `spec`.
pub(crate) fn plan_traces(spec: &ReproSpec) -> Result<PlanTraces, String> {
    let main = trace_specs(spec, spec.discipline, spec.transactions);
    let others = other_discipline_specs(spec);
    let (n_main, n_others) = (main.len(), others.len());
    let all = main
        .into_iter()
        .chain(others)
        .chain(small_trace_specs(spec));
    let mut workloads = generate_all(all.collect(), spec.host_threads())?;
    let mut others = workloads.split_off(n_main);
    let smalls = others.split_off(n_others);
    Ok(PlanTraces {
        workloads,
        others,
        smalls,
    })
}

/// The workload traces of `discipline` with `transactions` per core, at the plan's largest
/// core count.
pub(crate) fn trace_specs(
    spec: &ReproSpec,
    discipline: StoreDiscipline,
    transactions: u64,
) -> Vec<(String, TraceSpec)> {
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
            (w.name().to_string(), t)
        })
        .collect()
}

/// Generates named traces over `threads` host threads (each trace is independent and
/// deterministic, so the order of generation does not matter); traces in `specs` order.
pub(crate) fn generate_all(
    specs: Vec<(String, TraceSpec)>,
    threads: usize,
) -> Result<Vec<Workload>, String> {
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<Option<Result<Trace, String>>>> =
        Mutex::new((0..specs.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, specs.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((_, t)) = specs.get(i) else { break };
                    let trace = generate(t).map_err(|e| e.to_string());
                    done.lock().expect("no worker panicked")[i] = Some(trace);
                }
            });
        }
    });
    let done = done.into_inner().expect("no worker panicked");
    specs
        .into_iter()
        .zip(done)
        .map(|((name, _), trace)| {
            Ok(Workload {
                name,
                trace: trace.expect("every trace generated")?,
            })
        })
        .collect()
}

/// The workload traces with 16× smaller instances (sensitivity to the data-set size), with
/// the sensitivity runs' transactions.
pub(crate) fn small_trace_specs(spec: &ReproSpec) -> Vec<(String, TraceSpec)> {
    if !spec.sensitivity {
        return Vec::new();
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
            (w.name().to_string(), t)
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
pub(crate) fn other_discipline_specs(spec: &ReproSpec) -> Vec<(String, TraceSpec)> {
    if !spec.sensitivity {
        return Vec::new();
    }
    trace_specs(spec, other_discipline(spec.discipline), spec.transactions)
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

/// The rows of a plan's jobs, in job order.
pub(crate) struct JobRows {
    pub(crate) rows: Vec<RunRow>,
    /// Jobs whose simulation another job of the plan already ran (same trace, design and
    /// effective machine): their rows reuse its metrics and cost no host time.
    pub(crate) reused: usize,
    /// Trace events actually simulated (reused rows excluded).
    pub(crate) simulated_events: u64,
}

/// Runs every distinct simulation of `jobs` once over `threads` host threads, longest first,
/// and gives each job its row, in job order.
pub(crate) fn run_jobs(
    jobs: &[Job],
    traces: &[&Workload],
    threads: usize,
) -> Result<JobRows, String> {
    let (unique, source) = distinct_simulations(jobs);
    let mut order: Vec<usize> = unique.clone();
    order.sort_by_key(|&i| std::cmp::Reverse(jobs[i].cost));
    let next = AtomicUsize::new(0);
    type Slot = Option<Result<(Metrics, f64), String>>;
    let results: Mutex<Vec<Slot>> = Mutex::new((0..jobs.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, order.len().max(1)) {
            scope.spawn(|| {
                while let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let result = simulate_one(&jobs[i], traces);
                    results.lock().expect("no worker panicked")[i] = Some(result);
                }
            });
        }
    });
    let results = results.into_inner().expect("no worker panicked");
    let mut rows = Vec::with_capacity(jobs.len());
    let mut simulated_events = 0;
    for (i, job) in jobs.iter().enumerate() {
        let ran = source[i] == i;
        let slot = results[source[i]].as_ref().expect("every distinct job ran");
        let (m, cpu) = slot.as_ref().map_err(Clone::clone)?;
        let name = &traces[job.trace].name;
        let mut row = RunRow::from_metrics(m, job.design, name, &job.variant, &job.config);
        if ran {
            row.cpu_seconds = *cpu;
            simulated_events += m.events;
        } else {
            row.host_seconds = 0.0;
            row.events_per_host_second = 0.0;
        }
        rows.push(row);
    }
    Ok(JobRows {
        reused: jobs.len() - unique.len(),
        rows,
        simulated_events,
    })
}

/// The jobs to simulate (the first of each group of identical simulations) and, per job,
/// the job whose simulation it takes its metrics from.
fn distinct_simulations(jobs: &[Job]) -> (Vec<usize>, Vec<usize>) {
    let mut first: HashMap<String, usize> = HashMap::new();
    let mut unique = Vec::new();
    let source = jobs
        .iter()
        .enumerate()
        .map(|(i, job)| {
            *first.entry(simulation_key(job)).or_insert_with(|| {
                unique.push(i);
                i
            })
        })
        .collect();
    (unique, source)
}

/// What decides a job's simulated results: its trace, its design and the machine as that
/// design sees it. Whether the baselines write through the on-PM buffer does not concern
/// the designs whose buffer use is fixed (Silo, whose design it is part of, and Ideal), so it
/// is replaced by the design's own answer.
fn simulation_key(job: &Job) -> String {
    let mut cfg = job.config.clone();
    cfg.mem.baselines_use_onpm_buffer = job.design.build(&cfg).uses_onpm_buffer(&cfg);
    let machine = serde_json::to_string(&cfg).expect("a configuration serializes");
    format!("{}/{}/{machine}", job.trace, job.design.name())
}

fn simulate_one(job: &Job, traces: &[&Workload]) -> Result<(Metrics, f64), String> {
    let cpu = thread_cpu_seconds();
    let m =
        simulate(&job.config, job.design, &traces[job.trace].trace).map_err(|e| e.to_string())?;
    Ok((m, thread_cpu_seconds() - cpu))
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
                    // A trace too short for one transaction of this size (a `tx_size` point
                    // of 160 operations per transaction on traces of 100) commits nothing:
                    // no measurement, not a throughput of 0.
                    if r.committed_tx == 0 || b.committed_tx == 0 {
                        return None;
                    }
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
        // A point no workload measured is left out (its claim reads "not measured"), rather
        // than kept with the empty mean's 1.0.
        .filter(|p: &SweepPoint| !p.per_workload.is_empty())
        .collect();
    Sweep {
        name: name.to_string(),
        reference: reference.to_string(),
        points,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hwsim::synth::{SynthKind, SynthSpec, synth_trace};

    fn job(trace: usize, design: DesignKind, buffer: bool, variant: &str) -> Job {
        let mut config = Config::default().with_cores(2);
        config.mem.baselines_use_onpm_buffer = buffer;
        Job {
            trace,
            design,
            config,
            variant: variant.to_string(),
            cost: 1,
        }
    }

    fn workload() -> Workload {
        let spec = SynthSpec {
            kind: SynthKind::HashUpdate,
            cores: 2,
            tx_per_core: 20,
            elements: 512,
            compute: 20,
            seed: 3,
        };
        Workload {
            name: "hash".into(),
            trace: synth_trace(&spec),
        }
    }

    #[test]
    fn traces_generated_in_parallel_are_those_generated_one_by_one() {
        use tracegen::SiloWorkload;
        let specs: Vec<(String, TraceSpec)> =
            [SiloWorkload::Hash, SiloWorkload::Queue, SiloWorkload::Btree]
                .into_iter()
                .map(|w| {
                    let t = TraceSpec::new(w)
                        .with_cores(2)
                        .with_transactions(40)
                        .with_keys(256);
                    (w.name().to_string(), t)
                })
                .collect();
        let parallel = generate_all(specs.clone(), 2).expect("generates");
        for ((name, spec), got) in specs.iter().zip(&parallel) {
            let alone = generate(spec).expect("generates");
            assert_eq!(&got.name, name);
            assert_eq!(got.trace.to_bytes(), alone.to_bytes(), "{name}");
        }
    }

    #[test]
    fn a_sweep_point_whose_runs_committed_nothing_is_not_measured() {
        let cfg = Config::default().with_cores(2);
        let row = |trace: &Trace| {
            let m = hwsim::simulate(&cfg, DesignKind::Silo, trace).expect("simulates");
            RunRow::from_metrics(&m, DesignKind::Silo, "hash", "", &cfg)
        };
        let w = workload();
        let measured = row(&w.trace);
        // Grouped 1000 operations per transaction, 20 operations make no transaction.
        let empty = row(&group_transactions(&w.trace, 1000, 1));
        assert_eq!(empty.committed_tx, 0);
        let workloads = vec!["hash".to_string(), "queue".to_string()];
        let find = |name: &str, value: u64| match (name, value) {
            ("hash", 1) => Some(measured.clone()),
            ("queue", 1) => Some(empty.clone()),
            (_, _) => Some(empty.clone()),
        };
        let base = |_: &str, _: u64| Some(measured.clone());
        let s = sweep("tx_size", "ref", &[1, 16], &workloads, &find, &base);
        // Value 1: the queue's empty run is left out, not counted as a throughput of 0.
        assert_eq!(s.points.len(), 1, "{:?}", s.points);
        assert_eq!(s.points[0].value, 1);
        assert_eq!(s.points[0].per_workload.len(), 1);
        assert!((s.points[0].relative_throughput - 1.0).abs() < 1e-12);
    }

    #[test]
    fn only_a_design_that_uses_the_baselines_buffer_option_tells_its_cells_apart() {
        let jobs = [
            job(0, DesignKind::Silo, false, "a"),
            job(0, DesignKind::Silo, true, "b"),
            job(0, DesignKind::Fwb, false, "a"),
            job(0, DesignKind::Fwb, true, "b"),
            job(1, DesignKind::Silo, true, "b"),
        ];
        let (unique, source) = distinct_simulations(&jobs);
        assert_eq!(unique, vec![0, 2, 3, 4]);
        assert_eq!(source, vec![0, 0, 2, 3, 4]);
    }

    #[test]
    fn a_reused_row_has_the_simulated_results_and_costs_no_time() {
        let w = workload();
        let jobs = [
            job(0, DesignKind::Silo, false, "a"),
            job(0, DesignKind::Silo, true, "b"),
        ];
        let done = run_jobs(&jobs, &[&w], 2).expect("runs");
        assert_eq!(done.reused, 1);
        let (a, b) = (&done.rows[0], &done.rows[1]);
        assert_eq!(done.simulated_events, a.events);
        assert_eq!((a.variant.as_str(), b.variant.as_str()), ("a", "b"));
        assert_eq!((a.cycles, a.write_bytes), (b.cycles, b.write_bytes));
        assert_eq!((b.host_seconds, b.cpu_seconds), (0.0, 0.0));
        let alone = simulate(&jobs[1].config, DesignKind::Silo, &w.trace).expect("runs");
        assert_eq!(b.cycles, alone.cycles, "the reuse is exact");
    }
}
