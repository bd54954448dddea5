//! Markdown rendering of a [`Reproduction`] (the tables of `docs/hwsim.md`).

use crate::results::{Comparison, Reproduction, Sweep};
use std::fmt::Write;

/// Every table: design summary, per-workload runs, sweeps, battery, comparison, timing.
pub fn markdown(rep: &Reproduction) -> String {
    let mut out = String::new();
    summary(&mut out, rep);
    memory_system(&mut out, rep);
    per_workload(&mut out, rep);
    for s in &rep.sweeps {
        sweep(&mut out, s);
    }
    size_traces(&mut out, rep);
    sensitivity(&mut out, rep);
    battery(&mut out, rep);
    comparison(&mut out, rep);
    timing(&mut out, rep);
    out
}

fn summary(out: &mut String, rep: &Reproduction) {
    out.push_str("### Designs (geometric means over workloads)\n\n");
    out.push_str("| cores | design | × FWB | × Base | × Ideal | programmed × FWB | sent × FWB | requests × FWB | media writes × FWB | sent B/tx | programmed B/tx |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for s in &rep.summary {
        let _ = writeln!(
            out,
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} |",
            s.cores,
            s.design.name(),
            s.vs_fwb,
            s.vs_base,
            s.vs_ideal,
            s.write_bytes_vs_fwb,
            s.sent_bytes_vs_fwb,
            s.write_requests_vs_fwb,
            s.media_writes_vs_fwb,
            s.bytes_per_tx,
            s.programmed_per_tx
        );
    }
    out.push('\n');
}

/// Where each design's time and PCM work go at the largest core count (means over
/// workloads): the facts behind the throughput ratios.
fn memory_system(out: &mut String, rep: &Reproduction) {
    let big = rep.spec.cores.iter().copied().max().unwrap_or(1);
    let _ = writeln!(
        out,
        "### Memory system and stalls at {big} cores (means over workloads, per transaction)\n"
    );
    out.push_str(
        "| design | × Ideal | B/tx | write req/tx | media blocks/tx | media bank cycles/tx | \
         banks busy writing | draining | WQ occupancy | load stall | drain-wait stall | \
         commit stall | log-buffer stall |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for design in &rep.spec.designs {
        let rs: Vec<&crate::RunRow> = rep
            .runs
            .iter()
            .filter(|r| r.cores == big && r.design == *design)
            .collect();
        if rs.is_empty() {
            continue;
        }
        let mean = |f: &dyn Fn(&crate::RunRow) -> f64| {
            rs.iter().map(|r| f(r)).sum::<f64>() / rs.len() as f64
        };
        let _ = writeln!(
            out,
            "| {} | {:.2} | {:.0} | {:.1} | {:.2} | {:.0} | {:.0} % | {:.0} % | {:.1} | {:.0} | {:.0} | {:.0} | {:.0} |",
            design.name(),
            crate::results::geomean(rs.iter().map(|r| r.vs_ideal)),
            mean(&|r| r.bytes_per_tx()),
            mean(&|r| r.per_tx(r.write_requests)),
            mean(&|r| r.media_blocks_per_tx),
            mean(&|r| r.media_cycles_per_tx),
            100.0 * mean(&|r| r.bank_write_utilisation),
            100.0 * mean(&|r| r.drain_fraction),
            mean(&|r| r.queue_occupancy),
            mean(&|r| r.per_tx(r.stalls.load)),
            mean(&|r| r.per_tx(r.stalls.mem_drain)),
            mean(&|r| r.per_tx(r.stalls.commit)),
            mean(&|r| r.per_tx(r.stalls.log_buffer)),
        );
    }
    out.push('\n');
}

/// The transaction-size traces: operations grouped per transaction and the live entries.
fn size_traces(out: &mut String, rep: &Reproduction) {
    if rep.size_traces.is_empty() {
        return;
    }
    out.push_str("### Transaction-size traces (operations grouped per transaction)\n\n");
    out.push_str(
        "| workload | × buffer | ops/tx | live entries/tx (mean) | max |\n|---|---|---|---|---|\n",
    );
    for s in &rep.size_traces {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.1} | {} |",
            s.workload, s.multiple, s.ops_per_transaction, s.live_entries_mean, s.live_entries_max
        );
    }
    out.push('\n');
}

