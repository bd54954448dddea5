//! Section "engines": Ferrite's redo and undo engines against PMDK's libpmemobj and the
//! ideal redo reference, on Silo's micro-benchmarks, TimeStone's structures and YCSB / TPC-C,
//! every engine measured in the same run with the bench harness.
//!
//! The summary states the project's performance goals and whether this run's numbers meet
//! them. The section only measures (verdict Info): a goal missed on this machine is a finding,
//! not a failure. It fails only when a benchmark run itself fails (an operation error or a
//! broken invariant after the run).

use super::{EvalOptions, empty_section};
use crate::cells;
use crate::plot::{BarSeries, grouped_bar_chart};
use crate::report::{Plot, Section, Table, Verdict};
use bench::choice::{EngineChoice, OpenError, WorkloadChoice};
use bench::raw::Durability;
use bench::runner::{Measurement, RunError, RunSpec};
use indicatif::ProgressBar;
use serde::Serialize;
use serde_json::json;
use std::path::Path;
use std::time::Instant;
use tx::LogMode;
use workloads::Params;
use workloads::ycsb::YcsbMix;

/// Section id.
pub const ID: &str = "engines";
/// Section heading.
pub const TITLE: &str = "Transaction engines vs PMDK and the ideal reference";

const REDO: EngineChoice = EngineChoice::Redo(LogMode::Auto);
const UNDO: EngineChoice = EngineChoice::Undo(LogMode::Auto);
const PMDK: EngineChoice = EngineChoice::Pmdk;
const IDEAL: EngineChoice = EngineChoice::Ideal;
const MVCC: EngineChoice = EngineChoice::Mvcc;
const RAW: EngineChoice = EngineChoice::Raw(Durability::Persistent);
const RAW_VOLATILE: EngineChoice = EngineChoice::Raw(Durability::Volatile);
const MEM: EngineChoice = EngineChoice::Mem;

/// The ideal reference is a redo log stripped to the minimum; it only makes sense next to
/// the single-threaded Silo micro-benchmarks it was written for.
const SILO_ENGINES: [EngineChoice; 4] = [REDO, UNDO, PMDK, IDEAL];
/// TimeStone's structures, YCSB and TPC-C: the MVCC engine beside the logging engines.
const PEER_ENGINES: [EngineChoice; 4] = [MVCC, REDO, UNDO, PMDK];
/// The floors beside the Silo Array and Hash: the raw reference (no engine, persistent and
/// volatile) and the volatile engine.
const FLOORS: [EngineChoice; 3] = [RAW, RAW_VOLATILE, MEM];
/// Element size of the second Array table (the 8-byte swaps; the first uses
/// `Plan::value_size`).
const SMALL_ELEMENT: u32 = 8;
/// Label of the Array table with [`SMALL_ELEMENT`]-byte elements.
const ARRAY_SMALL: &str = "array-8";
/// How much slower than the persistent raw reference redo may be on the Array.
const RAW_FACTOR_GOAL: f64 = 1.5;
/// The volatile engine's p50 latency goal on the 8-byte Array, in nanoseconds.
const MEM_P50_GOAL_NS: u64 = 80;

/// Seed of every workload's random choices (fixed, so runs are comparable).
const SEED: u64 = 42;
/// Write amplification the redo engine must stay within.
const WA_GOAL: f64 = 3.0;
/// How far from exactly one fence per commit still counts as "one fence".
const FENCE_TOLERANCE: f64 = 0.05;

/// A benchmark family: one table per (workload, threads) of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Family {
    Silo,
    TimeStone,
    Ycsb,
}

impl Family {
    fn name(self) -> &'static str {
        match self {
            Family::Silo => "Silo",
            Family::TimeStone => "TimeStone",
            Family::Ycsb => "YCSB / TPC-C",
        }
    }
}

/// Sizes and workloads of one run of the section.
#[derive(Clone, Copy, Debug, Serialize)]
struct Plan {
    /// Elements of Silo's array.
    array_elements: u64,
    /// Keys of the other Silo structures, TimeStone's hash and BST, and YCSB's records.
    keys: u64,
    /// Keys of TimeStone's list (every operation walks it).
    list_keys: u64,
    /// Value and element size in bytes.
    value_size: u32,
    /// Operations per timed run.
    ops: u64,
    /// Operations per timed run on the list.
    list_ops: u64,
    /// Untimed operations before the first run, as a fraction of `ops`.
    warmup_share: f64,
    /// Timed runs per configuration (the median is reported).
    runs: usize,
    /// Pool size in bytes.
    pool_size: u64,
    silo: &'static [WorkloadChoice],
    timestone: &'static [WorkloadChoice],
    timestone_updates: &'static [u32],
    thread_counts: &'static [usize],
    ycsb: &'static [WorkloadChoice],
}

