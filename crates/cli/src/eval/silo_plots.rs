//! The `silo` section's figures, one per figure of the paper, drawn from a
//! [`Reproduction`]: throughput and PM bytes programmed normalised to FWB at the smallest and the
//! largest core count (Figs. 12 and 11, with the paper's geometric means beside ours at 8
//! cores), Silo's log-entry reduction (Fig. 13), its overflows and the transaction-size sweep
//! (Fig. 14), the log-buffer latency sweep (Fig. 15), the entries sweep and the core-count
//! scaling.

use super::silo::{core_extremes, cores_text, figure_designs, workload_names};
use crate::plot::{
    BarSeries, Series, bar_chart, fitted_log2_line_chart, grouped_bar_chart, log_bar_chart,
};
use crate::report::Plot;
use anyhow::Result;
use hwsim::DesignKind;
use hwsim::metrics::LogStats;
use silorepro::paper::{self, SweepLoss};
use silorepro::{DesignSummary, Reproduction, RunRow, Sweep};

/// A sweep point of the paper as a point of a relative-throughput line.
fn paper_point(loss: SweepLoss) -> (f64, f64) {
    (loss.value as f64, 1.0 - loss.loss)
}

/// Every figure the reproduction has data for.
pub fn plots(rep: &Reproduction) -> Result<Vec<Plot>> {
    let (small, big) = core_extremes(rep);
    let mut plots = Vec::new();
    let extremes = if small == big {
        vec![big]
    } else {
        vec![small, big]
    };
    for cores in extremes {
        plots.push(throughput(rep, cores)?);
        plots.push(writes(rep, cores)?);
    }
    plots.push(log_entries(rep, big)?);
    plots.push(overflows(rep, big)?);
    for sweep in &rep.sweeps {
        if let Some(plot) = sweep_plot(rep, sweep)? {
            plots.push(plot);
        }
    }
    if rep.spec.cores.len() > 1 {
        plots.push(core_scaling(rep)?);
    }
    plots.push(battery(rep)?);
    Ok(plots)
}

/// Table IV as a figure: each design's failure-time flush energy (log scale: eADR's is
/// about 900× Silo's), the paper's value beside ours.
fn battery(rep: &Reproduction) -> Result<Plot> {
    let t = &rep.battery;
    let mut bars = Vec::new();
    for row in &t.rows {
        let name = row.design.name();
        bars.push((name.to_owned(), round3(row.energy_uj)));
        if t.cores == paper::CORES
            && let Some(target) = paper::battery_of(row.design)
        {
            bars.push((format!("{name} (paper)"), target.energy_uj));
        }
    }
    Ok(Plot {
        id: "battery".to_owned(),
        title: format!(
            "Table IV: energy to flush what each design keeps on chip at a power failure, {}: \
             eADR the whole cache hierarchy ({:.0} % dirty), BBB its persist buffers, Silo its \
             log buffers and log registers ({} nJ/B)",
            cores_text(t.cores),
            t.params.eadr_dirty_fraction * 100.0,
            t.params.nj_per_byte
        ),
        svg: log_bar_chart("Battery: failure-time flush energy", "energy (µJ)", &bars)?,
    })
}

/// `value` with three significant figures (bar labels).
fn round3(value: f64) -> f64 {
    if value <= 0.0 {
        return value;
    }
    let scale = 10f64.powf(2.0 - value.log10().floor());
    (value * scale).round() / scale
}

/// "1-core", "8-cores": part of plot ids.
fn cores_id(cores: usize) -> String {
    match cores {
        1 => "1-core".to_owned(),
        n => format!("{n}-cores"),
    }
}

