//! Reproduction of the evaluation of Silo (Zhang & Hua, "Silo: Speculative Hardware Logging
//! for Atomic Durability in Persistent Memory", HPCA 2023) on Ferrite's simulator.
//!
//! The traces come from the shared workloads through `tracegen` (one independent instance per
//! simulated core); the designs and the machine are `hwsim`'s. One entry point, [`reproduce`],
//! runs the paper's plan ([`ReproSpec`]) and returns one serde struct ([`Reproduction`]):
//!
//! * the design matrix: {Ideal, Base, FWB, MorLog, LAD, Silo} × workloads × core counts, with
//!   throughput (absolute, relative to FWB, Base and Ideal), PM writes (requests, bytes, media
//!   writes after the on-PM buffer, bytes by class), log statistics and stalls;
//! * geometric-mean summaries per design and core count;
//! * sweeps: Silo's log-buffer latency, its entries, the transaction size (1–16× the buffer,
//!   Array swaps of random elements sized so a transaction changes `k × entries` words,
//!   against a Silo with an unbounded buffer) and the core count;
//! * the battery table (eADR, BBB, Silo);
//! * the paper's targets beside ours with a ±25 % verdict and, for misses, the computed
//!   facts behind the difference;
//! * wall-clock time and simulation speed.
//!
//! Trace generation and the independent runs are spread over the host's cores
//! (`std::thread::scope`), the runs longest first; a run that repeats another's simulation
//! (same trace, design and machine as the design sees it) reuses its metrics.
//!
//! ```no_run
//! let rep = silorepro::reproduce(&silorepro::ReproSpec::quick())?;
//! println!("{}", silorepro::report::markdown(&rep));
//! # Ok::<(), silorepro::ReproError>(())
//! ```

#![forbid(unsafe_code)]

mod compare;
pub mod paper;
pub mod report;
pub mod results;
mod run;
pub mod spec;

pub use results::{
    Comparison, DesignSummary, Reproduction, RunRow, Sensitivity, Setting, SizeTraceInfo, Sweep,
    SweepPoint, Timing,
};
pub use spec::ReproSpec;

use hwsim::battery::{BatteryParams, battery_table};
use hwsim::{Config, DesignKind};
use run::{Job, Workload, events};
use std::time::Instant;

/// Why a reproduction could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReproError {
    /// The plan is invalid.
    #[error("invalid reproduction spec: {0}")]
    Spec(String),
    /// Trace generation or a simulation failed.
    #[error("{0}")]
    Run(String),
}

/// Runs the whole plan and returns every result.
pub fn reproduce(spec: &ReproSpec) -> Result<Reproduction, ReproError> {
    spec.validate().map_err(ReproError::Spec)?;
    let started = Instant::now();
    let run::PlanTraces {
        workloads,
        others,
        smalls,
    } = run::plan_traces(spec).map_err(ReproError::Run)?;
    let prefixes = run::prefix_traces(spec, &workloads);
    let sizes = run::size_traces(spec, &workloads);
    let generation_seconds = started.elapsed().as_secs_f64();
    let all: Vec<&Workload> = workloads
        .iter()
        .chain(sizes.iter().map(|s| &s.workload))
        .chain(&others)
        .chain(&prefixes)
        .chain(&smalls)
        .collect();
    let plan = Plan::new(spec, &all, (workloads.len(), &sizes, others.len()));
    let sim_started = Instant::now();
    let done = run::run_jobs(&plan.jobs, &all, spec.host_threads()).map_err(ReproError::Run)?;
    let simulation_wall_seconds = sim_started.elapsed().as_secs_f64();
    let (mut runs, sweep_runs): (Vec<RunRow>, Vec<RunRow>) = done
        .rows
        .into_iter()
        .partition(|r| r.variant.is_empty() && !r.workload.contains("-x"));
    run::normalise(&mut runs);
    let names: Vec<String> = workloads.iter().map(|w| w.name.clone()).collect();
    let mut rep = Reproduction {
        spec: spec.clone(),
        summary: run::summarise(&runs, spec),
        sweeps: Vec::new(),
        battery: battery_table(
            &spec.config.with_cores(spec.max_cores()),
            &BatteryParams::default(),
        ),
        comparison: Vec::new(),
        timing: Timing::default(),
        sensitivity: Vec::new(),
        size_traces: sizes
            .iter()
            .map(|s| SizeTraceInfo {
                workload: s.base.clone(),
                multiple: s.multiple,
                ops_per_transaction: s.ops,
                live_entries_mean: s.live_mean,
                live_entries_max: s.live_max,
            })
            .collect(),
        runs,
        sweep_runs,
    };
    rep.sweeps = sweeps(&rep, &names);
    rep.sensitivity = sensitivity(&rep);
    rep.comparison = compare::compare(&rep);
    rep.timing = timing(
        &rep,
        spec,
        (generation_seconds, simulation_wall_seconds),
        (done.simulated_events, done.reused),
        started,
    );
    Ok(rep)
}