/// The default matrix: about three minutes, setup included, on a two-core machine.
const FULL: Plan = Plan {
    array_elements: 1_000_000,
    keys: 100_000,
    list_keys: 1_000,
    value_size: 64,
    ops: 100_000,
    list_ops: 20_000,
    warmup_share: 0.1,
    runs: 5,
    pool_size: 1 << 30,
    silo: &[
        WorkloadChoice::Array,
        WorkloadChoice::Queue,
        WorkloadChoice::Hash,
        WorkloadChoice::BTree,
        WorkloadChoice::RbTree,
    ],
    timestone: &[
        WorkloadChoice::List,
        WorkloadChoice::TsHash,
        WorkloadChoice::Bst,
    ],
    timestone_updates: &[2, 20, 80],
    thread_counts: &[1, 2],
    ycsb: &[
        WorkloadChoice::Ycsb(YcsbMix::A),
        WorkloadChoice::Ycsb(YcsbMix::B),
        WorkloadChoice::Ycsb(YcsbMix::C),
        WorkloadChoice::Ycsb(YcsbMix::D),
        WorkloadChoice::Ycsb(YcsbMix::E),
        WorkloadChoice::Ycsb(YcsbMix::F),
        WorkloadChoice::Tpcc,
    ],
};

/// `--quick`: one workload or two per family, tiny sizes, one run.
const QUICK: Plan = Plan {
    array_elements: 10_000,
    keys: 1_000,
    list_keys: 100,
    value_size: 64,
    ops: 2_000,
    list_ops: 500,
    warmup_share: 0.1,
    runs: 1,
    pool_size: 64 << 20,
    silo: &[WorkloadChoice::Array, WorkloadChoice::Hash],
    timestone: &[WorkloadChoice::Bst],
    timestone_updates: &[20],
    thread_counts: &[1, 2],
    ycsb: &[WorkloadChoice::Ycsb(YcsbMix::A), WorkloadChoice::Tpcc],
};

/// One configuration to measure.
#[derive(Clone, Debug)]
struct Case {
    family: Family,
    /// The workload in tables and plots ("hash", "list 20%", "ycsb-a").
    label: String,
    spec: RunSpec,
}

/// One measured configuration, as the JSON keeps it.
#[derive(Clone, Debug, Serialize)]
struct Run {
    family: Family,
    label: String,
    workload: WorkloadChoice,
    params: Params,
    measurement: Measurement,
}

impl Run {
    fn threads(&self) -> usize {
        self.measurement.threads
    }

    fn is(&self, engine: EngineChoice) -> bool {
        self.measurement.engine == engine.to_string()
    }

    fn group(&self) -> (Family, &str, usize) {
        (self.family, &self.label, self.threads())
    }

    /// "bst 20%, 2 threads": where a number was measured, for summary lines.
    fn place(&self) -> String {
        format!("{}, {}", self.label, threads_text(self.threads()))
    }
}

/// Everything the runs produced.
#[derive(Debug, Default)]
struct Outcomes {
    runs: Vec<Run>,
    /// Runs that failed (other than PMDK being unavailable).
    errors: Vec<String>,
    /// Why the PMDK peer could not be used, when it could not.
    pmdk_skipped: Option<String>,
    seconds: f64,
}

/// Runs the matrix (the quick one with `--quick`) and reports it.
pub fn run(options: &EvalOptions, bar: &ProgressBar) -> anyhow::Result<Section> {
    let plan = if options.quick { QUICK } else { FULL };
    let cases = cases(&plan, &options.pool_dir);
    let outcomes = measure_all(&cases, bar);
    section_of(&plan, &outcomes, options.quick)
}

fn cases(plan: &Plan, pool_dir: &Path) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut add = |family, label: String, workload, engines: &[EngineChoice], params: Params| {
        let ops = if workload == WorkloadChoice::List {
            plan.list_ops
        } else {
            plan.ops
        };
        for &engine in engines {
            let spec = RunSpec {
                engine,
                workload,
                params: params.clone(),
                ops,
                warmup_ops: (ops as f64 * plan.warmup_share) as u64,
                runs: plan.runs,
                pool_dir: pool_dir.to_owned(),
                pool_size: plan.pool_size,
            };
            let label = label.clone();
            cases.push(Case {
                family,
                label,
                spec,
            });
        }
    };
    let params = |keys, update_percent, threads| Params {
        keys,
        value_size: plan.value_size,
        update_percent,
        threads,
        seed: SEED,
    };
    for &workload in plan.silo {
        let keys = match workload {
            WorkloadChoice::Array => plan.array_elements,
            _ => plan.keys,
        };
        // Silo's micro-benchmarks are all writes: swaps, enqueue/dequeue, upserts.
        let p = params(keys, 100, 1);
        let engines = silo_engines(workload);
        add(Family::Silo, workload.name(), workload, &engines, p.clone());
        if workload == WorkloadChoice::Array {
            let p = Params {
                value_size: SMALL_ELEMENT,
                ..p
            };
            add(Family::Silo, ARRAY_SMALL.to_owned(), workload, &engines, p);
        }
    }
    for &workload in plan.timestone {
        let keys = match workload {
            WorkloadChoice::List => plan.list_keys,
            _ => plan.keys,
        };
        for &update in plan.timestone_updates {
            for &threads in plan.thread_counts {
                let label = format!("{} {update}%", workload.name());
                let p = params(keys, update, threads);
                add(Family::TimeStone, label, workload, &PEER_ENGINES, p);
            }
        }
    }
    for &workload in plan.ycsb {
        // YCSB's mix decides its updates; TPC-C scales its warehouses with the threads.
        let p = params(plan.keys, 0, 1);
        add(Family::Ycsb, workload.name(), workload, &PEER_ENGINES, p);
    }
    cases
}

