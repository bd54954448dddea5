//! Section "logstudy": seed 001's question — cache the log or stream it past the cache? —
//! answered on this machine with Ferrite's log writer: nanoseconds per update for cacheable,
//! non-temporal, packed and Auto log writes, record sizes 4 B to 256 B, durable after every
//! record (batch 1) or after every eight (batch 8).
//!
//! The summary says which mode wins where, and how close the engines' Auto mode
//! ([`AUTO_THRESHOLD`]: packed below it, non-temporal at or above) comes to the fastest fixed
//! mode in batch 1 — the engines' pattern, where every append is followed by a fence.

use super::{EvalOptions, empty_section, ns};
use crate::plot::{Series, log2_line_chart};
use crate::report::{Plot, Section, Table};
use anyhow::Context;
use bench::logstudy::{self, StudyResults, StudySettings};
use indicatif::ProgressBar;
use serde_json::json;
use tx::logwriter::{AUTO_THRESHOLD, LogMode};

/// Section id.
pub const ID: &str = "logstudy";
/// Section heading.
pub const TITLE: &str = "Logging to cache or not to cache (seed 001)";

/// The batch whose evidence Auto should follow: both engines fence after every log append
/// (redo one record per commit, undo one entry group per write).
const AUTO_BATCH: usize = 1;

/// Auto is judged good where it is within this fraction of the fastest fixed mode (the
/// run-to-run spread of this study on a 2-core machine is about that large).
const AUTO_TOLERANCE: f64 = 0.15;

/// Runs the study (quick settings with `--quick`) in the pool directory and reports it.
pub fn run(options: &EvalOptions, bar: &ProgressBar) -> anyhow::Result<Section> {
    let settings = if options.quick {
        StudySettings::quick()
    } else {
        StudySettings::default()
    };
    let progress = |done: usize, total: usize| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    };
    let results = logstudy::run(&options.pool_dir, &settings, &progress)
        .with_context(|| format!("log study with a pool in {}", options.pool_dir.display()))?;
    section_of(&results, options.quick)
}

fn section_of(results: &StudyResults, quick: bool) -> anyhow::Result<Section> {
    let excess = auto_excess(results, AUTO_BATCH);
    let batches = distinct(results.points.iter().map(|p| p.batch));
    let mut section = empty_section(ID, TITLE);
    section.summary = summary(results, &excess, quick);
    section.tables = batches
        .iter()
        .flat_map(|&batch| [time_table(results, batch), traffic_table(results, batch)])
        .collect();
    section.plots = batches
        .iter()
        .map(|&batch| plot(results, batch))
        .collect::<anyhow::Result<_>>()?;
    let winners: Vec<_> = batches
        .iter()
        .flat_map(|&batch| winners(results, batch))
        .map(|(batch, record, mode)| json!({ "batch": batch, "record": record, "mode": mode }))
        .collect();
    section.json = json!({
        "settings": results.settings,
        "auto_threshold": AUTO_THRESHOLD,
        "auto_batch": AUTO_BATCH,
        "auto_tolerance": AUTO_TOLERANCE,
        "auto_good": excess.iter().all(|&(_, e)| e <= AUTO_TOLERANCE),
        "auto_excess": excess.iter().map(|&(r, e)| json!({ "record": r, "excess": e })).collect::<Vec<_>>(),
        "winners": winners,
        "points": results.points,
    });
    Ok(section)
}

/// The distinct values, ascending.
fn distinct(values: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut values: Vec<usize> = values.collect();
    values.sort_unstable();
    values.dedup();
    values
}

fn records(results: &StudyResults) -> Vec<usize> {
    distinct(results.points.iter().map(|p| p.record))
}

fn median(results: &StudyResults, mode: LogMode, record: usize, batch: usize) -> Option<f64> {
    results
        .point(mode, record, batch)
        .map(|p| p.ns_per_update.median)
}

/// The fastest fixed mode at every record size of `batch`: `(batch, record, mode)`.
fn winners(results: &StudyResults, batch: usize) -> Vec<(usize, usize, LogMode)> {
    records(results)
        .into_iter()
        .filter_map(|record| Some((batch, record, results.winner(record, batch)?.mode)))
        .collect()
}

