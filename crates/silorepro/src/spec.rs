//! What to run: the paper's experiment plan as parameters.

use hwsim::{Config, DesignKind};
use serde::{Deserialize, Serialize};
use tracegen::{SiloWorkload, StoreDiscipline};

/// The experiment plan. [`ReproSpec::default`] is the full reproduction (minutes on two host
/// cores); [`ReproSpec::quick`] is the same plan on small traces (seconds, for tests).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReproSpec {
    /// Committed transactions per core in the workload traces.
    pub transactions: u64,
    /// Instance size per core (`None`: tracegen's per-workload default, larger than the LLC).
    pub keys: Option<u64>,
    /// The store discipline of the main traces (the paper-faithful PMDK-style stores by
    /// default; the sensitivity grid runs the other one too).
    pub discipline: StoreDiscipline,
    /// Workloads (the paper's seven by default).
    pub workloads: Vec<SiloWorkload>,
    /// Designs of the main comparison.
    pub designs: Vec<DesignKind>,
    /// Core counts every design runs on (the main comparison uses 1 and the largest).
    pub cores: Vec<usize>,
    /// Core count of the sensitivity sweeps (latency, entries, transaction size).
    pub sweep_cores: usize,
    /// Silo log-buffer access latencies (cycles); the first is the reference.
    pub latencies: Vec<u64>,
    /// Silo log-buffer entries per core.
    pub entries: Vec<usize>,
    /// Transaction sizes as multiples of the log buffer (mean live entries per
    /// transaction over the buffer's entries): each workload's operations are grouped into
    /// transactions of `ceil(multiple × entries / live entries per operation)` operations.
    pub size_multiples: Vec<u32>,
    /// Operations per core in each transaction-size trace (a prefix of the workload trace).
    pub size_operations: u64,
    /// Run the sensitivity study at the largest core count (FWB, MorLog, LAD, Silo): every
    /// cell of the cost-model grid (media model × store discipline × on-PM buffer for the
    /// baselines), then the paper-faithful cell with one assumption of the machine changed
    /// (see `machine_variants`), with data sets 16× smaller, and with Silo's in-place
    /// updates coalesced per line.
    pub sensitivity: bool,
    /// Transactions per core of the sensitivity runs (a prefix of the workload traces, or
    /// traces of that length for the other store discipline; every cell and variant runs
    /// on the same prefixes).
    pub sensitivity_transactions: u64,
    /// Host threads for independent runs (0: every host core).
    pub threads: usize,
    /// The simulated machine (its `cores` is overridden per run).
    pub config: Config,
}

impl Default for ReproSpec {
    fn default() -> Self {
        ReproSpec {
            transactions: 20_000,
            keys: None,
            discipline: StoreDiscipline::Pmdk,
            workloads: SiloWorkload::ALL.to_vec(),
            designs: DesignKind::ALL.to_vec(),
            cores: vec![1, 2, 4, 8],
            sweep_cores: 8,
            latencies: vec![8, 16, 32, 64, 128],
            entries: vec![10, 20, 40],
            size_multiples: vec![1, 2, 4, 8, 16],
            size_operations: 6_000,
            sensitivity: true,
            sensitivity_transactions: 3_000,
            threads: 0,
            config: Config::default(),
        }
    }
}

impl ReproSpec {
    /// The whole plan on small traces (a few hundred transactions, small instances): every
    /// table is filled, in seconds.
    pub fn quick() -> Self {
        ReproSpec {
            transactions: 150,
            keys: Some(2048),
            cores: vec![1, 2, 8],
            latencies: vec![8, 128],
            entries: vec![10, 20],
            size_multiples: vec![1, 4],
            size_operations: 120,
            sensitivity_transactions: 100,
            ..ReproSpec::default()
        }
    }

    /// The largest core count of the plan.
    pub fn max_cores(&self) -> usize {
        self.cores
            .iter()
            .copied()
            .chain([self.sweep_cores])
            .max()
            .unwrap_or(1)
    }

    /// Host threads to use.
    pub fn host_threads(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, usize::from),
            n => n,
        }
    }

    /// Checks the plan.
    pub fn validate(&self) -> Result<(), String> {
        let checks = [
            (self.transactions > 0, "transactions must be ≥ 1"),
            (!self.workloads.is_empty(), "workloads must not be empty"),
            (!self.designs.is_empty(), "designs must not be empty"),
            (
                self.cores.iter().all(|&c| (1..=64).contains(&c)) && !self.cores.is_empty(),
                "cores must be in 1..=64",
            ),
            (!self.latencies.is_empty(), "latencies must not be empty"),
            (
                self.entries.iter().all(|&e| e > 0),
                "entries must be positive",
            ),
            (
                self.size_multiples.iter().all(|&m| (1..=64).contains(&m)),
                "size multiples must be in 1..=64",
            ),
            (self.size_operations > 0, "size_operations must be ≥ 1"),
            (
                self.sensitivity_transactions > 0,
                "sensitivity_transactions must be ≥ 1",
            ),
        ];
        if let Some((_, why)) = checks.iter().find(|(ok, _)| !ok) {
            return Err((*why).to_string());
        }
        self.config.validate().map_err(|e| e.to_string())?;
        // Every trace the plan generates, checked before any is: generation checks each
        // when it reaches it, by which time the others (minutes of work in the full plan)
        // have run, and the failure was a run error rather than a refused plan.
        crate::run::trace_specs(self, self.discipline, self.transactions)
            .into_iter()
            .chain(crate::run::other_discipline_specs(self))
            .chain(crate::run::small_trace_specs(self))
            .try_for_each(|(name, trace)| {
                trace
                    .validate()
                    .map_err(|why| format!("the {name} trace: {why}"))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_the_plan_cannot_generate_refuses_the_plan() {
        assert_eq!(ReproSpec::quick().validate(), Ok(()));
        assert_eq!(ReproSpec::default().validate(), Ok(()));
        let huge = ReproSpec {
            transactions: u64::MAX,
            ..ReproSpec::quick()
        };
        let why = huge.validate().expect_err("no memory holds it");
        assert!(
            why.starts_with("the array trace: ") && why.contains("MiB of memory"),
            "{why}"
        );
        let tiny = ReproSpec {
            keys: Some(1),
            ..ReproSpec::quick()
        };
        let why = tiny.validate().expect_err("one key");
        assert!(why.contains("keys must be in 2..=2^28"), "{why}");
    }
}