/// The engines of a Silo table: the floors too on the Array and the Hash (the raw reference
/// has only those two).
fn silo_engines(workload: WorkloadChoice) -> Vec<EngineChoice> {
    let mut engines = SILO_ENGINES.to_vec();
    if matches!(workload, WorkloadChoice::Array | WorkloadChoice::Hash) {
        engines.extend(FLOORS);
    }
    engines
}

/// Runs every case in order. PMDK being unavailable skips its cases and is reported once;
/// any other failure is recorded and the remaining cases still run.
fn measure_all(cases: &[Case], bar: &ProgressBar) -> Outcomes {
    let start = Instant::now();
    let mut outcomes = Outcomes::default();
    bar.set_length(cases.len() as u64);
    for case in cases {
        let spec = &case.spec;
        let threads = threads_text(spec.params.threads);
        bar.set_message(format!("{}, {threads} on {}", case.label, spec.engine));
        if spec.engine == PMDK && outcomes.pmdk_skipped.is_some() {
            bar.inc(1);
            continue;
        }
        match bench::runner::run(spec, &|_| {}) {
            Ok(measurement) => outcomes.runs.push(Run {
                family: case.family,
                label: case.label.clone(),
                workload: spec.workload,
                params: spec.params.clone(),
                measurement,
            }),
            Err(RunError::Open(OpenError::Pmdk(error))) => {
                outcomes.pmdk_skipped = Some(pmdk_skip_reason(&error));
            }
            Err(error) => outcomes.errors.push(format!(
                "{} ({threads}) on {}: {error}",
                case.label, spec.engine
            )),
        }
        bar.inc(1);
    }
    outcomes.seconds = start.elapsed().as_secs_f64();
    outcomes
}

/// Why PMDK was skipped, with the fix when it is the missing library.
fn pmdk_skip_reason(error: &pmdk::PmdkError) -> String {
    match error {
        pmdk::PmdkError::NotInstalled(_) => format!("{error}; run scripts/setup"),
        _ => error.to_string(),
    }
}

fn threads_text(threads: usize) -> String {
    match threads {
        1 => "1 thread".to_owned(),
        n => format!("{n} threads"),
    }
}

fn section_of(plan: &Plan, outcomes: &Outcomes, quick: bool) -> anyhow::Result<Section> {
    let runs = &outcomes.runs;
    let goals = goals(runs);
    let mut section = empty_section(ID, TITLE);
    section.verdict = if outcomes.errors.is_empty() {
        Verdict::Info
    } else {
        Verdict::Fail
    };
    section.summary = summary(plan, outcomes, &goals, quick);
    section.tables = groups(runs)
        .into_iter()
        .map(|group| group_table(&group))
        .collect();
    section.plots = plots(plan, runs)?;
    section.json = json!({
        "plan": plan,
        "seed": SEED,
        "elapsed_s": outcomes.seconds,
        "pmdk_skipped": outcomes.pmdk_skipped,
        "errors": outcomes.errors,
        "goals": goals,
        "runs": runs,
    });
    Ok(section)
}

fn summary(plan: &Plan, outcomes: &Outcomes, goals: &[Goal], quick: bool) -> Vec<String> {
    let count = |family| {
        outcomes
            .runs
            .iter()
            .filter(|run| run.family == family)
            .count()
    };
    let mut lines = vec![format!(
        "Measured {} configurations ({} Silo, {} TimeStone, {} YCSB / TPC-C) in {:.0} s: \
         {} operations per timed run ({} on the list) after {:.0} % as warm-up, median of {} \
         run(s); all engines of a table ran in this same run.",
        outcomes.runs.len(),
        count(Family::Silo),
        count(Family::TimeStone),
        count(Family::Ycsb),
        outcomes.seconds,
        plan.ops,
        plan.list_ops,
        plan.warmup_share * 100.0,
        plan.runs
    )];
    lines.extend(goals.iter().map(Goal::line));
    lines.extend(scaling_line(&outcomes.runs));
    if let Some(error) = &outcomes.pmdk_skipped {
        lines.push(format!(
            "PMDK peer skipped: {error}. Its columns and the goals against it are n/a."
        ));
    }
    lines.extend(
        outcomes
            .errors
            .iter()
            .map(|error| format!("FAILED: {error}")),
    );
    if quick {
        lines.push(
            "Quick run: tiny structures and one short run per configuration; the numbers are \
             indicative only."
                .to_owned(),
        );
    }
    lines
}

/// A performance goal of the project and whether this run's measurements meet it.
#[derive(Clone, Debug, Serialize)]
struct Goal {
    statement: String,
    measured: String,
    /// `None` when the run did not measure it (PMDK skipped, workload not in the matrix).
    holds: Option<bool>,
}

impl Goal {
    fn line(&self) -> String {
        let verdict = match self.holds {
            Some(true) => "holds",
            Some(false) => "does NOT hold",
            None => "not measured",
        };
        format!("Goal: {}: {verdict} ({}).", self.statement, self.measured)
    }
}

