//! End-to-end tests of `ferrite sim` and the evaluation's `silo` section: JSON of a run for
//! every design, trace files written and read back, usage errors (clap's and the command's
//! own, such as corrupt trace files) as one line with exit code 2, the battery table, and the
//! reproduction report on the quick plan. Traces are tiny; the reproduction is
//! `ReproSpec::quick()` (seconds).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::{ferrite, stderr, stdout};

/// clap's exit code for usage errors, which `ferrite sim` also uses for bad files.
const USAGE: i32 = 2;
const DESIGNS: [&str; 6] = ["ideal", "base", "fwb", "morlog", "lad", "silo"];
/// A tiny trace: 2 cores, 30 transactions each, a 512-key hash table.
const TINY: [&str; 8] = [
    "--workload",
    "hash",
    "--cores",
    "2",
    "--tx",
    "30",
    "--keys",
    "512",
];

fn text(path: &Path) -> &str {
    path.to_str().expect("scratch paths are UTF-8")
}

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").expect("scratch directory in /dev/shm")
}

fn read_json(path: &Path) -> Value {
    let contents =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&contents).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn assert_success(output: &Output) {
    assert_eq!(
        output.status.code(),
        Some(0),
        "stdout: {}\nstderr: {}",
        stdout(output),
        stderr(output)
    );
}

/// `sim run` with `args`, writing its JSON into `dir`; returns the JSON.
fn run_json(dir: &Path, name: &str, args: &[&str]) -> Value {
    let json = dir.join(format!("{name}.json"));
    let mut all = vec!["sim", "run", "--json", text(&json)];
    all.extend_from_slice(args);
    let output = ferrite(&all);
    assert_success(&output);
    let summary = stdout(&output);
    for label in ["throughput", "PM writes", "log", "stalls/tx"] {
        assert!(summary.contains(label), "no {label} line: {summary}");
    }
    let stalls = summary
        .lines()
        .find(|line| line.starts_with("stalls/tx"))
        .expect("stalls/tx line");
    assert!(stalls.contains("mem_drain"), "no mem_drain stall: {stalls}");
    read_json(&json)
}

/// Writes a tiny trace file with `sim trace` and returns its path.
fn write_trace(dir: &Path) -> PathBuf {
    let path = dir.join("tiny.trace");
    let mut args = vec!["sim", "trace", "--out", text(&path)];
    args.extend_from_slice(&TINY);
    let output = ferrite(&args);
    assert_success(&output);
    assert!(stdout(&output).starts_with("wrote "), "{}", stdout(&output));
    path
}

#[test]
fn run_reports_every_metric_of_every_design_as_json() {
    let dir = scratch();
    for design in DESIGNS {
        let mut args = vec!["--design", design];
        args.extend_from_slice(&TINY);
        let run = run_json(dir.path(), design, &args);
        assert_eq!(run["design"], design);
        assert_eq!(run["workload"], "hash");
        assert_eq!(run["cores"], 2);
        assert_eq!(run["trace"]["source"], "generated");
        assert_eq!(run["config"]["cores"], 2);
        let metrics = &run["metrics"];
        assert_eq!(metrics["design"], design);
        assert_eq!(metrics["committed_tx"], 60, "2 cores × 30 transactions");
        assert!(
            metrics["throughput_tx_per_s"].as_f64() > Some(0.0),
            "{design}"
        );
        let requests = metrics["pm"]["writes"]["requests"]
            .as_u64()
            .expect("requests");
        assert!(metrics["pm"]["writes"]["bytes"].is_u64());
        assert!(metrics["pm"]["media_writes"].is_u64());
        assert!(run["per_tx"]["stall_cycles"]["load"].as_f64() > Some(0.0));
        assert!(run["per_tx"]["stall_cycles"]["mem_drain"].is_f64());
        if design == "ideal" {
            // Ideal does no persistence work: no log, nothing written in 60 transactions
            // whose instances fit the caches.
            assert!(metrics["log"].is_null());
            assert_eq!(requests, 0);
        } else {
            assert!(requests > 0, "{design} wrote nothing");
            assert!(metrics["log"]["tx_stores"].as_u64() > Some(0), "{design}");
        }
    }
}

