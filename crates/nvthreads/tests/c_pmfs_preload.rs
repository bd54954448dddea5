//! NVthreads together with PMFS's preload (`crates/pmfs-preload`, `docs/pmfs-mount.md` §5;
//! `docs/nvthreads.md` §9, "PMFS's preload"): `tests/c/pmfs_threads.c` writes files from
//! several threads through the preload, both libraries in `LD_PRELOAD`. Both tests fail
//! today, for reasons in the preload, not in NVthreads, so they are ignored: run them with
//! `cargo build --release -p pmfs-preload -p ferrite-cli && cargo test --release -p
//! nvthreads --test c_pmfs_preload -- --ignored` once the preload is fixed.

mod common;

use common::*;
use std::path::PathBuf;
use std::process::Command;

/// `target/<profile>/NAME` (beside the `examples/` that holds the runtime library).
fn built(name: &str) -> PathBuf {
    let path = library_dir()
        .parent()
        .expect("profile directory")
        .join(name);
    assert!(
        path.exists(),
        "{} missing: build it with `cargo build --release -p pmfs-preload -p ferrite-cli`",
        path.display()
    );
    path
}

/// Runs `pmfs_threads /pmfs THREADS WRITES [main-first]` on a fresh PMFS pool `rounds`
/// times; each run must print "pmfs_threads ok" (the program reads every file back).
fn writes_through_the_preload(threads: &str, writes: &str, main_first: bool, rounds: usize) {
    let preload = built("libpmfs_preload.so");
    let ferrite = built("ferrite");
    let runtime = library_dir().join("libnvthreads_rt.so");
    let program = program("pmfs_threads");
    for round in 0..rounds {
        let (_dir, pool) = pool_path("pmfs_threads");
        let fs_pool = pool.with_extension("fs");
        let made = Command::new(&ferrite)
            .args(["fs", "mkfs"])
            .arg(&fs_pool)
            .args(["--size", "64M"])
            .output()
            .expect("spawn ferrite");
        assert!(made.status.success(), "mkfs: {made:?}");
        let mut args = vec!["/pmfs", threads, writes];
        if main_first {
            args.push("main-first");
        }
        let mut run = command(&program.preload, &pool, &args);
        run.env("PMFS_POOL", &fs_pool)
            .env("PMFS_PREFIX", "/pmfs")
            .env(
                "LD_PRELOAD",
                format!("{}:{}", runtime.display(), preload.display()),
            );
        let output = run.output().expect("spawn");
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && text.trim() == "pmfs_threads ok",
            "round {round}: {:?} (a hang ends by SIGALRM, 14)\n{text}",
            output.status
        );
    }
}

/// The pool opened in main before the threads exist: every thread-process inherits main's
/// served state, which lives in NVthreads' shared `malloc` memory, so they share one file
/// system; but the preload's locks (`parking_lot` in `pmfs`'s descriptor table and file
/// system) park a waiting thread on a futex of its own process-private memory, which a
/// release in another thread-process never wakes: the run hangs (5 of 30 runs, 4 of 10 with
/// 8 threads of 200 writes; the waiter's stack: `pmfs::posix::write` →
/// `lock_api::Mutex::lock` → `parking_lot::RawMutex::lock_slow` → `futex_wait`).
#[test]
#[ignore = "pmfs-preload: its locks do not wake waiters in other thread-processes (hangs)"]
fn threads_write_through_a_pool_main_opened() {
    writes_through_the_preload("8", "200", true, 10);
}

/// The pool first used by the threads: the first thread-process to use it opens it for
/// itself, and every other thread's open fails (`EBUSY` after the preload's 300 ms wait:
/// "pool is already open by another process"), as another process's would.
#[test]
#[ignore = "pmfs-preload: only the first thread-process to use the pool can open it"]
fn threads_write_through_a_pool_they_open() {
    writes_through_the_preload("4", "100", false, 1);
}
