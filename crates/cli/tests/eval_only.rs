//! `ferrite eval --only` over a folder that holds a report: the sections it does not run are
//! kept (carried over, marked with when they ran) and `index.html` shows every section; a
//! report there that cannot be read back is refused before anything runs (exit 2), never
//! silently replaced. Two sections that run in a fraction of a second at `--quick` size
//! (`substrate`, `crash-selftest`) stand for all of them.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

const USAGE: i32 = 2;

fn text(path: &Path) -> &str {
    path.to_str().expect("scratch paths are UTF-8")
}

fn eval_only(out: &Path, pool_dir: &Path, section: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["eval", "--quick", "--only", section, "--out", text(out)])
        .args(["--pool-dir", text(pool_dir)])
        .output()
        .expect("the ferrite binary runs")
}

fn report(out: &Path) -> Value {
    let text = std::fs::read_to_string(out.join("report.json")).expect("report.json");
    serde_json::from_str(&text).expect("report.json is JSON")
}

fn section_ids(report: &Value) -> Vec<String> {
    report["sections"]
        .as_array()
        .expect("sections")
        .iter()
        .map(|s| s["id"].as_str().expect("id").to_owned())
        .collect()
}

fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn assert_ok(output: &Output) {
    assert_eq!(
        output.status.code(),
        Some(0),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_run_of_one_section_keeps_the_others_and_shows_them_all() {
    let scratch = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let out = scratch.path().join("report");
    assert_ok(&eval_only(&out, scratch.path(), "substrate"));
    let substrate_files: Vec<String> = files(&out)
        .into_iter()
        .filter(|name| name.starts_with("substrate"))
        .collect();
    assert!(substrate_files.len() >= 2, "{substrate_files:?}");
    let first = report(&out);

    // Another section: the first stays, whole, and is marked as carried over.
    let second = eval_only(&out, scratch.path(), "crash-selftest");
    assert_ok(&second);
    let merged = report(&out);
    assert_eq!(section_ids(&merged), ["substrate", "crash-selftest"]);
    for name in &substrate_files {
        assert!(out.join(name).exists(), "{name} removed");
    }
    let carried = &merged["sections"][0];
    assert_eq!(carried["generated"], first["generated"]);
    assert_eq!(carried["data"], first["sections"][0]["data"]);
    assert_eq!(carried["tables"], first["sections"][0]["tables"]);
    let html = std::fs::read_to_string(out.join("index.html")).expect("index.html");
    assert!(
        html.contains("<section id=\"substrate\">"),
        "substrate shown"
    );
    assert!(
        html.contains("<section id=\"crash-selftest\">"),
        "crash-selftest shown"
    );
    assert!(html.contains("carried over from the run of"), "{html}");
    for plot in substrate_files.iter().filter(|name| name.ends_with(".svg")) {
        let svg = std::fs::read_to_string(out.join(plot)).expect("svg");
        assert!(html.contains(svg.trim()), "{plot} inlined");
    }
    let stdout = String::from_utf8_lossy(&second.stdout);
    assert!(stdout.contains("carried over from the run of"), "{stdout}");

    // Running the first section again replaces it and carries the second.
    assert_ok(&eval_only(&out, scratch.path(), "substrate"));
    let again = report(&out);
    assert_eq!(section_ids(&again), ["substrate", "crash-selftest"]);
    assert_eq!(again["sections"][0]["generated"], again["generated"]);
    assert_eq!(
        again["sections"][1]["generated"],
        merged["sections"][1]["generated"]
    );
}

#[test]
fn a_report_that_cannot_be_read_back_is_refused_untouched() {
    let scratch = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let out = scratch.path().join("report");
    assert_ok(&eval_only(&out, scratch.path(), "substrate"));
    let svg = files(&out)
        .into_iter()
        .find(|name| name.ends_with(".svg"))
        .expect("a substrate plot");
    std::fs::remove_file(out.join(&svg)).expect("remove a plot");
    let before = std::fs::read(out.join("report.json")).expect("report.json");
    let listing = files(&out);

    let refused = eval_only(&out, scratch.path(), "crash-selftest");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(USAGE), "{err}");
    assert!(err.contains(&svg), "{err}");
    assert!(err.contains("cannot be read back"), "{err}");
    assert_eq!(
        std::fs::read(out.join("report.json")).expect("report.json"),
        before
    );
    assert_eq!(files(&out), listing);

    std::fs::write(out.join("report.json"), "not json").expect("overwrite");
    let refused = eval_only(&out, scratch.path(), "crash-selftest");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(USAGE), "{err}");
    assert!(err.contains("not a report"), "{err}");
}
