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
        .env("COLUMNS", "120")
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
    // Quick sizes judge no goal: a measured one is indicative, the others not measured.
    assert!(
        headlines
            .iter()
            .all(|h| h["verdict"] == "indicative" || h["verdict"] == "not-measured"),
        "{headlines:?}"
    );
    assert!(
        stdout.contains("(indicative: measured at reduced sizes"),
        "{stdout}"
    );
    // The JSON gives each goal the verdict of its headline: no true / false at quick sizes.
    for (goal, headline) in goals.iter().zip(headlines) {
        assert_eq!(goal["verdict"], headline["verdict"], "{goal}");
        assert!(goal.get("holds").is_none(), "{goal}");
    }
    assert_eq!(engines["quick"], true);
    // Every table row fits a 120-column terminal (cells wrap), or the table says it cannot
    // and points at the HTML.
    let lines: Vec<&str> = stdout.lines().collect();
    for (index, line) in lines.iter().enumerate() {
        if line.chars().count() <= 120 || !line.starts_with(['│', '┌', '└', '╞', '├']) {
            continue;
        }
        let note = lines[index..]
            .iter()
            .find(|l| !l.starts_with(['│', '┌', '└', '╞', '├']))
            .expect("a line after the table");
        assert!(
            note.starts_with("(this table needs") && note.contains("index.html"),
            "a row wider than 120 columns with no note: {line}"
        );
    }

    let logstudy = section_data(&out, "logstudy");
    let points = logstudy["data"]["points"].as_array().expect("study points");
    assert_eq!(points.len(), 4 * 7 * 2, "modes × record sizes × batches");
    assert_eq!(logstudy["data"]["auto_verdict"], "indicative");
    let headlines = logstudy["headlines"].as_array().expect("headlines");
    assert!(
        headlines.iter().all(|h| h["claim"]
            .as_str()
            .is_some_and(|c| c.starts_with("MemSys 2017"))),
        "{headlines:?}"
    );
}

/// The mounts whose mount point names `marker`, from this machine's mount table.
fn mounts_naming(marker: &str) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .expect("mount table")
        .lines()
        .filter(|line| line.contains(marker))
        .map(str::to_owned)
        .collect()
}

#[test]
fn an_interrupted_pmfs_section_leaves_no_mount_pool_or_directory() {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: no /dev/fuse: the section mounts nothing to leave behind");
        return;
    }
    let scratch = tempfile::tempdir_in("/dev/shm").expect("scratch directory in /dev/shm");
    let pool_dir = scratch.path().join("pools");
    std::fs::create_dir(&pool_dir).expect("pool directory");
    let out = scratch.path().join("report");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["eval", "--quick", "--only", "pmfs", "--out", text(&out)])
        .args(["--pool-dir", text(&pool_dir)])
        // Set, so that `ferrite` does not re-run itself: the signal goes to the process that
        // mounts.
        .env("PMEM_IS_PMEM_FORCE", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the ferrite binary runs");
    let marker = format!("ferrite-eval-fuse-durable-{}", child.id());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while mounts_naming(&marker).is_empty() {
        assert!(
            child.try_wait().expect("poll the eval").is_none(),
            "the section ended before mounting"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "no FUSE mount appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("interrupt the eval");
    let output = child.wait_with_output().expect("wait for the eval");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    let tag = format!("-{}", pid);
    let left: Vec<String> = mounts_naming("ferrite-eval-")
        .into_iter()
        .filter(|line| line.contains(&tag))
        .collect();
    assert!(left.is_empty(), "mounts left: {left:?}");
    let pools: Vec<_> = std::fs::read_dir(&pool_dir)
        .expect("pool directory")
        .map(|entry| entry.expect("entry").path())
        .collect();
    assert!(pools.is_empty(), "left in the pool directory: {pools:?}");
    let temp = std::env::temp_dir();
    let dirs: Vec<_> = std::fs::read_dir(&temp)
        .expect("temp directory")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.starts_with("ferrite-eval-") && name.ends_with(&tag))
        .collect();
    assert!(dirs.is_empty(), "left in {}: {dirs:?}", temp.display());
}
