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
    // Before the (long) plan runs, so an unusable `--out` fails first.
    crate::output::folder_can_be_written(&args.out)?;
    let (spec, plan) = plan(args);
    let spinner = spinner(args.quiet, args.quick);
    let reproduction = silo::reproduce(&spec);
    spinner.finish_and_clear();
    let reproduction = reproduction?;
    let section = silo::section_of(&reproduction, plan)?;
    let report = Report {
        title: "Silo (HPCA'23) reproduction".to_owned(),
        generated: crate::time::now_rfc3339(),
        quick: args.quick,
        sections: vec![section],
    };
    let mut written = report::write(&report, &args.out)
        .with_context(|| format!("writing the report to {}", args.out.display()))?;
    let markdown = args.out.join("reproduction.md");
    std::fs::write(&markdown, silorepro::report::markdown(&reproduction))
        .with_context(|| format!("writing {}", markdown.display()))?;
    written.push(markdown);
    crate::eval::print_summary(&report, &args.out, written.len(), out)?;
    Ok(())
}

/// The plan of the options: quick or full, then the command line's changes.
fn plan(args: &ReproduceArgs) -> (ReproSpec, PlanName) {
    let (mut spec, mut plan) = if args.quick {
        (ReproSpec::quick(), PlanName::Quick)
    } else {
        (ReproSpec::default(), PlanName::Full)
    };
    if let Some(transactions) = args.transactions {
        spec.transactions = transactions;
        plan = PlanName::Custom;
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
        assert_eq!(name, PlanName::Custom);
        assert_eq!(spec.transactions, 500);
        assert_eq!(spec.workloads, ReproSpec::default().workloads);
    }
}
