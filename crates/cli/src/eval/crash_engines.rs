//! Section "crash-engines": the redo, undo and MVCC engines on the conformance catalogue's
//! representative workloads through the crash simulator (run by [`bench::crash`] with
//! `Config::thorough`): a crash before every fence, structured and random images, recovery,
//! the workload's invariant checker, the model of durable operations, the heap's block
//! count, and a crash during recovery. The verdict is Pass only if no image of any scenario
//! failed.

use super::{EvalOptions, empty_section};
use crate::report::{ClaimVerdict, Headline, Section, Table, Verdict};
use bench::Progress;
use bench::crash::{self, ENGINES_SEED, EngineCrashRun as Run};
use conformance::CrashWorkload;
use conformance::catalogue::POOL;
use indicatif::ProgressBar;
use serde_json::json;
use std::time::Instant;

/// Section id.
pub const ID: &str = "crash-engines";
/// Section heading.
pub const TITLE: &str = "Engine crash tests";

/// Failure lines quoted in the summary when something fails.
const QUOTED_FAILURES: usize = 5;

/// Runs every scenario with `Config::thorough`.
pub fn run(options: &EvalOptions, bar: &ProgressBar) -> anyhow::Result<Section> {
    let cases = crash::engine_scenarios(options.quick);
    bar.set_length(cases.len() as u64);
    let start = Instant::now();
    let runs = crash::run_engine_scenarios(&cases, &|progress| match progress {
        Progress::Started(case) => bar.set_message(format!(
            "{} {:?} {}",
            case.engine.name(),
            case.workload,
            case.mode.name()
        )),
        Progress::Finished(_) => bar.inc(1),
    });
    Ok(section_of(
        &runs,
        start.elapsed().as_millis(),
        options.quick,
    ))
}

/// The section for `runs`, which took `wall_ms` milliseconds in all; `quick`: the reduced
/// plan ran, whose pass cannot stand for the claim (a failure can: one image that loses an
/// acknowledged transaction disproves it at any size).
fn section_of(runs: &[Run], wall_ms: u128, quick: bool) -> Section {
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
        match (runs.is_empty(), failed.is_empty()) {
            (true, _) => ClaimVerdict::NotMeasured,
            (false, false) => ClaimVerdict::NotMet,
            (false, true) if quick => ClaimVerdict::Indicative,
            (false, true) => ClaimVerdict::Met,
        },
    )];
    section.summary = summary(runs, &failed, wall_ms);
    if quick {
        section.summary.push(format!(
            "Quick run: {} workloads and {} operations per scenario (the full run: {} \
             workloads, {} operations, {} on TPC-C and mvcc's B+tree), so a pass is indicative \
             only; a failure would be a real counterexample.",
            CrashWorkload::QUICK.len(),
            crash::ENGINES_QUICK_OPS,
            CrashWorkload::REPRESENTATIVE.len(),
            crash::ENGINES_OPS,
            crash::ENGINES_HEAVY_OPS
        ));
    }
    section.tables = vec![table(runs)];
    section.json = json!({
        "seed": ENGINES_SEED,
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
         during recovery; seed {ENGINES_SEED}), log mode Auto: {} crash points, {} images, {} \
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
    use conformance::{CrashCase, CrashEngine, CrashWorkload};
    use crashsim::SimMode;

    #[test]
    fn a_panicking_scenario_fails_the_section_with_its_message() {
        let case = crash::engine_scenarios(true)[0];
        let runs = [Run {
            case,
            report: crashsim::Report::default(),
            panic: Some("boom".to_owned()),
        }];
        let section = section_of(&runs, 0, true);
        assert_eq!(section.verdict, Verdict::Fail);
        assert!(section.summary.iter().any(|l| l.contains("panicked: boom")));
        assert_eq!(section.tables[0].rows[0][7], "panicked");
        assert_eq!(
            section.headlines[0].verdict,
            ClaimVerdict::NotMet,
            "a failure at quick sizes is still a counterexample"
        );
    }

    #[test]
    fn a_small_scenario_passes() {
        let case = CrashCase::new(CrashEngine::Redo, CrashWorkload::Hash)
            .under(SimMode::Eadr)
            .with_ops(2);
        let runs = [crash::run_engine_scenario(case)];
        let section = section_of(&runs, 0, false);
        assert_eq!(section.verdict, Verdict::Pass, "{:?}", section.summary);
        assert_eq!(section.json["failures"], 0);
        assert_eq!(section.headlines[0].verdict, ClaimVerdict::Met);
        // The same pass in a quick run is indicative, and the summary says why.
        let quick = section_of(&runs, 0, true);
        assert_eq!(quick.headlines[0].verdict, ClaimVerdict::Indicative);
        assert!(
            quick.summary.iter().any(|l| l.starts_with("Quick run: ")),
            "{:?}",
            quick.summary
        );
    }
}