#[test]
fn silo_run_counts_its_log_entries_and_takes_overrides() {
    let dir = scratch();
    let mut args = vec![
        "--design",
        "silo",
        "--log-entries",
        "4",
        "--log-latency",
        "64",
    ];
    args.extend_from_slice(&TINY);
    let run = run_json(dir.path(), "silo", &args);
    assert_eq!(run["config"]["silo"]["entries"], 4);
    assert_eq!(run["config"]["silo"]["buffer_latency"], 64);
    let log = &run["metrics"]["log"];
    let count = |field: &str| log[field].as_u64().unwrap_or_else(|| panic!("{field}"));
    // Every transactional store is either silent or generates an entry, and every entry
    // either merges or takes a slot.
    assert_eq!(
        count("tx_stores"),
        count("silent_ignored") + count("generated")
    );
    assert_eq!(count("generated"), count("merged") + count("appended"));
    // Hash upserts change more than 4 words: a 4-entry buffer overflows.
    assert!(count("overflow_tx") > 0, "{log}");
    assert!(count("max_entries_per_tx") > 4, "{log}");
}

#[test]
fn cost_model_options_reach_the_configuration_and_the_trace() {
    let dir = scratch();
    let mut args = vec![
        "--design",
        "fwb",
        "--media",
        "block-dcw",
        "--discipline",
        "write-minimal",
        "--baselines-onpm-buffer",
        "--write-pausing",
        "--no-final-drain",
    ];
    args.extend_from_slice(&TINY);
    let run = run_json(dir.path(), "options", &args);
    let mem = &run["config"]["mem"];
    assert_eq!(mem["media"], "block-dcw");
    assert_eq!(mem["baselines_use_onpm_buffer"], true);
    assert_eq!(mem["write_pausing"], true);
    assert_eq!(mem["final_drain"], false);
    assert_eq!(run["trace"]["spec"]["discipline"], "write-minimal");
    assert_eq!(run["metrics"]["pm"]["final_drain"]["requests"], 0);
    // The paper-faithful defaults.
    let mut args = vec!["--design", "fwb"];
    args.extend_from_slice(&TINY);
    let run = run_json(dir.path(), "defaults", &args);
    let mem = &run["config"]["mem"];
    assert_eq!(mem["media"], "nvmain-row");
    assert_eq!(mem["baselines_use_onpm_buffer"], false);
    assert_eq!(run["trace"]["spec"]["discipline"], "pmdk");
    assert!(run["per_tx"]["programmed_bytes"].as_f64() > Some(0.0));
}

#[test]
fn a_written_trace_simulates_like_the_generated_one() {
    let dir = scratch();
    let trace = write_trace(dir.path());
    let from_file = run_json(
        dir.path(),
        "file",
        &["--design", "fwb", "--trace", text(&trace)],
    );
    assert_eq!(from_file["trace"]["source"], "file");
    assert_eq!(from_file["trace"]["streams"], 2);
    assert_eq!(from_file["cores"], 2, "every stream by default");
    let mut args = vec!["--design", "fwb"];
    args.extend_from_slice(&TINY);
    let generated = run_json(dir.path(), "generated", &args);
    // Generation and simulation are deterministic: the same trace gives the same run.
    for field in ["committed_tx", "cycles", "events", "pm"] {
        assert_eq!(
            from_file["metrics"][field], generated["metrics"][field],
            "{field}"
        );
    }
}

/// A failure that must be a usage error on one stderr line, without a panic.
fn assert_usage_error(output: &Output, prefix: &str, reason: &str) {
    let err = stderr(output);
    assert!(!err.contains("panicked"), "panicked: {err}");
    assert_eq!(output.status.code(), Some(USAGE), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "one line on stderr, got: {err:?}");
    assert!(
        err.starts_with(prefix),
        "{err:?} lacks the prefix {prefix:?}"
    );
    assert!(err.contains(reason), "{err:?} does not say {reason:?}");
}