fn goals(runs: &[Run]) -> Vec<Goal> {
    vec![
        ratio_goal(runs, "array", PMDK, 4.0, "Array: redo at least 4× PMDK"),
        ratio_goal(
            runs,
            "array",
            IDEAL,
            0.5,
            "Array: redo within 2× of the ideal reference (at least 0.5× its throughput)",
        ),
        ratio_goal(runs, "hash", PMDK, 2.0, "Hash: redo at least 2× PMDK"),
        ratio_goal(runs, "btree", PMDK, 2.0, "B+tree: redo at least 2× PMDK"),
        amplification_goal(runs),
        fence_goal(runs),
        read_mostly_goal(runs),
        mvcc_amplification_goal(runs),
        lowest_amplification_goal(runs),
        raw_goal(runs, "array"),
        raw_goal(runs, ARRAY_SMALL),
        ratio_goal(
            runs,
            ARRAY_SMALL,
            PMDK,
            4.0,
            "Array, 8-byte elements: redo at least 4× PMDK",
        ),
        mem_latency_goal(runs),
    ]
}

/// Redo within [`RAW_FACTOR_GOAL`] of the persistent raw reference on Silo's `label`.
fn raw_goal(runs: &[Run], label: &str) -> Goal {
    let mut goal = ratio_goal(
        runs,
        label,
        RAW,
        1.0 / RAW_FACTOR_GOAL,
        &format!("{label}: redo within {RAW_FACTOR_GOAL}× of the raw reference"),
    );
    let slowdown = cells::ratio(
        silo_throughput(runs, label, RAW).unwrap_or(0.0),
        silo_throughput(runs, label, REDO),
    );
    if let Some(slowdown) = slowdown {
        goal.measured = format!("raw at {slowdown:.2}× redo's throughput");
    }
    goal
}

/// The volatile engine's median latency on the 8-byte Array.
fn mem_latency_goal(runs: &[Run]) -> Goal {
    let p50 = runs
        .iter()
        .find(|run| run.group() == (Family::Silo, ARRAY_SMALL, 1) && run.is(MEM))
        .map(|run| run.measurement.latency_ns[0]);
    Goal {
        statement: format!(
            "Array, 8-byte elements: mem at most {:.2} µs per operation (p50)",
            MEM_P50_GOAL_NS as f64 / 1e3
        ),
        measured: p50.map_or("no mem run on the 8-byte array".to_owned(), |ns| {
            format!("p50 {:.3} µs", ns as f64 / 1e3)
        }),
        holds: p50.map(|ns| ns <= MEM_P50_GOAL_NS),
    }
}

/// The TimeStone-family run of `engine` on `label` at `threads`.
fn timestone_run<'a>(
    runs: &'a [Run],
    label: &str,
    threads: usize,
    engine: EngineChoice,
) -> Option<&'a Run> {
    runs.iter()
        .find(|run| run.group() == (Family::TimeStone, label, threads) && run.is(engine))
}

/// TimeStone's read-mostly claim: mvcc beats every other engine on the 2 %-update hash
/// table and BST, at each thread count measured.
fn read_mostly_goal(runs: &[Run]) -> Goal {
    let mut worst: Option<(f64, String)> = None;
    for label in ["ts-hash 2%", "bst 2%"] {
        for threads in [1, 2] {
            let Some(mvcc) = timestone_run(runs, label, threads, MVCC) else {
                continue;
            };
            for other in [REDO, UNDO, PMDK] {
                let Some(peer) = timestone_run(runs, label, threads, other) else {
                    continue;
                };
                let ratio = mvcc.measurement.throughput.median / peer.measurement.throughput.median;
                if worst.as_ref().is_none_or(|(w, _)| ratio < *w) {
                    worst = Some((ratio, format!("{other} on {}", mvcc.place())));
                }
            }
        }
    }
    Goal {
        statement: "TimeStone: mvcc faster than undo, redo and PMDK on the 2 %-update hash \
                    table and BST at 1 and 2 threads"
            .to_owned(),
        measured: worst.as_ref().map_or(
            "no 2 %-update runs in this plan".to_owned(),
            |(r, place)| format!("lowest ratio mvcc / peer {r:.2}, against {place}"),
        ),
        holds: worst.map(|(r, _)| r > 1.0),
    }
}

/// TimeStone's write-amplification claim on the 80 %-update hash table. Two definitions:
/// ours (PM bytes per distinct byte the operations asked to write, as for every engine)
/// and TimeStone's (PM bytes per byte copied into the version log, `tlog_bytes`).
fn mvcc_amplification_goal(runs: &[Run]) -> Goal {
    let run = timestone_run(runs, "ts-hash 80%", 1, MVCC);
    let ours = run.and_then(|r| r.measurement.traffic.write_amplification);
    let timestone = run.and_then(|r| {
        let logged = *r.measurement.events.get("tlog_bytes")?;
        (logged > 0).then(|| r.measurement.counters.pm_bytes() as f64 / logged as f64)
    });
    Goal {
        statement: "TimeStone: mvcc write amplification at most 1.0 on the 80 %-update hash \
                    table (1 thread)"
            .to_owned(),
        measured: match (ours, timestone) {
            (Some(ours), Some(ts)) => format!(
                "{ours:.2} PM bytes per user byte; {ts:.2} per version-log byte (TimeStone's \
                 definition)"
            ),
            _ => "no 80 %-update hash run of mvcc in this plan".to_owned(),
        },
        holds: ours.map(|wa| wa <= 1.0),
    }
}

