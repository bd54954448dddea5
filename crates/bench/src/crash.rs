//! The crash campaigns the evaluation reports, with typed results:
//! - the simulator's self-test ([`selftest`]): the correct toy redo log must pass under both
//!   persistence domains and every deliberately broken variant must be caught exactly where
//!   its bug can lose data ([`Mutation::is_bug_under`]);
//! - the engines' scenarios ([`engine_scenarios`]): the conformance catalogue's engines ×
//!   representative workloads, a crash before every fence, recovery, the invariant checker,
//!   the model of durable operations, the heap's block count, and a crash during recovery.

use crate::Progress;
use conformance::{CrashCase, CrashEngine, CrashWorkload};
use crashsim::toy::{LogWrites, Mutation, ToyScenario};
use crashsim::{Config, Report, SimMode};
use serde::Serialize;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Seed of the self-test's random image choices (fixed, so the report is reproducible).
pub const SELFTEST_SEED: u64 = 1;
/// Transactions per self-test run.
pub const SELFTEST_OPS: usize = 8;
/// Transactions per self-test run in a quick evaluation (every mutant's bug shows in its
/// first transaction).
pub const SELFTEST_QUICK_OPS: usize = 4;
/// The persistence domains every self-test scenario runs under.
pub const SELFTEST_MODES: [SimMode; 2] = [SimMode::Adr, SimMode::Eadr];

/// One run of the self-test.
#[derive(Debug, Serialize)]
pub struct SelftestRun {
    /// The toy engine's deliberate bug, or `None`.
    pub mutation: Mutation,
    /// How the toy writes its log.
    pub log: LogWrites,
    /// The simulated platform.
    pub mode: SimMode,
    /// Whether the harness should report failures ([`Mutation::is_bug_under`]).
    pub expected_caught: bool,
    /// Whether it did.
    pub caught: bool,
    /// The harness's own report, failures included.
    pub report: Report,
}

impl SelftestRun {
    /// Whether the harness judged the run as it should.
    pub fn as_expected(&self) -> bool {
        self.caught == self.expected_caught
    }

    /// Whether the toy engine carries a bug.
    pub fn is_mutant(&self) -> bool {
        self.mutation != Mutation::None
    }

    /// "toy/… under adr".
    pub fn describe(&self) -> String {
        format!("{} under {}", self.report.scenario, self.mode.name())
    }
}

/// One self-test case: the toy engine (correct or a mutant) under one persistence domain.
pub type SelftestCase = (ToyScenario, SimMode);

/// The self-test's scenarios, in report order: the correct toy with each log-write mode,
/// then every mutant, each under every mode.
pub fn selftest_cases(ops: usize) -> Vec<SelftestCase> {
    let correct =
        [LogWrites::Cacheable, LogWrites::NonTemporal].map(|log| ToyScenario::correct(log, ops));
    let mutants = Mutation::MUTANTS.map(|mutation| ToyScenario::mutant(mutation, ops));
    correct
        .into_iter()
        .chain(mutants)
        .flat_map(|scenario| SELFTEST_MODES.map(|mode| (scenario, mode)))
        .collect()
}

