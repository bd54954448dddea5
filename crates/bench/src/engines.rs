//! The engine comparison of the evaluation: Ferrite's redo, undo and MVCC engines against
//! PMDK's libpmemobj and the ideal redo reference, on Silo's micro-benchmarks, TimeStone's
//! structures and YCSB / TPC-C, every engine measured in the same run by the [`runner`].
//!
//! A [`Plan`] names the sizes and the matrix; [`run`] measures it and returns typed
//! [`EngineResults`], which answer the questions the report asks (a throughput ratio, the
//! worst write amplification, the fences per commit) through typed keys ([`Config`]).
//!
//! [`runner`]: crate::runner

use crate::Progress;
use crate::choice::{EngineChoice, OpenError, WorkloadChoice};
use crate::runner::{self, Measurement, RunError, RunSpec};
use serde::Serialize;
use std::path::Path;
use std::time::Instant;
use tx::LogMode;
use workloads::Params;
use workloads::ycsb::YcsbMix;

pub use crate::amplification::TimeStoneAmplification;
pub use mvcc::TLOG_BYTES_EVENT;

/// Ferrite's redo engine with the Auto log writer.
pub const REDO: EngineChoice = EngineChoice::Redo(LogMode::Auto);
/// Ferrite's undo engine with the Auto log writer.
pub const UNDO: EngineChoice = EngineChoice::Undo(LogMode::Auto);
/// PMDK libpmemobj, the peer.
pub const PMDK: EngineChoice = EngineChoice::Pmdk;
/// The ideal redo reference.
pub const IDEAL: EngineChoice = EngineChoice::Ideal;
/// Ferrite's MVCC engine (TimeStone).
pub const MVCC: EngineChoice = EngineChoice::Mvcc;

/// The raw reference, persistent (no engine: a redo record, one fence, stores in place).
pub const RAW: EngineChoice = EngineChoice::Raw(crate::raw::Durability::Persistent);
/// The raw reference without write-backs or fences.
pub const RAW_VOLATILE: EngineChoice = EngineChoice::Raw(crate::raw::Durability::Volatile);
/// Ferrite's volatile engine (the transaction interface with no persistence).
pub const MEM: EngineChoice = EngineChoice::Mem;
/// The floors beside Silo's Array and Hash (the raw reference has only those two).
pub const FLOORS: [EngineChoice; 3] = [RAW, RAW_VOLATILE, MEM];

/// The ideal reference is a redo log stripped to the minimum; it only makes sense next to
/// the single-threaded Silo micro-benchmarks it was written for.
pub const SILO_ENGINES: [EngineChoice; 4] = [REDO, UNDO, PMDK, IDEAL];
/// TimeStone's structures, YCSB and TPC-C: the MVCC engine beside the logging engines.
pub const PEER_ENGINES: [EngineChoice; 4] = [MVCC, REDO, UNDO, PMDK];
/// The emulated-PM-cost sweep: the engines whose every PM write the emulation charges
/// (PMDK writes PM through its own library).
pub const PM_COST_ENGINES: [EngineChoice; 3] = [MVCC, REDO, UNDO];

/// Seed of every workload's random choices (fixed, so runs are comparable).
pub const SEED: u64 = 42;

/// A benchmark family: one table per configuration of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    /// Silo's micro-benchmarks (HPCA 2023), all writes, one thread.
    Silo,
    /// TimeStone's structures (ASPLOS 2020) at several update shares and thread counts.
    TimeStone,
    /// YCSB A–F and TPC-C New-Order.
    Ycsb,
    /// Upserts over a small set of hot keys (TimeStone's coalescing case: a key rewritten
    /// many times between checkpoints reaches PM once), all updates, on the hash map.
    HotKey {
        /// Value size in bytes.
        value_size: u32,
    },
    /// The MVCC engine against redo and undo with a PM write cost emulated on top of this
    /// machine's DRAM-backed pools: TimeStone's throughput argument (fewer PM writes than a
    /// logging engine) can only show where PM writes cost more than DRAM stores. Two
    /// workloads: the first hot-key configuration (`WorkloadChoice::Hash`) and TimeStone's
    /// hash at 80 % updates (`WorkloadChoice::TsHash`), one thread.
    PmCost {
        /// Nanoseconds spun per cache line written back (flushed or streamed).
        line_ns: u32,
    },
}