/// mvcc's write amplification is the lowest of the counted engines on every 80 %-update
/// run (PMDK writes PM directly and is not counted).
fn lowest_amplification_goal(runs: &[Run]) -> Goal {
    let mut checked = 0;
    let mut beaten = Vec::new();
    for run in runs
        .iter()
        .filter(|r| r.family == Family::TimeStone && r.label.ends_with(" 80%") && r.is(MVCC))
    {
        let Some(mine) = run.measurement.traffic.write_amplification else {
            continue;
        };
        checked += 1;
        for other in [REDO, UNDO] {
            let peer = timestone_run(runs, &run.label, run.threads(), other)
                .and_then(|p| p.measurement.traffic.write_amplification);
            if let Some(theirs) = peer.filter(|&theirs| theirs < mine) {
                beaten.push(format!(
                    "{other} {theirs:.2} < {mine:.2} on {}",
                    run.place()
                ));
            }
        }
    }
    Goal {
        statement: "TimeStone: mvcc has the lowest write amplification of the counted engines \
                    on the 80 %-update structures"
            .to_owned(),
        measured: if checked == 0 {
            "no 80 %-update runs in this plan".to_owned()
        } else if beaten.is_empty() {
            format!("lowest on all {checked} runs")
        } else {
            format!(
                "{} of {checked} runs beaten: {}",
                beaten.len(),
                beaten.join("; ")
            )
        },
        holds: (checked > 0).then_some(beaten.is_empty()),
    }
}

/// How mvcc's throughput and PM traffic change from 1 to 2 threads (the machine has two
/// cores, so scaling beyond cannot be measured). Informational: not a goal.
fn scaling_line(runs: &[Run]) -> Option<String> {
    let mut parts = Vec::new();
    for label in ["ts-hash 2%", "ts-hash 80%", "bst 2%", "bst 80%"] {
        let (Some(one), Some(two)) = (
            timestone_run(runs, label, 1, MVCC),
            timestone_run(runs, label, 2, MVCC),
        ) else {
            continue;
        };
        let speedup = two.measurement.throughput.median / one.measurement.throughput.median;
        let bytes = |r: &Run| r.measurement.traffic.pm_bytes_per_op;
        parts.push(format!(
            "{label}: {speedup:.2}× throughput, {:.0} → {:.0} PM B/op",
            bytes(one),
            bytes(two)
        ));
    }
    (!parts.is_empty()).then(|| {
        format!(
            "TimeStone, mvcc from 1 to 2 threads (scaling past 2 cores cannot be measured on \
             this 2-core machine): {}.",
            parts.join("; ")
        )
    })
}

/// The single-threaded Silo throughput of `engine` on `label`.
fn silo_throughput(runs: &[Run], label: &str, engine: EngineChoice) -> Option<f64> {
    runs.iter()
        .find(|run| run.group() == (Family::Silo, label, 1) && run.is(engine))
        .map(|run| run.measurement.throughput.median)
}

/// Redo's throughput over `base`'s on Silo's `label` must be at least `target`.
fn ratio_goal(runs: &[Run], label: &str, base: EngineChoice, target: f64, statement: &str) -> Goal {
    let redo = silo_throughput(runs, label, REDO);
    let ratio = cells::ratio(redo.unwrap_or(0.0), silo_throughput(runs, label, base));
    Goal {
        statement: statement.to_owned(),
        measured: ratio.map_or(format!("no {label} measurement of redo and {base}"), |r| {
            format!("redo at {r:.2}× {base}")
        }),
        holds: ratio.map(|r| r >= target),
    }
}

/// The worst write amplification of `engine` over every run that counted it, with where,
/// and how many runs stayed within the goal.
fn amplification_of(runs: &[Run], engine: EngineChoice) -> Option<(f64, String, usize, usize)> {
    let values: Vec<(f64, &Run)> = runs
        .iter()
        .filter(|run| run.is(engine))
        .filter_map(|run| Some((run.measurement.traffic.write_amplification?, run)))
        .collect();
    let (worst, place) = values
        .iter()
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(wa, run)| (*wa, run.place()))?;
    let within = values.iter().filter(|(wa, _)| *wa <= WA_GOAL).count();
    Some((worst, place, within, values.len()))
}

fn amplification_goal(runs: &[Run]) -> Goal {
    let describe = |engine: EngineChoice| {
        amplification_of(runs, engine).map_or(format!("{engine}: not measured"), |a| {
            let (worst, place, within, total) = a;
            format!("{engine}: at most {WA_GOAL} in {within} of {total} runs, worst {worst:.2} on {place}")
        })
    };
    Goal {
        statement: format!(
            "write amplification (PM bytes per user byte) of redo at most {WA_GOAL}"
        ),
        measured: format!("{}; {}", describe(REDO), describe(UNDO)),
        holds: amplification_of(runs, REDO).map(|(worst, ..)| worst <= WA_GOAL),
    }
}

