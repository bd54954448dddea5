//! `ferrite sim run`: one design over one trace, summarised for people and, with `--json`,
//! written whole for programs.

use super::{RunArgs, generate, trace_spec};
use crate::UsageError;
use crate::size::format_bytes;
use anyhow::Context;
use hwsim::metrics::{LogStats, StallCycles};
use hwsim::{Config, DesignKind, Metrics, SimError};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use trace::Trace;

/// Where the simulated trace came from.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "source", rename_all = "lowercase")]
enum TraceSource {
    /// Generated for this run by `tracegen`.
    Generated { spec: tracegen::TraceSpec },
    /// Read from a file.
    File { path: PathBuf },
}

impl TraceSource {
    /// What error messages name: the file, or the generated workload.
    fn label(&self) -> String {
        match self {
            TraceSource::Generated { spec } => spec.workload.to_string(),
            TraceSource::File { path } => path.display().to_string(),
        }
    }
}

/// Everything `--json` writes: enough to rerun the simulation and every number it produced.
#[derive(Debug, Serialize)]
struct RunRecord {
    design: DesignKind,
    workload: String,
    cores: usize,
    /// `--config`, when given.
    config_file: Option<PathBuf>,
    trace: TraceInfo,
    per_tx: PerTransaction,
    config: Config,
    metrics: Metrics,
}

/// The trace as the record describes it.
#[derive(Debug, Serialize)]
struct TraceInfo {
    #[serde(flatten)]
    source: TraceSource,
    /// Streams in the trace (the run simulates the first `cores`).
    streams: usize,
    /// Events of every stream.
    events: u64,
    /// The trace's own metadata (workload, generation parameters).
    meta: trace::TraceMeta,
}

/// The headline quantities per committed transaction (the run's totals over its
/// transactions), so runs of different lengths compare directly.
#[derive(Debug, Serialize)]
struct PerTransaction {
    write_requests: Option<f64>,
    write_bytes: Option<f64>,
    final_drain_bytes: Option<f64>,
    programmed_bytes: Option<f64>,
    media_writes: Option<f64>,
    log_bytes: Option<f64>,
    stall_cycles: StallsPerTx,
}

/// `value` per committed transaction; none without a committed transaction.
fn per_tx(value: u64, committed: u64) -> Option<f64> {
    (committed > 0).then(|| value as f64 / committed as f64)
}

/// A per-transaction figure with `decimals`, or "n/a" without a committed transaction.
fn per_tx_text(value: u64, committed: u64, decimals: usize) -> String {
    per_tx(value, committed).map_or_else(|| "n/a".to_owned(), |v| format!("{v:.decimals$}"))
}

/// Stall cycles per committed transaction, by cause.
#[derive(Debug, Serialize)]
struct StallsPerTx {
    load: Option<f64>,
    store_buffer: Option<f64>,
    writeback: Option<f64>,
    persist: Option<f64>,
    log_buffer: Option<f64>,
    commit: Option<f64>,
    drain: Option<f64>,
    mem_drain: Option<f64>,
}

