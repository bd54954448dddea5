//! The paper's numeric targets (reference note §6.5) beside ours, with a ±25 % verdict and,
//! for each miss, the computed facts behind the difference.

use crate::results::{Comparison, Reproduction, RunRow, geomean};

/// Within ±25 % of the target.
const TOLERANCE: f64 = 0.25;

/// Every comparison of the plan (those whose runs are missing are left out).
pub(crate) fn compare(rep: &Reproduction) -> Vec<Comparison> {
    let big = rep.spec.cores.iter().copied().max().unwrap_or(1);
    let mut out = Vec::new();
    for (a, b, paper) in [
        ("silo", "lad", 1.5),
        ("silo", "morlog", 4.3),
        ("silo", "fwb", 6.4),
        ("morlog", "fwb", 1.5),
    ] {
        out.extend(speedup(rep, a, b, big, paper));
    }
    if rep.spec.cores.contains(&1) {
        out.extend(speedup(rep, "silo", "morlog", 1, 1.4));
        out.extend(speedup(rep, "silo", "lad", 1, 1.1));
    }
    out.extend(write_cut(rep, "morlog", big, 0.765));
    out.extend(write_cut(rep, "fwb", big, 0.82));
    out.extend(orderings(rep, big));
    out.extend(log_reduction(rep, big));
    out.extend(sweep_losses(rep));
    out.extend(battery(rep));
    out
}

fn verdict(quantity: String, paper: f64, ours: f64, explanation: String) -> Comparison {
    let ratio = if paper != 0.0 { ours / paper } else { 0.0 };
    let within = (ratio - 1.0).abs() <= TOLERANCE;
    Comparison {
        quantity,
        paper,
        ours,
        ratio,
        within,
        explanation: if within { String::new() } else { explanation },
    }
}

/// Runs of `design` at `cores` over every workload.
fn runs<'a>(rep: &'a Reproduction, design: &str, cores: usize) -> Vec<&'a RunRow> {
    rep.runs
        .iter()
        .filter(|r| r.design == design && r.cores == cores)
        .collect()
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    s / n.max(1) as f64
}

/// Where `design`'s time goes at `cores` (means over workloads).
fn facts(rep: &Reproduction, design: &str, cores: usize) -> String {
    let rs = runs(rep, design, cores);
    let per_tx = |f: &dyn Fn(&RunRow) -> u64| mean(rs.iter().map(|r| r.per_tx(f(r))));
    let vs_ideal = geomean(rs.iter().map(|r| r.vs_ideal));
    format!(
        "{design} at {cores} cores: {:.0} % of Ideal; per transaction {:.0} B in {:.1} MC write \
         requests, stalls commit {:.0} / persist {:.0} / log-buffer {:.0} / load {:.0} / drain \
         {:.0} cycles (loads {:.0} % of core cycles); PCM bus {:.0} % and banks {:.0} % busy \
         with writes",
        100.0 * vs_ideal,
        mean(rs.iter().map(|r| r.bytes_per_tx())),
        mean(rs.iter().map(|r| r.per_tx(r.write_requests))),
        per_tx(&|r| r.stalls.commit),
        per_tx(&|r| r.stalls.persist),
        per_tx(&|r| r.stalls.log_buffer),
        per_tx(&|r| r.stalls.load),
        per_tx(&|r| r.stalls.drain),
        100.0 * mean(rs.iter().map(|r| r.load_stall_fraction())),
        100.0 * mean(rs.iter().map(|r| r.bus_utilisation)),
        100.0 * mean(rs.iter().map(|r| r.bank_write_utilisation)),
    )
}

/// Per-workload ratios `a / b` of throughput at `cores`, and their geometric mean.
fn ratios(rep: &Reproduction, a: &str, b: &str, cores: usize) -> Option<(f64, String)> {
    let per: Vec<(String, f64)> = runs(rep, a, cores)
        .into_iter()
        .filter_map(|r| {
            let other = rep.run(&r.workload, b, cores)?;
            Some((r.workload.clone(), r.throughput / other.throughput))
        })
        .collect();
    if per.is_empty() {
        return None;
    }
    let list = per
        .iter()
        .map(|(w, x)| format!("{w} {x:.2}"))
        .collect::<Vec<_>>()
        .join(", ");
    Some((geomean(per.iter().map(|p| p.1)), list))
}