fn fence_goal(runs: &[Run]) -> Goal {
    let fences: Vec<f64> = runs
        .iter()
        .filter(|run| run.is(REDO))
        .filter_map(|run| run.measurement.traffic.fences_per_commit)
        .collect();
    let min = fences.iter().copied().reduce(f64::min);
    let max = fences.iter().copied().reduce(f64::max);
    let measured = match (min, max) {
        (Some(min), Some(max)) => format!(
            "{min:.2} to {max:.2} over {} runs with commits",
            fences.len()
        ),
        _ => "no redo run committed".to_owned(),
    };
    Goal {
        statement: format!("redo issues one fence per commit (within ±{FENCE_TOLERANCE})"),
        measured,
        holds: min
            .zip(max)
            .map(|(min, max)| (1.0 - min).abs().max((max - 1.0).abs()) <= FENCE_TOLERANCE),
    }
}

/// The runs grouped by (family, workload, threads), groups in the order they ran.
fn groups(runs: &[Run]) -> Vec<Vec<&Run>> {
    let mut groups: Vec<Vec<&Run>> = Vec::new();
    for run in runs {
        match groups.iter_mut().find(|g| g[0].group() == run.group()) {
            Some(group) => group.push(run),
            None => groups.push(vec![run]),
        }
    }
    groups
}

const COLUMNS: [&str; 12] = [
    "engine",
    "Kops/s median (min–max)",
    "× pmdk",
    "× ideal",
    "× raw",
    "p50 µs",
    "p99 µs",
    "fences/commit",
    "flushes/commit",
    "PM B/op",
    "WA (pm)",
    "WA (media)",
];

fn group_table(group: &[&Run]) -> Table {
    let base = |engine: EngineChoice| {
        group
            .iter()
            .find(|run| run.is(engine))
            .map(|run| run.measurement.throughput.median)
    };
    let bases = [base(PMDK), base(IDEAL), base(RAW)];
    let mut table = Table::new(group_title(group[0]), &COLUMNS);
    for run in group {
        table.push(row(&run.measurement, bases));
    }
    table
}

fn group_title(run: &Run) -> String {
    let p = &run.params;
    let threads = threads_text(run.threads());
    let family = run.family.name();
    match run.workload {
        WorkloadChoice::Array => format!(
            "{family} array: {} elements of {} B, swaps, {threads}",
            p.keys, p.value_size
        ),
        WorkloadChoice::Queue => format!(
            "{family} queue: {} initial items of {} B, enqueue/dequeue, {threads}",
            p.keys, p.value_size
        ),
        WorkloadChoice::Tpcc => format!("TPC-C New-Order: one warehouse per thread, {threads}"),
        WorkloadChoice::Ycsb(_) => format!(
            "{family} {}: {} records of {} B over the B+tree, {threads}",
            run.label, p.keys, p.value_size
        ),
        _ => format!(
            "{family} {}: {} keys, {} B values, {} % updates, {threads}",
            run.label, p.keys, p.value_size, p.update_percent
        ),
    }
}

/// A table row, with throughput ratios over PMDK, ideal and raw; the cells are formatted as
/// `ferrite bench` formats them.
fn row(m: &Measurement, [pmdk, ideal, raw]: [Option<f64>; 3]) -> Vec<String> {
    let t = &m.throughput;
    vec![
        m.engine.clone(),
        format!(
            "{} ({}–{})",
            cells::kops(t.median),
            cells::kops(t.min),
            cells::kops(t.max)
        ),
        cells::optional(cells::ratio(t.median, pmdk)),
        cells::optional(cells::ratio(t.median, ideal)),
        cells::optional(cells::ratio(t.median, raw)),
        cells::micros(m.latency_ns[0]),
        cells::micros(m.latency_ns[1]),
        cells::optional(m.traffic.fences_per_commit),
        cells::optional(m.traffic.flushes_per_commit),
        cells::pm_bytes_per_op(m),
        cells::optional(m.traffic.write_amplification),
        cells::optional(m.traffic.media_write_amplification),
    ]
}

fn plots(plan: &Plan, runs: &[Run]) -> anyhow::Result<Vec<Plot>> {
    let mut plots = Vec::new();
    let silo: Vec<&Run> = runs.iter().filter(|r| r.family == Family::Silo).collect();
    if !silo.is_empty() {
        plots.push(silo_plot(&silo)?);
    }
    let single: Vec<&Run> = runs.iter().filter(|r| r.threads() == 1).collect();
    if single
        .iter()
        .any(|r| r.measurement.traffic.write_amplification.is_some())
    {
        plots.push(amplification_plot(&single)?);
    }
    let timestone: Vec<&Run> = runs
        .iter()
        .filter(|r| r.family == Family::TimeStone)
        .collect();
    if !timestone.is_empty() {
        plots.push(timestone_plot(plan, &timestone)?);
    }
    Ok(plots)
}

/// The distinct labels of `runs`, in order.
fn labels(runs: &[&Run]) -> Vec<String> {
    let mut labels: Vec<String> = Vec::new();
    for run in runs {
        if !labels.contains(&run.label) {
            labels.push(run.label.clone());
        }
    }
    labels
}

/// One bar series: `value` of the run of `engine` (and `threads`) on each label.
fn series(
    name: String,
    runs: &[&Run],
    labels: &[String],
    engine: EngineChoice,
    threads: usize,
    value: fn(&Measurement) -> Option<f64>,
) -> BarSeries {
    let values = labels
        .iter()
        .map(|label| {
            runs.iter()
                .find(|r| &r.label == label && r.threads() == threads && r.is(engine))
                .and_then(|r| value(&r.measurement))
        })
        .collect();
    BarSeries { name, values }
}

