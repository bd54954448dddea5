//! `ferrite bench`: engines × workloads with the bench harness, printed side by side with
//! ratios against a baseline engine measured in the same run.

use crate::cells;
use bench::choice::{EngineChoice, WorkloadChoice};
use bench::runner::{Measurement, RunSpec};
use comfy_table::Table;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use workloads::Params;

/// What `ferrite bench` was asked to run.
#[derive(Clone, Debug)]
pub struct BenchRequest {
    /// Engines, in column order; ratios are against `baseline` (or the first engine).
    pub engines: Vec<EngineChoice>,
    /// Workloads.
    pub workloads: Vec<WorkloadChoice>,
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Workload parameters (threads overridden per run).
    pub params: Params,
    /// Operations per timed run.
    pub ops: u64,
    /// Warm-up operations.
    pub warmup: u64,
    /// Timed runs per configuration.
    pub runs: usize,
    /// Pool size.
    pub pool_size: u64,
    /// Pool directory.
    pub pool_dir: PathBuf,
    /// Emulated PM cost of Ferrite's pools (`--pm-line-ns`, `--pm-fence-ns`).
    pub pm_latency: pmem::LatencyModel,
}

/// Runs every configuration of `request`, the engines of each (workload, threads) together
/// with their timed runs interleaved (`bench::runner::run_interleaved`); a configuration
/// whose engine is unavailable (PMDK not installed) or that does not exist (the raw
/// reference on a workload it lacks) is reported and skipped, any other failure stops the
/// run once its group is done.
pub fn run(request: &BenchRequest, quiet: bool) -> anyhow::Result<Vec<Measurement>> {
    let configs = configurations(request);
    let per_spec = request.ops * request.runs as u64;
    let bar = progress_bar(configs.len() as u64 * per_spec, quiet);
    let mut results = Vec::new();
    let mut skipped = Skipped::default();
    let mut first = 0;
    for group in configs.chunk_by(|a, b| a.workload == b.workload && a.params == b.params) {
        bar.set_message(format!(
            "{} ×{} on {}",
            group[0].workload.name(),
            group[0].params.threads,
            engine_names(group)
        ));
        let done: Vec<AtomicU64> = group.iter().map(|_| AtomicU64::new(0)).collect();
        let outcomes = bench::runner::run_interleaved(group, &|index, n| {
            done[index].store(n, Ordering::Relaxed);
            let total: u64 = done.iter().map(|d| d.load(Ordering::Relaxed)).sum();
            bar.set_position(first as u64 * per_spec + total);
        });
        for (spec, outcome) in group.iter().zip(outcomes) {
            match outcome {
                Ok(measurement) => results.push(measurement),
                Err(bench::runner::RunError::Open(bench::choice::OpenError::Pmdk(error))) => {
                    skipped.unavailable += 1;
                    bar.suspend(|| eprintln!("ferrite: bench: skipping pmdk: {error}"));
                }
                Err(bench::runner::RunError::Unsupported(why)) => {
                    skipped.not_measurable += 1;
                    bar.suspend(|| eprintln!("ferrite: bench: skipping {}: {why}", spec.engine));
                }
                Err(error) => {
                    bar.finish_and_clear();
                    return Err(failed_run(spec, error));
                }
            }
        }
        first += group.len();
    }
    bar.finish_and_clear();
    if results.is_empty() {
        return Err(skipped.nothing_measured());
    }
    Ok(results)
}

/// Configurations `run` skipped, by why.
#[derive(Debug, Default)]
struct Skipped {
    /// An engine that is not installed (PMDK).
    unavailable: usize,
    /// A configuration that does not exist (the raw reference on a workload it lacks).
    not_measurable: usize,
}

impl Skipped {
    /// The error of a run that measured nothing at all: it must not look like a success
    /// with an empty table. Asking only for configurations that do not exist is a usage
    /// error; a missing peer is not.
    fn nothing_measured(&self) -> anyhow::Error {
        let why = "bench: nothing was measured: every configuration asked for was skipped";
        if self.unavailable == 0 && self.not_measurable > 0 {
            crate::UsageError(why.to_owned()).into()
        } else {
            anyhow::anyhow!("{why}")
        }
    }
}

