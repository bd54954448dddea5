//! The evaluation report: sections of summary lines, tables, plots and raw data, written as a
//! folder of JSON files, SVG plots and one `index.html`.
//!
//! Folder layout (see [`write`]):
//! - `report.json`: every section, data included;
//! - `<section>.json`: one section alone;
//! - `<section>-<plot>.svg`: each plot;
//! - `index.html`: every section's summary and tables, with its plots inlined.
//!
//! A new evaluation adds a [`Section`]; nothing here changes. A report's sections can be
//! read back from its folder ([`read_sections`]), so a run of some sections keeps the others
//! ([`Section::earlier`] says when they ran).

use crate::output::Staged;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

/// The outcome a section claims.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Measurements only: nothing to pass or fail.
    Info,
    /// Every check of the section held.
    Pass,
    /// A check failed, or the section could not run.
    Fail,
}

impl Verdict {
    /// Upper-case label for terminals and HTML.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Info => "INFO",
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
        }
    }
}

/// A table: named columns and rows of already-formatted cells.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Table {
    /// Caption.
    pub title: String,
    /// Column headings.
    pub columns: Vec<String>,
    /// Rows, each with one cell per column.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with `columns`.
    pub fn new(title: impl Into<String>, columns: &[&str]) -> Self {
        Table {
            title: title.into(),
            columns: columns.iter().map(|&c| c.to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row; it must have one cell per column.
    pub fn push(&mut self, row: Vec<String>) {
        debug_assert_eq!(row.len(), self.columns.len(), "row width of {}", self.title);
        self.rows.push(row);
    }
}

/// A plot, already rendered to SVG.
#[derive(Clone, Debug)]
pub struct Plot {
    /// Short identifier, part of the file name (`[a-z0-9-]+`).
    pub id: String,
    /// Caption.
    pub title: String,
    /// The SVG document.
    pub svg: String,
}

/// Whether one of a paper's headline claims holds in our measurements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClaimVerdict {
    /// Ours is within the stated tolerance of the paper's, or meets the stated goal.
    Met,
    /// Ours misses the paper's claim; the section says why.
    NotMet,
    /// Not measurable here (missing tool or hardware, or not in this run's plan).
    NotMeasured,
    /// Measured at `--quick` sizes, which cannot judge the claim: the number is shown, no
    /// verdict is given (the full run's can differ either way).
    Indicative,
}

impl ClaimVerdict {
    /// `Met` when `holds`, else `NotMet`.
    pub fn from_holds(holds: bool) -> Self {
        if holds {
            ClaimVerdict::Met
        } else {
            ClaimVerdict::NotMet
        }
    }

    /// Lower-case label for tables and HTML.
    pub fn label(self) -> &'static str {
        match self {
            ClaimVerdict::Met => "met",
            ClaimVerdict::NotMet => "not met",
            ClaimVerdict::NotMeasured => "not measured",
            ClaimVerdict::Indicative => "indicative",
        }
    }
}

/// One headline claim of a paper (or one goal of ours) beside what we measured: the rows of
/// the report's first screen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Headline {
    /// The claim as the paper (venue and year) or the goal states it, with its number.
    pub claim: String,
    /// What we measured, with its number.
    pub ours: String,
    /// Whether the claim holds here.
    pub verdict: ClaimVerdict,
}

impl Headline {
    /// A headline row.
    pub fn new(claim: impl Into<String>, ours: impl Into<String>, verdict: ClaimVerdict) -> Self {
        Headline {
            claim: claim.into(),
            ours: ours.into(),
            verdict,
        }
    }

    /// The headline of a `--quick` run: a measured claim (met or not) becomes
    /// [`ClaimVerdict::Indicative`]; one that was not measured stays so.
    pub fn indicative(&mut self) {
        if matches!(self.verdict, ClaimVerdict::Met | ClaimVerdict::NotMet) {
            self.verdict = ClaimVerdict::Indicative;
        }
    }