/// Runs `sim run`.
pub fn run(args: &RunArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    refuse_silo_options_elsewhere(args)?;
    if let Some(path) = &args.json {
        crate::output::file_can_be_written(path)?;
        refuse_json_over_an_input(path, args)?;
    }
    let (file, file_cores) = match &args.config {
        Some(path) => read_config(path)?,
        None => (Config::default(), None),
    };
    // `--cores` wins over the file's `cores`, which wins over the trace's streams.
    let requested = args.cores.or(file_cores);
    let (trace, source) = obtain_trace(args, requested)?;
    let cores = cores_to_simulate(requested, &trace, &source)?;
    let config = machine(args, file, cores)?;
    let metrics =
        hwsim::simulate(&config, args.design, &trace).map_err(|e| sim_error(e, &source))?;
    let record = RunRecord {
        design: args.design,
        workload: trace.meta.workload.clone(),
        cores,
        config_file: args.config.clone(),
        per_tx: per_transaction(&metrics),
        trace: TraceInfo {
            source,
            streams: trace.cores(),
            events: trace.total_events(),
            meta: trace.meta.clone(),
        },
        config,
        metrics,
    };
    print_summary(&record, out)?;
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&record)?;
        crate::output::replace_file(path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// `--json` naming the `--trace` or `--config` file (the same file, by any path) would
/// replace the run's input with its record: refused before the run.
fn refuse_json_over_an_input(json: &Path, args: &RunArgs) -> Result<(), UsageError> {
    use std::os::unix::fs::MetadataExt;
    let Ok(output) = std::fs::metadata(json) else {
        // Not there yet: no input can be it.
        return Ok(());
    };
    let inputs = [("--trace", &args.trace), ("--config", &args.config)];
    for (option, input) in inputs {
        let same = input
            .as_deref()
            .and_then(|input| std::fs::metadata(input).ok())
            .is_some_and(|input| (input.dev(), input.ino()) == (output.dev(), output.ino()));
        if same {
            return Err(UsageError(format!(
                "{}: --json names the {option} file: the record would replace it",
                json.display()
            )));
        }
    }
    Ok(())
}

/// `--log-latency`, `--log-entries` and `--coalesce-lus` configure Silo's log buffer and
/// controller: for another design they would change nothing, so they are refused.
fn refuse_silo_options_elsewhere(args: &RunArgs) -> Result<(), UsageError> {
    let given = [
        ("--log-latency", args.log_latency.is_some()),
        ("--log-entries", args.log_entries.is_some()),
        ("--coalesce-lus", args.coalesce_lus),
    ];
    match given.iter().find(|(_, set)| *set) {
        Some((option, _)) if args.design != DesignKind::Silo => Err(UsageError(format!(
            "{option} configures Silo's log buffer; --design {} has none",
            args.design.name()
        ))),
        _ => Ok(()),
    }
}

/// The trace file, or a trace generated from the workload options on `cores` cores (8 when
/// neither `--cores` nor the configuration file names them).
fn obtain_trace(args: &RunArgs, cores: Option<u64>) -> anyhow::Result<(Trace, TraceSource)> {
    if let Some(path) = &args.trace {
        let usage = |why: String| UsageError(format!("{}: {why}", path.display()));
        let trace = Trace::read(path).map_err(|error| match error {
            trace::TraceError::Io(io) => unreadable(path, io),
            error => usage(error.to_string()).into(),
        })?;
        trace
            .check_transactions()
            .map_err(|error| usage(error.to_string()))?;
        return Ok((trace, TraceSource::File { path: path.clone() }));
    }
    // clap requires --workload when --trace is absent.
    let workload = args
        .workload
        .ok_or_else(|| UsageError("sim run: --workload or --trace is required".into()))?;
    let spec = trace_spec(workload, cores.unwrap_or(8), &args.shape);
    let trace = generate(&spec)?;
    Ok((trace, TraceSource::Generated { spec }))
}

/// The cores asked for (`--cores` or the configuration file's), or every stream of the trace
/// (at most hwsim's 64).
fn cores_to_simulate(
    requested: Option<u64>,
    trace: &Trace,
    source: &TraceSource,
) -> anyhow::Result<usize> {
    match requested {
        // clap keeps --cores, and `read_config` the file's cores, in 1..=MAX_CORES.
        Some(cores) => Ok(cores as usize),
        None if trace.cores() == 0 => {
            Err(UsageError(format!("{}: the trace has no streams", source.label())).into())
        }
        None if trace.cores() > super::MAX_CORES as usize => Err(UsageError(format!(
            "{}: the trace has {} streams, more than the {} cores the simulator models; \
             --cores N simulates the first N",
            source.label(),
            trace.cores(),
            super::MAX_CORES
        ))
        .into()),
        None => Ok(trace.cores()),
    }
}

/// The machine of `--config` (or the default one), then the single-parameter options,
/// checked.
fn machine(args: &RunArgs, mut config: Config, cores: usize) -> anyhow::Result<Config> {
    config.cores = cores;
    if let Some(latency) = args.log_latency {
        config.silo.buffer_latency = latency;
    }
    if let Some(entries) = args.log_entries {
        config.silo.entries = entries as usize;
    }
    if let Some(mlp) = args.mlp {
        config.core.mlp = mlp as usize;
    }
    if let Some(lines) = args.onpm_lines {
        config.mem.onpm_lines = lines as usize;
    }
    config.silo.coalesce_lus |= args.coalesce_lus;
    if let Some(media) = args.media {
        config.mem.media = media;
    }
    config.mem.baselines_use_onpm_buffer |= args.baselines_onpm_buffer;
    config.mem.write_pausing |= args.write_pausing;
    config.mem.final_drain &= !args.no_final_drain;
    config
        .validate()
        .map_err(|error| UsageError(error.to_string()))?;
    Ok(config)
}

/// The default machine with the fields of the JSON object in `path` laid over it, at every
/// depth: `{"l1": {"latency": 8}}` changes the L1 latency and keeps its size and ways. Also
/// the file's `cores` when it names them, held to `--cores`' range.
fn read_config(path: &Path) -> anyhow::Result<(Config, Option<u64>)> {
    let usage = |why: String| UsageError(format!("{}: {why}", path.display()));
    let text = read_small_text(path).map_err(|e| unreadable(path, e))?;
    if text.len() > MAX_CONFIG_BYTES {
        return Err(usage(format!(
            "not a simulator configuration: larger than {} KiB",
            MAX_CONFIG_BYTES >> 10
        ))
        .into());
    }
    let not_config = |e: serde_json::Error| usage(format!("not a simulator configuration: {e}"));
    let given: serde_json::Value = serde_json::from_str(&text).map_err(not_config)?;
    if !given.is_object() {
        return Err(usage(
            "not a simulator configuration: a JSON object of hwsim's Config fields is expected"
                .to_owned(),
        )
        .into());
    }
    let named_cores = given.get("cores").is_some();
    let mut config = serde_json::to_value(Config::default())?;
    lay_over(&mut config, given);
    let config: Config = serde_json::from_value(config).map_err(not_config)?;
    if !named_cores {
        return Ok((config, None));
    }
    let cores = config.cores as u64;
    if !(1..=super::MAX_CORES).contains(&cores) {
        return Err(usage(format!(
            "cores = {cores}: the simulator models 1 to {} cores",
            super::MAX_CORES
        ))
        .into());
    }
    Ok((config, Some(cores)))
}

/// The largest configuration file read: every field of hwsim's `Config` takes about 2 KiB
/// of JSON, so a larger file is no configuration (`/dev/zero` was read until memory ran
/// out).
const MAX_CONFIG_BYTES: usize = 1 << 20;

/// The text of `path`, at most one byte past [`MAX_CONFIG_BYTES`].
fn read_small_text(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_CONFIG_BYTES as u64 + 1)
        .read_to_string(&mut text)?;
    Ok(text)
}

