//! `ferrite sim`: the Silo (HPCA'23) hardware-logging simulator from the command line.
//!
//! - `sim run`: one design on one workload's trace (generated, or read from a file), with a
//!   readable summary and optionally the whole metrics as JSON;
//! - `sim trace`: generate a workload's trace and write it to a file;
//! - `sim reproduce`: the paper's experiment plan (`silorepro`) and its report;
//! - `sim battery`: the battery table;
//! - `sim crash`: crash injection at many cycles of a workload's recorded trace.
//!
//! Everything clap can check it checks (names, ranges: exit 2 from clap). What only the
//! command can find out — a trace file that cannot be read or does not decode, more cores
//! than the trace has streams, a configuration out of range — is a [`crate::UsageError`]:
//! one line, exit 2 as well.

mod battery;
mod crash_cmd;
mod reproduce;
mod run;
mod trace_cmd;

use clap::{Args, Subcommand};
use hwsim::DesignKind;
use hwsim::config::MediaModel;
use std::io::Write;
use std::path::PathBuf;
use tracegen::spec::{DEFAULT_CORES, DEFAULT_SEED, DEFAULT_TRANSACTIONS};
use tracegen::{SiloWorkload, StoreDiscipline};

/// Largest simulated core count (hwsim's limit; tracegen could record more streams, but
/// they could not be simulated).
const MAX_CORES: u64 = 64;

/// The `sim` subcommands.
#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Simulate one design on one workload; print throughput, PM writes, log statistics and
    /// stalls.
    Run(RunArgs),
    /// Generate a workload's per-core trace and write it to a file.
    Trace(TraceArgs),
    /// Run the Silo paper's experiment plan and write its report (JSON, SVG, index.html).
    Reproduce(ReproduceArgs),
    /// Print the battery table (eADR, BBB, Silo): what each must flush on a power failure.
    Battery(BatteryArgs),
    /// Crash-check a design on a workload's recorded trace: crashes at evenly spread
    /// cycles, the design's failure flush and recovery, an all-or-nothing check each time.
    Crash(CrashArgs),
}

/// `ferrite sim crash`.
#[derive(Debug, Args)]
pub struct CrashArgs {
    /// Design: base, fwb, morlog, lad, silo (ideal promises nothing).
    #[arg(long, value_parser = parse_design)]
    pub design: DesignKind,
    /// Workload: array, btree, hash, queue, rbtree, tpcc, ycsb.
    #[arg(long, value_parser = parse_workload)]
    pub workload: SiloWorkload,
    /// Simulated cores.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=MAX_CORES))]
    pub cores: u64,
    #[command(flatten)]
    pub shape: CrashShape,
    /// Crash points after the start (cycle `end × i / points` for i in 0..=points).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub points: u64,
}

/// A small trace by default: value tracking keeps every word the trace writes.
#[derive(Debug, Args)]
pub struct CrashShape {
    /// Committed transactions per core.
    #[arg(long = "tx", value_name = "N", default_value_t = 200,
          value_parser = crate::count)]
    pub transactions: u64,
    /// Instance size per core.
    #[arg(long, default_value_t = 4096)]
    pub keys: u64,
    /// Seed (core c runs with seed + c).
    #[arg(long, default_value_t = DEFAULT_SEED)]
    pub seed: u64,
}

impl CrashShape {
    fn workload_args(&self) -> WorkloadArgs {
        WorkloadArgs {
            transactions: self.transactions,
            keys: Some(self.keys),
            seed: self.seed,
            discipline: StoreDiscipline::Pmdk,
        }
    }
}

/// The trace a workload generates: what `sim run` (without `--trace`) and `sim trace` share.
#[derive(Debug, Args)]
pub struct WorkloadArgs {
    /// Committed transactions per core.
    #[arg(long = "tx", value_name = "N", default_value_t = DEFAULT_TRANSACTIONS,
          value_parser = crate::count)]
    pub transactions: u64,
    /// Instance size per core (array elements, initial keys, queue items, YCSB records,
    /// TPC-C items); default: the workload's own, larger than the simulated LLC.
    #[arg(long)]
    pub keys: Option<u64>,
    /// Seed (core c runs with seed + c).
    #[arg(long, default_value_t = DEFAULT_SEED)]
    pub seed: u64,
    /// Store discipline: pmdk (what a C program on libpmemobj stores, the paper-faithful
    /// default) or write-minimal (each changed word once).
    #[arg(long, default_value = "pmdk", value_parser = parse_discipline)]
    pub discipline: StoreDiscipline,
}

