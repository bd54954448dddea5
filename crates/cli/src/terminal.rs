//! Tables for the terminal, fitted to its width: `bench` and `eval` print tables whose text
//! cells (claims, measurements, configurations) would otherwise make rows of 200 columns and
//! more, which a terminal wraps into unreadable fragments. Cells wrap at spaces inside their
//! column; no word (so no number) is ever split. A table whose longest words alone are wider
//! than the terminal is shown in parts of its columns, each part repeating the first
//! (the row's name), so every row of every part is whole; only a table whose first column and
//! any one other are too wide together is printed as it is, with a note saying so.

use comfy_table::{ColumnConstraint, ContentArrangement, Table, TableStyle, Width};

/// Width used when neither `COLUMNS` nor the terminal gives one (output piped to a file or a
/// pager): a common wide terminal.
pub const DEFAULT_WIDTH: u16 = 120;

/// The narrowest width tables are fitted to.
const MIN_WIDTH: u16 = 40;

/// The width to fit tables to: `COLUMNS` when it is set to a number, else the width of the
/// terminal on stdout, else [`DEFAULT_WIDTH`]; never below [`MIN_WIDTH`]. A `COLUMNS` that is
/// not a width is ignored with one warning on stderr (as GNU `ls` does), not silently.
pub fn width() -> u16 {
    let columns = match columns_setting(std::env::var_os("COLUMNS").as_deref()) {
        Ok(columns) => columns,
        Err(warning) => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| eprintln!("ferrite: {warning}"));
            None
        }
    };
    columns
        .or_else(|| {
            console::Term::stdout()
                .size_checked()
                .map(|(_, columns)| columns)
        })
        .unwrap_or(DEFAULT_WIDTH)
        .max(MIN_WIDTH)
}

/// The width `COLUMNS` asks for: `None` when it is unset or empty (as a shell leaves it),
/// an error naming the value when it is not a width from 1 to 65535.
fn columns_setting(value: Option<&std::ffi::OsStr>) -> Result<Option<u16>, String> {
    let Some(value) = value else {
        return Ok(None);
    };
    let text = value.to_string_lossy();
    if text.trim().is_empty() {
        return Ok(None);
    }
    match text.trim().parse::<u16>() {
        Ok(columns) if columns > 0 => Ok(Some(columns)),
        _ => Err(format!(
            "ignoring COLUMNS={text:?}: not a width from 1 to 65535; using the terminal's \
             width instead ({DEFAULT_WIDTH} columns when output is not a terminal)"
        )),
    }
}

/// Makes `table` wrap its cells to fit `width` columns, each column at least as wide as its
/// longest word (a number is one word), so wrapping never splits a number. Returns whether
/// it fits; a table whose longest words alone are wider is left unwrapped (whole rows, wider
/// than `width`), as splitting them would break numbers.
pub fn fit(table: &mut Table, width: u16) -> bool {
    let mut longest: Vec<usize> = vec![0; table.column_count()];
    let header = table.header().map(|row| {
        row.cell_iter()
            .map(|cell| cell.content())
            .collect::<Vec<_>>()
    });
    let rows = table.row_iter().map(|row| {
        row.cell_iter()
            .map(|cell| cell.content())
            .collect::<Vec<_>>()
    });
    for cells in header.into_iter().chain(rows) {
        for (index, text) in cells.iter().enumerate() {
            let word = text
                .split_whitespace()
                .map(|w| w.chars().count())
                .max()
                .unwrap_or(0);
            if let Some(slot) = longest.get_mut(index) {
                *slot = (*slot).max(word);
            }
        }
    }
    // Each column has a space either side and a border line on its left, the last one a
    // border on its right too.
    let narrowest: usize = longest.iter().map(|word| word + 3).sum::<usize>() + 1;
    if narrowest > usize::from(width) {
        table.set_content_arrangement(ContentArrangement::Disabled);
        return false;
    }
    table
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(width);
    for (column, word) in table.column_iter_mut().zip(longest) {
        // comfy-table's lower boundary counts the column's padding too.
        let word = u16::try_from(word)
            .unwrap_or(u16::MAX)
            .saturating_add(column.padding_width());
        column.set_constraint(ColumnConstraint::LowerBoundary(Width::Fixed(word)));
    }
    true
}