/// A bar per design and workload, normalised to FWB on the same workload (`per_run(run,
/// fwb_run)`), then the geometric mean over workloads (`geomean(summary)`), then — at the
/// paper's core count — the paper's geometric mean where it gives one.
fn normalised_bars(
    rep: &Reproduction,
    cores: usize,
    per_run: &dyn Fn(&RunRow, &RunRow) -> f64,
    geomean: &dyn Fn(&DesignSummary) -> f64,
    paper: fn(DesignKind) -> Option<f64>,
) -> (Vec<String>, Vec<BarSeries>) {
    let workloads = workload_names(rep);
    let with_paper = cores == paper::CORES;
    let mut categories = workloads.clone();
    categories.push("geomean".to_owned());
    if with_paper {
        categories.push("paper geomean".to_owned());
    }
    let series = figure_designs(rep)
        .into_iter()
        .map(|design| {
            let mut values: Vec<Option<f64>> = workloads
                .iter()
                .map(|w| {
                    let run = rep.run(w, design, cores)?;
                    let fwb = rep.run(w, DesignKind::Fwb, cores)?;
                    Some(per_run(run, fwb))
                })
                .collect();
            values.push(rep.summary_of(design, cores).map(geomean));
            if with_paper {
                values.push(paper(design));
            }
            BarSeries {
                name: design.label().to_owned(),
                values,
            }
        })
        .collect();
    (categories, series)
}

fn throughput(rep: &Reproduction, cores: usize) -> Result<Plot> {
    let (categories, series) = normalised_bars(
        rep,
        cores,
        &|run, fwb| run.throughput / fwb.throughput.max(f64::MIN_POSITIVE),
        &|s| s.vs_fwb,
        paper::throughput_vs_fwb,
    );
    let title = format!("Throughput, {}, × FWB", cores_text(cores));
    Ok(Plot {
        id: format!("throughput-{}", cores_id(cores)),
        title: format!(
            "Fig. 12: committed transactions per second at {}, normalised to FWB on the same \
             workload{}",
            cores_text(cores),
            paper_note(cores)
        ),
        svg: grouped_bar_chart(&title, "throughput × FWB", &categories, &series)?,
    })
}

fn writes(rep: &Reproduction, cores: usize) -> Result<Plot> {
    let (categories, series) = normalised_bars(
        rep,
        cores,
        &|run, fwb| run.programmed_per_tx() / fwb.programmed_per_tx().max(f64::MIN_POSITIVE),
        &|s| s.write_bytes_vs_fwb,
        paper::write_bytes_vs_fwb,
    );
    let title = format!(
        "PM bytes programmed per transaction, {}, × FWB",
        cores_text(cores)
    );
    Ok(Plot {
        id: format!("writes-{}", cores_id(cores)),
        title: format!(
            "Fig. 11: bytes programmed in PM per committed transaction at {} (words reaching \
             the cells with new data, the final drain included), normalised to FWB{}",
            cores_text(cores),
            paper_note(cores)
        ),
        svg: grouped_bar_chart(&title, "bytes programmed × FWB", &categories, &series)?,
    })
}

fn paper_note(cores: usize) -> &'static str {
    if cores == paper::CORES {
        "; the last group is the paper's geometric mean (designs it gives)"
    } else {
        ""
    }
}

/// Picks one counter of a design's log statistics.
type CountOf = fn(&LogStats) -> u64;

