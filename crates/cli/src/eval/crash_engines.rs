//! Section "crash-engines": the redo and undo engines on representative workloads through
//! the crash simulator ([`conformance::EngineScenario`] with `Config::thorough`): a crash
//! before every fence, structured and random images, recovery, the workload's invariant
//! checker, the model of durable operations, the heap's block count, and a crash during
//! recovery. The verdict is Pass only if no image of any scenario failed.

use super::{EvalOptions, empty_section};
use crate::report::{ClaimVerdict, Headline, Section, Table, Verdict};
use conformance::{EngineScenario, Factory, RedoFactory, UndoFactory};
use crashsim::{Config, SimMode};
use indicatif::ProgressBar;
use serde::Serialize;
use serde_json::json;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use tx::LogMode;
use workloads::array::ArrayWorkload;
use workloads::bst::timestone_bst;
use workloads::btree::{BTree, silo_btree};
use workloads::hash::silo_hash;
use workloads::list::timestone_list;
use workloads::queue::QueueWorkload;
use workloads::rbtree::silo_rbtree;
use workloads::tpcc::{TpccConfig, TpccNewOrder};
use workloads::ycsb::{Ycsb, YcsbMix};
use workloads::{Params, Workload};

/// Section id.
pub const ID: &str = "crash-engines";
/// Section heading.
pub const TITLE: &str = "Engine crash tests";

/// Seed of the harness's random image choices (fixed, so the report is reproducible).
const SEED: u64 = 11;
/// Simulated pool size: every crash image is a copy of it, so small.
const POOL: u64 = 512 * 1024;
/// Operations per scenario.
const OPS: usize = 8;
/// Operations of TPC-C New-Order, whose transactions touch far more lines than the others.
const TPCC_OPS: usize = 4;
/// Operations per scenario with `--quick`.
const QUICK_OPS: usize = 3;
/// Failure lines quoted in the summary when something fails.
const QUOTED_FAILURES: usize = 5;

/// An engine under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum EngineKind {
    Redo,
    Undo,
}

/// A workload of the matrix, with crash-test sizes (a few keys, so images are cheap).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum CrashWorkload {
    Array,
    Queue,
    Hash,
    BTree,
    RbTree,
    List,
    Bst,
    YcsbA,
    Tpcc,
}

impl CrashWorkload {
    const ALL: [CrashWorkload; 9] = [
        CrashWorkload::Array,
        CrashWorkload::Queue,
        CrashWorkload::Hash,
        CrashWorkload::BTree,
        CrashWorkload::RbTree,
        CrashWorkload::List,
        CrashWorkload::Bst,
        CrashWorkload::YcsbA,
        CrashWorkload::Tpcc,
    ];
    /// With `--quick`: a hash table, a tree and YCSB, the structures most often changed.
    const QUICK: [CrashWorkload; 3] = [
        CrashWorkload::Hash,
        CrashWorkload::BTree,
        CrashWorkload::YcsbA,
    ];
}

/// One scenario to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
struct Case {
    engine: EngineKind,
    workload: CrashWorkload,
    mode: SimMode,
    ops: usize,
}

/// The outcome of one scenario.
#[derive(Debug, Serialize)]
struct Run {
    case: Case,
    /// The harness's report (empty when the scenario panicked outside recovery).
    report: crashsim::Report,
    /// A panic outside recovery (setup, the crash-free dry run, an operation).
    panic: Option<String>,
}

impl Run {
    fn passed(&self) -> bool {
        self.report.passed() && self.panic.is_none() && self.report.crash_points > 0
    }

    fn name(&self) -> String {
        if self.report.scenario.is_empty() {
            format!("{:?}/{:?}", self.case.engine, self.case.workload).to_lowercase()
        } else {
            self.report.scenario.clone()
        }
    }

    /// Why the scenario failed, first problem first.
    fn problems(&self) -> Vec<String> {
        let mut problems: Vec<String> = self
            .panic
            .iter()
            .map(|p| format!("{}: panicked: {p}", self.name()))
            .collect();
        problems.extend(self.report.failures.iter().map(|f| f.to_string()));
        if self.panic.is_none() && self.report.crash_points == 0 {
            problems.push(format!(
                "{}: no crash points, the test was vacuous",
                self.name()
            ));
        }
        problems
    }
}

/// The scenarios: both engines on every workload under ADR, then the hash table under eADR.
fn cases(quick: bool) -> Vec<Case> {
    let (workloads, ops): (&[CrashWorkload], usize) = if quick {
        (&CrashWorkload::QUICK, QUICK_OPS)
    } else {
        (&CrashWorkload::ALL, OPS)
    };
    let engines = [EngineKind::Redo, EngineKind::Undo];
    let case = |engine, workload, mode| Case {
        engine,
        workload,
        mode,
        ops: if workload == CrashWorkload::Tpcc {
            ops.min(TPCC_OPS)
        } else {
            ops
        },
    };
    let adr = workloads
        .iter()
        .flat_map(|&w| engines.map(|e| case(e, w, SimMode::Adr)));
    let eadr = engines.map(|e| case(e, CrashWorkload::Hash, SimMode::Eadr));
    adr.chain(eadr).collect()
}