impl Family {
    /// Whether the family's runs spin an emulated PM cost (the sweep, above 0 ns per line).
    pub fn charges_pm_cost(self) -> bool {
        matches!(self, Family::PmCost { line_ns } if line_ns > 0)
    }

    /// The family's name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Family::Silo => "Silo",
            Family::TimeStone => "TimeStone",
            Family::Ycsb => "YCSB / TPC-C",
            Family::HotKey { .. } => "Hot keys",
            Family::PmCost { .. } => "Emulated PM cost",
        }
    }
}

/// Sizes and workloads of one run of the comparison.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Plan {
    /// Elements of Silo's array.
    pub array_elements: u64,
    /// Keys of the other Silo structures, TimeStone's hash and BST, and YCSB's records.
    pub keys: u64,
    /// Keys of TimeStone's list (every operation walks it).
    pub list_keys: u64,
    /// Value and element size in bytes.
    pub value_size: u32,
    /// Operations per timed run.
    pub ops: u64,
    /// Operations per timed run on the list.
    pub list_ops: u64,
    /// Untimed operations before the first run, as a fraction of `ops`.
    pub warmup_share: f64,
    /// Timed runs per configuration (the median is reported).
    pub runs: usize,
    /// Pool size in bytes.
    pub pool_size: u64,
    /// Silo's workloads.
    pub silo: &'static [WorkloadChoice],
    /// TimeStone's workloads.
    pub timestone: &'static [WorkloadChoice],
    /// Update shares of TimeStone's workloads, in percent.
    pub timestone_updates: &'static [u32],
    /// Thread counts of TimeStone's workloads.
    pub thread_counts: &'static [usize],
    /// YCSB mixes and TPC-C.
    pub ycsb: &'static [WorkloadChoice],
    /// Keys of the hot-key upsert workload.
    pub hot_keys: u64,
    /// Value sizes of the hot-key upsert workload.
    pub hot_value_sizes: &'static [u32],
    /// Emulated PM costs of the sweep, in nanoseconds per cache line written back (empty:
    /// no sweep).
    pub pm_cost_line_ns: &'static [u32],
}

impl Plan {
    /// The default matrix: about six minutes, setup included, on a two-core machine (the
    /// emulated-PM-cost sweep is about a sixth of it).
    pub const FULL: Plan = Plan {
        array_elements: 1_000_000,
        keys: 100_000,
        list_keys: 1_000,
        value_size: 64,
        ops: 100_000,
        list_ops: 20_000,
        warmup_share: 0.1,
        runs: 5,
        pool_size: 1 << 30,
        silo: &[
            WorkloadChoice::Array,
            WorkloadChoice::Queue,
            WorkloadChoice::Hash,
            WorkloadChoice::BTree,
            WorkloadChoice::RbTree,
        ],
        timestone: &[
            WorkloadChoice::List,
            WorkloadChoice::TsHash,
            WorkloadChoice::Bst,
        ],
        timestone_updates: &[2, 20, 80],
        thread_counts: &[1, 2],
        ycsb: &[
            WorkloadChoice::Ycsb(YcsbMix::A),
            WorkloadChoice::Ycsb(YcsbMix::B),
            WorkloadChoice::Ycsb(YcsbMix::C),
            WorkloadChoice::Ycsb(YcsbMix::D),
            WorkloadChoice::Ycsb(YcsbMix::E),
            WorkloadChoice::Ycsb(YcsbMix::F),
            WorkloadChoice::Tpcc,
        ],
        hot_keys: 1_000,
        hot_value_sizes: &[256, 1024],
        pm_cost_line_ns: &[0, 100, 300, 1000],
    };

    /// A quick evaluation: one workload or two per family, tiny sizes, one run.
    pub const QUICK: Plan = Plan {
        array_elements: 10_000,
        keys: 1_000,
        list_keys: 100,
        value_size: 64,
        ops: 2_000,
        list_ops: 500,
        warmup_share: 0.1,
        runs: 1,
        pool_size: 64 << 20,
        silo: &[WorkloadChoice::Array, WorkloadChoice::Hash],
        timestone: &[WorkloadChoice::Bst],
        timestone_updates: &[20],
        thread_counts: &[1, 2],
        ycsb: &[WorkloadChoice::Ycsb(YcsbMix::A), WorkloadChoice::Tpcc],
        hot_keys: 100,
        hot_value_sizes: &[256],
        pm_cost_line_ns: &[0, 300],
    };

