//! One descriptor table for all threads (`docs/nvthreads.md` §3.1): thread-processes are made
//! with `clone(CLONE_FILES | CLONE_FS)`, so a descriptor opened, closed or `dup2`ed by one
//! thread is so in every thread, as with pthreads, and so are the working directory and umask. Each mode of `tests/c/fdtable.c` prints "MODE ok",
//! linked and preloaded, and ends itself with `alarm(5)` if it hangs.

mod common;

use common::*;

fn holds(mode: &str) {
    let library = library_dir().join("libnvthreads_rt.so");
    let built = program("fdtable");
    for (binary, preload) in [(&built.linked, false), (&built.preload, true)] {
        let (_dir, pool) = pool_path("fdtable");
        let mut fdtable = command(binary, &pool, &[mode]);
        if preload {
            fdtable.env("LD_PRELOAD", &library);
        }
        assert_eq!(run(fdtable), [format!("{mode} ok")], "preloaded: {preload}");
    }
}

/// A reader thread sees end-of-file once main closes the pipe's write end (its own copy of
/// the write end kept the pipe open: the read blocked for ever).
#[test]
fn a_pipe_closed_by_main_ends_in_a_thread() {
    holds("eof");
}

/// A thread's write to a pipe whose reader main closed fails with `EPIPE`.
#[test]
fn a_pipe_whose_reader_main_closed_is_broken_for_a_thread() {
    holds("epipe");
}

/// Descriptors a thread opens are main's too, and the other way round, after the thread
/// was created.
#[test]
fn descriptors_opened_by_one_thread_are_open_in_all() {
    holds("opened");
}

/// `close` and `dup2` in a thread are seen by main.
#[test]
fn close_and_dup2_in_a_thread_are_seen_by_main() {
    holds("closed");
}

/// The working directory and umask are shared too: a thread's `chdir` and `umask` are main's.
#[test]
fn chdir_and_umask_in_a_thread_are_seen_by_main() {
    holds("cwd");
}
