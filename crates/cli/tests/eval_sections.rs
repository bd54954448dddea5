//! The evaluation sections that exercise the engines (`engines`, `logstudy`,
//! `crash-engines`), end to end through the `ferrite` binary at `--quick` size.

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

const SECTIONS: [&str; 3] = ["engines", "logstudy", "crash-engines"];
const PLOTS: [&str; 5] = [
    "engines-silo-throughput",
    "engines-write-amplification",
    "engines-timestone-threads",
    "logstudy-batch-1",
    "logstudy-batch-8",
];

fn text(path: &Path) -> &str {
    path.to_str().expect("scratch paths are UTF-8")
}

fn section_data(out: &Path, id: &str) -> Value {
    let path = out.join(format!("{id}.json"));
    let contents =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&contents).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn quick_engine_sections_write_their_data_and_plots() {
    let scratch = tempfile::tempdir_in("/dev/shm").expect("scratch directory in /dev/shm");
    let out = scratch.path().join("report");
    let mut args = vec!["eval", "--quick", "--out", text(&out)];
    args.extend(["--pool-dir", text(scratch.path())]);
    for id in SECTIONS {
        args.extend(["--only", id]);
    }
    let output = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(&args)
        .output()
        .expect("the ferrite binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {stderr}"
    );

    for plot in PLOTS {
        let svg = std::fs::read_to_string(out.join(format!("{plot}.svg")))
            .unwrap_or_else(|e| panic!("{plot}.svg: {e}"));
        assert!(svg.starts_with("<svg"), "{plot}.svg is not an SVG");
    }

    let crash = section_data(&out, "crash-engines");
    assert_eq!(crash["verdict"], "pass", "{stdout}");
    assert_eq!(crash["data"]["failures"], 0);
    assert!(crash["data"]["scenarios"].as_u64().is_some_and(|n| n > 0));
    let crashed: BTreeSet<&str> = crash["data"]["runs"]
        .as_array()
        .expect("crash runs")
        .iter()
        .filter_map(|run| run["case"]["engine"].as_str())
        .collect();
    assert_eq!(crashed, BTreeSet::from(["mvcc", "redo", "undo"]));

    let engines = section_data(&out, "engines");
    let runs = engines["data"]["runs"].as_array().expect("engine runs");
    let measured: BTreeSet<&str> = runs
        .iter()
        .filter_map(|run| run["measurement"]["engine"].as_str())
        .collect();
    let mut expected = vec!["redo", "undo", "ideal"];
    if pmdk::Pmdk::available().is_ok() {
        expected.push("pmdk");
    } else {
        assert!(engines["data"]["pmdk_skipped"].is_string(), "{stdout}");
    }
    for engine in expected {
        assert!(measured.contains(engine), "no {engine} run: {measured:?}");
    }
    assert!(
        runs.iter()
            .all(|run| run["measurement"]["throughput"]["median"].as_f64() > Some(0.0))
    );
    let goals = engines["data"]["goals"].as_array().expect("goals");
    assert!(!goals.is_empty());
    let headlines = engines["headlines"].as_array().expect("headlines");
    assert_eq!(headlines.len(), goals.len(), "one headline per goal");

    let logstudy = section_data(&out, "logstudy");
    let points = logstudy["data"]["points"].as_array().expect("study points");
    assert_eq!(points.len(), 4 * 7 * 2, "modes × record sizes × batches");
    assert!(logstudy["data"]["auto_good"].is_boolean());
    let headlines = logstudy["headlines"].as_array().expect("headlines");
    assert!(
        headlines.iter().all(|h| h["claim"]
            .as_str()
            .is_some_and(|c| c.starts_with("MemSys 2017"))),
        "{headlines:?}"
    );
}