#[test]
fn bad_arguments_are_usage_errors() {
    let cases: [(&[&str], &str); 9] = [
        (
            &["--design", "hoop", "--workload", "hash"],
            "unknown design",
        ),
        (
            &["--design", "silo", "--workload", "hash", "--media", "dram"],
            "unknown media model",
        ),
        (
            &[
                "--design",
                "silo",
                "--workload",
                "hash",
                "--discipline",
                "c++",
            ],
            "unknown store discipline",
        ),
        (
            &["--design", "silo", "--workload", "list"],
            "unknown workload",
        ),
        (
            &["--design", "silo", "--workload", "hash", "--cores", "0"],
            "0 is not in 1..=64",
        ),
        (
            &["--design", "silo", "--workload", "hash", "--cores", "65"],
            "not in 1..=64",
        ),
        (&["--design", "silo"], "--workload"),
        (
            &["--design", "silo", "--workload", "hash", "--tx", "0"],
            "--tx",
        ),
        (
            &[
                "--design",
                "silo",
                "--workload",
                "hash",
                "--trace",
                "x.trace",
            ],
            "cannot be used with",
        ),
    ];
    for (args, reason) in cases {
        let mut all = vec!["sim", "run"];
        all.extend_from_slice(args);
        let output = ferrite(&all);
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(USAGE), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(err.contains(reason), "{args:?}: {err}");
    }
    // Arguments clap accepts but the generator or the machine cannot use.
    let one_key = ferrite(&[
        "sim",
        "run",
        "--design",
        "silo",
        "--workload",
        "hash",
        "--keys",
        "1",
    ]);
    assert_usage_error(&one_key, "ferrite: hash: ", "keys must be");
    let unknown = ferrite(&["sim", "trace", "--workload", "nope", "--out", "/dev/null"]);
    assert_eq!(unknown.status.code(), Some(USAGE), "{}", stderr(&unknown));
}

#[test]
fn unreadable_or_corrupt_trace_files_are_one_line_usage_errors() {
    let dir = scratch();
    let good = write_trace(dir.path());
    let bytes = std::fs::read(&good).expect("trace bytes");
    let missing = dir.path().join("missing.trace");
    let not_a_trace = dir.path().join("text.trace");
    std::fs::write(&not_a_trace, b"this is not a trace file at all").expect("write");
    let truncated = dir.path().join("truncated.trace");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).expect("write");
    let flipped = dir.path().join("flipped.trace");
    let mut damaged = bytes.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 0x55; // inside the last stream: its checksum no longer matches
    std::fs::write(&flipped, &damaged).expect("write");
    let config = dir.path().join("config.json");
    std::fs::write(&config, "{\"silo\": {\"entries\": \"twenty\"}}").expect("write");
    let cases: [(&Path, &[&str], &str); 5] = [
        (&not_a_trace, &[], "not a Ferrite trace"),
        (&truncated, &[], "truncated"),
        (&flipped, &[], "checksum"),
        (&good, &["--cores", "4"], "2 streams"),
        (
            &config,
            &["--config", text(&config)],
            "not a simulator configuration",
        ),
    ];
    for (path, extra, reason) in cases {
        let trace = if path == config { &good } else { path };
        let mut args = vec!["sim", "run", "--design", "silo", "--trace", text(trace)];
        args.extend_from_slice(extra);
        let output = ferrite(&args);
        assert_usage_error(&output, &format!("ferrite: {}: ", path.display()), reason);
    }
    // A missing trace or configuration file is the table's "no such file".
    let good_config = dir.path().join("good.json");
    std::fs::write(&good_config, "{}").expect("write");
    for (trace, config) in [(&missing, &good_config), (&good, &missing)] {
        let args = ["sim", "run", "--design", "silo", "--trace", text(trace)];
        let output = ferrite(&[&args[..], &["--config", text(config)]].concat());
        assert_eq!(output.status.code(), Some(19), "{}", stderr(&output));
        assert!(
            stderr(&output).contains("no such file"),
            "{}",
            stderr(&output)
        );
        assert_eq!(stderr(&output).lines().count(), 1, "{}", stderr(&output));
    }
}

