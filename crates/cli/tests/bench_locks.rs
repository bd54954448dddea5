//! `bench --locks-at-one-thread`: the request records it and the tables say who paid for
//! the locks (the locks themselves are tested in `workloads::locks`).

use std::path::Path;
use std::process::Output;

fn text(path: &Path) -> &str {
    path.to_str().expect("scratch paths are UTF-8")
}

fn bench(dir: &Path, json: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "bench",
        "--engine",
        "redo,mvcc",
        "--workload",
        "ts-hash",
        "--keys",
        "256",
        "--ops",
        "200",
        "--warmup",
        "10",
        "--runs",
        "1",
        "--quiet",
        "--pool-dir",
        text(dir),
        "--json",
        text(json),
    ];
    args.extend_from_slice(extra);
    std::process::Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(&args)
        .output()
        .expect("the ferrite binary runs")
}

fn recorded_choice(json: &Path) -> serde_json::Value {
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(json).expect("the JSON report")).expect("JSON");
    report["request"]["locks_at_one_thread"].clone()
}

#[test]
fn a_one_thread_run_with_locks_says_so_in_its_tables_and_its_json() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch directory in /dev/shm");
    let json = dir.path().join("bench.json");
    let pools = dir.path().join("pools");
    std::fs::create_dir(&pools).expect("pool directory");

    let locked = bench(&pools, &json, &["--locks-at-one-thread"]);
    let out = String::from_utf8_lossy(&locked.stdout).into_owned();
    assert!(
        locked.status.success(),
        "{}",
        String::from_utf8_lossy(&locked.stderr)
    );
    assert!(out.contains("--locks-at-one-thread"), "{out}");
    assert_eq!(recorded_choice(&json), serde_json::Value::Bool(true));

    let default = bench(&pools, &json, &[]);
    let out = String::from_utf8_lossy(&default.stdout).into_owned();
    assert!(
        default.status.success(),
        "{}",
        String::from_utf8_lossy(&default.stderr)
    );
    assert!(!out.contains("--locks-at-one-thread"), "{out}");
    assert_eq!(recorded_choice(&json), serde_json::Value::Bool(false));
}