/// The jobs of a plan.
struct Plan {
    jobs: Vec<Job>,
}

impl Plan {
    /// `all` holds the traces in this order: the workloads (`counts.0` of them), the
    /// transaction-size traces (`counts.1`), the workloads in the other store discipline
    /// (`counts.2`, as many as the workloads or none), the sensitivity prefixes (as many as
    /// the workloads), then the small-data traces.
    fn new(
        spec: &ReproSpec,
        all: &[&Workload],
        (workloads, sizes, others): (usize, &[run::SizeTrace], usize),
    ) -> Self {
        let mut jobs = Vec::new();
        let job = |trace: usize, design, config: Config, variant: &str| Job {
            trace,
            design,
            cost: events(&all[trace].trace, config.cores) * design_weight(design),
            config,
            variant: variant.to_string(),
        };
        for i in 0..workloads {
            for &cores in &spec.cores {
                for &d in &spec.designs {
                    jobs.push(job(i, d, spec.config.with_cores(cores), ""));
                }
            }
            for cfg in silo_variants(spec) {
                let variant = variant_name(&cfg, &spec.config);
                jobs.push(job(i, DesignKind::Silo, cfg, &variant));
            }
        }
        for (k, size) in sizes.iter().enumerate() {
            let i = workloads + k;
            let cfg = spec.config.with_cores(spec.sweep_cores);
            let mut unbounded = cfg.clone();
            // Room for every live entry of the largest transaction.
            unbounded.silo.entries = (size.live_max as usize + 8).max(cfg.silo.entries);
            jobs.push(job(i, DesignKind::Silo, cfg, ""));
            jobs.push(job(i, DesignKind::Silo, unbounded, UNBOUNDED));
        }
        if spec.sensitivity {
            let big = spec.config.with_cores(spec.max_cores());
            let first_other = workloads + sizes.len();
            let first_prefix = first_other + others;
            let first_small = first_prefix + workloads;
            // A cell's traces: the workloads in its discipline, whole.
            let trace_of = |discipline, w: usize| {
                if discipline == spec.discipline {
                    w
                } else {
                    first_other + w
                }
            };
            for cell in Setting::grid() {
                if main_runs_cover(spec, cell) {
                    continue; // the design matrix ran this cell already
                }
                let cfg = cell_config(&big, cell);
                let variant = sensitivity_variant(&cell.label());
                for w in 0..workloads {
                    for &d in SENSITIVITY_DESIGNS.iter() {
                        jobs.push(job(trace_of(cell.discipline, w), d, cfg.clone(), &variant));
                    }
                }
            }
            for w in 0..workloads {
                let trace = first_prefix + w;
                for &d in SENSITIVITY_DESIGNS.iter() {
                    jobs.push(job(trace, d, big.clone(), &sensitivity_variant(PREFIX)));
                }
                for (name, _, cfg) in machine_variants(&big) {
                    for &d in SENSITIVITY_DESIGNS.iter() {
                        jobs.push(job(trace, d, cfg.clone(), &sensitivity_variant(name)));
                    }
                }
                let mut coalesced = big.clone();
                coalesced.silo.coalesce_lus = true;
                let variant = sensitivity_variant(COALESCED);
                jobs.push(job(trace, DesignKind::Silo, coalesced, &variant));
            }
            for i in first_small..all.len() {
                for &d in SENSITIVITY_DESIGNS.iter() {
                    jobs.push(job(i, d, big.clone(), &sensitivity_variant(SMALL)));
                }
            }
        }
        Plan { jobs }
    }
}

/// Variant of the transaction-size runs with a buffer large enough for every transaction.
const UNBOUNDED: &str = "entries=unbounded";
/// Sensitivity variant: Silo's log controller coalesces one line's in-place updates.
const COALESCED: &str = "coalesced-lu";
/// Sensitivity variant: instances 16× smaller.
const SMALL: &str = "small-data";
/// The plan's machine on the sensitivity prefixes (the reference of the variants).
const PREFIX: &str = "prefix reference";