    /// Every configuration of the plan with the engines it runs on, in report order.
    pub fn cases(&self, pool_dir: &Path) -> Vec<Case> {
        let mut cases = Vec::new();
        for config in self.configs() {
            let engines: &[EngineChoice] = match config.family {
                Family::Silo => &SILO_ENGINES,
                Family::PmCost { .. } => &PM_COST_ENGINES,
                _ => &PEER_ENGINES,
            };
            let floors: &[EngineChoice] = match (config.family, config.workload) {
                (Family::Silo, WorkloadChoice::Array | WorkloadChoice::Hash) => &FLOORS,
                _ => &[],
            };
            for &engine in engines.iter().chain(floors) {
                cases.push(Case {
                    config,
                    spec: self.spec(config, engine, pool_dir),
                });
            }
        }
        cases
    }

    /// The plan's configurations, in report order.
    fn configs(&self) -> Vec<Config> {
        let config = |family, workload, update_percent, threads| Config {
            family,
            workload,
            update_percent,
            threads,
        };
        // Silo's micro-benchmarks are all writes: swaps, enqueue/dequeue, upserts.
        let silo = self.silo.iter().map(|&w| config(Family::Silo, w, 100, 1));
        let timestone = self.timestone.iter().flat_map(|&w| {
            self.timestone_updates.iter().flat_map(move |&update| {
                self.thread_counts
                    .iter()
                    .map(move |&threads| config(Family::TimeStone, w, update, threads))
            })
        });
        // YCSB's mix decides its updates; TPC-C scales its warehouses with the threads.
        let ycsb = self.ycsb.iter().map(|&w| config(Family::Ycsb, w, 0, 1));
        let hot = self
            .hot_value_sizes
            .iter()
            .map(|&value_size| config(Family::HotKey { value_size }, WorkloadChoice::Hash, 100, 1));
        let pm_cost = self.pm_cost_line_ns.iter().flat_map(|&line_ns| {
            let family = Family::PmCost { line_ns };
            [
                config(family, WorkloadChoice::Hash, 100, 1),
                config(family, WorkloadChoice::TsHash, 80, 1),
            ]
        });
        silo.chain(timestone)
            .chain(ycsb)
            .chain(hot)
            .chain(pm_cost)
            .collect()
    }

    fn spec(&self, config: Config, engine: EngineChoice, pool_dir: &Path) -> RunSpec {
        let ops = match config.workload {
            WorkloadChoice::List => self.list_ops,
            _ => self.ops,
        };
        let hot_value_size = self.hot_value_sizes.first().copied();
        let (keys, value_size) = match (config.family, config.workload) {
            (Family::HotKey { value_size }, _) => (self.hot_keys, value_size),
            (Family::PmCost { .. }, WorkloadChoice::Hash) => {
                (self.hot_keys, hot_value_size.unwrap_or(self.value_size))
            }
            (_, WorkloadChoice::Array) => (self.array_elements, self.value_size),
            (_, WorkloadChoice::List) => (self.list_keys, self.value_size),
            _ => (self.keys, self.value_size),
        };
        RunSpec {
            engine,
            workload: config.workload,
            params: Params {
                keys,
                value_size,
                update_percent: config.update_percent,
                threads: config.threads,
                seed: SEED,
                locks_at_one_thread: false,
            },
            ops,
            warmup_ops: (ops as f64 * self.warmup_share) as u64,
            runs: self.runs,
            pool_dir: pool_dir.to_owned(),
            pool_size: self.pool_size,
            pm_latency: match config.family {
                Family::PmCost { line_ns } => pmem::LatencyModel {
                    line_writeback_ns: u64::from(line_ns),
                    fence_ns: 0,
                },
                _ => pmem::LatencyModel::NONE,
            },
        }
    }
}