fn kops(m: &Measurement) -> Option<f64> {
    Some(m.throughput.median / 1e3)
}

fn amplification(m: &Measurement) -> Option<f64> {
    m.traffic.write_amplification
}

fn silo_plot(runs: &[&Run]) -> anyhow::Result<Plot> {
    let labels = labels(runs);
    let bars: Vec<BarSeries> = SILO_ENGINES
        .iter()
        .chain(&FLOORS)
        .filter(|&&engine| runs.iter().any(|r| r.is(engine)))
        .map(|&engine| series(engine.to_string(), runs, &labels, engine, 1, kops))
        .collect();
    let title = "Silo micro-benchmarks, 1 thread";
    Ok(Plot {
        id: "silo-throughput".to_owned(),
        title: format!("{title}: median throughput (Kops/s) by workload and engine"),
        svg: grouped_bar_chart(title, "Kops/s (median)", &labels, &bars)?,
    })
}

fn amplification_plot(runs: &[&Run]) -> anyhow::Result<Plot> {
    let measured: Vec<&Run> = runs
        .iter()
        .copied()
        .filter(|r| r.measurement.traffic.write_amplification.is_some())
        .collect();
    let labels = labels(&measured);
    let bars: Vec<BarSeries> = SILO_ENGINES
        .iter()
        .filter(|&&engine| measured.iter().any(|r| r.is(engine)))
        .map(|&engine| {
            series(
                engine.to_string(),
                &measured,
                &labels,
                engine,
                1,
                amplification,
            )
        })
        .collect();
    let title = "Write amplification, 1 thread";
    Ok(Plot {
        id: "write-amplification".to_owned(),
        title: format!(
            "{title}: PM bytes stored per user byte, by workload and engine (PMDK's stores \
             are not counted; read-only workloads have none)"
        ),
        svg: grouped_bar_chart(title, "PM bytes per user byte", &labels, &bars)?,
    })
}