/// The cost-model cell of the plan's own machine and traces.
fn main_cell(spec: &ReproSpec) -> Setting {
    Setting {
        media: spec.config.mem.media,
        discipline: spec.discipline,
        baselines_use_onpm_buffer: spec.config.mem.baselines_use_onpm_buffer,
    }
}

/// Whether the design matrix already ran `cell` at the largest core count for every
/// design of the sensitivity study.
fn main_runs_cover(spec: &ReproSpec, cell: Setting) -> bool {
    cell == main_cell(spec)
        && spec.cores.contains(&spec.max_cores())
        && SENSITIVITY_DESIGNS.iter().all(|d| spec.designs.contains(d))
}

/// The variant name of a sensitivity run.
fn sensitivity_variant(name: &str) -> String {
    format!("sensitivity/{name}")
}

/// The machine of cost-model cell `cell`: `big` with its media model and on-PM buffer
/// choice (its store discipline is the trace's).
fn cell_config(big: &Config, cell: Setting) -> Config {
    let mut cfg = big.clone();
    cfg.mem.media = cell.media;
    cfg.mem.baselines_use_onpm_buffer = cell.baselines_use_onpm_buffer;
    cfg
}

/// Machine variants of the sensitivity study (name, description, configuration), each one
/// assumption of the plan's machine `big` changed, within the ranges the literature on the
/// paper's simulators (gem5, NVMain) gives, or naming their source.
fn machine_variants(big: &Config) -> Vec<(&'static str, &'static str, Config)> {
    let mut mlp = big.clone();
    mlp.core.mlp = 4;
    let mut banks = big.clone();
    banks.mem.banks = 16;
    let mut pausing = big.clone();
    pausing.mem.write_pausing = true;
    vec![
        (
            "mlp=4",
            "4 outstanding loads per core (gem5's O3 core behind its default 4 L1D MSHRs; \
             the traces carry no dependences, so dependent misses overlap too)",
            mlp,
        ),
        (
            "banks=16",
            "16 PCM banks instead of NVMain's 4 (the upper end of the 8-16 of PCM studies): \
             four times the media write bandwidth",
            banks,
        ),
        (
            "write-pausing",
            "reads pause media writes and are never held by write drains (Qureshi et al., \
             HPCA'10), instead of NVMain's FRFCFS-WQF holding them",
            pausing,
        ),
    ]
}

/// The designs of the sensitivity study (those of the four headline ratios).
const SENSITIVITY_DESIGNS: [DesignKind; 4] = [
    DesignKind::Fwb,
    DesignKind::MorLog,
    DesignKind::Lad,
    DesignKind::Silo,
];

/// The largest-core comparison in every cost-model cell (on the whole traces: the cell of
/// the plan's own machine is the design matrix's largest-core runs), then the plan's
/// machine on the trace prefixes and each variant of it on the same prefixes.
fn sensitivity(rep: &Reproduction) -> Vec<Sensitivity> {
    let rows = |variant: &str| -> Vec<RunRow> {
        let name = sensitivity_variant(variant);
        rep.sweep_runs
            .iter()
            .filter(|r| r.variant == name)
            .cloned()
            .collect()
    };
    let big = rep.spec.max_cores();
    let mut out = Vec::new();
    for cell in Setting::grid() {
        let label = cell.label();
        let found = if main_runs_cover(&rep.spec, cell) {
            rep.runs
                .iter()
                .filter(|r| r.cores == big && SENSITIVITY_DESIGNS.contains(&r.design))
                .cloned()
                .collect()
        } else {
            rows(&label)
        };
        if !found.is_empty() {
            let description = cell_description(cell);
            out.push(sensitivity_of(&label, &description, Some(cell), &found));
        }
    }
    let reference = rows(PREFIX);
    if reference.is_empty() {
        return out;
    }
    out.push(sensitivity_of(
        PREFIX,
        &format!(
            "the plan's machine on the first {} transactions per core, the variants' \
             reference (the LLC has not filled with dirty lines yet on every workload)",
            rep.spec.sensitivity_transactions
        ),
        None,
        &reference,
    ));
    let big_config = rep.spec.config.with_cores(big);
    let variants = machine_variants(&big_config)
        .into_iter()
        .map(|(name, description, _)| (name, description))
        .chain([(
            SMALL,
            "instances 16× smaller (data sets nearer the LLC's size)",
        )]);
    for (variant, description) in variants {
        let found = rows(variant);
        if !found.is_empty() {
            out.push(sensitivity_of(variant, description, None, &found));
        }
    }
    // Silo with line-coalesced in-place updates against the reference baselines.
    let coalesced: Vec<RunRow> = reference
        .iter()
        .filter(|r| r.design != DesignKind::Silo)
        .cloned()
        .chain(rows(COALESCED))
        .collect();
    if coalesced.iter().any(|r| r.design == DesignKind::Silo) {
        out.push(sensitivity_of(
            COALESCED,
            "Silo's log controller merges one line's in-place updates into one write (not in \
             the paper)",
            None,
            &coalesced,
        ));
    }
    out
}

