//! The serde results of a reproduction.

use crate::paper::Target;
use crate::spec::ReproSpec;
use hwsim::battery::BatteryTable;
use hwsim::config::MediaModel;
use hwsim::metrics::{LogStats, StallCycles};
use hwsim::{Config, DesignKind, Metrics};
use serde::{Deserialize, Serialize};
use tracegen::StoreDiscipline;

/// One simulation run, flattened for tables and plots.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    /// Workload (`array`, …, or `{workload}-x{K}` for the transaction-size traces).
    pub workload: String,
    /// Design.
    pub design: DesignKind,
    /// Simulated cores.
    pub cores: usize,
    /// What differs from the reference machine (`""`, `latency=128`, `entries=10`,
    /// `entries=unbounded`, `sensitivity/<variant>`).
    pub variant: String,
    /// Committed transactions.
    pub committed_tx: u64,
    /// Cycles until the last core finished.
    pub cycles: u64,
    /// Sum over cores of their cycles (for stall fractions).
    pub core_cycles: u64,
    /// Committed transactions per simulated second.
    pub throughput: f64,
    /// Throughput over FWB's on the same workload and cores (main runs; 0 if absent).
    pub vs_fwb: f64,
    /// Throughput over Base's.
    pub vs_base: f64,
    /// Throughput over Ideal's.
    pub vs_ideal: f64,
    /// MC write requests.
    pub write_requests: u64,
    /// Bytes of those requests (bytes sent during the run).
    pub write_bytes: u64,
    /// Bytes of the write-backs of the lines left dirty at the end (the final drain).
    #[serde(default)]
    pub final_drain_bytes: u64,
    /// Bytes programmed: 8 B words reaching the cells with data they did not hold (final
    /// drain included).
    #[serde(default)]
    pub programmed_bytes: u64,
    /// Media (256 B line) writes after the on-PM buffer.
    pub media_writes: u64,
    /// Bytes by class: write-backs, design flushes, in-place updates, log writes.
    pub writeback_bytes: u64,
    /// Design flushes (Base's line flushes, LAD's committed lines, FWB/MorLog scans).
    pub flush_bytes: u64,
    /// In-place updates (Silo's LUs, LAD's overflowed lines).
    pub in_place_bytes: u64,
    /// Log-region writes.
    pub log_bytes: u64,
    /// Fraction of the run the PCM data bus carried writes.
    pub bus_utilisation: f64,
    /// Fraction of bank time spent on media writes.
    pub bank_write_utilisation: f64,
    /// Bank cycles of media writes per committed transaction, the final drain's included:
    /// the PCM write work a transaction costs.
    #[serde(default)]
    pub media_cycles_per_tx: f64,
    /// Fraction of the run the memory controller spent draining writes (reads held).
    #[serde(default)]
    pub drain_fraction: f64,
    /// Mean write-queue occupancy (entries, speculative ones included).
    #[serde(default)]
    pub queue_occupancy: f64,
    /// Media (64 B block) writes per committed transaction.
    #[serde(default)]
    pub media_blocks_per_tx: f64,
    /// Stall cycles summed over cores.
    pub stalls: StallCycles,
    /// Log statistics of logging designs.
    pub log: Option<LogStats>,
    /// Trace events simulated.
    pub events: u64,
    /// Host seconds of the simulation (wall clock).
    pub host_seconds: f64,
    /// CPU seconds of the host thread that ran it.
    #[serde(default)]
    pub cpu_seconds: f64,
    /// Events per host second.
    pub events_per_host_second: f64,
}