/// Silo's transactional word stores per workload: the shares that were silent (no entry),
/// merged into an entry of the same word, or took a buffer slot (Fig. 13).
fn log_entries(rep: &Reproduction, cores: usize) -> Result<Plot> {
    let logs: Vec<(String, LogStats)> = workload_names(rep)
        .into_iter()
        .filter_map(|w| {
            let log = rep.run(&w, DesignKind::Silo, cores)?.log?;
            Some((w, log))
        })
        .collect();
    let share = |part: u64, log: &LogStats| 100.0 * part as f64 / log.tx_stores.max(1) as f64;
    let parts: [(&str, CountOf); 4] = [
        ("generated (non-silent)", |l| l.generated),
        ("silent, ignored", |l| l.silent_ignored),
        ("merged", |l| l.merged),
        ("took a slot (live)", |l| l.appended),
    ];
    let mut categories: Vec<String> = logs.iter().map(|(w, _)| w.clone()).collect();
    categories.push("mean".to_owned());
    let series = parts
        .iter()
        .map(|(name, part)| {
            let mut values: Vec<Option<f64>> =
                logs.iter().map(|(_, l)| Some(share(part(l), l))).collect();
            let total: f64 = values.iter().flatten().sum();
            values.push(Some(total / logs.len().max(1) as f64));
            BarSeries {
                name: (*name).to_owned(),
                values,
            }
        })
        .collect::<Vec<_>>();
    let title = format!("Silo log entries, {}", cores_text(cores));
    Ok(Plot {
        id: "log-entries".to_owned(),
        title: format!(
            "Fig. 13: what became of Silo's transactional word stores at {}, as % of them (the \
             paper: {:.1} % removed by ignoring silent stores and merging, on average)",
            cores_text(cores),
            100.0 * paper::LOG_REDUCTION
        ),
        svg: grouped_bar_chart(&title, "% of transactional stores", &categories, &series)?,
    })
}

/// The share of Silo's transactions that overflowed its log buffer, per workload.
fn overflows(rep: &Reproduction, cores: usize) -> Result<Plot> {
    let bars: Vec<(String, f64)> = workload_names(rep)
        .into_iter()
        .filter_map(|w| {
            let run = rep.run(&w, DesignKind::Silo, cores)?;
            let log = run.log?;
            Some((
                w,
                100.0 * log.overflow_tx as f64 / run.committed_tx.max(1) as f64,
            ))
        })
        .collect();
    let entries = rep.spec.config.silo.entries;
    let title = format!("Silo transactions that overflowed, {}", cores_text(cores));
    Ok(Plot {
        id: "overflow".to_owned(),
        title: format!(
            "Share of Silo's committed transactions that needed overflow retirement of its \
             {entries}-entry log buffer, at {}",
            cores_text(cores)
        ),
        svg: bar_chart(&title, "% of transactions", &bars)?,
    })
}

/// The plot of a sweep silorepro ran (latency, entries, transaction size); the core-count
/// sweep is drawn from the summaries instead ([`core_scaling`]).
fn sweep_plot(rep: &Reproduction, sweep: &Sweep) -> Result<Option<Plot>> {
    let plot = match sweep.name.as_str() {
        "latency" => latency(rep, sweep)?,
        "entries" => entries(rep, sweep)?,
        "tx_size" => tx_size(rep, sweep)?,
        _ => return Ok(None),
    };
    Ok(Some(plot))
}