/// What a cost-model cell assumes, in a sentence.
fn cell_description(cell: Setting) -> String {
    let media = match cell.media {
        hwsim::config::MediaModel::NvmainRow => "a write pulse per media write (NVMain)",
        hwsim::config::MediaModel::BlockDcw => {
            "a comparison read and a pulse per changed 64 B block"
        }
        hwsim::config::MediaModel::Proportional => "programming time in proportion to the bytes",
    };
    let stores = match cell.discipline {
        tracegen::StoreDiscipline::Pmdk => "PMDK-style stores",
        tracegen::StoreDiscipline::WriteMinimal => "write-minimal stores",
    };
    let buffer = if cell.baselines_use_onpm_buffer {
        "every design writes through the on-PM buffer"
    } else {
        "only Silo writes through the on-PM buffer"
    };
    let paper = if cell == Setting::PAPER {
        " (the paper-faithful cell)"
    } else {
        ""
    };
    format!("{media}; {stores}; {buffer}{paper}")
}

fn sensitivity_of(
    variant: &str,
    description: &str,
    setting: Option<Setting>,
    rows: &[RunRow],
) -> Sensitivity {
    let find = |w: &str, d| rows.iter().find(|r| r.workload == w && r.design == d);
    let ratio = |a, b, f: &dyn Fn(&RunRow) -> f64| {
        results::geomean(rows.iter().filter(|r| r.design == a).filter_map(|r| {
            let other = find(&r.workload, b)?;
            Some(f(r) / f(other).max(f64::MIN_POSITIVE))
        }))
    };
    let tp = |r: &RunRow| r.throughput;
    let programmed = |r: &RunRow| r.programmed_per_tx();
    let sent = |r: &RunRow| r.bytes_per_tx();
    use DesignKind::{Fwb, Lad, MorLog, Silo};
    Sensitivity {
        variant: variant.to_string(),
        description: description.to_string(),
        setting,
        silo_vs_lad: ratio(Silo, Lad, &tp),
        silo_vs_morlog: ratio(Silo, MorLog, &tp),
        silo_vs_fwb: ratio(Silo, Fwb, &tp),
        morlog_vs_fwb: ratio(MorLog, Fwb, &tp),
        silo_programmed_vs_morlog: ratio(Silo, MorLog, &programmed),
        silo_programmed_vs_fwb: ratio(Silo, Fwb, &programmed),
        silo_sent_vs_morlog: ratio(Silo, MorLog, &sent),
    }
}

/// Relative simulation cost per event (Base makes two synchronous writes per store).
fn design_weight(d: DesignKind) -> u64 {
    match d {
        DesignKind::Ideal | DesignKind::Lad => 2,
        _ => 3,
    }
}

/// The Silo configurations of the latency and entries sweeps that differ from the reference
/// machine (whose runs are in the design matrix).
fn silo_variants(spec: &ReproSpec) -> Vec<Config> {
    let base = spec.config.with_cores(spec.sweep_cores);
    let lat = spec.latencies.iter().map(|&l| {
        let mut c = base.clone();
        c.silo.buffer_latency = l;
        c
    });
    let ent = spec.entries.iter().map(|&e| {
        let mut c = base.clone();
        c.silo.entries = e;
        c
    });
    let needed = |c: &Config| !(c.silo == base.silo && spec.cores.contains(&spec.sweep_cores));
    lat.chain(ent).filter(needed).collect()
}