/// `ferrite sim run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Design: ideal, base, fwb, morlog, lad, silo.
    #[arg(long, value_parser = parse_design)]
    pub design: DesignKind,
    /// Workload to generate the trace of: array, btree, hash, queue, rbtree, tpcc, ycsb.
    #[arg(long, value_parser = parse_workload, required_unless_present = "trace")]
    pub workload: Option<SiloWorkload>,
    /// Simulated cores (default: the `cores` of --config, else 8 for a generated trace and
    /// every stream of a trace file).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_CORES))]
    pub cores: Option<u64>,
    #[command(flatten)]
    pub shape: WorkloadArgs,
    /// Read the trace from this file (written by `ferrite sim trace`) instead of generating.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["workload", "transactions", "keys", "seed", "discipline"])]
    pub trace: Option<PathBuf>,
    /// Machine configuration as JSON (hwsim's `Config`; missing fields keep their
    /// defaults), applied before the options below.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Silo log-buffer access latency in cycles, at least 1 (the paper sweeps 8..128).
    #[arg(long, value_name = "CYCLES", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub log_latency: Option<u64>,
    /// Silo log-buffer entries per core (default 20).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub log_entries: Option<u64>,
    /// Loads a core may have outstanding (1 = blocking loads, the default).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=64))]
    pub mlp: Option<u64>,
    /// Lines of the on-PM buffer (0 disables it).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(0..=1 << 20))]
    pub onpm_lines: Option<u64>,
    /// Silo's log controller merges one line's in-place updates into one write (not in the
    /// paper).
    #[arg(long)]
    pub coalesce_lus: bool,
    /// Media model: nvmain-row (one write pulse per media write, the paper-faithful
    /// default), block-dcw or proportional.
    #[arg(long, value_name = "MODEL", value_parser = parse_media)]
    pub media: Option<MediaModel>,
    /// The baselines (Base, FWB, MorLog, LAD) write through the on-PM buffer too.
    #[arg(long)]
    pub baselines_onpm_buffer: bool,
    /// Reads pause media writes and are never held by write drains.
    #[arg(long)]
    pub write_pausing: bool,
    /// Do not charge the write-backs of the lines left dirty at the end.
    #[arg(long)]
    pub no_final_drain: bool,
    /// Also write the run (trace, configuration, every metric) as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// `ferrite sim trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// Workload: array, btree, hash, queue, rbtree, tpcc, ycsb.
    #[arg(long, value_parser = parse_workload)]
    pub workload: SiloWorkload,
    /// Cores (one independent instance and stream per core).
    #[arg(long, default_value_t = u64::from(DEFAULT_CORES),
          value_parser = clap::value_parser!(u64).range(1..=MAX_CORES))]
    pub cores: u64,
    #[command(flatten)]
    pub shape: WorkloadArgs,
    /// The trace file to write (replaced if it exists).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

/// `ferrite sim reproduce`.
#[derive(Debug, Args)]
pub struct ReproduceArgs {
    /// The same plan on small traces (seconds; numbers indicative only).
    #[arg(long)]
    pub quick: bool,
    /// Report folder (created if needed).
    #[arg(long, default_value = "report-silo")]
    pub out: PathBuf,
    /// Committed transactions per core of the workload traces (default: the plan's).
    #[arg(long, value_name = "N", value_parser = crate::count)]
    pub transactions: Option<u64>,
    /// Host threads for the independent runs (default: every host core).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub threads: Option<u64>,
    /// No progress spinner.
    #[arg(long)]
    pub quiet: bool,
}