/// The error of a failed configuration, saying what ran where; the typed error is kept as
/// the source, so its exit code comes from the pool error inside (out of space: 18). A pool
/// that could not be made names its directory; a pool too small for the engine and workload
/// says what filled it and what would help (`bench_space::advice`).
fn failed_run(spec: &RunSpec, error: bench::runner::RunError) -> anyhow::Error {
    use bench::choice::OpenError;
    use bench::runner::RunError;
    let what = format!("{} on {}", spec.workload.name(), spec.engine);
    let out_of_space = |error: &tx::TxError| matches!(error, tx::TxError::OutOfSpace { .. });
    let loading = match &error {
        RunError::Open(OpenError::Tx(e)) | RunError::Setup(e) if out_of_space(e) => Some(true),
        RunError::Operation(e) if out_of_space(e) => Some(false),
        _ => None,
    };
    let context = match (&error, loading) {
        (RunError::Open(OpenError::Pool(_)), _) => {
            format!("{what}: creating its pool in {}", spec.pool_dir.display())
        }
        (_, Some(loading)) => {
            let ops = crate::bench_space::Ops {
                warmup: spec.warmup_ops,
                per_run: spec.ops,
                runs: spec.runs as u64,
            };
            let advice = crate::bench_space::advice(
                spec.engine,
                spec.workload,
                &spec.params,
                ops,
                spec.pool_size,
                loading,
            );
            format!("{what}: {advice}")
        }
        _ => what,
    };
    anyhow::Error::new(error).context(context)
}

fn engine_names(group: &[RunSpec]) -> String {
    let names: Vec<String> = group.iter().map(|spec| spec.engine.to_string()).collect();
    names.join(", ")
}

fn configurations(request: &BenchRequest) -> Vec<RunSpec> {
    let mut specs = Vec::new();
    for &workload in &request.workloads {
        for &threads in &request.threads {
            for &engine in &request.engines {
                specs.push(RunSpec {
                    engine,
                    workload,
                    params: Params {
                        threads,
                        ..request.params.clone()
                    },
                    ops: request.ops,
                    warmup_ops: request.warmup,
                    runs: request.runs,
                    pool_dir: request.pool_dir.clone(),
                    pool_size: request.pool_size,
                    pm_latency: request.pm_latency,
                });
            }
        }
    }
    specs
}

fn progress_bar(len: u64, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    ProgressBar::new(len).with_style(
        ProgressStyle::with_template("[{bar:30}] {pos}/{len} ops {msg} ({elapsed})")
            .expect("the progress template is valid")
            .progress_chars("=> "),
    )
}

/// Prints one table per (workload, threads), with throughput ratios against the baseline;
/// with an emulated PM cost, first what it charges and a column of each engine's charge.
pub fn print_tables(
    results: &[Measurement],
    baseline: Option<&str>,
    pm_latency: pmem::LatencyModel,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    if pm_latency.is_enabled() {
        writeln!(out, "\n{}", pm_cost_note(results, pm_latency))?;
    }
    let width = crate::terminal::width();
    let mut groups: Vec<(String, usize)> = results
        .iter()
        .map(|m| (m.workload.clone(), m.threads))
        .collect();
    groups.dedup();
    for (workload, threads) in groups {
        let rows: Vec<&Measurement> = results
            .iter()
            .filter(|m| m.workload == workload && m.threads == threads)
            .collect();
        let base = baseline
            .and_then(|name| rows.iter().find(|m| m.engine == name))
            .or(rows.first())
            .map(|m| (m.engine.clone(), m.throughput.median));
        writeln!(out, "\n{workload}, {threads} thread(s)")?;
        let mut table = Table::new();
        let ratio_heading = base
            .as_ref()
            .map_or("ratio".to_owned(), |(name, _)| format!("× {name}"));
        let mut header = vec![
            "engine".to_owned(),
            "Kops/s (median)".into(),
            ratio_heading,
            "p50 µs".into(),
            "p99 µs".into(),
            "fences/commit".into(),
            "flushes/commit".into(),
            "PM B/op".into(),
            "WA (ours)".into(),
            "WA TimeStone (new objs / artifact)".into(),
        ];
        if pm_latency.is_enabled() {
            header.push("emulated PM µs/op".into());
        }
        table.set_header(header);
        for m in &rows {
            let mut cells = row(m, base.as_ref().map(|b| b.1));
            if pm_latency.is_enabled() {
                cells.push(charged_cell(m, pm_latency));
            }
            table.add_row(cells);
        }
        let note = "the JSON that `--json FILE` writes (docs/bench-json.md)";
        writeln!(out, "{}", crate::terminal::render(table, width, Some(note)))?;
        for m in rows.iter().filter(|m| !m.events.is_empty()) {
            writeln!(out, "{}", events_line(m))?;
        }
    }
    Ok(())
}