fn variant_name(c: &Config, reference: &Config) -> String {
    if c.silo.buffer_latency != reference.silo.buffer_latency {
        format!("latency={}", c.silo.buffer_latency)
    } else if c.silo.entries != reference.silo.entries {
        format!("entries={}", c.silo.entries)
    } else {
        "reference".into()
    }
}

fn sweeps(rep: &Reproduction, names: &[String]) -> Vec<Sweep> {
    let spec = &rep.spec;
    let cores = spec.sweep_cores;
    let reference = &spec.config.silo;
    let silo_run = |w: &str, variant: String| -> Option<RunRow> {
        let main = (variant == "reference")
            .then(|| rep.run(w, DesignKind::Silo, cores).cloned())
            .flatten();
        main.or_else(|| {
            rep.sweep_runs
                .iter()
                .find(|r| r.workload == w && r.design == DesignKind::Silo && r.variant == variant)
                .cloned()
        })
    };
    let lat_variant = |v: u64| match v == reference.buffer_latency {
        true => "reference".to_string(),
        false => format!("latency={v}"),
    };
    let ent_variant = |v: u64| match v as usize == reference.entries {
        true => "reference".to_string(),
        false => format!("entries={v}"),
    };
    let first = spec.latencies[0];
    let lats: Vec<u64> = spec.latencies.clone();
    let ents: Vec<u64> = spec.entries.iter().map(|&e| e as u64).collect();
    let sizes: Vec<u64> = spec.size_multiples.iter().map(|&k| u64::from(k)).collect();
    let size_run = |w: &str, k: u64, variant: &str| {
        rep.sweep_runs
            .iter()
            .find(|r| r.workload == format!("{w}-x{k}") && r.variant == variant)
            .cloned()
    };
    let core_counts: Vec<u64> = spec.cores.iter().map(|&c| c as u64).collect();
    vec![
        run::sweep(
            "latency",
            &format!("Silo, {first}-cycle buffer, {cores} cores"),
            &lats,
            names,
            &|w, v| silo_run(w, lat_variant(v)),
            &|w, _| silo_run(w, lat_variant(first)),
        ),
        run::sweep(
            "entries",
            &format!("Silo, {} entries, {cores} cores", reference.entries),
            &ents,
            names,
            &|w, v| silo_run(w, ent_variant(v)),
            &|w, _| silo_run(w, "reference".to_string()),
        ),
        run::sweep(
            "tx_size",
            "Silo with a log buffer holding every live entry, on the same trace",
            &sizes,
            names,
            &|w, k| size_run(w, k, ""),
            &|w, k| size_run(w, k, UNBOUNDED),
        ),
        run::sweep(
            "cores",
            "Silo throughput relative to FWB at the same core count",
            &core_counts,
            names,
            &|w, c| rep.run(w, DesignKind::Silo, c as usize).cloned(),
            &|w, c| rep.run(w, DesignKind::Fwb, c as usize).cloned(),
        ),
    ]
}

fn timing(
    rep: &Reproduction,
    spec: &ReproSpec,
    (generation_seconds, simulation_wall_seconds): (f64, f64),
    (events, reused_runs): (u64, usize),
    started: Instant,
) -> Timing {
    // Reused rows carry no host or CPU time, and `events` counts simulated events only.
    let all: Vec<&RunRow> = rep.runs.iter().chain(&rep.sweep_runs).collect();
    let host: f64 = all.iter().map(|r| r.host_seconds).sum();
    let cpu: f64 = all.iter().map(|r| r.cpu_seconds).sum();
    let big = spec.max_cores();
    let per_design = |seconds: fn(&RunRow) -> f64| -> Vec<(DesignKind, f64)> {
        spec.designs
            .iter()
            .map(|&d| {
                let rs = rep.runs.iter().filter(|r| r.design == d && r.cores == big);
                let (e, s) = rs.fold((0u64, 0.0), |(e, s), r| (e + r.events, s + seconds(r)));
                (d, e as f64 / s.max(1e-9))
            })
            .collect()
    };
    Timing {
        threads: spec.host_threads(),
        generation_seconds,
        simulation_wall_seconds,
        wall_seconds: started.elapsed().as_secs_f64(),
        events,
        events_per_host_second: events as f64 / host.max(1e-9),
        per_design_events_per_second: per_design(|r| r.host_seconds),
        events_per_cpu_second: events as f64 / cpu.max(1e-9),
        per_design_events_per_cpu_second: per_design(|r| r.cpu_seconds),
        simulation_cpu_seconds: cpu,
        reused_runs,
    }
}
