//! Pins every simulated result (cycles, stalls, PM traffic, cache and log counters, per core)
//! of small fixed multi-core traces, per design and per machine variant, bit for bit.
//!
//! The simulator's speed work must not change what it simulates: a faster engine, map or
//! queue that reorders one event shows up here as a changed number. The expected metrics
//! live in `tests/pinned/*.json`; after a change that is *meant* to alter the model,
//! regenerate them with `HWSIM_BLESS=1 cargo test -p hwsim --test pinned` and say why in the
//! commit.

use hwsim::synth::{SynthKind, SynthSpec, synth_trace};
use hwsim::{Config, DesignKind, Metrics, simulate};
use serde_json::{Value, json};
use std::path::PathBuf;

/// Merges `patch` into `into` (objects key by key, anything else replaced).
fn merge(into: &mut Value, patch: &Value) {
    match (into, patch) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v.clone(),
    }
}

/// The machine variants: the default, each media model, the baselines' on-PM buffer, the
/// controller's read and write-pausing options, no merging, and a small LLC that makes
/// the runs evict dirty lines (the eviction, write-back and overflow paths).
fn variants() -> Vec<(&'static str, Value)> {
    vec![
        ("default", json!({})),
        ("block-dcw", json!({"mem": {"media": "block-dcw"}})),
        (
            "proportional-onpm",
            json!({"mem": {"media": "proportional", "baselines_use_onpm_buffer": true}}),
        ),
        (
            "pausing",
            json!({"mem": {"write_pausing": true, "reads_wait_for_drain": false,
                           "merge_writes": false, "final_drain": false}}),
        ),
        (
            "small-llc",
            json!({"llc": {"size_bytes": 16384, "ways": 4},
                   "mem": {"write_queue": 16, "drain_high": 12, "drain_low": 4, "banks": 2}}),
        ),
    ]
}

fn config(patch: &Value, cores: usize) -> Config {
    let mut v = serde_json::to_value(Config::default()).expect("config serializes");
    merge(&mut v, patch);
    let cfg: Config = serde_json::from_value(v).expect("patched config parses");
    cfg.with_cores(cores)
}

fn traces() -> Vec<(&'static str, trace::Trace)> {
    let spec = |kind, elements| SynthSpec {
        kind,
        cores: 4,
        tx_per_core: 60,
        elements,
        compute: 50,
        seed: 7,
    };
    vec![
        ("hash", synth_trace(&spec(SynthKind::HashUpdate, 4096))),
        ("array", synth_trace(&spec(SynthKind::ArraySwap, 2048))),
    ]
}

/// A run's metrics without the host timings (the only fields that legitimately vary).
fn timeless(m: Metrics) -> Value {
    let m = Metrics {
        host_seconds: 0.0,
        events_per_host_second: 0.0,
        ..m
    };
    serde_json::to_value(m).expect("metrics serialize")
}

/// One line per run, `variant/trace/design<TAB>metrics as compact JSON`: compared as text,
/// so floats are pinned to the bit (a parse would round them).
fn simulate_all() -> Vec<String> {
    let traces = traces();
    let mut out = Vec::new();
    for (variant, patch) in variants() {
        let cfg = config(&patch, 4);
        for (name, trace) in &traces {
            for design in DesignKind::ALL {
                let m = simulate(&cfg, design, trace).expect("runs");
                let json = serde_json::to_string(&timeless(m)).expect("metrics serialize");
                out.push(format!("{variant}/{name}/{}\t{json}", design.name()));
            }
        }
    }
    out
}

fn expected_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/pinned/metrics.tsv")
}

#[test]
fn every_design_simulates_the_pinned_traces_bit_for_bit() {
    let got = simulate_all();
    let path = expected_path();
    if std::env::var_os("HWSIM_BLESS").is_some() {
        std::fs::write(&path, got.join("\n") + "\n").expect("writes the pinned metrics");
        return;
    }
    let text = std::fs::read_to_string(&path).expect("pinned metrics exist");
    let want: Vec<&str> = text.lines().collect();
    assert_eq!(got.len(), want.len(), "the number of pinned runs changed");
    for (got, want) in got.iter().zip(want) {
        let run = want.split('\t').next().unwrap_or_default();
        assert_eq!(got, want, "run {run} simulated differently");
    }
}