/// `ferrite sim battery`.
#[derive(Debug, Args)]
pub struct BatteryArgs {
    /// Cores of the machine (the paper's table is for 8).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=MAX_CORES))]
    pub cores: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs a `sim` subcommand, printing to `out`.
pub fn run(command: &SimCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    match command {
        SimCommand::Run(args) => run::run(args, out),
        SimCommand::Trace(args) => trace_cmd::run(args, out),
        SimCommand::Reproduce(args) => reproduce::run(args, out),
        SimCommand::Battery(args) => battery::run(args, out),
        SimCommand::Crash(args) => crash_cmd::run(args, out),
    }
}

fn parse_design(text: &str) -> Result<DesignKind, String> {
    DesignKind::from_name(text).ok_or_else(|| {
        let known: Vec<&str> = DesignKind::ALL.iter().map(|d| d.name()).collect();
        format!("unknown design {text:?} (known: {})", known.join(", "))
    })
}

fn parse_media(text: &str) -> Result<MediaModel, String> {
    MediaModel::from_name(text).ok_or_else(|| {
        let known: Vec<&str> = MediaModel::ALL.iter().map(|m| m.name()).collect();
        format!("unknown media model {text:?} (known: {})", known.join(", "))
    })
}

fn parse_discipline(text: &str) -> Result<StoreDiscipline, String> {
    StoreDiscipline::parse(text).ok_or_else(|| {
        let known: Vec<&str> = StoreDiscipline::ALL.iter().map(|d| d.name()).collect();
        format!(
            "unknown store discipline {text:?} (known: {})",
            known.join(", ")
        )
    })
}

fn parse_workload(text: &str) -> Result<SiloWorkload, String> {
    SiloWorkload::parse(text).ok_or_else(|| {
        let known: Vec<&str> = SiloWorkload::ALL.iter().map(|w| w.name()).collect();
        format!("unknown workload {text:?} (known: {})", known.join(", "))
    })
}

/// The trace spec of `workload` on `cores` cores with the generation options.
fn trace_spec(workload: SiloWorkload, cores: u64, shape: &WorkloadArgs) -> tracegen::TraceSpec {
    // `cores` is at most MAX_CORES (clap checked it), so it fits a u32.
    let cores = u32::try_from(cores).unwrap_or(u32::MAX);
    let mut spec = tracegen::TraceSpec::new(workload)
        .with_cores(cores)
        .with_transactions(shape.transactions)
        .with_seed(shape.seed)
        .with_discipline(shape.discipline);
    if let Some(keys) = shape.keys {
        spec = spec.with_keys(keys);
    }
    spec
}

/// Generates a trace; an out-of-range parameter is a usage error, a failing workload not.
fn generate(spec: &tracegen::TraceSpec) -> anyhow::Result<trace::Trace> {
    tracegen::generate(spec).map_err(|error| match error {
        tracegen::GenError::InvalidSpec(why) => {
            crate::UsageError(format!("{}: {why}", spec.workload)).into()
        }
        out_of_memory @ tracegen::GenError::OutOfMemory { .. } => {
            crate::UsageError(format!("{}: {out_of_memory}", spec.workload)).into()
        }
        other => {
            anyhow::Error::new(other).context(format!("generating the {} trace", spec.workload))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_unknown_names_list_the_known_ones() {
        assert_eq!(parse_design("morlog"), Ok(DesignKind::MorLog));
        assert_eq!(parse_workload("tpcc"), Ok(SiloWorkload::Tpcc));
        let error = parse_design("hoop").expect_err("not a design");
        assert!(
            error.contains("ideal, base, fwb, morlog, lad, silo"),
            "{error}"
        );
        let error = parse_workload("list").expect_err("not a Silo workload");
        assert!(error.contains("array, btree"), "{error}");
    }

    #[test]
    fn trace_spec_takes_every_option() {
        let shape = WorkloadArgs {
            transactions: 7,
            keys: Some(300),
            seed: 9,
            discipline: StoreDiscipline::WriteMinimal,
        };
        let spec = trace_spec(SiloWorkload::Hash, 3, &shape);
        assert_eq!(
            (spec.cores, spec.transactions, spec.keys, spec.seed),
            (3, 7, 300, 9)
        );
        assert_eq!(spec.discipline, StoreDiscipline::WriteMinimal);
        assert_eq!(parse_discipline("pmdk"), Ok(StoreDiscipline::Pmdk));
        assert_eq!(parse_media("block-dcw"), Ok(MediaModel::BlockDcw));
        assert!(parse_media("dram").is_err());
        let default_keys = trace_spec(
            SiloWorkload::Array,
            1,
            &WorkloadArgs {
                keys: None,
                ..shape
            },
        );
        assert_eq!(default_keys.keys, SiloWorkload::Array.default_keys());
    }

    #[test]
    fn out_of_range_generation_parameters_are_usage_errors() {
        let shape = WorkloadArgs {
            transactions: 1,
            keys: Some(1),
            seed: 0,
            discipline: StoreDiscipline::Pmdk,
        };
        let error = generate(&trace_spec(SiloWorkload::Hash, 1, &shape)).expect_err("1 key");
        assert!(
            error.downcast_ref::<crate::UsageError>().is_some(),
            "{error}"
        );
        assert!(
            error.to_string().starts_with("hash: keys must be"),
            "{error}"
        );
    }
}