/// What the emulated PM cost charges, and which measured engines it could not charge (no
/// line written back, no fence): their rates are not PM rates, whatever column they sit in.
fn pm_cost_note(results: &[Measurement], pm_latency: pmem::LatencyModel) -> String {
    let mut uncharged: Vec<&str> = Vec::new();
    for m in results {
        let charged = emulated_ns_per_op(m, pm_latency).is_some_and(|ns| ns > 0.0);
        if !charged && !uncharged.contains(&m.engine.as_str()) {
            uncharged.push(&m.engine);
        }
    }
    let mut note = format!(
        "Emulated PM cost: {} ns spun per cache line Ferrite's pools write back (flushed or \
         streamed) and {} ns per fence; the last column estimates each engine's charge per \
         operation from its counters, streamed bytes rounded up to lines over the whole run, \
         while the pools charge every line a streamed write touches: an engine that streams \
         records shorter than a line (redo, ideal, raw) pays up to one line per record more \
         than the column says (pmdk, which the emulation cannot reach, is skipped).",
        pm_latency.line_writeback_ns, pm_latency.fence_ns
    );
    if !uncharged.is_empty() {
        note.push_str(&format!(
            " Not charged at all: {} (nothing written back or fenced; mem has no pool, \
             raw:volatile never writes back), so their rates are DRAM rates, not PM ones.",
            uncharged.join(", ")
        ));
    }
    note
}

/// Nanoseconds of emulated PM cost charged per operation, estimated from the counters: the
/// lines written back (flushed, plus the streamed bytes rounded up to whole lines over the
/// run) and the fences, at `pm_latency`'s prices; `None` when the engine stores nothing
/// through Ferrite's seam. An estimate: `pmem::native` charges each streamed write every line
/// it touches (a 32-byte record is a whole line there, half a line here), and does not
/// charge the fringe lines of a streamed write that the counters count as flushed.
pub fn emulated_ns_per_op(m: &Measurement, pm_latency: pmem::LatencyModel) -> Option<f64> {
    if !cells::traffic_counted(m) || m.ops == 0 {
        return None;
    }
    let charged = m
        .lines_written_back()
        .saturating_mul(pm_latency.line_writeback_ns)
        + m.counters.fences.saturating_mul(pm_latency.fence_ns);
    Some(charged as f64 / m.ops as f64)
}

fn charged_cell(m: &Measurement, pm_latency: pmem::LatencyModel) -> String {
    match emulated_ns_per_op(m, pm_latency) {
        None => "none (no PM)".to_owned(),
        Some(ns) => format!("{:.2}", ns / 1e3),
    }
}

/// An engine's own event counters over the timed runs, one line (the MVCC engine's include
/// the byte counters TimeStone's write amplification is computed from).
pub fn events_line(m: &Measurement) -> String {
    let parts: Vec<String> = m
        .events
        .iter()
        .map(|(name, value)| format!("{name} {value}"))
        .collect();
    format!("  {} events: {}", m.engine, parts.join(", "))
}

/// The version of the `--json` document's layout (docs/bench-json.md); a change that removes
/// or renames a field bumps it.
pub const JSON_VERSION: u32 = 1;

