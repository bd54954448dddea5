//! Timing helpers shared by Ferrite's benchmarks.
//!
//! A reported number is the median of several runs; each run times a whole batch of
//! iterations with one pair of [`Instant`] reads, so the clock's own cost is spread over the
//! batch. The median resists the odd run disturbed by an interrupt or a migration; min and max
//! are kept so a reader can see how noisy the machine was.

use serde::{Deserialize, Serialize};
use std::time::Instant;

/// The distribution of one measured quantity over repeated runs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Median of the runs (mean of the two middle runs for an even count).
    pub median: f64,
    /// Smallest run.
    pub min: f64,
    /// Largest run.
    pub max: f64,
    /// Number of runs summarised.
    pub runs: usize,
}

impl Summary {
    /// Summarises `samples`; `None` when there are none.
    pub fn of(samples: &[f64]) -> Option<Self> {
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let (&min, &max) = (sorted.first()?, sorted.last()?);
        let mid = sorted.len() / 2;
        let median = if sorted.len() % 2 == 1 {
            sorted[mid]
        } else {
            (sorted[mid - 1] + sorted[mid]) / 2.0
        };
        Some(Summary {
            median,
            min,
            max,
            runs: sorted.len(),
        })
    }

    /// Turns a time per operation in nanoseconds into a rate for operations of `bytes` bytes,
    /// in GB/s (10^9 bytes per second, which is bytes per nanosecond). The slowest run gives
    /// the lowest rate, so min and max swap.
    pub fn to_gb_per_s(&self, bytes: u64) -> Summary {
        let rate = |ns: f64| if ns > 0.0 { bytes as f64 / ns } else { 0.0 };
        Summary {
            median: rate(self.median),
            min: rate(self.max),
            max: rate(self.min),
            runs: self.runs,
        }
    }

    /// Relative spread `(max - min) / median`, a quick noise indicator (0 when the median
    /// is 0).
    pub fn spread(&self) -> f64 {
        if self.median > 0.0 {
            (self.max - self.min) / self.median
        } else {
            0.0
        }
    }
}

/// Calls `run` `runs` times (at least once) and summarises the values it returns.
pub fn median_of_runs(runs: usize, mut run: impl FnMut() -> f64) -> Summary {
    let samples: Vec<f64> = (0..runs.max(1)).map(|_| run()).collect();
    Summary::of(&samples).expect("at least one run was made, so there is a sample")
}

/// Times `body(0)`, `body(1)`, ..., `body(iterations - 1)` as one batch and returns the
/// nanoseconds per iteration. At least one iteration runs, and the batch counts as taking
/// at least one nanosecond, so the result is always positive.
pub fn ns_per_iteration(iterations: u64, mut body: impl FnMut(u64)) -> f64 {
    let iterations = iterations.max(1);
    let start = Instant::now();
    for i in 0..iterations {
        body(i);
    }
    let elapsed = start.elapsed().as_nanos().max(1);
    elapsed as f64 / iterations as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_count_is_the_middle_value() {
        let summary = Summary::of(&[5.0, 1.0, 9.0, 3.0, 7.0]).expect("samples");
        assert_eq!(
            (summary.median, summary.min, summary.max, summary.runs),
            (5.0, 1.0, 9.0, 5)
        );
    }

    #[test]
    fn median_of_even_count_averages_the_middle_pair() {
        let summary = Summary::of(&[4.0, 1.0, 2.0, 100.0]).expect("samples");
        assert_eq!(summary.median, 3.0);
        assert_eq!(summary.max, 100.0);
    }

    #[test]
    fn no_samples_no_summary() {
        assert_eq!(Summary::of(&[]), None);
    }

    #[test]
    fn median_of_runs_makes_exactly_the_requested_runs() {
        let mut calls = 0;
        let summary = median_of_runs(7, || {
            calls += 1;
            f64::from(calls)
        });
        assert_eq!(calls, 7);
        assert_eq!(summary.median, 4.0);
        assert_eq!(
            median_of_runs(0, || 1.0).runs,
            1,
            "zero runs still measures once"
        );
    }

    #[test]
    fn rate_inverts_and_swaps_extremes() {
        let ns = Summary {
            median: 32.0,
            min: 16.0,
            max: 64.0,
            runs: 3,
        };
        let rate = ns.to_gb_per_s(64);
        assert_eq!((rate.median, rate.min, rate.max), (2.0, 1.0, 4.0));
    }

    #[test]
    fn time_per_iteration_is_positive_and_runs_every_iteration() {
        let mut seen = Vec::new();
        let ns = ns_per_iteration(5, |i| seen.push(i));
        assert!(ns > 0.0);
        assert_eq!(seen, vec![0, 1, 2, 3, 4]);
    }
}