#[test]
fn battery_prints_the_three_designs() {
    let output = ferrite(&["sim", "battery"]);
    assert_success(&output);
    let table = stdout(&output);
    for row in ["eadr", "bbb", "silo", "flush size KiB", " 10496 ", "5.3125"] {
        assert!(table.contains(row), "{row} missing: {table}");
    }
    let json = ferrite(&["sim", "battery", "--json", "--cores", "4"]);
    assert_success(&json);
    let value: Value = serde_json::from_str(&stdout(&json)).expect("battery JSON");
    assert_eq!(value["cores"], 4);
    assert_eq!(value["rows"].as_array().map(Vec::len), Some(3));
}

#[test]
fn crash_checks_a_recorded_trace_for_every_consistent_design() {
    for design in ["base", "fwb", "morlog", "lad", "silo"] {
        let mut args = vec!["sim", "crash", "--design", design, "--points", "12"];
        args.extend(TINY);
        let output = ferrite(&args);
        assert_success(&output);
        let report = stdout(&output);
        assert!(
            report.contains("13 crash points") && report.contains("all recovered all-or-nothing"),
            "{report}"
        );
        assert!(
            report.contains("60 transactions committed by the end"),
            "{report}"
        );
    }
    let mut args = vec!["sim", "crash", "--design", "ideal"];
    args.extend(TINY);
    let ideal = ferrite(&args);
    assert_eq!(ideal.status.code(), Some(USAGE));
    assert!(stderr(&ideal).contains("promises no atomic durability"));
}

/// The figures of the `silo` section (file names without the `silo-` prefix).
const FIGURES: [&str; 11] = [
    "throughput-1-core",
    "throughput-8-cores",
    "writes-1-core",
    "writes-8-cores",
    "log-entries",
    "overflow",
    "tx-size",
    "latency",
    "entries",
    "cores",
    "battery",
];

/// Checks a report folder holding the `silo` section of a quick reproduction.
fn assert_silo_report(out: &Path, summary: &str) {
    for figure in FIGURES {
        let path = out.join(format!("silo-{figure}.svg"));
        let svg = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{figure}: {e}"));
        assert!(svg.starts_with("<svg"), "{figure} is not an SVG");
    }
    let section = read_json(&out.join("silo.json"));
    assert_eq!(section["data"]["plan"], "quick");
    let rep = &section["data"]["reproduction"];
    let comparison = rep["comparison"].as_array().expect("comparison");
    assert!(comparison.len() >= 10, "{} targets", comparison.len());
    assert_eq!(rep["battery"]["rows"].as_array().map(Vec::len), Some(3));
    assert_eq!(rep["runs"].as_array().map(Vec::len), Some(7 * 6 * 3));
    // Every miss is stated in the summary, with silorepro's explanation; the quick plan
    // judges nothing, so it names them as indicative, not as misses.
    let lines = section["summary"].as_array().expect("summary");
    for target in comparison.iter().filter(|c| c["within"] == false) {
        let quantity = target["quantity"].as_str().expect("quantity");
        assert!(
            lines.iter().any(|l| l.as_str().is_some_and(|l| {
                l.starts_with("Outside ±25 % at quick sizes (indicative)") && l.contains(quantity)
            })),
            "miss {quantity} not in the summary"
        );
    }
    assert!(
        lines
            .iter()
            .all(|l| l.as_str().is_some_and(|l| !l.starts_with("MISS"))),
        "{lines:?}"
    );
    let html = std::fs::read_to_string(out.join("index.html")).expect("index.html");
    for caption in [
        "Paper vs reproduction",
        "Battery: what must be flushed",
        "Sweep of the",
    ] {
        assert!(html.contains(caption), "{caption} missing from index.html");
    }
    assert!(summary.contains("Paper vs reproduction"), "{summary}");
    assert!(summary.contains("within ±25 %"), "{summary}");
}

#[test]
fn quick_eval_silo_section_writes_figures_tables_and_data() {
    let dir = scratch();
    let out = dir.path().join("report");
    let output = ferrite(&[
        "eval",
        "--quick",
        "--only",
        "silo",
        "--out",
        text(&out),
        "--pool-dir",
        text(dir.path()),
    ]);
    assert_success(&output);
    assert_silo_report(&out, &stdout(&output));
}