/// Runs every scenario with `Config::thorough`.
pub fn run(options: &EvalOptions, bar: &ProgressBar) -> anyhow::Result<Section> {
    let cases = cases(options.quick);
    bar.set_length(cases.len() as u64);
    let start = Instant::now();
    let runs = run_all(&cases, bar);
    Ok(section_of(&runs, start.elapsed().as_millis()))
}

/// Runs the scenarios on every available core (they are independent and each is
/// single-threaded), returning their runs in case order.
fn run_all(cases: &[Case], bar: &ProgressBar) -> Vec<Run> {
    let workers = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, cases.len().max(1));
    let next = AtomicUsize::new(0);
    let worker = || {
        let mut done = Vec::new();
        while let Some(&case) = cases.get(next.fetch_add(1, Ordering::Relaxed)) {
            bar.set_message(format!(
                "{:?} {:?} {}",
                case.engine,
                case.workload,
                case.mode.name()
            ));
            done.push(run_case(case));
            bar.inc(1);
        }
        done
    };
    let mut runs: Vec<Run> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers).map(|_| scope.spawn(worker)).collect();
        handles
            .into_iter()
            .flat_map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|panic| panic::resume_unwind(panic))
            })
            .collect()
    });
    runs.sort_by_key(|run| cases.iter().position(|case| *case == run.case));
    runs
}

/// Runs one scenario; a panic outside recovery (which the harness catches itself) becomes
/// the scenario's failure instead of ending the evaluation.
fn run_case(case: Case) -> Run {
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| match case.engine {
        EngineKind::Redo => with_workload(RedoFactory::small(LogMode::Auto), case),
        EngineKind::Undo => with_workload(UndoFactory::small(LogMode::Auto), case),
    }));
    match outcome {
        Ok(report) => Run {
            case,
            report,
            panic: None,
        },
        Err(payload) => Run {
            case,
            report: crashsim::Report::default(),
            panic: Some(panic_text(payload.as_ref())),
        },
    }
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".to_owned())
}

/// Crash-test sizes, like `crates/conformance/tests/crash_workloads.rs`.
fn params(update_percent: u32) -> Params {
    Params {
        keys: 12,
        value_size: 16,
        update_percent,
        threads: 1,
        seed: 5,
    }
}

fn tiny_tpcc() -> TpccConfig {
    TpccConfig {
        warehouses: 1,
        districts: 2,
        customers: 4,
        items: 40,
        order_capacity: 6,
        seed: 3,
    }
}

fn with_workload<F: Factory>(factory: F, case: Case) -> crashsim::Report {
    match case.workload {
        CrashWorkload::Array => check(
            factory,
            ArrayWorkload::new(Params {
                keys: 16,
                value_size: 64,
                ..params(100)
            }),
            case,
        ),
        CrashWorkload::Queue => check(factory, QueueWorkload::new(params(50)), case),
        CrashWorkload::Hash => check(factory, silo_hash(params(80)), case),
        CrashWorkload::BTree => check(
            factory,
            silo_btree(Params {
                keys: 40,
                ..params(80)
            }),
            case,
        ),
        CrashWorkload::RbTree => check(factory, silo_rbtree(params(80)), case),
        CrashWorkload::List => check(factory, timestone_list(params(80)), case),
        CrashWorkload::Bst => check(factory, timestone_bst(params(80)), case),
        CrashWorkload::YcsbA => check(
            factory,
            Ycsb::<BTree>::new(params(0), YcsbMix::A).with_max_scan(4),
            case,
        ),
        CrashWorkload::Tpcc => match TpccNewOrder::new(tiny_tpcc()) {
            Ok(workload) => check(factory, workload, case),
            Err(error) => panic!("the tiny TPC-C configuration is invalid: {error}"),
        },
    }
}

fn check<F: Factory, W: Workload>(factory: F, workload: W, case: Case) -> crashsim::Report {
    let scenario = EngineScenario::new(factory, workload, case.ops, POOL);
    crashsim::check(&scenario, &Config::thorough(case.mode, SEED))
}

