//! `ferrite sim crash`: crash injection on a workload's recorded trace. The design runs
//! with value tracking and stops right after each crash cycle (spread evenly over the run);
//! its failure-time flush and its recovery (on a fresh instance) must leave an
//! all-or-nothing image: every word the committed transactions wrote holds their newest
//! value, nothing of an open transaction remains, and no other word changed.

use super::{CrashArgs, generate, trace_spec};
use anyhow::Context;
use hwsim::{Config, Violation, crash_check, simulate};
use std::io::Write;

/// Runs `sim crash`; the first violation is an error naming the crash cycle and the word.
pub fn run(args: &CrashArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let spec = trace_spec(args.workload, args.cores, &args.shape.workload_args());
    let trace = generate(&spec)?;
    let cfg = Config::default().with_cores(spec.cores as usize);
    let end = simulate(&cfg, args.design, &trace)
        .map_err(|e| crate::UsageError(e.to_string()))?
        .drained_cycles;
    let (mut committed, mut open, mut words) = (0u64, 0usize, 0usize);
    for i in 0..=args.points {
        let cycle = end * i / args.points;
        let report = match crash_check(&cfg, args.design, &trace, cycle) {
            Ok(report) => report,
            Err(Violation::NotApplicable { design }) => {
                return Err(crate::UsageError(format!(
                    "{design} promises no atomic durability: nothing to crash-check"
                ))
                .into());
            }
            Err(violation) => {
                return Err(anyhow::Error::new(violation)).with_context(|| {
                    format!(
                        "{} on {} ({} cores, {} transactions per core)",
                        args.design.name(),
                        spec.workload,
                        spec.cores,
                        spec.transactions
                    )
                });
            }
        };
        committed = committed.max(report.committed_tx);
        open += report.open_tx;
        words += report.words_checked;
    }
    writeln!(
        out,
        "{} on {} ({} cores, {} transactions per core): {} crash points over {end} cycles, \
         all recovered all-or-nothing ({open} transactions open at the crashes, {words} word \
         checks, {committed} transactions committed by the end)",
        args.design.name(),
        spec.workload,
        spec.cores,
        spec.transactions,
        args.points + 1
    )?;
    Ok(())
}