/// Runs `cases` with `Config::thorough`, calling `progress` as each starts and ends.
pub fn selftest(
    cases: &[SelftestCase],
    progress: &dyn Fn(Progress<'_, SelftestCase>),
) -> Vec<SelftestRun> {
    cases
        .iter()
        .map(|case| {
            progress(Progress::Started(case));
            let (scenario, mode) = *case;
            let report = crashsim::check(&scenario, &Config::thorough(mode, SELFTEST_SEED));
            progress(Progress::Finished(case));
            selftest_run(scenario, mode, report)
        })
        .collect()
}

/// The run of `scenario` under `mode` that produced `report`.
pub fn selftest_run(scenario: ToyScenario, mode: SimMode, report: Report) -> SelftestRun {
    SelftestRun {
        mutation: scenario.mutation,
        log: scenario.log,
        mode,
        expected_caught: scenario.mutation.is_bug_under(mode),
        caught: !report.passed(),
        report,
    }
}

/// Seed of the engine scenarios' random image choices.
pub const ENGINES_SEED: u64 = 11;
/// Operations per engine scenario.
pub const ENGINES_OPS: usize = 8;
/// Operations of the heaviest scenarios: TPC-C New-Order, whose transactions touch far more
/// lines than the others, and the B+tree on the MVCC engine, whose splits version many
/// chunks that every checkpoint and write-back then rewrites (at 8 operations it alone cost
/// over a third of the section's scenario time).
pub const ENGINES_HEAVY_OPS: usize = 4;
/// Operations per engine scenario in a quick evaluation.
pub const ENGINES_QUICK_OPS: usize = 3;

/// The engine scenarios: every engine on the catalogue's representative workloads (its
/// quick list in a quick evaluation) under ADR, then the hash table under eADR.
pub fn engine_scenarios(quick: bool) -> Vec<CrashCase> {
    let (workloads, ops): (&[CrashWorkload], usize) = if quick {
        (&CrashWorkload::QUICK, ENGINES_QUICK_OPS)
    } else {
        (&CrashWorkload::REPRESENTATIVE, ENGINES_OPS)
    };
    let case = |engine, workload| {
        let ops = match (engine, workload) {
            (_, CrashWorkload::Tpcc) | (CrashEngine::Mvcc, CrashWorkload::BTree) => {
                ops.min(ENGINES_HEAVY_OPS)
            }
            _ => ops,
        };
        CrashCase::new(engine, workload).with_ops(ops)
    };
    let adr = workloads
        .iter()
        .flat_map(|&workload| CrashEngine::ALL.map(|engine| case(engine, workload)));
    let eadr =
        CrashEngine::ALL.map(|engine| case(engine, CrashWorkload::Hash).under(SimMode::Eadr));
    adr.chain(eadr).collect()
}

/// The outcome of one engine scenario.
#[derive(Debug, Serialize)]
pub struct EngineCrashRun {
    /// What ran.
    pub case: CrashCase,
    /// The harness's report (empty when the scenario panicked outside recovery).
    pub report: Report,
    /// A panic outside recovery (setup, the crash-free dry run, an operation).
    pub panic: Option<String>,
}

impl EngineCrashRun {
    /// Whether the scenario ran, had crash points, and no image failed.
    pub fn passed(&self) -> bool {
        self.report.passed() && self.panic.is_none() && self.report.crash_points > 0
    }

    /// The harness's name for the scenario, or the case's when it never started.
    pub fn name(&self) -> String {
        if self.report.scenario.is_empty() {
            format!("{}/{:?}", self.case.engine.name(), self.case.workload).to_lowercase()
        } else {
            self.report.scenario.clone()
        }
    }

    /// Why the scenario failed, first problem first.
    pub fn problems(&self) -> Vec<String> {
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

/// Runs `cases` on every available core (they are independent and each is single-threaded)
/// and returns their runs in case order; `progress` is called as each starts and ends.
pub fn run_engine_scenarios(
    cases: &[CrashCase],
    progress: &(dyn Fn(Progress<'_, CrashCase>) + Sync),
) -> Vec<EngineCrashRun> {
    let workers = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, cases.len().max(1));
    let next = AtomicUsize::new(0);
    let worker = || {
        let mut done = Vec::new();
        while let Some(case) = cases.get(next.fetch_add(1, Ordering::Relaxed)) {
            progress(Progress::Started(case));
            done.push(run_engine_scenario(*case));
            progress(Progress::Finished(case));
        }
        done
    };
    let mut runs: Vec<EngineCrashRun> = std::thread::scope(|scope| {
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
/// the scenario's failure instead of ending the campaign.
pub fn run_engine_scenario(case: CrashCase) -> EngineCrashRun {
    match panic::catch_unwind(AssertUnwindSafe(|| case.check(ENGINES_SEED))) {
        Ok(report) => EngineCrashRun {
            case,
            report,
            panic: None,
        },
        Err(payload) => EngineCrashRun {
            case,
            report: Report::default(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_engine_runs_every_representative_workload_plus_hash_under_eadr() {
        let full = engine_scenarios(false);
        assert_eq!(
            full.len(),
            CrashEngine::ALL.len() * (CrashWorkload::REPRESENTATIVE.len() + 1)
        );
        for engine in CrashEngine::ALL {
            assert!(full.iter().any(|c| c.engine == engine), "{engine:?}");
        }
        assert!(
            full.iter()
                .filter(|c| c.mode == SimMode::Eadr)
                .all(|c| c.workload == CrashWorkload::Hash)
        );
        assert!(engine_scenarios(true).len() < full.len());
    }

    #[test]
    fn a_small_scenario_passes_and_the_self_test_covers_every_mutant() {
        let case = CrashCase::new(CrashEngine::Redo, CrashWorkload::Hash)
            .under(SimMode::Eadr)
            .with_ops(2);
        let run = run_engine_scenario(case);
        assert!(run.passed(), "{:?}", run.problems());
        let cases = selftest_cases(2);
        assert_eq!(
            cases.len(),
            (2 + Mutation::MUTANTS.len()) * SELFTEST_MODES.len()
        );
    }
}
