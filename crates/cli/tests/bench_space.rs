//! `ferrite bench` and the pool's room: a `--pool-size` that cannot hold an engine's logs and
//! the initial content is refused before any pool is made (exit 2), naming what takes the
//! room; a run that fills its pool anyway exits 18 ("out of space", README) on every engine,
//! with advice that fits how the workload grows.

use bench::choice::{EngineChoice, WorkloadChoice};
use std::path::Path;
use std::process::{Command, Output};

mod common;
use common::stderr;

const USAGE: i32 = 2;
const OUT_OF_SPACE: i32 = 18;

fn text(path: &Path) -> &str {
    path.to_str().expect("scratch paths are UTF-8")
}

fn bench(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["bench", "--quiet", "--pool-dir", text(dir)])
        .args(args)
        .output()
        .expect("the ferrite binary runs")
}

/// Pools too small for the engines' own areas: 40 KiB passed the old check (two keys of 64
/// B), then failed at format with exit 1 and the advice "fewer --keys".
#[test]
fn a_pool_too_small_for_the_engines_logs_is_a_usage_error_naming_them() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    for (engine, size, named) in [
        (
            "redo",
            "40K",
            "16.00 MiB for the redo engine's logs (16 lanes of 1 MiB)",
        ),
        ("undo", "1M", "the undo engine's logs"),
        (
            "mvcc",
            "1M",
            "the mvcc engine's logs (16 operation logs of 1 MiB and a checkpoint log of 8 MiB)",
        ),
        ("ideal", "1M", "the ideal reference's logs"),
    ] {
        let output = bench(
            dir.path(),
            &[
                "--engine",
                engine,
                "--workload",
                "hash",
                "--keys",
                "2",
                "--pool-size",
                size,
                "--ops",
                "10",
                "--runs",
                "1",
            ],
        );
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(USAGE), "{engine}: {err}");
        assert!(err.contains(named), "{engine}: {err}");
        assert!(
            err.contains("before its first operation"),
            "{engine}: {err}"
        );
        // Two keys are not the problem: fewer would not help.
        assert!(!err.contains("fewer --keys"), "{engine}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 0);
}

/// B+tree leaves of 16 values of 1 KiB are 16,528 bytes, just over the heap's largest class:
/// each takes a whole 256 KiB chunk. The refusal says so, and which value size avoids it.
#[test]
fn leaves_just_over_the_largest_class_are_counted_as_whole_chunks() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let output = bench(
        dir.path(),
        &[
            "--engine",
            "redo",
            "--workload",
            "btree",
            "--update",
            "50",
            "--keys",
            "2000",
            "--value-size",
            "1K",
            "--pool-size",
            "64M",
            "--ops",
            "10",
            "--runs",
            "1",
        ],
    );
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(USAGE), "{err}");
    assert!(err.contains("222 B+tree leaves of 16528 B"), "{err}");
    assert!(err.contains("takes a whole 256 KiB chunk"), "{err}");
    assert!(err.contains("--value-size of 1015 or less"), "{err}");
    assert!(err.contains("give --pool-size 73M or more"), "{err}");
}

/// A run whose inserts fill the pool exits 18 on every engine, PMDK included (its `ENOMEM`
/// is the same typed error), with advice for a workload that grows with its operations.
#[test]
fn a_run_that_fills_its_pool_exits_18_on_every_engine() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let mut engines = vec![
        EngineChoice::parse("redo").expect("redo"),
        EngineChoice::parse("undo").expect("undo"),
        EngineChoice::Mvcc,
        EngineChoice::Ideal,
    ];
    if pmdk::Pmdk::available().is_ok() {
        engines.push(EngineChoice::Pmdk);
    }
    let ycsb_d = WorkloadChoice::parse("ycsb-d").expect("ycsb-d");
    let params = workloads::Params {
        keys: 20_000,
        value_size: 256,
        ..workloads::Params::default()
    };
    for engine in engines {
        // Room for the setup and 1 MiB more; PMDK's own metadata is not counted, so half as
        // as much again there (its allocator took 13.5 MiB for 9 MiB of leaves). The run inserts about 5 % of 400,000 operations: 20,000 records
        // of 256 B, as many as it loaded.
        let least = bench::space::need(engine, ycsb_d, &params)
            .expect("measured")
            .least;
        let room = match engine {
            EngineChoice::Pmdk => 2 * least,
            _ => least + (1 << 20),
        };
        let size = format!("{}K", room >> 10);
        let engine_name = engine.to_string();
        let output = bench(
            dir.path(),
            &[
                "--engine",
                &engine_name,
                "--workload",
                "ycsb-d",
                "--keys",
                "20000",
                "--value-size",
                "256",
                "--pool-size",
                &size,
                "--ops",
                "400000",
                "--warmup",
                "0",
                "--runs",
                "1",
            ],
        );
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(OUT_OF_SPACE), "{engine}: {err}");
        assert!(err.contains("filled during the run"), "{engine}: {err}");
        assert!(
            err.contains("inserts a new record in 5 % of its operations"),
            "{engine}: {err}"
        );
        assert!(err.contains("fewer --ops"), "{engine}: {err}");
        assert_eq!(err.lines().count(), 1, "{engine}: {err}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 0);
}

/// A setup the formats' count lets through but that runs out anyway (PMDK's metadata is not
/// counted) exits 18 too, saying it ran out while loading.
#[test]
fn a_setup_that_runs_out_exits_18_saying_so() {
    if pmdk::Pmdk::available().is_err() {
        eprintln!("skipped: PMDK (libpmemobj) is not installed");
        return;
    }
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let output = bench(
        dir.path(),
        &[
            "--engine",
            "pmdk",
            "--workload",
            "hash",
            "--keys",
            "100000",
            "--value-size",
            "256",
            "--pool-size",
            "30M",
            "--ops",
            "10",
            "--runs",
            "1",
        ],
    );
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(OUT_OF_SPACE), "{err}");
    assert!(err.contains("loaded before the first operation"), "{err}");
    assert!(err.contains("fewer --keys"), "{err}");
}
