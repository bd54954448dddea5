//! `ferrite eval`: runs the project's evaluation sections and assembles the report.
//!
//! Each section lives in its own module with an `ID`, a `TITLE` and a `run` function, and is
//! listed once in [`SECTIONS`]; adding an evaluation is adding a module and a line there.
//! A section that fails to run becomes a failed section of the report rather than aborting
//! the others.

mod crash_engines;
mod crash_selftest;
mod engine_goals;
mod engines;
mod logstudy;
mod nvthreads;
mod pmfs;
pub(crate) mod silo;
mod silo_plots;
pub(crate) mod silo_tables;
mod substrate;

use crate::report::{Report, Section, Verdict};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;

/// How to run the evaluation.
#[derive(Clone, Debug)]
pub struct EvalOptions {
    /// Reduced sizes everywhere (tests, smoke runs): the numbers are indicative only.
    pub quick: bool,
    /// Directory for scratch pools (tmpfs by default).
    pub pool_dir: PathBuf,
}

/// A section's entry point: builds the section, reporting progress on the bar (whose
/// length it sets).
type RunSection = fn(&EvalOptions, &ProgressBar) -> anyhow::Result<Section>;

/// One evaluation section.
#[derive(Debug)]
pub struct SectionSpec {
    /// Identifier: file names, anchors, `--only`.
    pub id: &'static str,
    /// Heading.
    pub title: &'static str,
    run: RunSection,
}

/// Every section, in report order.
pub const SECTIONS: &[SectionSpec] = &[
    SectionSpec {
        id: substrate::ID,
        title: substrate::TITLE,
        run: substrate::run,
    },
    SectionSpec {
        id: crash_selftest::ID,
        title: crash_selftest::TITLE,
        run: crash_selftest::run,
    },
    SectionSpec {
        id: logstudy::ID,
        title: logstudy::TITLE,
        run: logstudy::run,
    },
    SectionSpec {
        id: engines::ID,
        title: engines::TITLE,
        run: engines::run,
    },
    SectionSpec {
        id: crash_engines::ID,
        title: crash_engines::TITLE,
        run: crash_engines::run,
    },
    SectionSpec {
        id: silo::ID,
        title: silo::TITLE,
        run: silo::run,
    },
    SectionSpec {
        id: pmfs::ID,
        title: pmfs::TITLE,
        run: pmfs::run,
    },
    SectionSpec {
        id: nvthreads::ID,
        title: nvthreads::TITLE,
        run: nvthreads::run,
    },
];

/// Runs the sections whose ids are in `only` (every section when it is empty), in report
/// order, with a progress bar on stderr when it is a terminal.
pub fn run(options: &EvalOptions, only: &[String]) -> Report {
    let sections = SECTIONS
        .iter()
        .filter(|spec| only.is_empty() || only.iter().any(|id| id == spec.id))
        .map(|spec| run_one(spec, options))
        .collect();
    Report {
        title: "Ferrite evaluation".to_owned(),
        generated: crate::time::now_rfc3339(),
        quick: options.quick,
        sections,
    }
}

/// Adds to `report` the `earlier` sections it does not have (a report's folder holds every
/// section a run of some of them did not make), all in report order; sections of ids this
/// build does not know go last, in their earlier order.
pub fn carry_over(report: &mut Report, earlier: Vec<Section>) {
    for section in earlier {
        if !report.sections.iter().any(|s| s.id == section.id) {
            report.sections.push(section);
        }
    }
    let rank = |id: &str| {
        SECTIONS
            .iter()
            .position(|spec| spec.id == id)
            .unwrap_or(SECTIONS.len())
    };
    // A stable sort: unknown ids keep their order among themselves.
    report.sections.sort_by_key(|section| rank(&section.id));
}

/// Runs one section. With a terminal on stderr a progress bar shows its steps; without one
/// (a pipe, a log file, CI) the bar is hidden, so one line marks the section's start and one
/// its end with the elapsed time.
fn run_one(spec: &SectionSpec, options: &EvalOptions) -> Section {
    // The short id and a message cut to the terminal's width keep the bar on one line (a
    // section's title alone can fill 80 columns, and a wrapped bar redraws as two).
    let bar = ProgressBar::new(0).with_prefix(spec.id).with_style(
        ProgressStyle::with_template(
            "{prefix:.bold} [{bar:30}] {pos}/{len} ({elapsed}) {wide_msg}",
        )
        .expect("the progress template is valid")
        .progress_chars("=> "),
    );
    let plain_lines = bar.is_hidden();
    let started = std::time::Instant::now();
    if plain_lines {
        eprintln!("ferrite: eval: {} ({}) started", spec.id, spec.title);
    }
    let section = (spec.run)(options, &bar).unwrap_or_else(|error| {
        bar.suspend(|| eprintln!("ferrite: eval: {}: {error:#}", spec.id));
        Section::failed(spec.id, spec.title, &error)
    });
    bar.finish_and_clear();
    if plain_lines {
        eprintln!(
            "ferrite: eval: {} finished in {:.1} s [{}]",
            spec.id,
            started.elapsed().as_secs_f64(),
            section.verdict.label()
        );
    }
    debug_assert_eq!(section.id, spec.id, "a section reports under its own id");
    section
}

