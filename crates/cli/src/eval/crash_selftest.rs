//! Section "crash-selftest": proves the crash-test harness is not vacuous.
//!
//! The correct toy redo log must pass under both persistence domains with both log-write
//! modes, and every deliberately broken variant must be caught exactly where its bug can
//! lose data ([`Mutation::is_bug_under`]): a mutant that is harmless under eADR must pass
//! there, or the harness raises false alarms.

use super::{EvalOptions, empty_section};
use crate::report::{Section, Table, Verdict};
use bench::Progress;
use bench::crash::{self, SELFTEST_OPS, SELFTEST_QUICK_OPS, SELFTEST_SEED, SelftestRun as Run};
use indicatif::ProgressBar;
use serde_json::json;

/// Section id.
pub const ID: &str = "crash-selftest";
/// Section heading.
pub const TITLE: &str = "Crash simulator self-test";

/// Runs every scenario under both modes with `Config::thorough`.
pub fn run(options: &EvalOptions, bar: &ProgressBar) -> anyhow::Result<Section> {
    let ops = if options.quick {
        SELFTEST_QUICK_OPS
    } else {
        SELFTEST_OPS
    };
    let cases = crash::selftest_cases(ops);
    bar.set_length(cases.len() as u64);
    let runs = crash::selftest(&cases, &|progress| match progress {
        Progress::Started((scenario, mode)) => {
            bar.set_message(format!("{:?} {}", scenario.mutation, mode.name()));
        }
        Progress::Finished(_) => bar.inc(1),
    });
    Ok(section_of(&runs, ops))
}

fn section_of(runs: &[Run], ops: usize) -> Section {
    let all_mutants_caught = runs
        .iter()
        .filter(|run| run.is_mutant() && run.expected_caught)
        .all(|run| run.caught);
    let correct_engine_passed = runs
        .iter()
        .filter(|run| !run.is_mutant())
        .all(|run| !run.caught);
    let unexpected: Vec<&Run> = runs.iter().filter(|run| !run.as_expected()).collect();
    let mut section = empty_section(ID, TITLE);
    section.verdict = if unexpected.is_empty() {
        Verdict::Pass
    } else {
        Verdict::Fail
    };
    section.summary = summary(runs, ops, &unexpected);
    section.tables = vec![table(runs)];
    section.json = json!({
        "seed": SELFTEST_SEED,
        "ops": ops,
        "config": "Config::thorough",
        "all_mutants_caught": all_mutants_caught,
        "correct_engine_passed": correct_engine_passed,
        "no_false_alarms": runs.iter().filter(|run| !run.expected_caught).all(|run| !run.caught),
        "unexpected": unexpected.iter().map(|run| run.describe()).collect::<Vec<_>>(),
        "runs": runs,
    });
    section
}

fn summary(runs: &[Run], ops: usize, unexpected: &[&Run]) -> Vec<String> {
    let count = |keep: &dyn Fn(&Run) -> bool| runs.iter().filter(|run| keep(run)).count();
    let should_catch = count(&|run| run.is_mutant() && run.expected_caught);
    let did_catch = count(&|run| run.is_mutant() && run.expected_caught && run.caught);
    let correct = count(&|run| !run.is_mutant());
    let correct_passed = count(&|run| !run.is_mutant() && !run.caught);
    let harmless = count(&|run| run.is_mutant() && !run.expected_caught);
    let harmless_passed = count(&|run| run.is_mutant() && !run.expected_caught && !run.caught);
    let mut lines = Vec::new();
    if unexpected.is_empty() {
        lines.push(format!(
            "The harness caught every mutant it should ({did_catch} of {should_catch} runs \
             whose bug can lose data) and passed the correct engine ({correct_passed} of \
             {correct} runs)."
        ));
    } else {
        lines.push(format!(
            "UNEXPECTED: the harness caught {did_catch} of {should_catch} mutant runs it should \
             catch and passed the correct engine in {correct_passed} of {correct} runs."
        ));
        lines.extend(unexpected.iter().map(|run| unexpected_line(run)));
    }
    lines.push(format!(
        "{harmless_passed} of {harmless} mutant runs whose bug is harmless on that platform \
         (persistent caches) passed, as they should."
    ));
    let images: u64 = runs.iter().map(|run| run.report.images).sum();
    let recoveries: u64 = runs.iter().map(|run| run.report.recoveries).sum();
    let millis: u128 = runs.iter().map(|run| run.report.elapsed_ms).sum();
    lines.push(format!(
        "{} runs of {ops} transactions with Config::thorough (every fence, double crash, \
         seed {SELFTEST_SEED}): {images} crash images, {recoveries} recoveries, {millis} ms.",
        runs.len()
    ));
    lines
}

