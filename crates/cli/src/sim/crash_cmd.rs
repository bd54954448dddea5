//! `ferrite sim crash`: crash injection on a workload's recorded trace. The design runs
//! with value tracking and stops right after each crash cycle (spread evenly over the run);
//! its failure-time flush and its recovery (on a fresh instance) must leave an
//! all-or-nothing image: every word the committed transactions wrote holds their newest
//! value, nothing of an open transaction remains, and no other word changed.

use super::{CrashArgs, generate, trace_spec};
use crate::eval::silo::cores_text;
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
                        "{} on {} ({}, {} transactions per core)",
                        args.design.name(),
                        spec.workload,
                        cores_text(spec.cores as usize),
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
        "{} on {} ({}, {} transactions per core): {} crash points over {end} cycles, \
         all recovered all-or-nothing ({open} transactions open at the crashes, {words} word \
         checks, {committed} transactions committed by the end)",
        args.design.name(),
        spec.workload,
        cores_text(spec.cores as usize),
        spec.transactions,
        args.points + 1
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::CrashShape;
    use hwsim::DesignKind;
    use tracegen::SiloWorkload;

    #[test]
    fn one_core_is_named_in_the_singular() {
        let args = CrashArgs {
            design: DesignKind::Silo,
            workload: SiloWorkload::Hash,
            cores: 1,
            shape: CrashShape {
                transactions: 5,
                keys: 64,
                seed: 1,
            },
            points: 2,
        };
        let mut out = Vec::new();
        run(&args, &mut out).expect("crash check");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(
            text.starts_with("silo on hash (1 core, 5 transactions per core)"),
            "{text}"
        );
    }
}