/// What a configuration is, independent of the engine: the key every question about the
/// results is asked with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Config {
    /// The benchmark family.
    pub family: Family,
    /// The workload.
    pub workload: WorkloadChoice,
    /// Update share in percent (TimeStone's structures; 100 for Silo's, 0 for YCSB, whose
    /// mix decides).
    pub update_percent: u32,
    /// Threads.
    pub threads: usize,
}

impl Config {
    /// The workload as tables and plots name it: "hash", "list 20%", "ycsb-a".
    pub fn label(&self) -> String {
        match self.family {
            Family::TimeStone => format!("{} {}%", self.workload.name(), self.update_percent),
            Family::HotKey { value_size } => format!("hot-key upserts {value_size} B"),
            Family::PmCost { line_ns } => match self.workload {
                WorkloadChoice::Hash => format!("hot-key upserts, PM +{line_ns} ns/line"),
                _ => format!(
                    "{} {}%, PM +{line_ns} ns/line",
                    self.workload.name(),
                    self.update_percent
                ),
            },
            _ => self.workload.name(),
        }
    }
}

/// One configuration to measure on one engine.
#[derive(Clone, Debug)]
pub struct Case {
    /// The configuration.
    pub config: Config,
    /// What the runner runs.
    pub spec: RunSpec,
}

/// One measured configuration.
#[derive(Clone, Debug, Serialize)]
pub struct EngineRun {
    /// The benchmark family.
    pub family: Family,
    /// The workload as tables name it.
    pub label: String,
    /// The workload.
    pub workload: WorkloadChoice,
    /// The workload's parameters.
    pub params: Params,
    /// The engine.
    #[serde(skip)]
    pub engine: EngineChoice,
    /// What the runner measured.
    pub measurement: Measurement,
}

impl EngineRun {
    /// The configuration that was measured.
    pub fn config(&self) -> Config {
        Config {
            family: self.family,
            workload: self.workload,
            update_percent: self.params.update_percent,
            threads: self.measurement.threads,
        }
    }

    /// Threads.
    pub fn threads(&self) -> usize {
        self.measurement.threads
    }

    /// Median throughput in operations per second.
    pub fn throughput(&self) -> f64 {
        self.measurement.throughput.median
    }

    /// PM bytes per user byte, where the engine's stores are counted.
    pub fn write_amplification(&self) -> Option<f64> {
        self.measurement.traffic.write_amplification
    }

    /// TimeStone's write amplification (both variants), or a logging engine's analogue
    /// ([`crate::amplification`]).
    pub fn timestone_amplification(&self) -> Option<TimeStoneAmplification> {
        self.measurement.timestone_amplification()
    }
}

/// A configuration that failed on an engine (other than PMDK being unavailable).
#[derive(Clone, Debug, Serialize)]
pub struct RunFailure {
    /// The configuration.
    pub config: Config,
    /// The engine.
    pub engine: String,
    /// Why.
    pub error: String,
}

/// Everything a run of the plan produced.
#[derive(Debug, Default)]
pub struct EngineResults {
    /// The measured configurations, in plan order.
    pub runs: Vec<EngineRun>,
    /// Configurations that failed.
    pub failures: Vec<RunFailure>,
    /// Why the PMDK peer could not be used, when it could not.
    pub pmdk_skipped: Option<String>,
    /// Wall-clock seconds of the whole plan.
    pub seconds: f64,
}