impl RunRow {
    /// Flattens the metrics of `design`'s run.
    pub fn from_metrics(
        m: &Metrics,
        design: DesignKind,
        workload: &str,
        variant: &str,
        cfg: &Config,
    ) -> Self {
        let span = m.drained_cycles.max(1) as f64;
        RunRow {
            workload: workload.to_string(),
            design,
            cores: m.cores,
            variant: variant.to_string(),
            committed_tx: m.committed_tx,
            cycles: m.cycles,
            core_cycles: m.per_core.iter().map(|c| c.cycles).sum(),
            throughput: m.throughput_tx_per_s,
            vs_fwb: 0.0,
            vs_base: 0.0,
            vs_ideal: 0.0,
            write_requests: m.pm.writes.requests,
            write_bytes: m.pm.writes.bytes,
            final_drain_bytes: m.pm.final_drain.bytes,
            programmed_bytes: m.pm.programmed_bytes,
            media_writes: m.pm.media_writes,
            writeback_bytes: m.pm.writeback.bytes,
            flush_bytes: m.pm.flush.bytes,
            in_place_bytes: m.pm.in_place.bytes,
            log_bytes: m.pm.log.bytes,
            bus_utilisation: m.pm.bus_busy_cycles as f64 / span,
            bank_write_utilisation: m.pm.bank_write_cycles as f64 / (span * cfg.mem.banks as f64),
            media_cycles_per_tx: (m.pm.bank_write_cycles + m.pm.final_bank_cycles) as f64
                / m.committed_tx.max(1) as f64,
            drain_fraction: m.pm.drain_cycles as f64 / span,
            queue_occupancy: m.pm.queue_occupancy_integral as f64 / span,
            media_blocks_per_tx: m.pm.media_blocks as f64 / m.committed_tx.max(1) as f64,
            stalls: m.stalls,
            log: m.log,
            events: m.events,
            host_seconds: m.host_seconds,
            cpu_seconds: 0.0,
            events_per_host_second: m.events_per_host_second,
        }
    }

    /// PM bytes sent per committed transaction (write requests, final drain included).
    pub fn bytes_per_tx(&self) -> f64 {
        (self.write_bytes + self.final_drain_bytes) as f64 / self.committed_tx.max(1) as f64
    }

    /// PM bytes programmed per committed transaction (what the paper's write traffic
    /// counts: an eviction that repeats PM's data "will not write twice").
    pub fn programmed_per_tx(&self) -> f64 {
        self.programmed_bytes as f64 / self.committed_tx.max(1) as f64
    }

    /// Load stalls as a fraction of all core cycles.
    pub fn load_stall_fraction(&self) -> f64 {
        self.stalls.load as f64 / self.core_cycles.max(1) as f64
    }

    /// A stall class in cycles per committed transaction per core.
    pub fn per_tx(&self, cycles: u64) -> f64 {
        cycles as f64 / self.committed_tx.max(1) as f64
    }
}

/// One point of a sensitivity sweep, averaged (geometric mean) over workloads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    /// The swept value (cycles, entries, or multiple of the buffer).
    pub value: u64,
    /// Throughput relative to the sweep's reference, geometric mean over workloads.
    pub relative_throughput: f64,
    /// PM write bytes relative to the reference, geometric mean over workloads.
    pub relative_write_bytes: f64,
    /// Per workload: (workload, relative throughput, relative write bytes).
    pub per_workload: Vec<(String, f64, f64)>,
}

/// A sweep: what it varies, against what, and its points.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sweep {
    /// `latency`, `entries`, `tx_size` or `cores`.
    pub name: String,
    /// The reference the points are relative to.
    pub reference: String,
    /// The points.
    pub points: Vec<SweepPoint>,
}

/// One reproduced number beside the paper's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Which of the paper's numbers this is.
    pub target: Target,
    /// What is compared.
    pub quantity: String,
    /// The paper's value (ratios as ×, fractions as 0..1; orderings: 1 = holds).
    pub paper: f64,
    /// Ours.
    pub ours: f64,
    /// ours / paper.
    pub ratio: f64,
    /// Within ±25 % of the paper (orderings: holds).
    pub within: bool,
    /// For a miss: the mechanism behind the difference, with the computed facts.
    pub explanation: String,
}

/// One cell of the cost-model grid: the choices the paper does not pin down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Setting {
    /// How media writes hold their bank.
    pub media: MediaModel,
    /// Which stores the traces carry.
    pub discipline: StoreDiscipline,
    /// Whether the baselines write through the on-PM buffer too.
    pub baselines_use_onpm_buffer: bool,
}

impl Setting {
    /// The paper-faithful cell: NVMain's row timing, PMDK-style stores, the on-PM buffer
    /// Silo's alone.
    pub const PAPER: Setting = Setting {
        media: MediaModel::NvmainRow,
        discipline: StoreDiscipline::Pmdk,
        baselines_use_onpm_buffer: false,
    };

    /// "nvmain-row / pmdk / buffer: Silo only".
    pub fn label(&self) -> String {
        format!(
            "{} / {} / buffer: {}",
            self.media.name(),
            self.discipline.name(),
            if self.baselines_use_onpm_buffer {
                "all designs"
            } else {
                "Silo only"
            }
        )
    }

