//! NVthreads together with PMFS's preload (`crates/pmfs-preload`, `docs/pmfs-mount.md` §5;
//! `docs/nvthreads.md` §9, "PMFS's preload"): `tests/c/pmfs_threads.c` writes files from
//! several threads through the preload, both libraries in `LD_PRELOAD`. The two cannot work
//! together (thread-processes cannot share the preload's file system: its `parking_lot`
//! locks wake only threads of one process, so a run hung, and a pool is open in one process
//! at a time, so every thread but the first got `EBUSY`), so the preload refuses, once NVthreads
//! runs the program (`nvt_active()`), with a message naming the FUSE mount: the tests check
//! that the program ends at once with that message, and that the pool is left untouched.

mod common;

use common::*;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// `NAME` as cargo built it for this profile: in `target/<profile>/` (`cargo build`, and
/// binaries for `cargo test`) or, for a library `cargo test` built, in `target/<profile>/deps/`.
fn built(name: &str) -> PathBuf {
    let profile = library_dir()
        .parent()
        .expect("profile directory")
        .to_owned();
    let candidates = [profile.join(name), profile.join("deps").join(name)];
    candidates
        .iter()
        .find(|path| path.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "{name} is in neither {candidates:?}: build it with `cargo build -p \
                 pmfs-preload -p ferrite-cli` (`--release` for release tests)"
            )
        })
}

/// Runs `pmfs_threads /pmfs THREADS WRITES [main-first]` on a fresh PMFS pool: the preload
/// must refuse (served calls fail with `EOPNOTSUPP`), say why on stderr, and leave the pool
/// as `mkfs` made it (`fsck` clean, no file written).
fn the_preload_refuses(threads: &str, writes: &str, main_first: bool, failure: &str) {
    let preload = built("libpmfs_preload.so");
    let ferrite = built("ferrite");
    let runtime = library_dir().join("libnvthreads_rt.so");
    let program = program("pmfs_threads");
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
    let output = run.stderr(Stdio::piped()).output().expect("spawn");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(1),
        "the program fails (a hang ends by SIGALRM, 14): {:?}\n{stdout}\n{stderr}",
        output.status
    );
    assert!(stdout.contains(failure), "{stdout}");
    assert!(
        stderr.contains("NVthreads runtime runs this program")
            && stderr.contains("ferrite fs mount"),
        "the preload says why and what to use instead:\n{stderr}"
    );
    let checked = Command::new(&ferrite)
        .args(["fs", "fsck"])
        .arg(&fs_pool)
        .output()
        .expect("spawn ferrite");
    assert!(checked.status.success(), "fsck: {checked:?}");
    // Listed through the preload alone (no NVthreads): an empty root.
    let listed = Command::new("ls")
        .args(["-A", "/pmfs"])
        .env("PMFS_POOL", &fs_pool)
        .env("PMFS_PREFIX", "/pmfs")
        .env("LD_PRELOAD", &preload)
        .output()
        .expect("spawn ls");
    assert!(
        listed.status.success(),
        "ls through the preload: {listed:?}"
    );
    let names = String::from_utf8_lossy(&listed.stdout);
    assert!(names.trim().is_empty(), "nothing was written: {names}");
}

/// The pool first used by main before the threads exist (they would have inherited its
/// served state and hung on its locks).
#[test]
fn the_preload_refuses_a_pool_main_would_open() {
    the_preload_refuses("4", "50", true, "pmfs_threads FAILED: main's file");
}

/// The pool first used by the threads (all but the first would have found it busy).
#[test]
fn the_preload_refuses_a_pool_the_threads_would_open() {
    the_preload_refuses("4", "50", false, "pmfs_threads FAILED: thread 0");
}
