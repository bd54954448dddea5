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
    // More points than cycles give the same cycle several times: each is checked (and
    // counted) once. The product is taken in u128, where it cannot wrap.
    let mut cycles: Vec<u64> = (0..=args.points)
        .map(|i| (u128::from(end) * u128::from(i) / u128::from(args.points)) as u64)
        .collect();
    cycles.dedup();
    for &cycle in &cycles {
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
                        "{} on {} ({}, {} per core)",
                        args.design.name(),
                        spec.workload,
                        cores_text(spec.cores as usize),
                        counted(spec.transactions, "transaction")
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
        "{} on {} ({}, {} per core): {} over {}, all recovered all-or-nothing ({} open at \
         the crashes, {}, {} committed by the end)",
        args.design.name(),
        spec.workload,
        cores_text(spec.cores as usize),
        counted(spec.transactions, "transaction"),
        counted(cycles.len() as u64, "crash point"),
        counted(end, "cycle"),
        counted(open as u64, "transaction"),
        counted(words as u64, "word check"),
        counted(committed, "transaction"),
    )?;
    Ok(())
}

/// `n` and `noun`, in the plural unless `n` is 1.
fn counted(n: u64, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        n => format!("{n} {noun}s"),
    }
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

    /// 100 001 points over a run of about 1 700 cycles were reported as 100 001 crash
    /// points, and their repeats counted in the open transactions.
    #[test]
    fn repeated_crash_cycles_are_checked_and_counted_once() {
        let args = |points| CrashArgs {
            design: DesignKind::Lad,
            workload: SiloWorkload::Queue,
            cores: 1,
            shape: CrashShape {
                transactions: 1,
                keys: 2,
                seed: 42,
            },
            points,
        };
        let mut out = Vec::new();
        run(&args(100_000), &mut out).expect("crash check");
        let text = String::from_utf8(out).expect("utf-8");
        let number_before = |words: &str| -> u64 {
            let at = text
                .find(words)
                .unwrap_or_else(|| panic!("{words}: {text}"));
            let digits: String = text[..at]
                .trim_end()
                .chars()
                .rev()
                .take_while(char::is_ascii_digit)
                .collect();
            digits
                .chars()
                .rev()
                .collect::<String>()
                .parse()
                .expect("a number")
        };
        let (points, cycles) = (number_before(" crash points"), number_before(" cycles,"));
        assert!(points <= cycles + 1, "{text}");
        assert!(text.contains("(1 core, 1 transaction per core)"), "{text}");
    }
}