/// The header and rows of `table` as text.
fn cells_of(table: &Table) -> (Vec<String>, Vec<Vec<String>>) {
    let texts = |row: &comfy_table::Row| row.cell_iter().map(|cell| cell.content()).collect();
    let header = table.header().map(texts).unwrap_or_default();
    let rows = table.row_iter().map(texts).collect();
    (header, rows)
}

/// A table of `header` and `rows`, the columns that hold only numbers right-aligned.
fn table_of(header: &[String], rows: &[Vec<String>], style: TableStyle) -> Table {
    let mut table = Table::new();
    table.load_style(style).set_header(header);
    for row in rows {
        table.add_row(row);
    }
    for (index, column) in table.column_iter_mut().enumerate() {
        let numeric = rows.iter().all(|row| {
            row.get(index)
                .is_some_and(|cell| crate::cells::is_numeric(cell))
        });
        if numeric {
            column.set_cell_alignment(comfy_table::CellAlignment::Right);
        }
    }
    table
}

/// `columns` of every row (and of the header).
fn pick(cells: &[Vec<String>], columns: &[usize]) -> Vec<Vec<String>> {
    cells
        .iter()
        .map(|row| {
            columns
                .iter()
                .map(|&c| row.get(c).cloned().unwrap_or_default())
                .collect()
        })
        .collect()
}

/// `table` fitted to `width`, rendered. A table whose longest words are wider is split into
/// parts of its columns that fit, each starting with the first column; when even that cannot
/// fit, the table is printed whole with a note saying so and where it reads better
/// (`elsewhere`, e.g. the HTML report).
pub fn render(mut table: Table, width: u16, elsewhere: Option<&str>) -> String {
    let style = table.style();
    let fits = fit(&mut table, width);
    if fits {
        return table.to_string();
    }
    let (header, rows) = cells_of(&table);
    if let Some(parts) = split(&header, &rows, width, style) {
        let count = parts.len();
        let mut text = format!(
            "({} columns, wider than the terminal's {width}: in {count} parts, each repeating \
             the first column)",
            header.len()
        );
        for part in parts {
            text.push('\n');
            text.push_str(&part);
        }
        return text;
    }
    let text = table.to_string();
    let widest = text
        .lines()
        .map(|line| line.chars().count())
        .max()
        .unwrap_or(0);
    if widest <= usize::from(width) {
        return text;
    }
    let mut note = format!(
        "{text}\n(this table needs {widest} columns, more than the terminal's {width}: widen \
         the terminal or set COLUMNS"
    );
    if let Some(place) = elsewhere {
        note.push_str(&format!("; the whole table is in {place}"));
    }
    note.push(')');
    note
}