/// The `--json` document: what was asked for and every measurement, each marked with
/// whether its PM traffic was counted (engines that store through Ferrite's persistence seam;
/// PMDK stores through its own library, so its counters and per-operation traffic read 0
/// there, meaning "not measured").
pub fn json_report(request: &BenchRequest, results: &[Measurement]) -> serde_json::Value {
    let measurements: Vec<serde_json::Value> = results
        .iter()
        .map(|m| {
            let mut value = serde_json::to_value(m).unwrap_or(serde_json::Value::Null);
            if let Some(object) = value.as_object_mut() {
                object.insert("traffic_counted".into(), cells::traffic_counted(m).into());
                object.insert(
                    "emulated_pm_ns_per_op".into(),
                    emulated_ns_per_op(m, request.pm_latency).into(),
                );
            }
            value
        })
        .collect();
    serde_json::json!({
        "format": "ferrite-bench",
        "version": JSON_VERSION,
        "request": {
            "engines": request.engines.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "workloads": request.workloads.iter().map(|w| w.name()).collect::<Vec<_>>(),
            "threads": request.threads,
            "keys": request.params.keys,
            "value_size": request.params.value_size,
            "update_percent": request.params.update_percent,
            "seed": request.params.seed,
            "ops_per_run": request.ops,
            "warmup_ops": request.warmup,
            "runs": request.runs,
            "pool_size": request.pool_size,
            "pool_dir": request.pool_dir.display().to_string(),
            "pm_line_ns": request.pm_latency.line_writeback_ns,
            "pm_fence_ns": request.pm_latency.fence_ns,
            "locks_at_one_thread": request.params.locks_at_one_thread,
        },
        "measurements": measurements,
    })
}

/// Printed above the tables of a `--locks-at-one-thread` run, so a reader of a one-thread
/// table knows which engines paid for locks.
pub const LOCKS_AT_ONE_THREAD_NOTE: &str = "One-thread runs took the workloads' locks \
     (--locks-at-one-thread): redo, undo, PMDK and ideal paid for them; mvcc isolates its \
     transactions itself and takes none.";

/// One table row of a measurement.
pub fn row(m: &Measurement, base_throughput: Option<f64>) -> Vec<String> {
    vec![
        m.engine.clone(),
        cells::kops(m.throughput.median),
        cells::optional(cells::ratio(m.throughput.median, base_throughput)),
        cells::micros(m.latency_ns[0]),
        cells::micros(m.latency_ns[1]),
        cells::optional(m.traffic.fences_per_commit),
        cells::optional(m.traffic.flushes_per_commit),
        cells::pm_bytes_per_op(m),
        cells::optional(m.traffic.write_amplification),
        cells::timestone_amplification(m),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use bench::measure::Summary;

    fn measured(engine: &str, counters: pmem::Counters) -> Measurement {
        Measurement {
            engine: engine.into(),
            workload: "hash-0%".into(),
            threads: 1,
            ops: 100,
            throughput: Summary {
                median: 1e6,
                min: 1e6,
                max: 1e6,
                runs: 1,
            },
            latency_ns: [100, 200, 300],
            traffic: bench::runner::Traffic::default(),
            counters,
            mix: Default::default(),
            events: Default::default(),
            checked: true,
        }
    }

    /// A read-only run of a seam engine stores nothing: that is a count of zero, not the
    /// "not measured" of PMDK (it once read `traffic_counted: false`, "n/a" bytes and "none
    /// (no PM)" of emulated cost, as if redo had bypassed the seam).
    #[test]
    fn a_seam_engine_that_stored_nothing_was_counted_zero() {
        let latency = pmem::LatencyModel {
            line_writeback_ns: 100,
            fence_ns: 10,
        };
        for engine in ["redo", "undo:packed", "mvcc", "ideal", "raw"] {
            let m = measured(engine, pmem::Counters::default());
            assert!(cells::traffic_counted(&m), "{engine}");
            assert_eq!(row(&m, None)[7], "0.0", "{engine}: PM B/op");
            assert_eq!(emulated_ns_per_op(&m, latency), Some(0.0), "{engine}");
        }
        for engine in ["pmdk", "mem"] {
            let m = measured(engine, pmem::Counters::default());
            assert!(!cells::traffic_counted(&m), "{engine}");
            assert_eq!(row(&m, None)[7], "n/a", "{engine}: PM B/op");
            assert_eq!(emulated_ns_per_op(&m, latency), None, "{engine}");
        }
        let request = BenchRequest {
            engines: vec![bench::engines::REDO],
            workloads: vec![WorkloadChoice::Hash],
            threads: vec![1],
            params: Params::default(),
            ops: 100,
            warmup: 0,
            runs: 1,
            pool_size: 1 << 30,
            pool_dir: PathBuf::from("/dev/shm"),
            pm_latency: pmem::LatencyModel::NONE,
        };
        let json = json_report(
            &request,
            &[
                measured("redo", pmem::Counters::default()),
                measured("pmdk", pmem::Counters::default()),
            ],
        );
        assert_eq!(json["measurements"][0]["traffic_counted"], true);
        assert_eq!(json["measurements"][1]["traffic_counted"], false);
    }
}
