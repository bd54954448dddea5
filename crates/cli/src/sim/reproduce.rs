//! `ferrite sim reproduce`: the Silo paper's experiment plan (`silorepro`), written as a
//! report folder with the same section the evaluation's `silo` section makes, plus the
//! markdown tables of `docs/hwsim.md` (`reproduction.md`).

use super::ReproduceArgs;
use crate::eval::silo::{self, PlanName};
use crate::report::{self, Report};
use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use silorepro::ReproSpec;
use std::io::Write;
use std::time::Duration;

/// Runs `sim reproduce`.
pub fn run(args: &ReproduceArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    // Before the (long) plan runs, so an unusable `--out` fails first; the other sections
    // of a report already there (an evaluation's) are kept beside the one this writes.
    crate::output::folder_can_be_written(&args.out)?;
    let earlier = crate::earlier_sections(&args.out)?;
    let (spec, plan) = plan(args);
    let spinner = spinner(args.quiet, args.quick);
    let reproduction = silo::reproduce(&spec);
    spinner.finish_and_clear();
    let reproduction = reproduction?;
    let section = silo::section_of(&reproduction, plan)?;
    let mut report = Report {
        title: "Silo (HPCA'23) reproduction".to_owned(),
        generated: crate::time::now_rfc3339(),
        quick: args.quick,
        sections: vec![section],
    };
    crate::eval::carry_over(&mut report, earlier);
    let mut written = report::write(&report, &args.out)
        .with_context(|| format!("writing the report to {}", args.out.display()))?;
    let markdown = args.out.join("reproduction.md");
    let mut text = silorepro::report::markdown(&reproduction);
    if !plan.judges() {
        text.insert_str(0, INDICATIVE_NOTE);
    }
    crate::output::replace_file(&markdown, text.as_bytes())
        .with_context(|| format!("writing {}", markdown.display()))?;
    written.push(markdown);
    crate::eval::print_summary(&report, &args.out, written.len(), out)?;
    Ok(())
}

/// The opening of `reproduction.md` for a plan that cannot judge the paper's targets: its
/// "within ±25 %" column is then a fact about small traces, not a verdict.
const INDICATIVE_NOTE: &str = "> **Indicative only, no verdict.** This plan is smaller than \
the full plan (`--quick`, or fewer `--transactions` than the full plan's): its numbers are \
not judged against the paper's targets, and the \"within ±25 %\" column below says only \
whether a number falls there. Run `ferrite sim reproduce` without `--quick` for verdicts.\n\n";

/// The plan of the options: quick or full, then the command line's changes. A changed plan
/// is judged against the paper only when its sizes are at least the full plan's: one built
/// on the quick plan, or with fewer transactions than the full plan's, is indicative.
fn plan(args: &ReproduceArgs) -> (ReproSpec, PlanName) {
    let (mut spec, mut plan) = if args.quick {
        (ReproSpec::quick(), PlanName::Quick)
    } else {
        (ReproSpec::default(), PlanName::Full)
    };
    if let Some(transactions) = args.transactions {
        spec.transactions = transactions;
        plan = PlanName::Custom {
            judged: !args.quick && transactions >= ReproSpec::default().transactions,
        };
    }
    if let Some(threads) = args.threads {
        // Host threads change the wall-clock time only, not the plan (runs are deterministic).
        spec.threads = threads as usize;
    }
    (spec, plan)
}

/// A spinner with the elapsed time on stderr (hidden when stderr is not a terminal):
/// `silorepro::reproduce` reports no progress, so this only shows that it runs.
fn spinner(quiet: bool, quick: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let spinner = ProgressBar::new_spinner().with_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .expect("the progress template is valid"),
    );
    let size = if quick {
        "quick plan, seconds"
    } else {
        "full plan, about five minutes on two idle host cores"
    };
    spinner.set_message(format!(
        "Silo reproduction ({size}): traces, then every simulation"
    ));
    spinner.enable_steady_tick(Duration::from_millis(250));
    spinner
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn args(quick: bool, transactions: Option<u64>) -> ReproduceArgs {
        ReproduceArgs {
            quick,
            out: PathBuf::from("unused"),
            transactions,
            threads: Some(1),
            quiet: true,
        }
    }

    #[test]
    fn options_pick_and_change_the_plan() {
        let (spec, name) = plan(&args(true, None));
        assert_eq!(name, PlanName::Quick);
        assert_eq!(
            (spec.transactions, spec.threads),
            (ReproSpec::quick().transactions, 1)
        );
        let (spec, name) = plan(&args(false, Some(500)));
        assert_eq!(name, PlanName::Custom { judged: false });
        assert_eq!(spec.transactions, 500);
        assert_eq!(spec.workloads, ReproSpec::default().workloads);
        let full = ReproSpec::default().transactions;
        assert!(plan(&args(false, Some(full))).1.judges());
        assert!(plan(&args(false, None)).1.judges());
    }

    /// `--quick --transactions N` keeps the quick plan's small instances: no verdict on the
    /// paper's targets, as the evaluation's quick Silo summary, however many transactions.
    #[test]
    fn a_quick_plan_with_more_transactions_is_still_indicative() {
        for transactions in [10, 150, 100_000] {
            let (spec, name) = plan(&args(true, Some(transactions)));
            assert_eq!(spec.keys, ReproSpec::quick().keys);
            assert!(!name.judges(), "{transactions}: {name:?}");
        }
    }

    /// The written report of `sim reproduce --quick --transactions N` judges nothing: its
    /// headlines are indicative, no summary line is a MISS, and `reproduction.md` says so.
    #[test]
    fn sim_reproduce_quick_with_transactions_writes_no_verdict() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut options = args(true, Some(40));
        options.out = dir.path().join("out");
        let mut printed = Vec::new();
        run(&options, &mut printed).expect("the quick plan runs");
        let printed = String::from_utf8(printed).expect("UTF-8");
        for word in [
            "MISS",
            "│ met ",
            "not met",
            "targets of the paper reproduced",
        ] {
            assert!(!printed.contains(word), "{word:?} in:\n{printed}");
        }
        assert!(printed.contains("indicative"), "{printed}");
        let json: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(options.out.join("silo.json")).expect("silo.json"),
        )
        .expect("JSON");
        assert_eq!(json["data"]["judged"], false);
        for headline in json["headlines"].as_array().expect("headlines") {
            let verdict = headline["verdict"].as_str().expect("verdict");
            assert!(
                verdict == "indicative" || verdict == "not-measured",
                "{headline}"
            );
        }
        for c in json["data"]["reproduction"]["comparison"]
            .as_array()
            .expect("comparison")
        {
            assert_eq!(c["verdict"], "indicative", "{c}");
        }
        let markdown =
            std::fs::read_to_string(options.out.join("reproduction.md")).expect("markdown");
        assert!(markdown.starts_with("> **Indicative only, no verdict.**"));
    }
}