    /// [`Headline::indicative`] on every headline when `quick`.
    pub fn all_indicative_if(headlines: &mut [Headline], quick: bool) {
        if quick {
            headlines.iter_mut().for_each(Headline::indicative);
        }
    }
}

/// One part of the evaluation.
#[derive(Clone, Debug)]
pub struct Section {
    /// Short identifier, used in file names and anchors (`[a-z0-9-]+`).
    pub id: String,
    /// Heading.
    pub title: String,
    /// Whether the section passed, failed, or only measured.
    pub verdict: Verdict,
    /// The paper's headline claims beside ours, shown on the report's first screen.
    pub headlines: Vec<Headline>,
    /// The conclusions, one sentence each.
    pub summary: Vec<String>,
    /// Tables, in display order.
    pub tables: Vec<Table>,
    /// Plots, in display order.
    pub plots: Vec<Plot>,
    /// Every number behind the tables and plots, for further processing.
    pub json: Value,
    /// Set for a section this run did not make: carried over from the report already in
    /// the folder (`eval --only` runs some sections and keeps the others).
    pub earlier: Option<Earlier>,
}

/// When a carried-over section was made, and at which sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Earlier {
    /// When its run made it (RFC 3339).
    pub generated: String,
    /// Whether it ran at `--quick` sizes.
    pub quick: bool,
}

impl Section {
    /// A section that could not run: its verdict is [`Verdict::Fail`] and its summary the
    /// error.
    pub fn failed(id: &str, title: &str, error: &anyhow::Error) -> Self {
        Section {
            id: id.to_owned(),
            title: title.to_owned(),
            verdict: Verdict::Fail,
            headlines: Vec::new(),
            summary: vec![format!("could not run: {}", crate::one_line(error))],
            tables: Vec::new(),
            plots: Vec::new(),
            json: json!({ "error": crate::one_line(error) }),
            earlier: None,
        }
    }

    fn plot_file(&self, plot: &Plot) -> String {
        format!("{}-{}.svg", self.id, plot.id)
    }

    /// The section as it appears in the JSON files (plots by file name), with when it was
    /// made and whether at `--quick` sizes: the report's for a section of this run, its own
    /// for one carried over, so a section file read alone says whether its verdicts could be
    /// given (`docs/bench-json.md`, "The evaluation's JSON").
    fn to_json(&self, report: &Report) -> Value {
        let plots: Vec<Value> = self
            .plots
            .iter()
            .map(|plot| json!({ "id": plot.id, "title": plot.title, "file": self.plot_file(plot) }))
            .collect();
        let (generated, quick) = match &self.earlier {
            Some(earlier) => (earlier.generated.as_str(), earlier.quick),
            None => (report.generated.as_str(), report.quick),
        };
        json!({
            "id": self.id,
            "title": self.title,
            "generated": generated,
            "quick": quick,
            "verdict": self.verdict,
            "headlines": self.headlines,
            "summary": self.summary,
            "tables": self.tables,
            "plots": plots,
            "data": self.json,
        })
    }
}

/// A whole report.
#[derive(Clone, Debug)]
pub struct Report {
    /// Page title.
    pub title: String,
    /// When the report was made (RFC 3339).
    pub generated: String,
    /// Whether the sections ran at reduced size (`--quick`).
    pub quick: bool,
    /// The sections, in display order.
    pub sections: Vec<Section>,
}

impl Report {
    /// The sections whose verdict is [`Verdict::Fail`].
    pub fn failed_sections(&self) -> Vec<&Section> {
        self.sections
            .iter()
            .filter(|section| section.verdict == Verdict::Fail)
            .collect()
    }

    fn to_json(&self) -> Value {
        json!({
            "title": self.title,
            "generated": self.generated,
            "quick": self.quick,
            "sections": self
                .sections
                .iter()
                .map(|section| section.to_json(self))
                .collect::<Vec<_>>(),
        })
    }
}