fn speedup(rep: &Reproduction, a: &str, b: &str, cores: usize, paper: f64) -> Option<Comparison> {
    let (ours, list) = ratios(rep, a, b, cores)?;
    let why = format!(
        "Per workload: {list}. {}. {}. The paper's {paper}× needs {b} to run at {:.0} % of {a}'s \
         throughput; here it runs at {:.0} %.{}",
        facts(rep, a, cores),
        facts(rep, b, cores),
        100.0 / paper,
        100.0 / ours,
        sensitivity_facts(rep, (a, b), cores, paper),
    );
    Some(verdict(
        format!("{cores}-core throughput {a} / {b} (×, geomean)"),
        paper,
        ours,
        why,
    ))
}

/// The same ratio under the sensitivity variants (largest core count only).
fn sensitivity_facts(rep: &Reproduction, (a, b): (&str, &str), cores: usize, paper: f64) -> String {
    if cores != rep.spec.max_cores() {
        return String::new();
    }
    let pick = |s: &crate::results::Sensitivity| match (a, b) {
        ("silo", "lad") => Some(s.silo_vs_lad),
        ("silo", "morlog") => Some(s.silo_vs_morlog),
        ("silo", "fwb") => Some(s.silo_vs_fwb),
        ("morlog", "fwb") => Some(s.morlog_vs_fwb),
        _ => None,
    };
    let values: Vec<(String, f64)> = rep
        .sensitivity
        .iter()
        .filter(|s| s.variant != "reference")
        .filter_map(|s| Some((s.variant.clone(), pick(s)?)))
        .collect();
    if values.is_empty() {
        return String::new();
    }
    let list: Vec<String> = values.iter().map(|(v, x)| format!("{v} {x:.2}×")).collect();
    let closing: Vec<&str> = values
        .iter()
        .filter(|(_, x)| (x / paper - 1.0).abs() <= TOLERANCE)
        .map(|(v, _)| v.as_str())
        .collect();
    let verdict = if closing.is_empty() {
        "none of these variants comes within ±25 % of the paper".to_string()
    } else {
        format!("within ±25 % of the paper with: {}", closing.join(", "))
    };
    format!(
        " Sensitivity (the same ratio): {}; {verdict}.",
        list.join(", ")
    )
}

/// Bytes written per transaction by class, for explanations.
fn traffic(rep: &Reproduction, design: &str, cores: usize) -> String {
    let rs = runs(rep, design, cores);
    let per = |f: &dyn Fn(&RunRow) -> u64| mean(rs.iter().map(|r| r.per_tx(f(r))));
    format!(
        "{design}: {:.0} B/tx = log {:.0} + write-backs {:.0} + flushes {:.0} + in-place {:.0}",
        mean(rs.iter().map(|r| r.bytes_per_tx())),
        per(&|r| r.log_bytes),
        per(&|r| r.writeback_bytes),
        per(&|r| r.flush_bytes),
        per(&|r| r.in_place_bytes),
    )
}

fn write_cut(rep: &Reproduction, other: &str, cores: usize, paper: f64) -> Option<Comparison> {
    let silo = rep.summary_of("silo", cores)?;
    let base = rep.summary_of(other, cores)?;
    let ours = 1.0 - silo.write_bytes_vs_fwb / base.write_bytes_vs_fwb;
    let why = format!(
        "{}; {}. Silo's bytes are write-backs of evicted lines plus 8 B in-place updates; {other}'s \
         log is {:.1}× Silo's total, so the cut is set by how much of the traffic is data \
         write-backs every design pays (large data sets: most dirty lines are evicted).",
        traffic(rep, "silo", cores),
        traffic(rep, other, cores),
        mean(runs(rep, other, cores).iter().map(|r| r.log_bytes as f64))
            / mean(
                runs(rep, "silo", cores)
                    .iter()
                    .map(|r| r.write_bytes as f64)
            )
            .max(1.0),
    );
    Some(verdict(
        format!("{cores}-core PM write bytes, Silo vs {other} (reduction)"),
        paper,
        ours,
        why,
    ))
}