/// Runs every case: the engines of one configuration together, their timed runs interleaved
/// ([`runner::run_interleaved`]), configurations in order; `progress` is called as each
/// case starts and ends. PMDK being unavailable skips its cases and is reported once; any
/// other failure is recorded and the remaining cases still run.
pub fn run(cases: &[Case], progress: &dyn Fn(Progress<'_, Case>)) -> EngineResults {
    let start = Instant::now();
    let mut results = EngineResults::default();
    for group in cases.chunk_by(|a, b| a.config == b.config) {
        let (skipped, measured): (Vec<&Case>, Vec<&Case>) = group
            .iter()
            .partition(|case| case.spec.engine == PMDK && results.pmdk_skipped.is_some());
        for case in &measured {
            progress(Progress::Started(case));
        }
        let specs: Vec<RunSpec> = measured.iter().map(|case| case.spec.clone()).collect();
        let outcomes = runner::run_interleaved(&specs, &|_, _| {});
        for (case, outcome) in measured.iter().zip(outcomes) {
            record(&mut results, case, outcome);
            progress(Progress::Finished(case));
        }
        for case in skipped {
            progress(Progress::Finished(case));
        }
    }
    results.seconds = start.elapsed().as_secs_f64();
    results
}

/// Files one case's outcome under runs, failures or the PMDK skip.
fn record(results: &mut EngineResults, case: &Case, outcome: Result<Measurement, RunError>) {
    let spec = &case.spec;
    match outcome {
        Ok(measurement) => results.runs.push(EngineRun {
            family: case.config.family,
            label: case.config.label(),
            workload: spec.workload,
            params: spec.params.clone(),
            engine: spec.engine,
            measurement,
        }),
        Err(RunError::Open(OpenError::Pmdk(error))) => {
            results.pmdk_skipped = Some(pmdk_skip_reason(&error));
        }
        Err(error) => results.failures.push(RunFailure {
            config: case.config,
            engine: spec.engine.to_string(),
            error: error.to_string(),
        }),
    }
}

/// Why PMDK was skipped, with the fix when it is the missing library.
fn pmdk_skip_reason(error: &pmdk::PmdkError) -> String {
    match error {
        pmdk::PmdkError::NotInstalled(_) => format!("{error}; run scripts/setup"),
        _ => error.to_string(),
    }
}

impl EngineResults {
    /// The run of `engine` on `config`.
    pub fn get(&self, config: Config, engine: EngineChoice) -> Option<&EngineRun> {
        self.runs
            .iter()
            .find(|run| run.engine == engine && run.config() == config)
    }

    /// The runs of `family`.
    pub fn of_family(&self, family: Family) -> impl Iterator<Item = &EngineRun> {
        self.runs.iter().filter(move |run| run.family == family)
    }

    /// `engine`'s median throughput over `base`'s on Silo's single-threaded `workload`.
    pub fn silo_ratio(
        &self,
        workload: WorkloadChoice,
        engine: EngineChoice,
        base: EngineChoice,
    ) -> Option<f64> {
        let config = Config {
            family: Family::Silo,
            workload,
            update_percent: 100,
            threads: 1,
        };
        let value = self.get(config, engine)?.throughput();
        let base = self.get(config, base)?.throughput();
        (base > 0.0).then(|| value / base)
    }

    /// The run of `engine` on TimeStone's `workload` at `update_percent` and `threads`.
    pub fn timestone(
        &self,
        workload: WorkloadChoice,
        update_percent: u32,
        threads: usize,
        engine: EngineChoice,
    ) -> Option<&EngineRun> {
        let config = Config {
            family: Family::TimeStone,
            workload,
            update_percent,
            threads,
        };
        self.get(config, engine)
    }

    /// The run of `engine` on the hot-key upserts with `value_size`-byte values.
    pub fn hot_key(&self, value_size: u32, engine: EngineChoice) -> Option<&EngineRun> {
        let config = Config {
            family: Family::HotKey { value_size },
            workload: WorkloadChoice::Hash,
            update_percent: 100,
            threads: 1,
        };
        self.get(config, engine)
    }

    /// The runs of `engine` at no added PM cost: the goals are judged on these only (the
    /// emulated-cost sweep's charged runs repeat configurations under a different machine).
    fn uncharged_runs(&self, engine: EngineChoice) -> impl Iterator<Item = &EngineRun> {
        self.runs
            .iter()
            .filter(move |run| run.engine == engine && !run.family.charges_pm_cost())
    }

    /// The write amplification of every run of `engine` at no added PM cost that counted it.
    pub fn amplifications(&self, engine: EngineChoice) -> Vec<(f64, &EngineRun)> {
        self.uncharged_runs(engine)
            .filter_map(|run| Some((run.write_amplification()?, run)))
            .collect()
    }

    /// The fewest and most fences per commit of `engine` over the runs at no added PM cost
    /// that committed.
    pub fn fence_range(&self, engine: EngineChoice) -> Option<(f64, f64, usize)> {
        let fences: Vec<f64> = self
            .uncharged_runs(engine)
            .filter_map(|run| run.measurement.traffic.fences_per_commit)
            .collect();
        let min = fences.iter().copied().reduce(f64::min)?;
        let max = fences.iter().copied().reduce(f64::max)?;
        Some((min, max, fences.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quick_plan_covers_every_family_and_engine() {
        let cases = Plan::QUICK.cases(Path::new("/dev/shm"));
        let hot = Family::HotKey { value_size: 256 };
        let pm_cost = Family::PmCost { line_ns: 300 };
        for family in [Family::Silo, Family::TimeStone, Family::Ycsb, hot, pm_cost] {
            assert!(
                cases.iter().any(|c| c.config.family == family),
                "{family:?}"
            );
        }
        for engine in SILO_ENGINES.iter().chain(&PEER_ENGINES).chain(&FLOORS) {
            assert!(cases.iter().any(|c| c.spec.engine == *engine), "{engine}");
        }
        let full = Plan::FULL.cases(Path::new("/dev/shm"));
        // The floors run beside Silo's Array and Hash only.
        assert_eq!(
            full.len(),
            5 * 4 + 2 * 3 + 3 * 3 * 2 * 4 + 7 * 4 + 2 * 4 + 4 * 2 * 3
        );
        for case in full.iter().filter(|c| FLOORS.contains(&c.spec.engine)) {
            assert_eq!(case.config.family, Family::Silo);
            assert!(matches!(
                case.config.workload,
                WorkloadChoice::Array | WorkloadChoice::Hash
            ));
        }
    }

    #[test]
    fn configurations_carry_their_sizes_and_labels() {
        let cases = Plan::FULL.cases(Path::new("/dev/shm"));
        let list = cases
            .iter()
            .find(|c| c.config.workload == WorkloadChoice::List)
            .expect("a list case");
        assert_eq!(list.config.label(), "list 2%");
        assert_eq!(
            (list.spec.params.keys, list.spec.ops),
            (Plan::FULL.list_keys, Plan::FULL.list_ops)
        );
        let array = &cases[0];
        assert_eq!(array.config.label(), "array");
        assert_eq!(array.spec.params.keys, Plan::FULL.array_elements);
        assert_eq!(array.spec.params.update_percent, 100);
        let hot: Vec<&Case> = cases
            .iter()
            .filter(|c| matches!(c.config.family, Family::HotKey { .. }))
            .collect();
        assert_eq!(hot.len(), 2 * PEER_ENGINES.len());
        for case in hot {
            let Family::HotKey { value_size } = case.config.family else {
                unreachable!()
            };
            assert_eq!(case.spec.params.value_size, value_size);
            assert_eq!(case.spec.params.keys, Plan::FULL.hot_keys);
            assert_eq!(case.spec.params.update_percent, 100);
            assert_eq!(case.config.workload, WorkloadChoice::Hash);
            assert!(!case.spec.pm_latency.is_enabled());
        }
    }

    /// The sweep charges exactly its own configurations, never PMDK's (which the emulation
    /// cannot reach), and measures the hot keys with the first hot-key value size.
    #[test]
    fn only_the_pm_cost_sweep_is_charged() {
        let cases = Plan::FULL.cases(Path::new("/dev/shm"));
        for case in &cases {
            let charged = case.spec.pm_latency.line_writeback_ns;
            match case.config.family {
                Family::PmCost { line_ns } => {
                    assert_eq!(charged, u64::from(line_ns));
                    assert!(PM_COST_ENGINES.contains(&case.spec.engine));
                    let params = &case.spec.params;
                    match case.config.workload {
                        WorkloadChoice::Hash => {
                            assert_eq!((params.keys, params.value_size), (1_000, 256));
                            assert_eq!(params.update_percent, 100);
                        }
                        WorkloadChoice::TsHash => {
                            assert_eq!((params.keys, params.update_percent), (100_000, 80));
                        }
                        other => panic!("unexpected sweep workload {other:?}"),
                    }
                }
                _ => assert_eq!(charged, 0, "{:?}", case.config),
            }
        }
        let swept: Vec<u32> = cases
            .iter()
            .filter_map(|c| match c.config.family {
                Family::PmCost { line_ns } => Some(line_ns),
                _ => None,
            })
            .collect();
        assert_eq!(swept.len(), 4 * 2 * PM_COST_ENGINES.len());
        assert!(swept.contains(&0) && swept.contains(&1000));
    }
}