#[test]
fn quick_reproduce_writes_the_report_and_markdown() {
    let dir = scratch();
    let out = dir.path().join("repro");
    let output = ferrite(&[
        "sim",
        "reproduce",
        "--quick",
        "--quiet",
        "--out",
        text(&out),
    ]);
    assert_success(&output);
    assert_silo_report(&out, &stdout(&output));
    let markdown = std::fs::read_to_string(out.join("reproduction.md")).expect("markdown");
    assert!(markdown.contains("### Paper vs reproduction"), "{markdown}");
}

#[test]
fn sizes_beyond_the_memory_limit_are_usage_errors_not_aborts() {
    let dir = scratch();
    let out = dir.path().join("big.trace");
    let huge_tx = ferrite(&[
        "sim",
        "run",
        "--design",
        "silo",
        "--workload",
        "hash",
        "--cores",
        "1",
        "--tx",
        "18446744073709551615",
    ]);
    assert_usage_error(&huge_tx, "ferrite: hash: ", "MiB of memory per core");
    let huge_keys = ferrite(&[
        "sim",
        "trace",
        "--workload",
        "array",
        "--keys",
        "268435456",
        "--out",
        text(&out),
    ]);
    assert_usage_error(&huge_keys, "ferrite: array: ", "MiB of memory per core");
    assert!(!out.exists());
}