fn per_workload(out: &mut String, rep: &Reproduction) {
    let big = rep.spec.cores.iter().copied().max().unwrap_or(1);
    let _ = writeln!(out, "### Per workload at 1 and {big} cores\n");
    out.push_str("| workload | cores | design | Mtx/s | × FWB | × Base | sent B/tx | programmed B/tx | req/tx | media/tx | log reduction | max live | overflow tx |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in rep.runs.iter().filter(|r| r.cores == 1 || r.cores == big) {
        let tx = r.committed_tx.max(1) as f64;
        // Entry statistics only for designs that generate word entries (not LAD).
        let (red, live, ovf) = r.log.map_or(("".into(), "".into(), "".into()), |l| {
            let entries = l.generated > 0 || l.silent_ignored > 0;
            (
                if entries {
                    format!("{:.0} %", 100.0 * l.reduction())
                } else {
                    String::new()
                },
                if l.max_entries_per_tx > 0 {
                    l.max_entries_per_tx.to_string()
                } else {
                    String::new()
                },
                l.overflow_tx.to_string(),
            )
        });
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} | {:.1} | {:.2} | {red} | {live} | {ovf} |",
            r.workload,
            r.cores,
            r.design.name(),
            r.throughput / 1e6,
            r.vs_fwb,
            r.vs_base,
            r.bytes_per_tx(),
            r.programmed_per_tx(),
            r.write_requests as f64 / tx,
            r.media_writes as f64 / tx,
        );
    }
    out.push('\n');
}

fn sweep(out: &mut String, s: &Sweep) {
    let _ = writeln!(
        out,
        "### Sweep `{}` (relative to: {})\n",
        s.name, s.reference
    );
    out.push_str(
        "| value | throughput | write bytes/tx | per workload (throughput) |\n|---|---|---|---|\n",
    );
    for p in &s.points {
        let per = p
            .per_workload
            .iter()
            .map(|(w, t, _)| format!("{w} {t:.3}"))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            out,
            "| {} | {:.3} | {:.3} | {per} |",
            p.value, p.relative_throughput, p.relative_write_bytes
        );
    }
    out.push('\n');
}

fn sensitivity(out: &mut String, rep: &Reproduction) {
    out.push_str(
        "### Sensitivity of the largest-core comparison (geometric means)\n\n\
         Cost-model cells (media model / store discipline / on-PM buffer), then variants of \
         the paper-faithful cell. Write columns: Silo's bytes over the other design's \
         (programmed; sent).\n\n",
    );
    out.push_str(
        "| variant | Silo/LAD | Silo/MorLog | Silo/FWB | MorLog/FWB | programmed ÷ MorLog | \
         programmed ÷ FWB | sent ÷ MorLog |\n|---|---|---|---|---|---|---|---|\n",
    );
    for s in &rep.sensitivity {
        let _ = writeln!(
            out,
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            s.variant,
            s.silo_vs_lad,
            s.silo_vs_morlog,
            s.silo_vs_fwb,
            s.morlog_vs_fwb,
            s.silo_programmed_vs_morlog,
            s.silo_programmed_vs_fwb,
            s.silo_sent_vs_morlog,
        );
    }
    out.push('\n');
}

fn battery(out: &mut String, rep: &Reproduction) {
    let _ = writeln!(out, "### Battery ({} cores)\n", rep.battery.cores);
    out.push_str("| design | flush size (KiB) | energy (µJ) | super-cap (mm³) | Li thin film (mm³) | volume × Silo |\n|---|---|---|---|---|---|\n");
    for r in &rep.battery.rows {
        let _ = writeln!(
            out,
            "| {} | {:.4} | {:.1} | {:.3} | {:.5} | {:.1} |",
            r.design.name(),
            r.flush_kb,
            r.energy_uj,
            r.capacitor_mm3,
            r.lithium_mm3,
            r.volume_vs_silo
        );
    }
    out.push('\n');
}

fn comparison(out: &mut String, rep: &Reproduction) {
    out.push_str("### Paper vs reproduction\n\n| quantity | paper | ours | ours / paper | within ±25 % |\n|---|---|---|---|---|\n");
    for c in &rep.comparison {
        let (paper, ours, ratio) = comparison_cells(c);
        let _ = writeln!(
            out,
            "| {} | {paper} | {ours} | {ratio} | {} |",
            c.quantity,
            if c.within { "yes" } else { "**no**" }
        );
    }
    out.push_str("\nMisses:\n\n");
    for c in rep.comparison.iter().filter(|c| !c.within) {
        let _ = writeln!(out, "* **{}**: {}", c.quantity, c.explanation);
    }
    out.push('\n');
}

/// Paper, ours and their ratio as a reader reads them: an ordering the paper states has no
/// number (its value is 1 when it holds), so it reads "holds" or "does not hold".
fn comparison_cells(c: &Comparison) -> (String, String, String) {
    if c.target.is_ordering() {
        let ours = if c.within { "holds" } else { "does not hold" };
        return ("holds".to_owned(), ours.to_owned(), "—".to_owned());
    }
    (
        format!("{:.3}", c.paper),
        format!("{:.3}", c.ours),
        format!("{:.2}", c.ratio),
    )
}

fn timing(out: &mut String, rep: &Reproduction) {
    let _ = writeln!(out, "### Timing\n\n{}\n", rep.timing.line());
}