fn orderings(rep: &Reproduction, cores: usize) -> Vec<Comparison> {
    let order = ["base", "fwb", "morlog", "lad", "silo"];
    let tp: Vec<(String, f64)> = order
        .iter()
        .filter_map(|d| Some((d.to_string(), rep.summary_of(d, cores)?.vs_fwb)))
        .collect();
    if tp.len() < order.len() {
        return Vec::new();
    }
    let holds = tp.windows(2).all(|w| w[0].1 < w[1].1);
    let listing = |v: &[(String, f64)]| {
        let mut v = v.to_vec();
        v.sort_by(|a, b| a.1.total_cmp(&b.1));
        v.iter()
            .map(|(d, x)| format!("{d} {x:.2}"))
            .collect::<Vec<_>>()
            .join(" < ")
    };
    let bytes: Vec<(String, f64)> = order
        .iter()
        .filter_map(|d| Some((d.to_string(), rep.summary_of(d, cores)?.write_bytes_vs_fwb)))
        .collect();
    let max = bytes
        .iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|b| b.0.clone());
    let min = bytes
        .iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|b| b.0.clone());
    let writes_hold = max.as_deref() == Some("base") && min.as_deref() == Some("silo");
    vec![
        ordering(
            format!("{cores}-core throughput ordering Base < FWB < MorLog < LAD < Silo"),
            holds,
            format!(
                "Ours (× FWB, geomean): {}. {}",
                listing(&tp),
                facts(rep, "fwb", cores)
            ),
        ),
        ordering(
            format!("{cores}-core PM writes: Base highest, Silo lowest"),
            writes_hold,
            format!("Ours (bytes × FWB, geomean): {}", listing(&bytes)),
        ),
    ]
}

fn ordering(quantity: String, holds: bool, facts: String) -> Comparison {
    Comparison {
        quantity,
        paper: 1.0,
        ours: f64::from(u8::from(holds)),
        ratio: f64::from(u8::from(holds)),
        within: holds,
        explanation: if holds { String::new() } else { facts },
    }
}