#[test]
fn reproduce_refuses_an_out_path_that_is_a_file_before_running() {
    let dir = scratch();
    let file = dir.path().join("taken");
    std::fs::write(&file, "keep me").expect("write");
    let started = std::time::Instant::now();
    let output = ferrite(&[
        "sim",
        "reproduce",
        "--quick",
        "--quiet",
        "--out",
        text(&file),
    ]);
    let prefix = format!("ferrite: {}: ", text(&file));
    assert_usage_error(&output, &prefix, "exists and is not a directory");
    assert_eq!(std::fs::read_to_string(&file).expect("read"), "keep me");
    // The plan never ran: a quick plan takes seconds, the check milliseconds.
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

fn header(args: &[&str]) -> (String, String) {
    let mut all = vec!["sim", "run", "--design", "silo"];
    all.extend_from_slice(&TINY);
    all.extend_from_slice(args);
    let output = ferrite(&all);
    assert_success(&output);
    let text = stdout(&output);
    let line = |label: &str| {
        let found = text.lines().find(|l| l.starts_with(label));
        found
            .unwrap_or_else(|| panic!("no {label} line: {text}"))
            .to_owned()
    };
    (line("run "), line("settings "))
}

#[test]
fn run_header_names_every_non_default_setting() {
    let (run, settings) = header(&[]);
    assert!(run.contains("on-PM buffer of"), "{run}");
    assert!(settings.ends_with("the default machine"), "{settings}");
    let (run, settings) = header(&["--onpm-lines", "0", "--log-latency", "16", "--mlp", "4"]);
    assert!(run.contains("no on-PM buffer"), "{run}");
    for setting in ["mem.onpm_lines 0", "silo.buffer_latency 16", "core.mlp 4"] {
        assert!(settings.contains(setting), "{setting}: {settings}");
    }
    let (_, pausing) = header(&["--write-pausing"]);
    let (_, no_drain) = header(&["--no-final-drain"]);
    assert_ne!(pausing, no_drain);
    assert!(pausing.contains("write_pausing true"), "{pausing}");
    assert!(no_drain.contains("final_drain false"), "{no_drain}");
}

#[test]
fn silo_only_options_are_refused_for_other_designs() {
    let mut base = vec!["sim", "run", "--design", "base"];
    base.extend_from_slice(&TINY);
    for extra in [
        &["--log-entries", "5"][..],
        &["--coalesce-lus"],
        &["--log-latency", "16"],
    ] {
        let mut args = base.clone();
        args.extend_from_slice(extra);
        let output = ferrite(&args);
        assert_usage_error(&output, "ferrite: --", "configures Silo's log buffer");
    }
    let mut zero = vec!["sim", "run", "--design", "silo", "--log-latency", "0"];
    zero.extend_from_slice(&TINY);
    let output = ferrite(&zero);
    assert_eq!(output.status.code(), Some(USAGE), "{}", stderr(&output));
}

/// A trace file of hand-made streams (valid CRCs, any structure).
fn hand_made(dir: &Path, name: &str, streams: &[Vec<trace::Event>]) -> PathBuf {
    let mut made = trace::Trace::new(trace::TraceMeta::default());
    for (core, events) in streams.iter().enumerate() {
        let mut encoder = trace::Encoder::default();
        for event in events {
            encoder.push(event);
        }
        made.add_stream(core as u32, encoder);
    }
    let path = dir.join(name);
    std::fs::write(&path, made.to_bytes()).expect("write the trace");
    path
}

fn run_file(path: &Path) -> Output {
    ferrite(&["sim", "run", "--design", "silo", "--trace", text(path)])
}

#[test]
fn malformed_transaction_structure_is_a_usage_error_naming_stream_and_event() {
    use trace::Event::{Compute, Store, TxBegin, TxEnd};
    let dir = scratch();
    let store = Store {
        addr: 64,
        size: 8,
        old: 0,
        new: 1,
    };
    let cases = [
        (
            vec![TxEnd],
            "stream 0, event 0: TxEnd without an open transaction",
        ),
        (
            vec![TxBegin, TxBegin],
            "event 1: TxBegin inside an open transaction",
        ),
        (vec![store], "event 0: store outside a transaction"),
        (
            vec![TxBegin, store],
            "event 2: the stream ends inside a transaction",
        ),
    ];
    for (index, (events, reason)) in cases.into_iter().enumerate() {
        let path = hand_made(dir.path(), &format!("bad{index}.trace"), &[events]);
        assert_usage_error(&run_file(&path), "ferrite: ", reason);
    }
    let idle = hand_made(
        dir.path(),
        "idle.trace",
        &[vec![Compute { instructions: 10 }]],
    );
    let output = run_file(&idle);
    assert_success(&output);
    let text = stdout(&output);
    assert!(
        text.contains("n/a B/tx") && !text.contains(" 0 B/tx"),
        "{text}"
    );
    assert!(text.contains("(1 stream)"), "{text}");
    let wide: Vec<Vec<trace::Event>> = (0..65).map(|_| vec![TxBegin, TxEnd]).collect();
    let wide = hand_made(dir.path(), "wide.trace", &wide);
    assert_usage_error(
        &run_file(&wide),
        "ferrite: ",
        "65 streams, more than the 64 cores",
    );
}

/// `--config` keeps the defaults of every field the file leaves out, inside nested objects
/// too; what is not an object of the configuration's fields, or is out of the model's range
/// (a latency that would wrap the simulated clock, a queue that would not fit in memory),
/// is a usage error before the run.
#[test]
fn a_partial_configuration_keeps_the_other_defaults_and_bad_ones_are_refused() {
    let dir = scratch();
    // Not `partial.json`: that is where `run_json` writes the record (which used to
    // replace this configuration file after the run read it; now refused).
    let partial = dir.path().join("partial-machine.json");
    std::fs::write(&partial, r#"{"l1": {"latency": 9}, "mem": {"banks": 8}}"#).expect("write");
    let mut args = vec!["--design", "silo", "--config", text(&partial)];
    args.extend_from_slice(&TINY);
    let run = run_json(dir.path(), "partial", &args);
    assert_eq!(run["config"]["l1"]["latency"], 9);
    assert_eq!(run["config"]["l1"]["ways"], 8, "the L1's other fields kept");
    assert_eq!(run["config"]["l1"]["size_bytes"], 32 << 10);
    assert_eq!(run["config"]["mem"]["banks"], 8);

    let cases = [
        ("array.json", "[1, 2]", "a JSON object"),
        (
            "wrap.json",
            r#"{"path_cycles": 18446744073709551615}"#,
            "path_cycles",
        ),
        (
            "queue.json",
            r#"{"mem": {"read_queue": 1000000000000}}"#,
            "mem.read_queue",
        ),
        (
            "cache.json",
            r#"{"llc": {"size_bytes": 1099511627776}}"#,
            "llc",
        ),
    ];
    for (name, contents, reason) in cases {
        let config = dir.path().join(name);
        std::fs::write(&config, contents).expect("write");
        let mut args = vec!["sim", "run", "--design", "silo", "--config", text(&config)];
        args.extend_from_slice(&TINY);
        let output = ferrite(&args);
        assert_usage_error(&output, "ferrite: ", reason);
    }
}

/// The file's `cores` is honoured like `--cores` (which wins over it) and held to the same
/// range.
#[test]
fn configuration_cores_are_honoured_like_the_option() {
    let dir = scratch();
    // TINY without its `--cores 2`.
    let small: Vec<&str> = [&TINY[..2], &TINY[4..]].concat();
    let four = dir.path().join("four.json");
    std::fs::write(&four, r#"{"cores": 4}"#).expect("write");
    let mut args = vec!["--design", "silo", "--config", text(&four)];
    args.extend_from_slice(&small);
    let run = run_json(dir.path(), "run-four", &args);
    assert_eq!(run["config"]["cores"], 4, "the file's cores");
    assert_eq!(run["trace"]["streams"], 4, "a trace generated for them");
    args.extend_from_slice(&["--cores", "2"]);
    let run = run_json(dir.path(), "run-two", &args);
    assert_eq!(run["config"]["cores"], 2, "--cores wins");

    for (name, contents, reason) in [
        ("zero.json", r#"{"cores": 0}"#, "cores = 0"),
        ("many.json", r#"{"cores": 100}"#, "cores = 100"),
    ] {
        let config = dir.path().join(name);
        std::fs::write(&config, contents).expect("write");
        let mut args = vec!["sim", "run", "--design", "silo", "--config", text(&config)];
        args.extend_from_slice(&small);
        assert_usage_error(&ferrite(&args), "ferrite: ", reason);
    }
}

/// A Silo batch of 0 bytes (its overflow writes would cost nothing) and a cache of 0 ways
/// are refused, each named.
#[test]
fn zero_sizes_in_a_configuration_are_refused_by_name() {
    let dir = scratch();
    let cases = [
        (
            "batch.json",
            r#"{"silo": {"entries": 1, "batch_bytes": 0}}"#,
            "silo.batch_bytes",
        ),
        (
            "ways.json",
            r#"{"l1": {"size_bytes": 32768, "ways": 0, "latency": 4}}"#,
            "l1: ways must be ≥ 1",
        ),
    ];
    for (name, contents, reason) in cases {
        let config = dir.path().join(name);
        std::fs::write(&config, contents).expect("write");
        let mut args = vec!["sim", "run", "--design", "silo", "--config", text(&config)];
        args.extend_from_slice(&TINY);
        assert_usage_error(&ferrite(&args), "ferrite: ", reason);
    }
}

/// An output the command cannot write fails before the simulation or generation runs, not
/// after it (`/sys` takes no new files, even for root).
#[test]
fn unwritable_outputs_fail_before_the_work() {
    let mut run = vec![
        "sim",
        "run",
        "--design",
        "silo",
        "--json",
        "/sys/ferrite-run.json",
    ];
    run.extend_from_slice(&TINY);
    let trace = [
        "sim",
        "trace",
        "--workload",
        "hash",
        "--tx",
        "30",
        "--out",
        "/sys/ferrite.trace",
    ];
    let reproduce = [
        "sim",
        "reproduce",
        "--quick",
        "--quiet",
        "--out",
        "/sys/ferrite-report",
    ];
    for args in [&run[..], &trace[..], &reproduce[..]] {
        let output = ferrite(args);
        assert_usage_error(&output, "ferrite: /sys/ferrite", "cannot");
        assert!(
            stdout(&output).is_empty(),
            "{args:?} ran: {}",
            stdout(&output)
        );
    }
}
