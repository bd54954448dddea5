//! `exit` called by a thread other than main ends the program with that status
//! (`docs/nvthreads.md` §3.7), linked and preloaded: `tests/c/exits.c STATUS [nested]`, the
//! thread that calls `exit` made by main or by another thread.

mod common;

use common::*;
use std::time::{Duration, Instant};

#[test]
fn exit_in_a_thread_ends_the_program_with_its_status() {
    let library = library_dir().join("libnvthreads_rt.so");
    let built = program("exits");
    for (status, nested) in [(0, false), (3, false), (4, true)] {
        for (binary, preload) in [(&built.linked, false), (&built.preload, true)] {
            let (_dir, pool) = pool_path("exits");
            let argument = status.to_string();
            let arguments: &[&str] = if nested {
                &[&argument, "nested"]
            } else {
                &[&argument]
            };
            let mut exits = command(binary, &pool, arguments);
            if preload {
                exits.env("LD_PRELOAD", &library);
            }
            let started = Instant::now();
            let output = exits.output().expect("spawn exits");
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert_eq!(
                output.status.code(),
                Some(status),
                "nested: {nested}, preloaded: {preload}: {:?}, stdout {stdout:?}",
                output.status
            );
            assert_eq!(stdout, "atexit\n", "preloaded: {preload}");
            // The sleeping thread is ended too, not waited for (it sleeps 10 s; the bound
            // leaves a loaded machine all the time below that).
            assert!(
                started.elapsed() < Duration::from_secs(9),
                "preloaded: {preload}"
            );
        }
    }
}