fn timestone_plot(plan: &Plan, runs: &[&Run]) -> anyhow::Result<Plot> {
    let labels = labels(runs);
    let mut bars = Vec::new();
    for engine in PEER_ENGINES
        .iter()
        .filter(|&&e| runs.iter().any(|r| r.is(e)))
    {
        for &threads in plan.thread_counts {
            let name = format!("{engine} ×{threads}");
            bars.push(series(name, runs, &labels, *engine, threads, kops));
        }
    }
    let title = "TimeStone structures by update share and threads";
    Ok(Plot {
        id: "timestone-threads".to_owned(),
        title: format!(
            "{title}: median throughput (Kops/s) at {} threads",
            plan.thread_counts
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(" and ")
        ),
        svg: grouped_bar_chart(title, "Kops/s (median)", &labels, &bars)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bench::Summary;
    use bench::runner::Traffic;

    fn fake(label: &str, engine: EngineChoice, kops: f64, wa: Option<f64>) -> Run {
        let fences = (engine == REDO).then_some(1.0);
        Run {
            family: Family::Silo,
            label: label.to_owned(),
            workload: WorkloadChoice::parse(label).expect("a workload name"),
            params: Params::default(),
            measurement: Measurement {
                engine: engine.to_string(),
                workload: label.to_owned(),
                threads: 1,
                ops: 1000,
                throughput: Summary {
                    median: kops * 1e3,
                    min: kops * 1e3,
                    max: kops * 1e3,
                    runs: 1,
                },
                latency_ns: [1000, 2000, 3000],
                traffic: Traffic {
                    fences_per_commit: fences,
                    write_amplification: wa,
                    ..Traffic::default()
                },
                counters: pmem::Counters::default(),
                mix: Default::default(),
                events: Default::default(),
                checked: true,
            },
        }
    }

    #[test]
    fn goals_are_computed_from_the_measurements() {
        let runs = vec![
            fake("array", REDO, 800.0, Some(2.5)),
            fake("array", PMDK, 100.0, None),
            fake("array", IDEAL, 2000.0, Some(2.4)),
            fake("hash", REDO, 300.0, Some(3.5)),
            fake("hash", UNDO, 300.0, Some(2.0)),
            fake("hash", PMDK, 200.0, None),
        ];
        let goals = goals(&runs);
        let holds: Vec<Option<bool>> = goals.iter().map(|g| g.holds).collect();
        // Array 8× PMDK but 0.4× ideal; hash 1.5× PMDK; no B+tree; WA 3.5 > 3; one fence.
        assert_eq!(
            holds,
            [
                Some(true),
                Some(false),
                Some(false),
                None,
                Some(false),
                Some(true),
                None,
                None,
                None,
                None,
                None,
                None,
                None
            ]
        );
        assert!(goals[0].measured.contains("8.00× pmdk"), "{:?}", goals[0]);
        assert!(
            goals[4].measured.contains("worst 3.50 on hash"),
            "{:?}",
            goals[4]
        );
        assert!(goals[4].measured.contains("undo: at most 3 in 1 of 1"));
        assert!(goals[3].line().contains("not measured"));
    }

    #[test]
    fn raw_and_mem_goals_use_the_floors_of_the_same_table() {
        let mut runs = vec![
            fake("array", REDO, 800.0, Some(2.5)),
            fake("array", RAW, 1000.0, Some(2.0)),
            fake("array", REDO, 500.0, Some(5.0)),
            fake("array", RAW, 1000.0, Some(4.0)),
            fake("array", PMDK, 100.0, None),
            fake("array", MEM, 4000.0, None),
        ];
        for run in &mut runs[2..] {
            run.label = ARRAY_SMALL.to_owned();
        }
        runs[5].measurement.latency_ns[0] = 70;
        let goals = goals(&runs);
        let [raw64, raw8, pmdk8, mem] = [&goals[9], &goals[10], &goals[11], &goals[12]];
        assert_eq!(raw64.holds, Some(true), "1.25× slower: {raw64:?}");
        assert!(raw64.measured.contains("1.25×"), "{raw64:?}");
        assert_eq!(raw8.holds, Some(false), "2× slower: {raw8:?}");
        assert_eq!(pmdk8.holds, Some(true), "5× pmdk: {pmdk8:?}");
        assert_eq!(mem.holds, Some(true), "{mem:?}");
        runs[5].measurement.latency_ns[0] = 90;
        assert_eq!(super::goals(&runs)[12].holds, Some(false));
    }

    /// A TimeStone-family run of `engine` on `label` at `threads`.
    fn fake_timestone(
        label: &str,
        threads: usize,
        engine: EngineChoice,
        kops: f64,
        wa: Option<f64>,
    ) -> Run {
        let mut run = fake("hash", engine, kops, wa);
        run.family = Family::TimeStone;
        run.label = label.to_owned();
        run.measurement.threads = threads;
        run
    }

    #[test]
    fn timestone_goals_compare_mvcc_with_every_peer() {
        let mut runs = Vec::new();
        for threads in [1, 2] {
            for (label, mvcc) in [("ts-hash 2%", 500.0), ("bst 2%", 300.0)] {
                runs.push(fake_timestone(label, threads, MVCC, mvcc, None));
                runs.push(fake_timestone(label, threads, REDO, 400.0, None));
                runs.push(fake_timestone(label, threads, PMDK, 200.0, None));
            }
        }
        let mut hot = fake_timestone("ts-hash 80%", 1, MVCC, 100.0, Some(0.9));
        hot.measurement.events.insert("tlog_bytes".into(), 1000);
        runs.push(hot);
        runs.push(fake_timestone("ts-hash 80%", 1, REDO, 100.0, Some(0.8)));
        let goals = goals(&runs);
        let [read_mostly, wa, lowest] = [&goals[6], &goals[7], &goals[8]];
        // bst 2%: mvcc 300 < redo 400 at both thread counts.
        assert_eq!(read_mostly.holds, Some(false), "{read_mostly:?}");
        assert!(read_mostly.measured.contains("0.75"), "{read_mostly:?}");
        assert!(
            read_mostly.measured.contains("redo on bst 2%"),
            "{read_mostly:?}"
        );
        assert_eq!(wa.holds, Some(true), "{wa:?}");
        assert_eq!(
            lowest.holds,
            Some(false),
            "redo's 0.8 beats 0.9: {lowest:?}"
        );
        assert!(
            lowest.measured.starts_with("1 of 1 runs beaten"),
            "{lowest:?}"
        );
    }

    #[test]
    fn tables_group_by_workload_and_show_ratios() {
        let runs = vec![
            fake("array", REDO, 800.0, Some(2.5)),
            fake("array", PMDK, 200.0, None),
            fake("hash", REDO, 300.0, Some(3.5)),
        ];
        let tables: Vec<Table> = groups(&runs).iter().map(|g| group_table(g)).collect();
        assert_eq!(tables.len(), 2);
        assert_eq!(tables[0].rows[0][2], "4.00", "redo over pmdk");
        assert_eq!(tables[0].rows[0][3], "n/a", "no ideal in the group");
        assert_eq!(tables[0].rows[0][4], "n/a", "no raw reference in the group");
        assert_eq!(tables[0].rows[1][10], "n/a", "PMDK's WA is not measured");
        assert_eq!(tables[1].rows[0][1], "300.0 (300.0–300.0)");
    }

    #[test]
    fn quick_plan_covers_every_family_and_engine() {
        let cases = cases(&QUICK, Path::new("/dev/shm"));
        for family in [Family::Silo, Family::TimeStone, Family::Ycsb] {
            assert!(cases.iter().any(|c| c.family == family), "{family:?}");
        }
        for engine in SILO_ENGINES.iter().chain(&FLOORS) {
            assert!(cases.iter().any(|c| c.spec.engine == *engine), "{engine}");
        }
        // The raw reference has only the Array and the Hash.
        assert!(cases.iter().all(|c| c.spec.engine != RAW
            || matches!(
                c.spec.workload,
                WorkloadChoice::Array | WorkloadChoice::Hash
            )));
        for engine in PEER_ENGINES {
            assert!(cases.iter().any(|c| c.spec.engine == engine), "{engine}");
        }
        let full = cases_count(&FULL);
        // Silo: 5 workloads × 4 engines, the floors on array and hash, the 8-byte array.
        assert_eq!(full, 5 * 4 + 2 * 3 + 7 + 3 * 3 * 2 * 4 + 7 * 4);
    }

    fn cases_count(plan: &Plan) -> usize {
        cases(plan, Path::new("/dev/shm")).len()
    }
}
