//! Calibration statistics of a trace, to compare with Silo's workload facts (§III-C, Fig. 4,
//! Fig. 13): most transactions write < 0.5 KB; after ignoring silent stores and merging
//! stores to the same word, at most ~20 live log entries per transaction (Hash the maximum);
//! ~90 % silent word stores in Array; −64 % log entries on average from ignore + merge.
//!
//! A "store" is one [`Event::Store`] piece (at most one 8-byte word); its bytes are its size.
//! A transaction's live log entries are the distinct words it changes (a store with
//! `old != new`): Silo's log generator drops silent stores, and its log buffer merges a
//! word's later stores into the word's entry.

use std::collections::HashSet;
use trace::{Event, Trace};

/// Half a kilobyte: Silo's Fig. 4 threshold.
pub const HALF_KB: u64 = 512;

/// Entries of Silo's per-core log buffer (680 B): transactions with more live entries
/// overflow it.
pub const SILO_LOG_ENTRIES: u64 = 20;

/// Upper bounds (inclusive) of the bytes-per-transaction histogram; the last bin is open.
pub const BYTE_BINS: [u64; 6] = [64, 128, 256, 512, 1024, 4096];

/// Distribution of a per-transaction count.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Maximum.
    pub max: u64,
}

impl Summary {
    /// The summary of `values` (sorted in place).
    pub fn of(values: &mut [u64]) -> Self {
        if values.is_empty() {
            return Summary::default();
        }
        values.sort_unstable();
        let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
        Summary {
            mean: values.iter().sum::<u64>() as f64 / values.len() as f64,
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            max: values[values.len() - 1],
        }
    }
}

/// One bin of the bytes-per-transaction histogram.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Bin {
    /// Inclusive upper bound in bytes (`None`: unbounded).
    pub up_to: Option<u64>,
    /// Transactions in the bin.
    pub transactions: u64,
}

/// The calibration report of one trace (all cores together).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CalibrationReport {
    /// Workload name from the trace metadata.
    pub workload: String,
    /// Streams (cores).
    pub cores: usize,
    /// Committed transactions.
    pub transactions: u64,
    /// Events of every stream.
    pub events: u64,
    /// The largest per-core data set after setup (from the metadata written by
    /// [`crate::generate()`]; `None` for traces without it).
    pub data_bytes_per_core: Option<u64>,
    /// Loads per transaction (line-bounded pieces).
    pub loads_per_tx: Summary,
    /// Stores per transaction (word pieces).
    pub stores_per_tx: Summary,
    /// Bytes written per transaction (sum of store sizes).
    pub bytes_per_tx: Summary,
    /// Share of transactions writing fewer than 512 bytes.
    pub share_below_half_kb: f64,
    /// Histogram of bytes written per transaction over [`BYTE_BINS`].
    pub bytes_histogram: Vec<Bin>,
    /// Share of stores that leave their bytes unchanged.
    pub silent_fraction: f64,
    /// Live log entries per transaction after ignoring silent stores and merging same-word
    /// stores (distinct changed words).
    pub live_entries_per_tx: Summary,
    /// Share of transactions with more live entries than Silo's 20-entry log buffer holds.
    pub share_over_log_buffer: f64,
    /// `1 - live entries / stores`: the log-entry reduction of ignore + merge.
    pub entry_reduction: f64,
    /// Distinct 64 B lines stored to per transaction.
    pub lines_written_per_tx: Summary,
    /// Compute instructions per transaction (inside and just before it).
    pub compute_per_tx: f64,
}

/// Counts of the running transaction.
#[derive(Default)]
struct TxCounts {
    loads: u64,
    stores: u64,
    bytes: u64,
    silent: u64,
    words: HashSet<u64>,
    lines: HashSet<u64>,
}

/// Per-transaction values of every transaction of a trace.
#[derive(Default)]
struct Samples {
    loads: Vec<u64>,
    stores: Vec<u64>,
    bytes: Vec<u64>,
    live: Vec<u64>,
    lines: Vec<u64>,
    silent: u64,
    compute: u64,
}

impl Samples {
    fn close(&mut self, tx: &mut TxCounts) {
        self.loads.push(tx.loads);
        self.stores.push(tx.stores);
        self.bytes.push(tx.bytes);
        self.live.push(tx.words.len() as u64);
        self.lines.push(tx.lines.len() as u64);
        self.silent += tx.silent;
        tx.words.clear();
        tx.lines.clear();
        (tx.loads, tx.stores, tx.bytes, tx.silent) = (0, 0, 0, 0);
    }

