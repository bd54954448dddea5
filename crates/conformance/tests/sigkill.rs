//! Real processes killed with SIGKILL at random times while running workloads on a pool
//! file, including kills during recovery; no acknowledged operation may be lost.

use conformance::kill::{ChildSpec, KillConfig, campaign, child_main};
use conformance::{Factory, MvccFactory, RedoFactory, UndoFactory};
use mvcc::MvccOptions;
use std::time::Duration;
use tx::{EngineOptions, LogMode, NoReplay, Replay};
use workloads::array::ArrayWorkload;
use workloads::hash::silo_hash;
use workloads::queue::QueueWorkload;
use workloads::{Params, Workload};

const ENTRY: &str = "child_entry_point";
const POOL: u64 = 64 << 20;

fn params() -> Params {
    Params {
        keys: 200,
        value_size: 32,
        update_percent: 80,
        threads: 1,
        seed: 9,
        locks_at_one_thread: false,
    }
}

fn options() -> EngineOptions {
    EngineOptions {
        lanes: 4,
        lane_size: 64 << 10,
        chunk_shift: 16,
        log_mode: LogMode::Auto,
    }
}

/// The MVCC engine with logs small enough that checkpoints and write-backs happen between
/// kills; `replay` re-executes the workload's logged operations.
fn mvcc<R: Replay + Clone + 'static>(replay: R) -> MvccFactory<R> {
    MvccFactory {
        options: MvccOptions {
            lanes: 4,
            olog_size: 64 << 10,
            clog_size: 64 << 10,
            chunk_shift: 16,
            tlog_versions: 256,
            ..MvccOptions::small()
        },
        replay,
    }
}

fn dispatch(spec: &ChildSpec) -> Result<(), String> {
    let (engine, workload) = spec.case.split_once('/').ok_or("bad case")?;
    match engine {
        "undo" => run_workload(spec, &UndoFactory(options()), workload),
        "redo" => run_workload(spec, &RedoFactory(options()), workload),
        "mvcc" => match workload {
            "hash" => {
                let hash = silo_hash(params());
                child_main(spec, &mvcc(hash.ops()), &hash)
            }
            other => run_workload(spec, &mvcc(NoReplay), other),
        },
        other => Err(format!("unknown engine {other}")),
    }
}

fn run_workload<F: Factory>(spec: &ChildSpec, factory: &F, workload: &str) -> Result<(), String> {
    match workload {
        "hash" => child_main(spec, factory, &silo_hash(params())),
        "array" => child_main(spec, factory, &ArrayWorkload::new(params())),
        "queue" => child_main(spec, factory, &QueueWorkload::new(params())),
        other => Err(format!("unknown workload {other}")),
    }
}

/// The child process's entry point; does nothing in a normal test run.
#[test]
fn child_entry_point() {
    let Some(spec) = ChildSpec::from_env() else {
        return;
    };
    if let Err(error) = dispatch(&spec) {
        eprintln!("child failed: {error}");
        std::process::exit(3);
    }
}

fn kill_campaign<F: Factory, W: Workload>(case: &str, factory: &F, workload: &W, kills: usize) {
    let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir");
    let exe = std::env::current_exe().expect("test binary");
    let config = KillConfig {
        kills,
        max_run: Duration::from_millis(40),
        double_crash_every: 4,
        seed: 17,
    };
    let report = campaign(
        &exe,
        ENTRY,
        case,
        factory,
        workload,
        &dir.path().join("pool"),
        POOL,
        &config,
    )
    .unwrap_or_else(|error| panic!("{case}: {error}"));
    eprintln!("{case}: {report:?}");
    assert_eq!(report.kills, kills);
    assert!(
        report.acknowledged > kills as u64,
        "{case}: the children barely ran: {report:?}"
    );
}

#[test]
fn redo_survives_sigkill() {
    kill_campaign(
        "redo/hash",
        &RedoFactory(options()),
        &silo_hash(params()),
        120,
    );
    kill_campaign(
        "redo/array",
        &RedoFactory(options()),
        &ArrayWorkload::new(params()),
        50,
    );
    kill_campaign(
        "redo/queue",
        &RedoFactory(options()),
        &QueueWorkload::new(params()),
        50,
    );
}

#[test]
fn undo_survives_sigkill() {
    kill_campaign(
        "undo/hash",
        &UndoFactory(options()),
        &silo_hash(params()),
        120,
    );
    kill_campaign(
        "undo/array",
        &UndoFactory(options()),
        &ArrayWorkload::new(params()),
        50,
    );
    kill_campaign(
        "undo/queue",
        &UndoFactory(options()),
        &QueueWorkload::new(params()),
        50,
    );
}

#[test]
fn mvcc_survives_sigkill() {
    let hash = silo_hash(params());
    kill_campaign("mvcc/hash", &mvcc(hash.ops()), &hash, 120);
    kill_campaign(
        "mvcc/array",
        &mvcc(NoReplay),
        &ArrayWorkload::new(params()),
        50,
    );
    kill_campaign(
        "mvcc/queue",
        &mvcc(NoReplay),
        &QueueWorkload::new(params()),
        50,
    );
}