/// An input file that cannot be read: a missing one is the table's "no such file" (19),
/// anything else (a directory, no permission to read it) a usage error naming it.
fn unreadable(path: &Path, error: std::io::Error) -> anyhow::Error {
    if error.kind() == std::io::ErrorKind::NotFound {
        return crate::pool_cmd::PoolFailure {
            path: path.to_owned(),
            error: pmem::PoolError::NotFound,
        }
        .into();
    }
    UsageError(format!("{}: {error}", path.display())).into()
}

/// Replaces the values of `base` by those of `over`, descending into objects both have.
fn lay_over(base: &mut serde_json::Value, over: serde_json::Value) {
    use serde_json::Value;
    match (base, over) {
        (Value::Object(base), Value::Object(over)) => {
            for (key, value) in over {
                match base.get_mut(&key) {
                    Some(slot) => lay_over(slot, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, over) => *base = over,
    }
}

/// A simulation refused to start: the configuration or the trace does not fit.
fn sim_error(error: SimError, source: &TraceSource) -> anyhow::Error {
    UsageError(format!("{}: {error}", source.label())).into()
}

fn per_transaction(m: &Metrics) -> PerTransaction {
    let per = |value: u64| per_tx(value, m.committed_tx);
    let s = &m.stalls;
    PerTransaction {
        write_requests: per(m.pm.writes.requests),
        write_bytes: per(m.pm.writes.bytes),
        final_drain_bytes: per(m.pm.final_drain.bytes),
        programmed_bytes: per(m.pm.programmed_bytes),
        media_writes: per(m.pm.media_writes),
        log_bytes: per(m.pm.log.bytes),
        stall_cycles: StallsPerTx {
            load: per(s.load),
            store_buffer: per(s.store_buffer),
            writeback: per(s.writeback),
            persist: per(s.persist),
            log_buffer: per(s.log_buffer),
            commit: per(s.commit),
            drain: per(s.drain),
            mem_drain: per(s.mem_drain),
        },
    }
}

/// The summary: one labelled line per aspect of the run.
fn print_summary(record: &RunRecord, out: &mut dyn Write) -> std::io::Result<()> {
    for (label, text) in summary_lines(record) {
        writeln!(out, "{label:<12} {text}")?;
    }
    Ok(())
}

fn summary_lines(record: &RunRecord) -> Vec<(&'static str, String)> {
    let m = &record.metrics;
    let mut lines = vec![
        ("run", run_line(record)),
        ("settings", settings_line(record)),
        ("throughput", throughput_line(m)),
        ("PM writes", writes_line(m)),
        ("  by class", classes_line(m)),
        ("memory", memory_line(m, &record.config)),
        ("caches", caches_line(m)),
    ];
    match &m.log {
        Some(log) => {
            lines.push(("log", log_line(record.design, log)));
            lines.push(match record.design {
                DesignKind::Silo => ("overflow", overflow_line(log)),
                _ => ("records", records_line(log)),
            });
            if let Some(other) = other_log_line(log) {
                lines.push(("  also", other));
            }
        }
        None => lines.push(("log", format!("none ({} keeps no log)", m.design))),
    }
    lines.push(("stalls/tx", stalls_line(&m.stalls, m.committed_tx)));
    lines.push(("host", host_line(m)));
    lines
}

fn run_line(record: &RunRecord) -> String {
    let source = match &record.trace.source {
        TraceSource::Generated { spec } => format!(
            "generated, {} tx per core, {} keys, seed {}, {} stores",
            spec.transactions,
            spec.keys,
            spec.seed,
            spec.discipline.name()
        ),
        TraceSource::File { path } => {
            let streams = record.trace.streams;
            let noun = if streams == 1 { "stream" } else { "streams" };
            format!("{} ({streams} {noun})", path.display())
        }
    };
    let mem = &record.config.mem;
    let buffer = match (mem.onpm_lines, mem.baselines_use_onpm_buffer) {
        (0, _) => "no on-PM buffer".to_owned(),
        (lines, true) => format!("on-PM buffer of {lines} lines for every design"),
        (lines, false) => format!("on-PM buffer of {lines} lines for Silo and Ideal"),
    };
    format!(
        "{} on {}, {} at {} GHz, media {}, {buffer}; trace {source}",
        record.design.name(),
        record.workload,
        crate::eval::silo::cores_text(record.cores),
        record.config.freq_ghz,
        mem.media.name(),
    )
}

/// The configuration file and every setting that differs from the default machine, so two
/// different runs never print the same header.
fn settings_line(record: &RunRecord) -> String {
    let default = Config {
        cores: record.config.cores,
        ..Config::default()
    };
    let mut parts: Vec<String> = record
        .config_file
        .iter()
        .map(|path| format!("--config {}", path.display()))
        .collect();
    parts.extend(changed_settings(&default, &record.config));
    if parts.is_empty() {
        return "the default machine".to_owned();
    }
    parts.join(", ")
}

/// `name value (default d)` for every leaf of `config` that differs from `default`.
fn changed_settings(default: &Config, config: &Config) -> Vec<String> {
    let (Ok(default), Ok(config)) = (serde_json::to_value(default), serde_json::to_value(config))
    else {
        return vec!["(the configuration does not serialize)".to_owned()];
    };
    let mut changed = Vec::new();
    diff_leaves("", &default, &config, &mut changed);
    changed
}

fn diff_leaves(
    path: &str,
    default: &serde_json::Value,
    ours: &serde_json::Value,
    out: &mut Vec<String>,
) {
    use serde_json::Value;
    match (default, ours) {
        (Value::Object(d), Value::Object(o)) => {
            for (key, value) in o {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                diff_leaves(&child, d.get(key).unwrap_or(&Value::Null), value, out);
            }
        }
        _ if default != ours => out.push(format!("{path} {ours} (default {default})")),
        _ => {}
    }
}

fn throughput_line(m: &Metrics) -> String {
    let seconds = m.cycles as f64 / (m.freq_ghz * 1e9);
    format!(
        "{} tx/s ({} committed transactions in {} cycles = {:.3} ms simulated)",
        si(m.throughput_tx_per_s),
        m.committed_tx,
        m.cycles,
        seconds * 1e3
    )
}

fn writes_line(m: &Metrics) -> String {
    let per = |value: u64, decimals: usize| per_tx_text(value, m.committed_tx, decimals);
    format!(
        "{} requests, {} sent ({} B/tx, {} requests/tx) + {} final drain; {} \
         programmed ({} B/tx); {} media writes of 256 B lines ({}/tx)",
        m.pm.writes.requests,
        format_bytes(m.pm.writes.bytes),
        per(m.pm.writes.bytes, 0),
        per(m.pm.writes.requests, 1),
        format_bytes(m.pm.final_drain.bytes),
        format_bytes(m.pm.programmed_bytes),
        per(m.pm.programmed_bytes, 0),
        m.pm.media_writes,
        per(m.pm.media_writes, 2),
    )
}

fn classes_line(m: &Metrics) -> String {
    let p = &m.pm;
    format!(
        "log {}, write-backs {}, flushes {}, in-place updates {}",
        format_bytes(p.log.bytes),
        format_bytes(p.writeback.bytes),
        format_bytes(p.flush.bytes),
        format_bytes(p.in_place.bytes)
    )
}

fn memory_line(m: &Metrics, config: &Config) -> String {
    let span = m.drained_cycles.max(1) as f64;
    let banks = config.mem.banks.max(1) as f64;
    format!(
        "PCM bus {:.0} % and banks {:.0} % busy with writes; write queue peak {} of {}, {} \
         drain episodes; {} reads ({} from the on-PM buffer)",
        100.0 * m.pm.bus_busy_cycles as f64 / span,
        100.0 * m.pm.bank_write_cycles as f64 / (span * banks),
        m.pm.max_write_queue,
        config.mem.write_queue,
        m.pm.drain_episodes,
        m.pm.reads,
        m.pm.reads_from_buffer
    )
}

fn caches_line(m: &Metrics) -> String {
    let c = &m.caches;
    let miss =
        |l: &hwsim::cache::LevelStats| 100.0 * l.misses as f64 / (l.hits + l.misses).max(1) as f64;
    format!(
        "miss rate L1 {:.1} %, L2 {:.1} %, LLC {:.1} %; {} LLC write-backs",
        miss(&c.l1),
        miss(&c.l2),
        miss(&c.llc),
        c.writebacks
    )
}

/// What became of the transactional stores. Only Silo and MorLog have a log generator that
/// ignores silent stores and merges per word into buffer slots; Base and FWB log every store
/// (silent ones too) as a record of its own, and LAD logs none — for those the slot counts
/// would read "at most 0 live entries" (Base, FWB) and "100 % reduction" (LAD).
fn log_line(design: DesignKind, log: &LogStats) -> String {
    match design {
        DesignKind::Base | DesignKind::Fwb => {
            return format!(
                "{} transactional stores: {} undo+redo records, one per store (silent ones too: \
                 {} has no log generator)",
                log.tx_stores,
                log.generated,
                design.name()
            );
        }
        DesignKind::Lad => {
            return format!(
                "{} transactional stores: no log entries (lad keeps no log: a transaction's \
                 dirty lines wait in the write queue until it commits)",
                log.tx_stores
            );
        }
        _ => {}
    }
    format!(
        "{} transactional stores: {} generated entries, {} silent stores ignored, {} merged, \
         {} took a slot ({:.0} % reduction); at most {} live entries in one transaction",
        log.tx_stores,
        log.generated,
        log.silent_ignored,
        log.merged,
        log.appended,
        100.0 * log.reduction(),
        log.max_entries_per_tx
    )
}

fn overflow_line(log: &LogStats) -> String {
    format!(
        "{} transactions overflowed ({} batches, {} entries retired); {} undo records, {} \
         in-place updates ({} skipped: the line was already written back)",
        log.overflow_tx,
        log.overflow_batches,
        log.overflowed_entries,
        log.undo_records,
        log.in_place_updates,
        log.updates_skipped
    )
}

/// The PM log records of a design other than Silo (which has no overflow retirement).
fn records_line(log: &LogStats) -> String {
    format!("{} undo records written to the PM log", log.undo_records)
}

/// The counters only some designs use, when any is non-zero.
fn other_log_line(log: &LogStats) -> Option<String> {
    let counters = [
        ("redo records", log.redo_records),
        ("force-write-back scans", log.scans),
        ("lines written back by scans", log.scan_flushes),
        ("speculative lines", log.speculative_lines),
        ("stores waiting for a full log", log.log_full_waits),
        ("failure records", log.failure_records),
    ];
    let used: Vec<String> = counters
        .iter()
        .filter(|(_, value)| *value > 0)
        .map(|(name, value)| format!("{value} {name}"))
        .collect();
    (!used.is_empty()).then(|| used.join(", "))
}

fn stalls_line(s: &StallCycles, committed: u64) -> String {
    let per = |cycles: u64| per_tx_text(cycles, committed, 0);
    format!(
        "load {}, store buffer {}, write-back buffer {}, persist {}, log buffer {}, commit \
         {}, store-buffer drain before commit {}, write-drain wait (mem_drain) {} cycles",
        per(s.load),
        per(s.store_buffer),
        per(s.writeback),
        per(s.persist),
        per(s.log_buffer),
        per(s.commit),
        per(s.drain),
        per(s.mem_drain)
    )
}

fn host_line(m: &Metrics) -> String {
    format!(
        "{} events simulated in {:.2} s ({} events/s)",
        m.events,
        m.host_seconds,
        si(m.events_per_host_second)
    )
}

/// A rate with a metric prefix: "1.23 M", "456.7 k", "12.0".
fn si(value: f64) -> String {
    match value {
        v if v >= 1e9 => format!("{:.2} G", v / 1e9),
        v if v >= 1e6 => format!("{:.2} M", v / 1e6),
        v if v >= 1e3 => format!("{:.1} k", v / 1e3),
        v => format!("{v:.1}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_get_a_metric_prefix() {
        assert_eq!(si(3_456_789.0), "3.46 M");
        assert_eq!(si(1_500.0), "1.5 k");
        assert_eq!(si(12.0), "12.0");
        assert_eq!(si(2.5e9), "2.50 G");
    }

    #[test]
    fn the_log_line_describes_what_each_design_logs() {
        // Base and FWB: a record per store, no slots, so no "at most 0 live entries".
        let every_store = LogStats {
            tx_stores: 10,
            generated: 10,
            appended: 10,
            undo_records: 10,
            ..LogStats::default()
        };
        for design in [DesignKind::Base, DesignKind::Fwb] {
            let line = log_line(design, &every_store);
            assert!(
                line.contains("10 undo+redo records, one per store"),
                "{line}"
            );
            assert!(!line.contains("live entries"), "{line}");
        }
        // LAD logs nothing: not "100 % reduction".
        let lad = LogStats {
            tx_stores: 10,
            ..LogStats::default()
        };
        let line = log_line(DesignKind::Lad, &lad);
        assert!(line.contains("no log entries"), "{line}");
        assert!(!line.contains("reduction"), "{line}");
        // Silo (and MorLog) keep the generator's counts.
        let silo = LogStats {
            tx_stores: 10,
            silent_ignored: 2,
            generated: 8,
            merged: 1,
            appended: 7,
            max_entries_per_tx: 3,
            ..LogStats::default()
        };
        let line = log_line(DesignKind::Silo, &silo);
        assert!(line.contains("7 took a slot (30 % reduction)"), "{line}");
        assert!(line.contains("at most 3 live entries"), "{line}");
        assert_eq!(
            records_line(&every_store),
            "10 undo records written to the PM log"
        );
    }

    #[test]
    fn the_two_drain_stalls_are_told_apart() {
        let stalls = StallCycles {
            drain: 30,
            mem_drain: 500,
            ..StallCycles::default()
        };
        let line = stalls_line(&stalls, 10);
        assert!(
            line.contains("store-buffer drain before commit 3,"),
            "{line}"
        );
        assert!(
            line.contains("write-drain wait (mem_drain) 50 cycles"),
            "{line}"
        );
    }

    #[test]
    fn only_used_design_counters_are_listed() {
        assert_eq!(other_log_line(&LogStats::default()), None);
        let log = LogStats {
            scans: 2,
            scan_flushes: 40,
            ..LogStats::default()
        };
        assert_eq!(
            other_log_line(&log).as_deref(),
            Some("2 force-write-back scans, 40 lines written back by scans")
        );
    }
}