/// Writes `report` into `dir` (created if needed; files of the same names are replaced) and
/// returns the paths written, `index.html` last. The section files an earlier report in
/// `dir` listed in its `report.json` and this one does not write are removed, so the folder
/// holds only what its `report.json` names; files no report listed are left alone.
pub fn write(report: &Report, dir: &Path) -> io::Result<Vec<PathBuf>> {
    check_ids(report)?;
    std::fs::create_dir_all(dir)?;
    let earlier = files_of_earlier_report(dir);
    // Every file is written beside its final name first and renamed into place only when
    // all of them were written: a report that cannot be written whole (a full file system)
    // leaves the folder's earlier report as it was, not a mix of old and truncated files.
    let mut staged = Vec::new();
    let mut put = |name: String, contents: &str| -> io::Result<()> {
        let path = dir.join(name);
        let file = Staged::new(&path)?;
        let permissions = std::fs::metadata(&path)
            .ok()
            .filter(std::fs::Metadata::is_file)
            .map(|meta| meta.permissions());
        file.fill(contents.as_bytes(), permissions)?;
        staged.push((file, path));
        Ok(())
    };
    for section in &report.sections {
        put(
            format!("{}.json", section.id),
            &pretty(&section.to_json(report)),
        )?;
        for plot in &section.plots {
            put(section.plot_file(plot), &plot.svg)?;
        }
    }
    put("report.json".into(), &pretty(&report.to_json()))?;
    put("index.html".into(), &render_html(report))?;
    let mut written = Vec::new();
    for (file, path) in staged {
        file.commit()?;
        written.push(path);
    }
    for name in earlier {
        let path = dir.join(name);
        if !written.contains(&path) {
            match std::fs::remove_file(&path) {
                Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
                _ => {}
            }
        }
    }
    Ok(written)
}