/// The section for `runs`, which took `wall_ms` milliseconds in all.
fn section_of(runs: &[Run], wall_ms: u128) -> Section {
    let failed: Vec<&Run> = runs.iter().filter(|run| !run.passed()).collect();
    let failures: usize = runs.iter().map(|run| run.report.failures.len()).sum();
    let mut section = empty_section(ID, TITLE);
    section.verdict = if failed.is_empty() {
        Verdict::Pass
    } else {
        Verdict::Fail
    };
    let images: u64 = runs.iter().map(|run| run.report.images).sum();
    section.headlines = vec![Headline::new(
        "Every engine keeps every acknowledged transaction and nothing else, after a crash \
         at any fence and after a crash during recovery",
        format!(
            "{} of {} engine × workload scenarios pass ({images} crash images)",
            runs.len() - failed.len(),
            runs.len()
        ),
        if runs.is_empty() {
            ClaimVerdict::NotMeasured
        } else {
            ClaimVerdict::from_holds(failed.is_empty())
        },
    )];
    section.summary = summary(runs, &failed, wall_ms);
    section.tables = vec![table(runs)];
    section.json = json!({
        "seed": SEED,
        "config": "Config::thorough",
        "pool_size": POOL,
        "wall_ms": wall_ms,
        "scenarios": runs.len(),
        "failed_scenarios": failed.len(),
        "failures": failures,
        "panics": runs.iter().filter(|run| run.panic.is_some()).count(),
        "passed": failed.is_empty(),
        "runs": runs,
    });
    section
}

fn summary(runs: &[Run], failed: &[&Run], wall_ms: u128) -> Vec<String> {
    let total =
        |pick: fn(&crashsim::Report) -> u64| -> u64 { runs.iter().map(|r| pick(&r.report)).sum() };
    let millis: u128 = runs.iter().map(|run| run.report.elapsed_ms).sum();
    let mut lines = Vec::new();
    if failed.is_empty() {
        lines.push(format!(
            "Every scenario passed: {} engine × workload scenarios, no crash image lost an \
             acknowledged operation, leaked or lost a heap block, or failed a second recovery.",
            runs.len()
        ));
    } else {
        lines.push(format!(
            "FAILED: {} of {} scenarios; first problems:",
            failed.len(),
            runs.len()
        ));
        lines.extend(
            failed
                .iter()
                .flat_map(|run| run.problems())
                .take(QUOTED_FAILURES),
        );
    }
    lines.push(format!(
        "Config::thorough (a crash before every fence, structured and random images, crashes \
         during recovery; seed {SEED}), log mode Auto: {} crash points, {} images, {} \
         recoveries ({} after a second crash); {millis} ms of scenario time, {wall_ms} ms \
         wall clock with the scenarios spread over the CPUs.",
        total(|r| r.crash_points),
        total(|r| r.images),
        total(|r| r.recoveries),
        total(|r| r.second_crash_images),
    ));
    lines
}

fn table(runs: &[Run]) -> Table {
    let mut table = Table::new(
        "Crash scenarios (failures stop at the configured maximum)",
        &[
            "scenario",
            "mode",
            "ops",
            "crash points",
            "images",
            "recoveries",
            "second-crash images",
            "failures",
            "ms",
        ],
    );
    for run in runs {
        let report = &run.report;
        let failures = match &run.panic {
            Some(_) => "panicked".to_owned(),
            None => report.failures.len().to_string(),
        };
        table.push(vec![
            run.name(),
            run.case.mode.name().to_owned(),
            run.case.ops.to_string(),
            report.crash_points.to_string(),
            report.images.to_string(),
            report.recoveries.to_string(),
            report.second_crash_images.to_string(),
            failures,
            report.elapsed_ms.to_string(),
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_runs_on_both_engines_plus_hash_under_eadr() {
        let full = cases(false);
        assert_eq!(full.len(), 2 * CrashWorkload::ALL.len() + 2);
        assert!(
            full.iter()
                .filter(|c| c.mode == SimMode::Eadr)
                .all(|c| c.workload == CrashWorkload::Hash)
        );
        assert!(cases(true).len() < full.len());
    }

    #[test]
    fn a_panicking_scenario_fails_the_section_with_its_message() {
        let case = cases(true)[0];
        let runs = [Run {
            case,
            report: crashsim::Report::default(),
            panic: Some("boom".to_owned()),
        }];
        let section = section_of(&runs, 0);
        assert_eq!(section.verdict, Verdict::Fail);
        assert!(section.summary.iter().any(|l| l.contains("panicked: boom")));
        assert_eq!(section.tables[0].rows[0][7], "panicked");
    }

    #[test]
    fn a_small_scenario_passes() {
        let case = Case {
            engine: EngineKind::Redo,
            workload: CrashWorkload::Hash,
            mode: SimMode::Eadr,
            ops: 2,
        };
        let section = section_of(&[run_case(case)], 0);
        assert_eq!(section.verdict, Verdict::Pass, "{:?}", section.summary);
        assert_eq!(section.json["failures"], 0);
    }
}