    /// Every cell, the paper-faithful one first.
    pub fn grid() -> Vec<Setting> {
        let mut cells = vec![Setting::PAPER];
        for media in MediaModel::ALL {
            for discipline in StoreDiscipline::ALL {
                for baselines_use_onpm_buffer in [false, true] {
                    let cell = Setting {
                        media,
                        discipline,
                        baselines_use_onpm_buffer,
                    };
                    if cell != Setting::PAPER {
                        cells.push(cell);
                    }
                }
            }
        }
        cells
    }
}

/// The largest-core comparison under one cost-model cell or one changed assumption of the
/// machine or workload (geometric means over workloads).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sensitivity {
    /// The cell's label, or the variant's name (`mlp=4`, `banks=16`, `write-pausing`,
    /// `small-data`, `coalesced-lu`).
    pub variant: String,
    /// What changed.
    pub description: String,
    /// The cost-model cell (`None` for a variant of the paper-faithful cell).
    pub setting: Option<Setting>,
    /// Throughput ratios.
    pub silo_vs_lad: f64,
    /// Silo / MorLog.
    pub silo_vs_morlog: f64,
    /// Silo / FWB.
    pub silo_vs_fwb: f64,
    /// MorLog / FWB.
    pub morlog_vs_fwb: f64,
    /// Silo's PM bytes programmed per transaction over MorLog's (the paper: 1 − 76.5 %).
    pub silo_programmed_vs_morlog: f64,
    /// The same over FWB's (the paper: 1 − 82 %).
    pub silo_programmed_vs_fwb: f64,
    /// Silo's PM bytes sent per transaction over MorLog's.
    pub silo_sent_vs_morlog: f64,
}

/// Wall-clock and simulation speed of the reproduction.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Host threads used for runs.
    pub threads: usize,
    /// Seconds generating traces.
    pub generation_seconds: f64,
    /// Wall-clock seconds of the simulations.
    pub simulation_wall_seconds: f64,
    /// Wall-clock seconds of the whole reproduction.
    pub wall_seconds: f64,
    /// Trace events simulated, all runs (a run that repeats another's simulation, see
    /// `reused_runs`, is counted once).
    pub events: u64,
    /// Events per host second per thread (sum of events / sum of per-run host seconds).
    pub events_per_host_second: f64,
    /// The same, per design, over its largest-core main runs: (design, events/s).
    pub per_design_events_per_second: Vec<(DesignKind, f64)>,
    /// Events per CPU second of the simulating threads (the speed per host core whatever
    /// else runs on the host), all runs.
    #[serde(default)]
    pub events_per_cpu_second: f64,
    /// The same, per design, over its largest-core runs.
    #[serde(default)]
    pub per_design_events_per_cpu_second: Vec<(DesignKind, f64)>,
    /// CPU seconds of the simulations (both host threads together).
    #[serde(default)]
    pub simulation_cpu_seconds: f64,
    /// Runs of the plan that repeat another run's simulation (same trace, design and machine
    /// as the design sees it, e.g. Silo in the grid cells that differ only in whether the
    /// baselines use the on-PM buffer): their results are reused, not simulated again.
    #[serde(default)]
    pub reused_runs: usize,
}

impl Timing {
    /// The timing in one sentence (the report's summary and `reproduction.md` both use it).
    pub fn line(&self) -> String {
        let per = |values: &[(DesignKind, f64)]| {
            values
                .iter()
                .map(|(d, e)| format!("{} {:.1} M", d.label(), e / 1e6))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "Took {:.1} s: trace generation {:.1} s, simulation {:.1} s on {} \
             ({:.1} CPU seconds, {} runs reused from identical simulations); {:.1} M trace \
             events at {:.2} M events per CPU second \
             ({:.2} M per wall second per thread); largest-core runs per CPU second: {}; per \
             wall second: {}.",
            self.wall_seconds,
            self.generation_seconds,
            self.simulation_wall_seconds,
            count(self.threads as u64, "host thread"),
            self.simulation_cpu_seconds,
            self.reused_runs,
            self.events as f64 / 1e6,
            self.events_per_cpu_second / 1e6,
            self.events_per_host_second / 1e6,
            per(&self.per_design_events_per_cpu_second),
            per(&self.per_design_events_per_second),
        )
    }
}