/// At each record size of `batch`: how much slower Auto was than the fastest fixed mode
/// (0.05 = 5 %; never negative).
fn auto_excess(results: &StudyResults, batch: usize) -> Vec<(usize, f64)> {
    records(results)
        .into_iter()
        .filter_map(|record| {
            let best = results.winner(record, batch)?.ns_per_update.median;
            let auto = median(results, LogMode::Auto, record, batch)?;
            (best > 0.0).then(|| (record, (auto / best - 1.0).max(0.0)))
        })
        .collect()
}

fn summary(results: &StudyResults, excess: &[(usize, f64)], quick: bool) -> Vec<String> {
    let batches = distinct(results.points.iter().map(|p| p.batch));
    let mut lines: Vec<String> = batches
        .iter()
        .map(|&batch| {
            format!(
                "{}: fastest is {}.",
                batch_name(batch),
                winner_ranges(results, batch)
            )
        })
        .collect();
    lines.push(auto_line(excess));
    let settings = &results.settings;
    lines.push(format!(
        "Each update appends a record, then stores 8 B at a random place of a {} MiB array; \
         {} updates per timed run, median of {} runs after a warm-up round, modes interleaved \
         run by run in rotating order, each mode on its own elements.",
        settings.array_bytes >> 20,
        settings.updates,
        settings.runs
    ));
    lines.push(
        "Last-level-cache misses are not reported: this machine has no hardware counters, and \
         cachegrind gave inconsistent counts for programs using clwb (random array stores \
         stopped missing), so they would not be evidence."
            .to_owned(),
    );
    if quick {
        lines.push(
            "Quick run: a small array and few updates; the numbers are indicative only.".to_owned(),
        );
    }
    lines
}

fn batch_name(batch: usize) -> String {
    match batch {
        1 => "Batch 1 (a fence after every record)".to_owned(),
        n => format!("Batch {n} (a fence after every {n} records)"),
    }
}

/// "cacheable at 4–64 B, packed at 128–256 B": consecutive sizes with the same winner merged.
fn winner_ranges(results: &StudyResults, batch: usize) -> String {
    let mut ranges: Vec<(LogMode, usize, usize)> = Vec::new();
    for (_, record, mode) in winners(results, batch) {
        match ranges.last_mut() {
            Some((last, _, end)) if *last == mode => *end = record,
            _ => ranges.push((mode, record, record)),
        }
    }
    if ranges.is_empty() {
        return "not measured".to_owned();
    }
    let parts: Vec<String> = ranges
        .iter()
        .map(|(mode, first, last)| match first == last {
            true => format!("{} at {first} B", mode.name()),
            false => format!("{} at {first}–{last} B", mode.name()),
        })
        .collect();
    parts.join(", ")
}

fn auto_line(excess: &[(usize, f64)]) -> String {
    let rule = format!(
        "Auto (tx::logwriter::AUTO_THRESHOLD = {AUTO_THRESHOLD} B: packed below, non-temporal at \
         or above), judged on {}",
        batch_name(AUTO_BATCH).to_lowercase()
    );
    let Some(&(worst_record, worst)) = excess.iter().max_by(|a, b| a.1.total_cmp(&b.1)) else {
        return format!("{rule}: not measured.");
    };
    let over: Vec<String> = excess
        .iter()
        .filter(|&&(_, e)| e > AUTO_TOLERANCE)
        .map(|(r, _)| format!("{r} B"))
        .collect();
    let verdict = if over.is_empty() {
        format!(
            "within {:.0} % of the fastest fixed mode at every size",
            AUTO_TOLERANCE * 100.0
        )
    } else {
        format!(
            "more than {:.0} % slower than the fastest fixed mode at {}",
            AUTO_TOLERANCE * 100.0,
            over.join(", ")
        )
    };
    format!(
        "{rule}: {verdict} (worst {:.0} % at {worst_record} B).",
        worst * 100.0
    )
}

fn time_table(results: &StudyResults, batch: usize) -> Table {
    let mut columns = vec!["record B"];
    columns.extend(logstudy::MODES.iter().map(|m| m.name()));
    columns.push("auto writes as");
    let mut table = Table::new(
        format!(
            "{}: ns per update, median of {} runs (* fastest fixed mode)",
            batch_name(batch),
            results.settings.runs
        ),
        &columns,
    );
    for record in records(results) {
        let winner = results.winner(record, batch).map(|p| p.mode);
        let mut row = vec![record.to_string()];
        row.extend(logstudy::MODES.iter().map(|&mode| {
            let cell = median(results, mode, record, batch).map_or("n/a".to_owned(), ns);
            if winner == Some(mode) {
                format!("{cell} *")
            } else {
                cell
            }
        }));
        row.push(LogMode::Auto.resolve(record).name().to_owned());
        table.push(row);
    }
    table
}