fn unexpected_line(run: &Run) -> String {
    match run.report.failures.first() {
        Some(failure) => format!("{}: unexpected failure: {failure}", run.describe()),
        None => format!("{}: the bug went undetected", run.describe()),
    }
}

fn table(runs: &[Run]) -> Table {
    let mut table = Table::new(
        "Harness runs (failures stop at the configured maximum)",
        &[
            "scenario",
            "mode",
            "crash points",
            "images",
            "recoveries",
            "failures",
            "expected caught",
            "verdict",
        ],
    );
    for run in runs {
        let report = &run.report;
        table.push(vec![
            report.scenario.clone(),
            run.mode.name().to_owned(),
            report.crash_points.to_string(),
            report.images.to_string(),
            report.recoveries.to_string(),
            report.failures.len().to_string(),
            if run.expected_caught { "yes" } else { "no" }.to_owned(),
            if run.as_expected() {
                "OK"
            } else {
                "UNEXPECTED"
            }
            .to_owned(),
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crashsim::toy::{Mutation, ToyScenario};
    use crashsim::{Config, SimMode};

    fn fake_run(mutation: Mutation, mode: SimMode, caught: bool) -> Run {
        let mut report = crashsim::Report {
            scenario: format!("toy/{mutation:?}"),
            ..crashsim::Report::default()
        };
        if caught {
            // A real failure, so the section has something to quote (the cheap check sees
            // a missing log flush at the durability point).
            let real = crashsim::check(
                &ToyScenario::mutant(Mutation::MissingLogFlush, 2),
                &Config::quick(SimMode::Adr),
            );
            report.failures = real.failures;
            assert!(!report.failures.is_empty(), "the quick check catches it");
        }
        let mut run = crash::selftest_run(ToyScenario::mutant(mutation, 2), mode, report);
        run.caught = caught;
        run
    }

    #[test]
    fn expected_outcomes_pass_the_section() {
        let runs = [
            fake_run(Mutation::None, SimMode::Adr, false),
            fake_run(Mutation::MissingLogFlush, SimMode::Adr, true),
            fake_run(Mutation::MissingLogFlush, SimMode::Eadr, false),
        ];
        let section = section_of(&runs, 2);
        assert_eq!(section.verdict, Verdict::Pass);
        assert_eq!(section.json["all_mutants_caught"], true);
        assert!(section.summary[0].contains("caught every mutant it should (1 of 1"));
    }

    #[test]
    fn a_missed_mutant_or_a_false_alarm_fails_the_section() {
        let missed = [fake_run(Mutation::CommitBeforeLog, SimMode::Eadr, false)];
        let section = section_of(&missed, 2);
        assert_eq!(section.verdict, Verdict::Fail);
        assert_eq!(section.json["all_mutants_caught"], false);
        assert!(
            section
                .summary
                .iter()
                .any(|line| line.contains("went undetected"))
        );
        assert_eq!(section.tables[0].rows[0][7], "UNEXPECTED");

        let false_alarm = [fake_run(Mutation::None, SimMode::Adr, true)];
        let section = section_of(&false_alarm, 2);
        assert_eq!(section.verdict, Verdict::Fail);
        assert_eq!(section.json["correct_engine_passed"], false);
        assert!(
            section
                .summary
                .iter()
                .any(|line| line.contains("unexpected failure"))
        );
    }
}