/// One line per workload (relative throughput at each value) and their geometric mean.
fn per_workload_lines(rep: &Reproduction, sweep: &Sweep) -> Vec<Series> {
    let mut lines: Vec<Series> = workload_names(rep)
        .into_iter()
        .map(|w| Series {
            points: sweep
                .points
                .iter()
                .filter_map(|p| {
                    let (_, t, _) = p.per_workload.iter().find(|(name, _, _)| *name == w)?;
                    Some((p.value as f64, *t))
                })
                .collect(),
            name: w,
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    lines.push(Series {
        name: "geomean".to_owned(),
        points: sweep
            .points
            .iter()
            .map(|p| (p.value as f64, p.relative_throughput))
            .collect(),
    });
    lines
}

fn latency(rep: &Reproduction, sweep: &Sweep) -> Result<Plot> {
    let mut lines = per_workload_lines(rep, sweep);
    lines.push(Series {
        name: "paper (mean)".to_owned(),
        points: vec![paper_point(paper::LATENCY_LOSS)],
    });
    Ok(Plot {
        id: "latency".to_owned(),
        title: format!(
            "Fig. 15: Silo's throughput against its log-buffer access latency, relative to {}",
            sweep.reference
        ),
        svg: fitted_log2_line_chart(
            "Log-buffer latency",
            "log-buffer access latency (cycles)",
            "throughput × reference",
            &lines,
        )?,
    })
}

fn entries(rep: &Reproduction, sweep: &Sweep) -> Result<Plot> {
    let lines = per_workload_lines(rep, sweep);
    Ok(Plot {
        id: "entries".to_owned(),
        title: format!(
            "Silo's throughput against its log-buffer entries per core, relative to {}",
            sweep.reference
        ),
        svg: fitted_log2_line_chart(
            "Log-buffer entries",
            "log-buffer entries per core",
            "throughput × reference",
            &lines,
        )?,
    })
}

fn tx_size(rep: &Reproduction, sweep: &Sweep) -> Result<Plot> {
    let mut lines = per_workload_lines(rep, sweep);
    lines.push(Series {
        name: "geomean write bytes/tx".to_owned(),
        points: sweep
            .points
            .iter()
            .map(|p| (p.value as f64, p.relative_write_bytes))
            .collect(),
    });
    // The paper's two marks (throughput, and the write-growth bound), drawn only where the
    // sweep has data, each a point of its own: one series of both drew a vertical line
    // between them that read as data.
    let paper_x = paper::TX_SIZE_LOSS.value;
    if sweep.points.iter().any(|p| p.value == paper_x) {
        lines.push(Series {
            name: format!("paper at {paper_x}×: throughput"),
            points: vec![paper_point(paper::TX_SIZE_LOSS)],
        });
        lines.push(Series {
            name: format!("paper at {paper_x}×: writes (≤)"),
            points: vec![(paper_x as f64, paper::TX_SIZE_WRITE_GROWTH_MAX)],
        });
    }
    Ok(Plot {
        id: "tx-size".to_owned(),
        title: format!(
            "Fig. 14: each workload's operations grouped into transactions of {}× the log \
             buffer (mean live entries), Silo's throughput relative to {}",
            sweep_range(sweep),
            sweep.reference
        ),
        svg: fitted_log2_line_chart(
            "Transaction size",
            "live log entries per transaction, × buffer entries",
            "× unbounded buffer",
            &lines,
        )?,
    })
}

/// The swept values as "1–4" (or "4" for one point).
fn sweep_range(sweep: &Sweep) -> String {
    let values = sweep.points.iter().map(|p| p.value);
    match (values.clone().min(), values.max()) {
        (Some(low), Some(high)) if low < high => format!("{low}–{high}"),
        (Some(only), _) => only.to_string(),
        _ => "no".to_owned(),
    }
}

/// Each design's geometric-mean throughput × FWB at every core count of the plan.
fn core_scaling(rep: &Reproduction) -> Result<Plot> {
    let mut designs = figure_designs(rep);
    if rep.spec.designs.contains(&DesignKind::Ideal) {
        designs.push(DesignKind::Ideal);
    }
    let lines: Vec<Series> = designs
        .into_iter()
        .map(|design| Series {
            name: design.label().to_owned(),
            points: rep
                .spec
                .cores
                .iter()
                .filter_map(|&c| Some((c as f64, rep.summary_of(design, c)?.vs_fwb)))
                .collect(),
        })
        .collect();
    Ok(Plot {
        id: "cores".to_owned(),
        title: "Throughput × FWB (geometric mean over workloads) at each core count: the paper \
                expects Silo's lead to grow with the cores"
            .to_owned(),
        svg: fitted_log2_line_chart(
            "Core-count scaling",
            "simulated cores",
            "throughput × FWB",
            &lines,
        )?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::silo::tests::tiny;

    #[test]
    fn every_figure_is_drawn_with_its_series() {
        let rep = tiny();
        let plots = plots(rep).expect("plots");
        let ids: Vec<&str> = plots.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "throughput-1-core",
                "writes-1-core",
                "throughput-2-cores",
                "writes-2-cores",
                "log-entries",
                "overflow",
                "latency",
                "entries",
                "tx-size",
                "cores",
                "battery"
            ]
        );
        for plot in &plots {
            assert!(plot.svg.starts_with("<svg"), "{}", plot.id);
        }
        let throughput = &plots[2].svg;
        for name in [
            "Base", "FWB", "MorLog", "LAD", "Silo", "array", "hash", "geomean",
        ] {
            assert!(throughput.contains(name), "{name} missing");
        }
        // Not the paper's core count: no paper group.
        assert!(!throughput.contains("paper geomean"));
    }

    #[test]
    fn tx_size_figure_names_its_sweep_and_marks_the_paper_only_where_swept() {
        let rep = tiny();
        let plots = plots(rep).expect("plots");
        let figure = plots.iter().find(|p| p.id == "tx-size").expect("tx-size");
        // The tiny plan sweeps 1× and 2×: no data at the paper's 16×.
        assert!(
            figure.title.contains("transactions of 1–2× the log"),
            "{}",
            figure.title
        );
        assert!(!figure.svg.contains("paper at 16×"));
    }

    /// At the paper's 16× the figure marks the paper's throughput and its write-growth bound
    /// as two points, each in its own colour: drawn as one series they were joined by a
    /// vertical line, in the colour of the first workload's line.
    #[test]
    fn the_papers_marks_at_16x_are_two_points_of_their_own() {
        let rep = tiny();
        let mut sweep = rep
            .sweeps
            .iter()
            .find(|s| s.name == "tx_size")
            .expect("a transaction-size sweep")
            .clone();
        let mut at_16 = sweep.points[sweep.points.len() - 1].clone();
        at_16.value = paper::TX_SIZE_LOSS.value;
        sweep.points.push(at_16);
        let plot = tx_size(rep, &sweep).expect("plot");
        let texts = crate::plot::tests::text_labels(&plot.svg);
        for name in ["paper at 16×: throughput", "paper at 16×: writes (≤)"] {
            assert!(texts.iter().any(|t| t == name), "{name}: {texts:?}");
        }
        let colours = crate::plot::tests::legend_colours(&plot.svg);
        let mut distinct = colours.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), colours.len(), "{colours:?}");
        // A point alone draws no line: the plotted lines (2 pixels wide, of two points or
        // more) are the workloads', their mean's and the write growth's.
        let lines = plot
            .svg
            .split("<polyline")
            .filter(|e| e.contains("stroke-width=\"2\""))
            .filter_map(|e| e.split("points=\"").nth(1)?.split('"').next())
            .filter(|points| points.split_whitespace().count() >= 2)
            .count();
        assert_eq!(lines, colours.len() - 2, "{}", plot.svg);
    }

    #[test]
    fn the_paper_group_appears_at_eight_cores_only() {
        let rep = tiny();
        let (categories, series) = normalised_bars(
            rep,
            2,
            &|r, f| r.throughput / f.throughput,
            &|s| s.vs_fwb,
            |_| None,
        );
        assert_eq!(categories, ["array", "hash", "geomean"]);
        // FWB normalised to itself is 1 on every workload.
        let fwb = series.iter().find(|s| s.name == "FWB").expect("FWB series");
        for value in &fwb.values[..2] {
            assert!((value.expect("a run") - 1.0).abs() < 1e-12);
        }
        let mut eight = rep.clone();
        for run in &mut eight.runs {
            run.cores = if run.cores == 2 { 8 } else { run.cores };
        }
        for summary in &mut eight.summary {
            summary.cores = if summary.cores == 2 { 8 } else { summary.cores };
        }
        let (categories, series) = normalised_bars(
            &eight,
            8,
            &|r, f| r.throughput / f.throughput,
            &|s| s.vs_fwb,
            paper::throughput_vs_fwb,
        );
        assert_eq!(categories.last().map(String::as_str), Some("paper geomean"));
        let silo = series
            .iter()
            .find(|s| s.name == "Silo")
            .expect("Silo series");
        assert_eq!(silo.values.last(), Some(&Some(6.4)));
        let base = series
            .iter()
            .find(|s| s.name == "Base")
            .expect("Base series");
        assert_eq!(
            base.values.last(),
            Some(&None),
            "the paper gives no Base mean"
        );
    }
}
