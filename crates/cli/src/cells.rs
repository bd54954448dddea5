//! Table cells of benchmark measurements, shared by `ferrite bench` and the evaluation's
//! engines section, so that one quantity reads the same in both.

use bench::engines::EngineRun;
use bench::runner::Measurement;

/// The marks the log study's tables put after a number: ` *` the clearly fastest mode, ` ~`
/// the fastest median within another mode's spread.
const MARKS: [&str; 2] = [" *", " ~"];

/// Whether a table cell holds a number, alone or followed by one of [`MARKS`] (`"111.1 *"`,
/// `"107.4 ~"`): such cells are right-aligned so their digits line up, marked cells included.
pub fn is_numeric(cell: &str) -> bool {
    MARKS
        .iter()
        .find_map(|mark| cell.strip_suffix(mark))
        .unwrap_or(cell)
        .parse::<f64>()
        .is_ok()
}

/// Two decimals, or "n/a" when the quantity could not be measured (PMDK's stores bypass
/// Ferrite's counters; read-only runs have no commits).
pub fn optional(value: Option<f64>) -> String {
    value.map_or("n/a".to_owned(), |v| format!("{v:.2}"))
}

/// Operations per second as thousands, one decimal.
pub fn kops(ops_per_s: f64) -> String {
    format!("{:.1}", ops_per_s / 1e3)
}

/// A throughput summary as "median (min–max)" in Kops/s; the median alone for one run,
/// whose range would only repeat it ("1906.8 (1906.8–1906.8)").
pub fn kops_spread(summary: &bench::Summary) -> String {
    if summary.runs <= 1 {
        return kops(summary.median);
    }
    format!(
        "{} ({}–{})",
        kops(summary.median),
        kops(summary.min),
        kops(summary.max)
    )
}

/// Nanoseconds as microseconds, two decimals.
pub fn micros(ns: u64) -> String {
    format!("{:.2}", ns as f64 / 1e3)
}

/// `value / base`, when there is a positive base.
pub fn ratio(value: f64, base: Option<f64>) -> Option<f64> {
    base.filter(|&b| b > 0.0).map(|b| value / b)
}

/// TimeStone's write amplification: "1.06 / 0.75" (counting new objects / as TimeStone's
/// artifact counts) for an engine with a version log, one number for a logging engine's
/// analogue (the variants agree), "n/a" when nothing was counted.
pub fn timestone_amplification(m: &Measurement) -> String {
    match m.timestone_amplification() {
        None => "n/a".into(),
        Some(ts) if ts.version_log => {
            format!("{:.2} / {:.2}", ts.counting_new_objects, ts.artifact)
        }
        Some(ts) => format!("{:.2}", ts.artifact),
    }
}

/// Whether `m`'s engine stores through Ferrite's counting seam: every engine but PMDK (its
/// own library) and `mem` (no pool). Decided by the engine, not by what it stored: a
/// read-only run of redo was counted, and counted nothing, which is a measurement (0 bytes,
/// 0 fences), not "not measured". A name no engine has falls back to whether anything was
/// counted.
pub fn traffic_counted(m: &Measurement) -> bool {
    match bench::choice::EngineChoice::parse(&m.engine) {
        Some(bench::choice::EngineChoice::Pmdk | bench::choice::EngineChoice::Mem) => false,
        Some(_) => true,
        None => m.counters.pm_bytes() > 0 || m.counters.fences > 0,
    }
}

/// PM bytes stored per operation, "n/a" for an engine whose stores are not counted.
pub fn pm_bytes_per_op(m: &Measurement) -> String {
    if traffic_counted(m) {
        bytes_per_op(m.traffic.pm_bytes_per_op)
    } else {
        "n/a".to_owned()
    }
}

/// Bytes per operation: whole bytes, with one decimal below 10 (a read-mostly workload's
/// 1.4 bytes would otherwise read as 1, and 0.4 as 0).
pub fn bytes_per_op(bytes: f64) -> String {
    if bytes < 10.0 {
        format!("{bytes:.1}")
    } else {
        format!("{bytes:.0}")
    }
}

/// "1 thread", "2 threads".
pub fn threads_text(threads: usize) -> String {
    match threads {
        1 => "1 thread".to_owned(),
        n => format!("{n} threads"),
    }
}

/// "bst 20%, 2 threads": where a number was measured, for summary lines.
pub fn place(run: &EngineRun) -> String {
    format!("{}, {}", run.label, threads_text(run.threads()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_run_shows_no_range() {
        let one = bench::Summary::of(&[1_906_800.0]).expect("a run");
        assert_eq!(kops_spread(&one), "1906.8");
        let three = bench::Summary::of(&[1_000.0, 3_000.0, 2_000.0]).expect("runs");
        assert_eq!(kops_spread(&three), "2.0 (1.0–3.0)");
    }

    #[test]
    fn small_byte_counts_keep_a_decimal() {
        assert_eq!(bytes_per_op(0.44), "0.4");
        assert_eq!(bytes_per_op(9.94), "9.9");
        assert_eq!(bytes_per_op(10.0), "10");
        assert_eq!(bytes_per_op(532.4), "532");
    }
    #[test]
    fn a_marked_number_is_a_number_and_words_are_not() {
        assert!(is_numeric("111.1"));
        assert!(is_numeric("111.1 *"));
        assert!(
            is_numeric("107.4 ~"),
            "a tie's fastest median is a number too"
        );
        assert!(!is_numeric(" ~"));
        assert!(is_numeric("-4"));
        assert!(!is_numeric("n/a"));
        assert!(!is_numeric("packed"));
        assert!(!is_numeric("*"));
        assert!(!is_numeric(" *"));
        assert!(!is_numeric("1.06 / 0.75"));
    }
}