/// The table in parts of consecutive columns, each part the first column and as many more as
/// fit `width` whole; `None` when the first column and one other do not fit together.
fn split(
    header: &[String],
    rows: &[Vec<String>],
    width: u16,
    style: TableStyle,
) -> Option<Vec<String>> {
    let all: Vec<Vec<String>> = std::iter::once(header.to_vec())
        .chain(rows.iter().cloned())
        .collect();
    let render_part = |columns: &[usize]| -> Option<String> {
        let mut cells = pick(&all, columns);
        let part_header = cells.remove(0);
        let mut table = table_of(&part_header, &cells, style);
        fit(&mut table, width).then(|| table.to_string())
    };
    let mut parts = Vec::new();
    let mut columns = vec![0];
    for next in 1..header.len() {
        let mut wider = columns.clone();
        wider.push(next);
        if render_part(&wider).is_some() {
            columns = wider;
            continue;
        }
        if columns.len() == 1 {
            return None;
        }
        parts.push(render_part(&columns)?);
        columns = vec![0, next];
        render_part(&columns)?;
    }
    if columns.len() > 1 || parts.is_empty() {
        parts.push(render_part(&columns)?);
    }
    Some(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wide_table() -> Table {
        let mut table = Table::new();
        table.set_header(vec!["system", "claim", "ours", "verdict"]);
        table.add_row(vec![
            "NVthreads (EuroSys'17): Phoenix kernels, page micro-benchmark, k-means recovery",
            "Page micro-benchmark: NVthreads 3–30× faster than fine-grained tracking (5–100 % \
             of each page, 1000 ns per page) in the paper, measured at every latency",
            "1.23× at 5 %, 12345.678 at 100 %; lowest ratio mvcc / peer 0.912, against redo",
            "indicative",
        ]);
        table
    }

    #[test]
    fn a_wide_table_wraps_within_the_width_and_keeps_every_number_whole() {
        for width in [80, 120] {
            let text = render(wide_table(), width, Some("index.html"));
            for line in text.lines() {
                assert!(
                    line.chars().count() <= usize::from(width),
                    "{width}: {line}"
                );
            }
            for number in ["12345.678", "0.912", "3–30×", "1000", "5–100", "indicative"] {
                assert!(text.contains(number), "{width}: {number} split in\n{text}");
            }
            assert!(!text.contains("needs"), "{text}");
        }
    }

    /// The columns of `ferrite bench`'s table at 120 columns: the headings wrap at spaces,
    /// never inside a word.
    #[test]
    fn bench_headings_wrap_between_words() {
        let mut table = Table::new();
        table.set_header(vec![
            "engine",
            "Kops/s (median)",
            "× redo",
            "p50 µs",
            "p99 µs",
            "fences/commit",
            "flushes/commit",
            "PM B/op",
            "WA (ours)",
            "WA TimeStone (new objs / artifact)",
            "emulated PM µs/op",
        ]);
        table.add_row(vec![
            "mvcc",
            "1118.4",
            "0.80",
            "0.40",
            "5.03",
            "1.00",
            "2.39",
            "26",
            "1.54",
            "0.91 / 0.64",
            "0.05",
        ]);
        let text = render(table, 120, None);
        for word in [
            "fences/commit",
            "flushes/commit",
            "(median)",
            "emulated",
            "artifact)",
        ] {
            assert!(text.contains(word), "{word} split in\n{text}");
        }
        assert!(
            text.lines().all(|line| line.chars().count() <= 120),
            "{text}"
        );
    }

    /// A table of many numeric columns is shown in parts, each row whole in each part, the
    /// first column repeated, every number kept.
    #[test]
    fn a_table_of_many_columns_is_shown_in_parts() {
        let mut table = Table::new();
        table.load_style(comfy_table::presets::UTF8_FULL_CONDENSED);
        let header: Vec<String> = std::iter::once("engine".to_owned())
            .chain((0..12).map(|i| format!("column{i}/commit")))
            .collect();
        table.set_header(header);
        for engine in ["redo", "raw:volatile"] {
            let mut row = vec![engine.to_owned()];
            row.extend((0..12).map(|i| format!("{}.25 ({i}.5–{i}.75)", 1000 + i)));
            table.add_row(row);
        }
        let text = render(table, 120, Some("index.html"));
        assert!(text.starts_with("(13 columns, wider than"), "{text}");
        for line in text.lines() {
            assert!(line.chars().count() <= 120, "{line}");
        }
        for i in 0..12 {
            assert!(text.contains(&format!("{}.25", 1000 + i)), "{i}: {text}");
            assert!(text.contains(&format!("({i}.5–{i}.75)")), "{i}: {text}");
        }
        let parts = text.matches("raw:volatile").count();
        assert!(parts >= 2, "{text}");
        assert_eq!(text.matches("┌").count(), parts, "one table per part");
    }

    #[test]
    fn a_table_that_cannot_fit_says_so() {
        let mut table = Table::new();
        table.set_header(vec!["a", "b"]);
        table.add_row(vec!["x".repeat(60), "y".repeat(60)]);
        let text = render(table, 80, Some("index.html"));
        assert!(
            text.contains("more than the terminal's 80") && text.contains("index.html"),
            "{text}"
        );
        assert!(text.contains(&"x".repeat(60)), "the word is not split");
        // A table that just fits its longest words wraps into the width.
        let mut table = Table::new();
        table.set_header(vec!["a", "b"]);
        table.add_row(vec!["x".repeat(36), format!("{} 1.5", "y".repeat(36))]);
        let text = render(table, 80, None);
        assert!(!text.contains("needs"), "{text}");
        assert!(
            text.lines().all(|line| line.chars().count() <= 80),
            "{text}"
        );
    }

    #[test]
    fn columns_that_are_not_a_width_are_named_not_ignored() {
        use std::ffi::OsStr;
        assert_eq!(columns_setting(None), Ok(None));
        assert_eq!(columns_setting(Some(OsStr::new(""))), Ok(None));
        assert_eq!(columns_setting(Some(OsStr::new(" 80 "))), Ok(Some(80)));
        for bad in ["abc", "0", "-5", "70000", "8O"] {
            let warning = columns_setting(Some(OsStr::new(bad))).expect_err(bad);
            assert!(
                warning.contains("COLUMNS") && warning.contains(bad),
                "{warning}"
            );
        }
    }
}