/// The section files (`<id>.json`, `<id>-<plot>.svg`) the `report.json` already in `dir`
/// lists; none when there is none or it does not parse. Only names made of a valid id are
/// taken, so a hand-edited `report.json` cannot point the removal outside `dir`.
fn files_of_earlier_report(dir: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(dir.join("report.json")) else {
        return Vec::new();
    };
    let Ok(earlier) = serde_json::from_str::<Value>(&text) else {
        return Vec::new();
    };
    let sections = earlier["sections"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let mut files = Vec::new();
    for section in sections {
        let Some(id) = section["id"].as_str().filter(|id| check_id(id).is_ok()) else {
            continue;
        };
        files.push(format!("{id}.json"));
        let plots = section["plots"].as_array().map_or(&[][..], Vec::as_slice);
        files.extend(plots.iter().filter_map(|plot| {
            let stem = plot["file"].as_str()?.strip_suffix(".svg")?;
            let plot_id = stem.strip_prefix(id)?.strip_prefix('-')?;
            check_id(plot_id).is_ok().then(|| format!("{stem}.svg"))
        }));
    }
    files
}

/// A section as `report.json` stores it.
#[derive(Deserialize)]
struct StoredSection {
    id: String,
    title: String,
    verdict: Verdict,
    headlines: Vec<Headline>,
    summary: Vec<String>,
    tables: Vec<Table>,
    plots: Vec<StoredPlot>,
    data: Value,
    /// Absent in reports written before sections were carried over: the report's then.
    generated: Option<String>,
    quick: Option<bool>,
}

#[derive(Deserialize)]
struct StoredPlot {
    id: String,
    title: String,
    file: String,
}

#[derive(Deserialize)]
struct StoredReport {
    generated: String,
    quick: bool,
    sections: Vec<StoredSection>,
}

/// The sections of the report already in `dir`, read back from its `report.json` and plot
/// files, each marked [`Section::earlier`]; none when `dir` holds no `report.json`. An error
/// says what cannot be read back (a `report.json` that is not a report, a plot file that is
/// missing).
pub fn read_sections(dir: &Path) -> Result<Vec<Section>, String> {
    let path = dir.join("report.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(format!("{}: {error}", path.display())),
    };
    let stored: StoredReport = serde_json::from_str(&text).map_err(|error| {
        format!(
            "{}: not a report of `ferrite eval` ({error})",
            path.display()
        )
    })?;
    stored
        .sections
        .into_iter()
        .map(|section| {
            check_id(&section.id).map_err(|error| format!("{}: {error}", path.display()))?;
            let mut read = Section {
                id: section.id,
                title: section.title,
                verdict: section.verdict,
                headlines: section.headlines,
                summary: section.summary,
                tables: section.tables,
                plots: Vec::new(),
                json: section.data,
                earlier: Some(Earlier {
                    generated: section
                        .generated
                        .unwrap_or_else(|| stored.generated.clone()),
                    quick: section.quick.unwrap_or(stored.quick),
                }),
            };
            for plot in section.plots {
                let read_plot = Plot {
                    id: plot.id,
                    title: plot.title,
                    svg: String::new(),
                };
                // Only the name this section would give the plot: a hand-edited file name
                // cannot point outside the folder.
                let file = read.plot_file(&read_plot);
                if check_id(&read_plot.id).is_err() || plot.file != file {
                    return Err(format!(
                        "{}: section {} names a plot file {:?} it would not write",
                        path.display(),
                        read.id,
                        plot.file
                    ));
                }
                let svg = std::fs::read_to_string(dir.join(&file)).map_err(|error| {
                    format!(
                        "{}: {error} (a plot of section {})",
                        dir.join(&file).display(),
                        read.id
                    )
                })?;
                read.plots.push(Plot { svg, ..read_plot });
            }
            Ok(read)
        })
        .collect()
}

fn pretty(value: &Value) -> String {
    // Serialising a `Value` cannot fail: its map keys are strings by construction.
    let mut text = serde_json::to_string_pretty(value).expect("a JSON value serialises");
    text.push('\n');
    text
}

/// Rejects ids that are unsafe in file names, and ids whose files would collide.
fn check_ids(report: &Report) -> io::Result<()> {
    let mut files = HashSet::new();
    for section in &report.sections {
        check_id(&section.id)?;
        let plot_files = section.plots.iter().map(|plot| {
            check_id(&plot.id)?;
            Ok::<_, io::Error>(section.plot_file(plot))
        });
        for file in std::iter::once(Ok(format!("{}.json", section.id))).chain(plot_files) {
            let file = file?;
            if !files.insert(file.clone()) {
                return Err(invalid_id(&file, "is used twice"));
            }
        }
    }
    Ok(())
}

fn check_id(id: &str) -> io::Result<()> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    if id.is_empty() || !id.chars().all(allowed) {
        return Err(invalid_id(
            id,
            "must be lower-case letters, digits and dashes",
        ));
    }
    Ok(())
}