    /// Adds the transactions of one stream.
    fn add_stream(&mut self, events: impl Iterator<Item = Event>) {
        let mut tx = TxCounts::default();
        for event in events {
            match event {
                Event::TxBegin => {}
                Event::TxEnd => self.close(&mut tx),
                Event::Load { .. } => tx.loads += 1,
                Event::Store {
                    addr,
                    size,
                    old,
                    new,
                    ..
                } => {
                    tx.stores += 1;
                    tx.bytes += u64::from(size);
                    tx.lines.insert(addr & !63);
                    if old == new {
                        tx.silent += 1;
                    } else {
                        tx.words.insert(addr & !7);
                    }
                }
                Event::Compute { instructions } => self.compute += u64::from(instructions),
            }
        }
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

fn histogram(bytes: &[u64]) -> Vec<Bin> {
    let mut bins: Vec<Bin> = BYTE_BINS
        .iter()
        .map(|&up_to| Bin {
            up_to: Some(up_to),
            transactions: 0,
        })
        .chain([Bin {
            up_to: None,
            transactions: 0,
        }])
        .collect();
    for &b in bytes {
        let index = BYTE_BINS
            .iter()
            .position(|&up_to| b <= up_to)
            .unwrap_or(BYTE_BINS.len());
        bins[index].transactions += 1;
    }
    bins
}

/// The largest entry of the metadata's `data_bytes_per_core`.
fn data_bytes(trace: &Trace) -> Option<u64> {
    let sizes = trace.meta.params.get("data_bytes_per_core")?.as_array()?;
    sizes.iter().filter_map(serde_json::Value::as_u64).max()
}

/// The calibration statistics of `trace`.
pub fn calibrate(trace: &Trace) -> CalibrationReport {
    let mut samples = Samples::default();
    for index in 0..trace.cores() {
        samples.add_stream(trace.events(index));
    }
    let transactions = samples.bytes.len() as u64;
    let stores: u64 = samples.stores.iter().sum();
    let live: u64 = samples.live.iter().sum();
    let below = samples.bytes.iter().filter(|&&b| b < HALF_KB).count() as u64;
    let over = samples
        .live
        .iter()
        .filter(|&&n| n > SILO_LOG_ENTRIES)
        .count() as u64;
    CalibrationReport {
        workload: trace.meta.workload.clone(),
        cores: trace.cores(),
        transactions,
        events: trace.total_events(),
        data_bytes_per_core: data_bytes(trace),
        share_below_half_kb: ratio(below, transactions),
        bytes_histogram: histogram(&samples.bytes),
        silent_fraction: ratio(samples.silent, stores),
        share_over_log_buffer: ratio(over, transactions),
        entry_reduction: 1.0 - ratio(live, stores),
        compute_per_tx: ratio(samples.compute, transactions),
        loads_per_tx: Summary::of(&mut samples.loads),
        stores_per_tx: Summary::of(&mut samples.stores),
        bytes_per_tx: Summary::of(&mut samples.bytes),
        live_entries_per_tx: Summary::of(&mut samples.live),
        lines_written_per_tx: Summary::of(&mut samples.lines),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trace::{Encoder, TraceMeta};

    fn trace_of(events: &[Event]) -> Trace {
        let mut encoder = Encoder::default();
        events.iter().for_each(|e| encoder.push(e));
        let mut trace = Trace::new(TraceMeta::default());
        trace.add_stream(0, encoder);
        trace
    }

    #[test]
    fn silent_stores_are_ignored_and_same_word_stores_merged() {
        let store = |addr, old, new| Event::Store {
            addr,
            size: 8,
            old,
            new,
        };
        let trace = trace_of(&[
            Event::TxBegin,
            store(64, 1, 2),
            store(64, 2, 3), // merged with the first
            store(72, 5, 5), // silent
            Event::Store {
                addr: 132,
                size: 4,
                old: 0,
                new: 9,
            },
            Event::TxEnd,
            Event::TxBegin,
            Event::Load { addr: 0, size: 64 },
            Event::TxEnd,
        ]);
        let report = calibrate(&trace);
        assert_eq!(report.transactions, 2);
        assert_eq!(report.stores_per_tx.max, 4);
        assert_eq!(report.live_entries_per_tx.max, 2);
        assert_eq!(report.live_entries_per_tx.mean, 1.0);
        assert_eq!(report.bytes_per_tx.max, 28);
        assert_eq!(report.lines_written_per_tx.max, 2);
        assert!((report.silent_fraction - 0.25).abs() < 1e-12);
        assert!((report.entry_reduction - 0.5).abs() < 1e-12);
        assert_eq!(report.share_below_half_kb, 1.0);
        assert_eq!(report.bytes_histogram[0].transactions, 2);
    }

    #[test]
    fn summaries_pick_percentiles() {
        let mut values: Vec<u64> = (1..=100).rev().collect();
        let summary = Summary::of(&mut values);
        assert_eq!((summary.p50, summary.p90, summary.max), (51, 90, 100));
        assert_eq!(summary.mean, 50.5);
        assert_eq!(Summary::of(&mut []), Summary::default());
    }
}