fn traffic_table(results: &StudyResults, batch: usize) -> Table {
    let headings: Vec<String> = logstudy::MODES
        .iter()
        .flat_map(|m| {
            [
                format!("{} flushes", m.name()),
                format!("{} NT B", m.name()),
            ]
        })
        .collect();
    let mut columns = vec!["record B"];
    columns.extend(headings.iter().map(String::as_str));
    let mut table = Table::new(
        format!(
            "{}: cache lines flushed and non-temporal bytes per update",
            batch_name(batch)
        ),
        &columns,
    );
    for record in records(results) {
        let mut row = vec![record.to_string()];
        for mode in logstudy::MODES {
            match results.point(mode, record, batch) {
                Some(p) => row.extend([
                    format!("{:.2}", p.flushes_per_update),
                    format!("{:.1}", p.nt_bytes_per_update),
                ]),
                None => row.extend(["n/a".to_owned(), "n/a".to_owned()]),
            }
        }
        table.push(row);
    }
    table
}

fn plot(results: &StudyResults, batch: usize) -> anyhow::Result<Plot> {
    let series: Vec<Series> = logstudy::MODES
        .iter()
        .map(|&mode| Series {
            name: mode.name().to_owned(),
            points: records(results)
                .into_iter()
                .filter_map(|r| Some((r as f64, median(results, mode, r, batch)?)))
                .collect(),
        })
        .collect();
    let title = format!("Log writes, batch {batch}");
    Ok(Plot {
        id: format!("batch-{batch}"),
        title: format!(
            "{}: median ns per update by record size (log scale), one line per mode",
            batch_name(batch)
        ),
        svg: log2_line_chart(&title, "record size (bytes)", "ns per update", &series)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bench::Summary;
    use bench::logstudy::StudyPoint;

    /// A study where cacheable costs `cached(record)` and both streaming modes `streamed`.
    fn study(cached: &dyn Fn(usize) -> f64, streamed: f64) -> StudyResults {
        let mut points = Vec::new();
        for batch in [1, 8] {
            for record in [4, 16, 64, 256] {
                for mode in logstudy::MODES {
                    let ns = match mode {
                        LogMode::Cacheable => cached(record),
                        LogMode::Auto => cached(record).min(streamed) * 1.1,
                        _ => streamed,
                    };
                    points.push(StudyPoint {
                        mode,
                        record,
                        batch,
                        ns_per_update: Summary::of(&[ns]).expect("one sample"),
                        flushes_per_update: 1.0,
                        nt_bytes_per_update: 0.0,
                    });
                }
            }
        }
        StudyResults {
            settings: StudySettings::quick(),
            points,
        }
    }

    #[test]
    fn winners_and_auto_excess_are_computed_from_the_points() {
        // Cacheable grows with the record; streaming costs 50 ns; Auto is 10 % off the best.
        let results = study(&|record| record as f64, 50.0);
        assert_eq!(
            winner_ranges(&results, 8),
            "cacheable at 4–16 B, non-temporal at 64–256 B"
        );
        let excess = auto_excess(&results, 1);
        assert_eq!(excess.len(), 4);
        assert!(
            excess.iter().all(|&(_, e)| (e - 0.1).abs() < 1e-9),
            "{excess:?}"
        );
        assert!(
            auto_line(&excess).contains("within 15 %"),
            "{}",
            auto_line(&excess)
        );
    }

    #[test]
    fn auto_far_from_the_best_is_reported() {
        let excess = [(4, 0.02), (128, 0.9)];
        let line = auto_line(&excess);
        assert!(
            line.contains("slower than the fastest fixed mode at 128 B"),
            "{line}"
        );
        assert!(line.contains("worst 90 % at 128 B"), "{line}");
    }

    #[test]
    fn section_has_a_table_pair_and_a_plot_per_batch() {
        let section = section_of(&study(&|r| r as f64, 50.0), true).expect("section");
        assert_eq!(section.tables.len(), 4);
        assert_eq!(section.plots.len(), 2);
        assert_eq!(section.tables[0].rows.len(), 4);
        assert!(
            section.tables[0].rows[0][1].ends_with('*'),
            "cacheable wins at 4 B"
        );
        assert_eq!(section.json["auto_good"], true);
    }
}