fn invalid_id(id: &str, problem: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("report id {id:?} {problem}"),
    )
}

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;\
padding:0 1em;color:#222}h1{margin-bottom:.2em}.meta{color:#666}\
table{border-collapse:collapse;margin:1em 0}caption{text-align:left;font-weight:600;\
padding:.3em 0}th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left}\
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}\
.verdict{font-size:.8em;padding:.1em .5em;border-radius:.3em;margin-left:.5em;\
vertical-align:middle}.info{background:#e8eef8}.pass{background:#d9f2d9}\
.fail{background:#f8d7d7}figure{margin:1em 0}figure svg{max-width:100%;height:auto}\
nav li{margin:.2em 0}td.met{background:#d9f2d9}td.not-met{background:#f8d7d7}\
td.not-measured{background:#eee}td.indicative{background:#fdf3d6}";

/// The whole `index.html`. Every piece of report text goes through [`escape_html`]; the
/// SVGs are inlined as they are (the plotting code escapes the text inside them).
pub fn render_html(report: &Report) -> String {
    let mut html = String::new();
    let title = escape_html(&report.title);
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{title}</h1>\n\
         <p class=\"meta\">Generated {}{}{}.</p>\n",
        escape_html(&report.generated),
        if report.quick {
            " with <code>--quick</code> (reduced sizes: numbers are indicative only)"
        } else {
            ""
        },
        match report
            .sections
            .iter()
            .filter(|s| s.earlier.is_some())
            .count()
        {
            0 => String::new(),
            n => format!(
                "; {n} section(s) carried over from earlier runs, each marked with when it ran"
            ),
        }
    );
    html.push_str("<nav><ul>\n");
    for section in &report.sections {
        let _ = writeln!(
            html,
            "<li><a href=\"#{}\">{}</a> {}{}</li>",
            escape_html(&section.id),
            escape_html(&section.title),
            verdict_badge(section.verdict),
            section
                .earlier
                .as_ref()
                .map_or(String::new(), |earlier| format!(
                    " <span class=\"meta\">({})</span>",
                    escape_html(&carried_note(earlier))
                ))
        );
    }
    html.push_str("</ul></nav>\n");
    if !report.sections.is_empty() {
        html.push_str(BADGE_LEGEND);
    }
    render_headlines(&mut html, report);
    for section in &report.sections {
        render_section(&mut html, section);
    }
    html.push_str("</body>\n</html>\n");
    html
}

/// The first screen: every section's headline claims, ours beside them, and the verdict, each
/// row linking to its section.
fn render_headlines(html: &mut String, report: &Report) {
    let rows: Vec<(&Section, &Headline)> = report
        .sections
        .iter()
        .flat_map(|section| {
            section
                .headlines
                .iter()
                .map(move |headline| (section, headline))
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    html.push_str(
        "<table class=\"headlines\">\n<caption>What was reproduced: each system's headline \
         claims, ours, and the verdict</caption>\n<tr><th>System</th><th>Claim</th>\
         <th>Ours</th><th>Verdict</th></tr>\n",
    );
    // A section's rows share one system cell (a section of thirteen goals repeated its long
    // title thirteen times down the first screen).
    let mut previous: Option<&str> = None;
    for (section, headline) in rows {
        let system = if previous == Some(section.id.as_str()) {
            String::new()
        } else {
            format!(
                "<td rowspan=\"{}\"><a href=\"#{}\">{}</a></td>",
                section.headlines.len(),
                escape_html(&section.id),
                escape_html(&section.title)
            )
        };
        previous = Some(section.id.as_str());
        let _ = writeln!(
            html,
            "<tr>{system}<td>{}</td><td>{}</td><td class=\"claim {}\">{}</td></tr>",
            escape_html(&headline.claim),
            escape_html(&headline.ours),
            headline.verdict.label().replace(' ', "-"),
            headline.verdict.label()
        );
    }
    html.push_str("</table>\n");
    html.push_str(VERDICT_LEGEND);
}

/// What a section's badge means. Without it a reader takes a section's PASS for its paper's
/// claims met, beside headline rows of the same section saying "not met".
const BADGE_LEGEND: &str = "<p class=\"meta\">Section badges: <b>PASS</b> / <b>FAIL</b>: the \
section's correctness checks (crash images recovered, results equal to the reference \
program's, a killed run resumed) held or not, or (FAIL) the section or a run of it could not \
run; <b>INFO</b>: measurements only. Neither judges performance: the claims, where a \
section has any, are judged in the table of claims.</p>\n";

/// What each verdict of the first-screen table means.
const VERDICT_LEGEND: &str = "<p class=\"meta\">Verdicts: <b>met</b> / <b>not met</b>: ours \
judged against the claim's number; <b>not measured</b>: this run did not measure it (its \
plan, a missing tool or hardware); <b>indicative</b>: measured at reduced sizes \
(<code>--quick</code>, or a <code>sim reproduce --transactions</code> plan below the full \
plan's), which cannot judge the claim, so no verdict.</p>\n";

fn verdict_badge(verdict: Verdict) -> String {
    format!(
        "<span class=\"verdict {}\">{}</span>",
        verdict.label().to_ascii_lowercase(),
        verdict.label()
    )
}

fn render_section(html: &mut String, section: &Section) {
    let _ = writeln!(
        html,
        "<section id=\"{}\">\n<h2>{}{}</h2>",
        escape_html(&section.id),
        escape_html(&section.title),
        verdict_badge(section.verdict)
    );
    if let Some(earlier) = &section.earlier {
        let _ = writeln!(
            html,
            "<p class=\"meta\">{}: this run did not run it again.</p>",
            escape_html(&upper_first(&carried_note(earlier)))
        );
    }
    if !section.summary.is_empty() {
        html.push_str("<ul>\n");
        for line in &section.summary {
            let _ = writeln!(html, "<li>{}</li>", escape_html(line));
        }
        html.push_str("</ul>\n");
    }
    for table in &section.tables {
        render_table(html, table);
    }
    for plot in &section.plots {
        let _ = writeln!(
            html,
            "<figure>\n{}\n<figcaption>{} (<a href=\"{}\">SVG</a>)</figcaption>\n</figure>",
            plot.svg.trim(),
            escape_html(&plot.title),
            escape_html(&section.plot_file(plot))
        );
    }
    let _ = writeln!(
        html,
        "<p class=\"meta\">Data: <a href=\"{0}.json\">{0}.json</a> (its fields: \
         <code>docs/bench-json.md</code>, \"The evaluation's JSON\")</p>\n</section>",
        escape_html(&section.id)
    );
}

/// "carried over from the run of 2026-11-20T10:00:00Z (quick)".
pub fn carried_note(earlier: &Earlier) -> String {
    format!(
        "carried over from the run of {}{}",
        earlier.generated,
        if earlier.quick { " (--quick)" } else { "" }
    )
}

fn upper_first(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or(String::new(), |first| {
        first.to_uppercase().chain(chars).collect()
    })
}

fn render_table(html: &mut String, table: &Table) {
    let _ = writeln!(
        html,
        "<table>\n<caption>{}</caption>",
        escape_html(&table.title)
    );
    html.push_str("<tr>");
    for column in &table.columns {
        let _ = write!(html, "<th>{}</th>", escape_html(column));
    }
    html.push_str("</tr>\n");
    for cells in &table.rows {
        html.push_str("<tr>");
        for cell in cells {
            // Numbers are right-aligned so their digits line up.
            let class = if crate::cells::is_numeric(cell) {
                " class=\"num\""
            } else {
                ""
            };
            let _ = write!(html, "<td{class}>{}</td>", escape_html(cell));
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_number_is_right_aligned_with_its_column() {
        let mut table = Table::new("ns per update (* fastest)", &["bytes", "packed", "mode"]);
        table.push(vec!["4".into(), "110.4 *".into(), "packed".into()]);
        table.push(vec!["32".into(), "1239.3".into(), "packed".into()]);
        table.push(vec!["64".into(), "107.4 ~".into(), "packed".into()]);
        let mut html = String::new();
        render_table(&mut html, &table);
        assert!(html.contains("<td class=\"num\">110.4 *</td>"), "{html}");
        assert!(html.contains("<td class=\"num\">107.4 ~</td>"), "{html}");
        assert!(html.contains("<td class=\"num\">1239.3</td>"), "{html}");
        assert!(html.contains("<td>packed</td>"), "{html}");
    }

    fn sample_section(id: &str) -> Section {
        let mut table = Table::new("Costs <ns>", &["name", "value"]);
        table.push(vec!["a & b".into(), "<script>alert(1)</script>".into()]);
        Section {
            id: id.to_owned(),
            title: "Title with \"quotes\" & <tags>".into(),
            verdict: Verdict::Pass,
            headlines: vec![Headline::new(
                "Paper <X>: 2× faster",
                "1.9×",
                ClaimVerdict::Met,
            )],
            summary: vec!["x < y && y > z".into()],
            tables: vec![table],
            plots: vec![Plot {
                id: "bars".into(),
                title: "Bars 'n' lines".into(),
                svg: "<svg xmlns=\"http://www.w3.org/2000/svg\"></svg>".into(),
            }],
            json: json!({ "answer": 42 }),
            earlier: None,
        }
    }

    fn sample_report() -> Report {
        Report {
            title: "Ferrite <evaluation>".into(),
            generated: "2025-01-01T00:00:00Z".into(),
            quick: true,
            sections: vec![sample_section("first"), sample_section("second")],
        }
    }

    #[test]
    fn escapes_every_special_character() {
        assert_eq!(
            escape_html(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(escape_html("plain text"), "plain text");
    }

    #[test]
    fn html_escapes_report_text_but_inlines_svg() {
        let html = render_html(&sample_report());
        assert!(!html.contains("<script>"), "table cell was not escaped");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("x &lt; y &amp;&amp; y &gt; z"));
        assert!(html.contains("Title with &quot;quotes&quot; &amp; &lt;tags&gt;"));
        assert!(html.contains("<title>Ferrite &lt;evaluation&gt;</title>"));
        assert!(html.contains("<caption>Costs &lt;ns&gt;</caption>"));
        assert!(html.contains("<svg xmlns=\"http://www.w3.org/2000/svg\"></svg>"));
        assert!(html.contains("href=\"first-bars.svg\""));
        assert_eq!(html.matches("<section id=").count(), 2);
    }

    #[test]
    fn headlines_come_first_and_link_to_their_sections() {
        let html = render_html(&sample_report());
        let table = html
            .find("class=\"headlines\"")
            .expect("a first-screen table");
        let first_section = html.find("<section id=").expect("sections");
        assert!(table < first_section, "the headline table opens the report");
        assert!(html.contains("<a href=\"#first\">"));
        assert!(html.contains("Paper &lt;X&gt;: 2× faster"));
        assert!(html.contains("<td class=\"claim met\">met</td>"));
    }

    /// A section's headline rows share one cell naming it, spanning them all.
    #[test]
    fn a_sections_headlines_name_it_once() {
        let mut report = sample_report();
        report.sections[0]
            .headlines
            .push(Headline::new("Paper <Y>", "3×", ClaimVerdict::NotMet));
        let html = render_html(&report);
        assert_eq!(
            html.matches("<a href=\"#first\">").count(),
            2,
            "nav and one cell"
        );
        assert!(
            html.contains("<td rowspan=\"2\"><a href=\"#first\">"),
            "{html}"
        );
        assert!(
            html.contains("<td rowspan=\"1\"><a href=\"#second\">"),
            "{html}"
        );
        let rows = html
            .split("<tr>")
            .filter(|row| row.contains("class=\"claim "))
            .count();
        assert_eq!(rows, 3, "every headline keeps its row");
    }

    /// The badges beside the sections say what they judge, before the first screen's
    /// verdicts (a PASS beside "not met" rows reads as a contradiction otherwise).
    #[test]
    fn the_section_badges_are_explained_before_the_headlines() {
        let html = render_html(&sample_report());
        let legend = html
            .find("Section badges: <b>PASS</b>")
            .expect("badge legend");
        let table = html.find("class=\"headlines\"").expect("headline table");
        assert!(legend < table, "the legend precedes the verdicts");
        assert!(html[legend..].contains("Neither judges performance"));
    }

    #[test]
    fn writes_every_file_and_json_round_trips() {
        let dir = tempfile::tempdir().expect("temp dir");
        let written = write(&sample_report(), dir.path()).expect("report written");
        let names: Vec<String> = written
            .iter()
            .map(|path| {
                path.file_name()
                    .expect("file name")
                    .to_string_lossy()
                    .into()
            })
            .collect();
        assert_eq!(
            names,
            [
                "first.json",
                "first-bars.svg",
                "second.json",
                "second-bars.svg",
                "report.json",
                "index.html"
            ]
        );
        let text = std::fs::read_to_string(dir.path().join("report.json")).expect("read");
        let report: Value = serde_json::from_str(&text).expect("report.json is JSON");
        assert_eq!(report["sections"][1]["data"]["answer"], 42);
        assert_eq!(report["sections"][0]["verdict"], "pass");
        assert_eq!(report["sections"][0]["plots"][0]["file"], "first-bars.svg");
        assert_eq!(report["sections"][0]["tables"][0]["rows"][0][0], "a & b");
        // Each section file says whether its run was quick, as report.json does.
        assert_eq!(report["quick"], true);
        let text = std::fs::read_to_string(dir.path().join("first.json")).expect("read");
        let first: Value = serde_json::from_str(&text).expect("first.json is JSON");
        assert_eq!(first["quick"], true);
    }

    #[test]
    fn files_of_sections_an_earlier_report_wrote_and_this_one_does_not_are_removed() {
        let dir = tempfile::tempdir().expect("temp dir");
        write(&sample_report(), dir.path()).expect("first report");
        std::fs::write(dir.path().join("notes.txt"), "mine").expect("a file of the user");
        let mut later = sample_report();
        later.sections.truncate(1);
        write(&later, dir.path()).expect("second report");
        for gone in ["second.json", "second-bars.svg"] {
            assert!(!dir.path().join(gone).exists(), "{gone} left behind");
        }
        for kept in ["first.json", "first-bars.svg", "notes.txt", "index.html"] {
            assert!(dir.path().join(kept).exists(), "{kept} removed");
        }
    }

    #[test]
    fn refuses_duplicate_or_unsafe_ids() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut report = sample_report();
        report.sections[1].id = "first".into();
        assert!(write(&report, dir.path()).is_err());
        report.sections[1].id = "../escape".into();
        assert!(write(&report, dir.path()).is_err());
        assert_eq!(
            std::fs::read_dir(dir.path()).expect("list").count(),
            0,
            "nothing written for a rejected report"
        );
    }

    #[test]
    fn a_quick_headline_is_indicative_unless_it_was_not_measured() {
        let mut rows = vec![
            Headline::new("a", "1×", ClaimVerdict::Met),
            Headline::new("b", "2×", ClaimVerdict::NotMet),
            Headline::new("c", "not in this plan", ClaimVerdict::NotMeasured),
        ];
        Headline::all_indicative_if(&mut rows, false);
        assert_eq!(
            rows[0].verdict,
            ClaimVerdict::Met,
            "a full run keeps its verdicts"
        );
        Headline::all_indicative_if(&mut rows, true);
        let verdicts: Vec<ClaimVerdict> = rows.iter().map(|h| h.verdict).collect();
        assert_eq!(
            verdicts,
            [
                ClaimVerdict::Indicative,
                ClaimVerdict::Indicative,
                ClaimVerdict::NotMeasured
            ]
        );
        let mut report = sample_report();
        report.sections[0].headlines = rows;
        let html = render_html(&report);
        assert!(html.contains("<td class=\"claim indicative\">indicative</td>"));
        assert!(
            html.contains("<b>indicative</b>: measured at"),
            "the legend says why"
        );
        assert_eq!(
            serde_json::to_value(ClaimVerdict::Indicative).expect("serialises"),
            "indicative"
        );
    }

    #[test]
    fn failed_section_carries_the_error() {
        let error = anyhow::anyhow!("disk on fire").context("creating pool");
        let section = Section::failed("boom", "Boom", &error);
        assert_eq!(section.verdict, Verdict::Fail);
        assert_eq!(
            section.summary,
            ["could not run: creating pool: disk on fire"]
        );
    }
}