/// Everything a reproduction produces.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reproduction {
    /// The plan.
    pub spec: ReproSpec,
    /// Every run of the design matrix (all designs × workloads × core counts).
    pub runs: Vec<RunRow>,
    /// Runs of the sweeps (Silo variants, transaction-size traces).
    pub sweep_runs: Vec<RunRow>,
    /// Geometric-mean summaries per design and core count.
    pub summary: Vec<DesignSummary>,
    /// Latency, entries, transaction-size and core-count sweeps.
    pub sweeps: Vec<Sweep>,
    /// The largest-core comparison in every cell of the cost-model grid (the paper-faithful
    /// cell first), then under the machine and workload variants of the paper-faithful cell.
    pub sensitivity: Vec<Sensitivity>,
    /// The battery table (eADR, BBB, Silo) of the machine at the largest core count.
    pub battery: BatteryTable,
    /// Each target of the paper beside our number.
    pub comparison: Vec<Comparison>,
    /// Speed.
    pub timing: Timing,
    /// The transaction-size traces: operations grouped per transaction and the live log
    /// entries per transaction they reach.
    #[serde(default)]
    pub size_traces: Vec<SizeTraceInfo>,
}

/// One transaction-size trace of the `tx_size` sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SizeTraceInfo {
    /// The workload it groups.
    pub workload: String,
    /// The targeted multiple of the log buffer.
    pub multiple: u32,
    /// Operations per transaction.
    pub ops_per_transaction: u32,
    /// Mean live log entries (distinct changed words) per transaction.
    pub live_entries_mean: f64,
    /// The most live log entries of one transaction.
    pub live_entries_max: u64,
}

/// One design at one core count, averaged over workloads (geometric means).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DesignSummary {
    /// Design.
    pub design: DesignKind,
    /// Simulated cores.
    pub cores: usize,
    /// Throughput relative to FWB.
    pub vs_fwb: f64,
    /// Throughput relative to Base.
    pub vs_base: f64,
    /// Throughput relative to Ideal.
    pub vs_ideal: f64,
    /// PM bytes programmed relative to FWB (what the paper's write traffic counts).
    pub write_bytes_vs_fwb: f64,
    /// PM bytes sent relative to FWB.
    #[serde(default)]
    pub sent_bytes_vs_fwb: f64,
    /// PM write requests relative to FWB.
    pub write_requests_vs_fwb: f64,
    /// Media writes relative to FWB.
    pub media_writes_vs_fwb: f64,
    /// Mean PM bytes sent per transaction (arithmetic, over workloads).
    pub bytes_per_tx: f64,
    /// Mean PM bytes programmed per transaction.
    #[serde(default)]
    pub programmed_per_tx: f64,
}

impl Reproduction {
    /// The main run of `design` on `workload` with `cores` cores.
    pub fn run(&self, workload: &str, design: DesignKind, cores: usize) -> Option<&RunRow> {
        self.runs
            .iter()
            .find(|r| r.workload == workload && r.design == design && r.cores == cores)
    }

    /// The summary of `design` at `cores`.
    pub fn summary_of(&self, design: DesignKind, cores: usize) -> Option<&DesignSummary> {
        self.summary
            .iter()
            .find(|s| s.design == design && s.cores == cores)
    }

    /// The comparison with the paper's number `target`, if the plan measured it.
    pub fn comparison_of(&self, target: Target) -> Option<&Comparison> {
        self.comparison.iter().find(|c| c.target == target)
    }

    /// The sweep named `name`.
    pub fn sweep(&self, name: &str) -> Option<&Sweep> {
        self.sweeps.iter().find(|s| s.name == name)
    }
}

/// Geometric mean of non-negative values (1.0 for none). A zero among them makes it zero,
/// as it is by definition: skipping zeros reported a mean of the other workloads only
/// (Ideal's write requests × FWB read 0.04 at 2 cores, with Queue's at 0), and a set of
/// zeros came out as 1.0. NaN and negative values, which no ratio of counts gives, are
/// skipped.
pub fn geomean(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut zero = false;
    let (sum, n) = values
        .into_iter()
        .filter(|v| {
            zero |= *v == 0.0;
            *v > 0.0
        })
        .fold((0.0, 0u32), |(s, n), v| (s + v.ln(), n + 1));
    if zero {
        0.0
    } else if n == 0 {
        1.0
    } else {
        (sum / f64::from(n)).exp()
    }
}

/// "1 host thread", "2 host threads".
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod geomean_tests {
    use super::geomean;

    #[test]
    fn a_zero_makes_the_geometric_mean_zero() {
        assert!((geomean([4.0, 1.0]) - 2.0).abs() < 1e-12);
        assert_eq!(geomean([0.5, 0.0, 2.0]), 0.0);
        assert_eq!(geomean([0.0, 0.0]), 0.0);
        assert_eq!(geomean(std::iter::empty()), 1.0);
        assert!((geomean([2.0, f64::NAN, 8.0]) - 4.0).abs() < 1e-12);
    }
}