/// A new section with `id` and `title`, nothing in it yet, verdict [`Verdict::Info`].
fn empty_section(id: &str, title: &str) -> Section {
    Section {
        id: id.to_owned(),
        title: title.to_owned(),
        verdict: Verdict::Info,
        headlines: Vec::new(),
        summary: Vec::new(),
        tables: Vec::new(),
        plots: Vec::new(),
        json: serde_json::Value::Null,
        earlier: None,
    }
}

/// Nanoseconds with one decimal.
fn ns(value: f64) -> String {
    format!("{value:.1}")
}

/// Prints each section's verdict, summary and tables, then where the report is. Tables are
/// fitted to the terminal's width ([`crate::terminal::width`]; 120 columns when piped),
/// their cells wrapped; one that cannot fit says so and points at `index.html`.
pub fn print_summary(
    report: &Report,
    dir: &std::path::Path,
    files: usize,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let mode = if report.quick { " (quick)" } else { "" };
    writeln!(out, "{}{mode}", report.title)?;
    let width = crate::terminal::width();
    let html = dir.join("index.html").display().to_string();
    let show = |table: &crate::report::Table| {
        crate::terminal::render(terminal_table(table), width, Some(&html))
    };
    let mut headlines = crate::report::Table::new(
        "What was reproduced (details in each section)",
        &["System", "Claim", "Ours", "Verdict"],
    );
    for section in &report.sections {
        for headline in &section.headlines {
            headlines.push(vec![
                section.title.clone(),
                headline.claim.clone(),
                headline.ours.clone(),
                headline.verdict.label().to_owned(),
            ]);
        }
    }
    if !headlines.rows.is_empty() {
        writeln!(out, "\n{}\n{}", headlines.title, show(&headlines))?;
    }
    let indicative = crate::report::ClaimVerdict::Indicative;
    if report
        .sections
        .iter()
        .flat_map(|section| &section.headlines)
        .any(|headline| headline.verdict == indicative)
    {
        writeln!(
            out,
            "({}: measured at reduced sizes (--quick, or a plan below the full one), which \
             cannot judge the claim, so no verdict.)",
            indicative.label()
        )?;
    }
    if !report.sections.is_empty() {
        writeln!(out, "\n{SECTION_MARKS}")?;
    }
    for section in &report.sections {
        if let Some(earlier) = &section.earlier {
            writeln!(
                out,
                "\n== {} [{}], {} (not run again; in {})",
                section.title,
                section.verdict.label(),
                crate::report::carried_note(earlier),
                html
            )?;
            continue;
        }
        writeln!(out, "\n== {} [{}]", section.title, section.verdict.label())?;
        for line in &section.summary {
            writeln!(out, "  - {line}")?;
        }
        for table in &section.tables {
            writeln!(out, "\n{}\n{}", table.title, show(table))?;
        }
    }
    writeln!(
        out,
        "\nreport: {} ({files} files; open {})",
        dir.display(),
        dir.join("index.html").display()
    )
}

/// What the mark after each section's heading judges, as the HTML's badge legend says: a
/// [PASS] beside a section whose claims are "not met" is not a contradiction.
const SECTION_MARKS: &str = "(Section marks: [PASS] / [FAIL]: the section's correctness \
checks held or not, or [FAIL] it or a run of it could not run; [INFO]: measurements only. \
Neither judges performance: the claims, where a section has any, are judged in the table of \
claims.)";

/// A report table for the terminal, numeric columns right-aligned.
pub(crate) fn terminal_table(table: &crate::report::Table) -> comfy_table::Table {
    let mut rendered = comfy_table::Table::new();
    rendered
        .load_style(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_header(&table.columns);
    for row in &table.rows {
        rendered.add_row(row);
    }
    // Right-align the columns that hold only numbers, so digits line up.
    let numeric: Vec<bool> = (0..table.columns.len())
        .map(|index| {
            table.rows.iter().all(|row| {
                row.get(index)
                    .is_some_and(|cell| crate::cells::is_numeric(cell))
            })
        })
        .collect();
    for (column, is_numeric) in rendered.column_iter_mut().zip(numeric) {
        if is_numeric {
            column.set_cell_alignment(comfy_table::CellAlignment::Right);
        }
    }
    rendered
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{ClaimVerdict, Headline};

    /// The terminal summary says what a section's [PASS] judges before the first one, as the
    /// HTML does.
    #[test]
    fn the_terminal_summary_explains_the_section_marks() {
        let mut section = empty_section("nvthreads", "NVthreads");
        section.verdict = Verdict::Pass;
        section.headlines = vec![Headline::new("a claim", "2×", ClaimVerdict::NotMet)];
        let report = Report {
            title: "Ferrite evaluation".to_owned(),
            generated: String::new(),
            quick: false,
            sections: vec![section],
        };
        let mut out = Vec::new();
        print_summary(&report, std::path::Path::new("/tmp/r"), 3, &mut out).expect("printed");
        let text = String::from_utf8(out).expect("UTF-8");
        let marks = text
            .find("(Section marks: [PASS]")
            .expect("the marks explained");
        let first = text.find("== NVthreads [PASS]").expect("the section");
        assert!(marks < first, "{text}");
    }
}