fn log_reduction(rep: &Reproduction, cores: usize) -> Vec<Comparison> {
    let silo = runs(rep, "silo", cores);
    let logs: Vec<(String, hwsim::metrics::LogStats)> = silo
        .iter()
        .filter_map(|r| Some((r.workload.clone(), r.log?)))
        .collect();
    if logs.is_empty() {
        return Vec::new();
    }
    let per = logs
        .iter()
        .map(|(w, l)| {
            format!(
                "{w} {:.0} % ({:.0} % silent)",
                100.0 * l.reduction(),
                100.0 * l.silent_fraction()
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let why = format!(
        "Entry reduction per workload: {per}. The shared workloads write each changed word once \
         with fresh values (docs/trace-format.md §8), so only Array has silent stores to ignore \
         and almost nothing merges; the paper's PMDK-style workloads re-assign and copy fields."
    );
    let mut out = vec![verdict(
        format!("{cores}-core log entries removed by ignore + merge (mean)"),
        0.643,
        mean(logs.iter().map(|(_, l)| l.reduction())),
        why.clone(),
    )];
    if let Some((_, array)) = logs.iter().find(|(w, _)| w == "array") {
        out.push(verdict(
            "Array silent word stores".into(),
            0.904,
            array.silent_fraction(),
            why,
        ));
    }
    let (worst, max) = logs
        .iter()
        .map(|(w, l)| (w.clone(), l.max_entries_per_tx))
        .max_by_key(|x| x.1)
        .expect("non-empty");
    out.push(verdict(
        "max live log entries per transaction".into(),
        20.0,
        max as f64,
        format!(
            "The maximum is {worst}'s: {max} changed words in one transaction. Our B+tree keeps \
             64 B values inline in its leaves (shifts and splits move whole values) and our TPC-C \
             New-Order writes 4 words per order line (docs/trace-format.md §8); the paper's \
             maximum, 20, is Hash's."
        ),
    ));
    out
}

fn sweep_losses(rep: &Reproduction) -> Vec<Comparison> {
    let mut out = Vec::new();
    let last = |name: &str| rep.sweep(name).and_then(|s| s.points.last().cloned());
    if let Some(p) = last("latency") {
        let per = listing(&p.per_workload);
        out.push(verdict(
            format!("throughput loss at a {}-cycle log buffer", p.value),
            0.033,
            1.0 - p.relative_throughput,
            format!(
                "Relative throughput per workload: {per}. The buffer latency adds to every \
                 commit's acknowledgement ({} cycles more per transaction), so the loss is that \
                 delay over the transaction's length; it is larger where transactions are short.",
                p.value.saturating_sub(rep.spec.latencies[0])
            ),
        ));
    }
    if let Some(p) = last("tx_size") {
        let per = listing(&p.per_workload);
        out.push(verdict(
            format!("throughput loss at {}× log-buffer transactions", p.value),
            0.074,
            1.0 - p.relative_throughput,
            format!(
                "Silo with the 20-entry buffer relative to an unbounded buffer, same trace: {per}. \
                 Overflow writes 18 B undo records in batches and the new words in place before \
                 commit; the loss is the share of the run these extra writes and the stalls for \
                 free slots take."
            ),
        ));
        out.push(write_growth(&p));
    }
    out
}

fn write_growth(p: &crate::results::SweepPoint) -> Comparison {
    let within = p.relative_write_bytes <= 1.9 * (1.0 + TOLERANCE);
    let growth = p
        .per_workload
        .iter()
        .map(|(w, _, b)| format!("{w} {b:.2}×"))
        .collect::<Vec<_>>()
        .join(", ");
    let explanation = format!(
        "Bytes per transaction over the unbounded buffer's: {growth}. Each overflowed entry \
         costs an 18 B undo record plus an 8 B in-place write (one bus request), and an element \
         swap's words are all distinct (nothing merges), so overflow adds ~26 B to every changed \
         word beyond the buffer, on top of Silo's 8 B in-place update of it."
    );
    Comparison {
        quantity: format!(
            "write growth at {}× log-buffer transactions (≤ 1.9×)",
            p.value
        ),
        paper: 1.9,
        ours: p.relative_write_bytes,
        ratio: p.relative_write_bytes / 1.9,
        within,
        explanation: if within { String::new() } else { explanation },
    }
}

fn listing(per: &[(String, f64, f64)]) -> String {
    per.iter()
        .map(|(w, t, _)| format!("{w} {t:.3}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn battery(rep: &Reproduction) -> Vec<Comparison> {
    let t = &rep.battery;
    let mut out = Vec::new();
    for (design, kb, uj, volume) in [
        ("eadr", 10_496.0, 54_377.0, 888.2),
        ("bbb", 16.0, 194.0, 3.2),
        ("silo", 5.3125, 62.0, 1.0),
    ] {
        let Some(r) = t.row(design) else { continue };
        if t.cores != 8 {
            continue; // the paper's table is for 8 cores
        }
        let why = "BBB's 194 µJ is not 16 KB × 11.228 nJ/B (= 184 µJ): the paper took it from \
                   BBB's own model; the 3.2× volume ratio is 194 µJ / 61.1 µJ."
            .to_string();
        out.push(verdict(
            format!("battery {design}: flush size (KB)"),
            kb,
            r.flush_kb,
            String::new(),
        ));
        out.push(verdict(
            format!("battery {design}: energy (µJ)"),
            uj,
            r.energy_uj,
            why.clone(),
        ));
        if design != "silo" {
            out.push(verdict(
                format!("battery {design}: volume vs Silo (×)"),
                volume,
                r.volume_vs_silo,
                why,
            ));
        }
    }
    out
}
