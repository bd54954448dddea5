//! Read-write locks as pthreads define them (`docs/nvthreads.md` §3.4): each mode of
//! `tests/c/rwlock.c` prints "MODE ok" on plain pthreads (the program built for `LD_PRELOAD`
//! run without it, which checks the test itself), linked with the runtime and preloaded.

mod common;

use common::*;

fn holds(mode: &str) {
    let library = library_dir().join("libnvthreads_rt.so");
    let built = program("rwlock");
    let ok = [format!("{mode} ok")];
    let (_dir, pool) = pool_path("rwlock");
    let mut plain = command(&built.preload, &pool, &[mode]);
    plain.env("NVT_DISABLE", "1");
    assert_eq!(run(plain), ok, "plain pthreads");
    for (binary, preload) in [(&built.linked, false), (&built.preload, true)] {
        let (_dir, pool) = pool_path("rwlock");
        let mut rwlock = command(binary, &pool, &[mode]);
        if preload {
            rwlock.env("LD_PRELOAD", &library);
        }
        assert_eq!(run(rwlock), ok, "preloaded: {preload}");
    }
}

/// Two readers hold the lock at the same time (each waits for the other inside), while a
/// writer's try, timed and clock locks fail and a reader's succeed; before, a read lock was
/// exclusive and each reader waited for the other in vain.
#[test]
fn readers_hold_a_read_write_lock_together() {
    holds("shared");
}

/// Recursive read locks, `EDEADLK` for a writer asking again, and the two preferences: a new
/// reader enters past a waiting writer by default (glibc's `PREFER_READER_NP`) and waits
/// with `PREFER_WRITER_NONRECURSIVE_NP` (attribute or static initialiser).
#[test]
fn read_write_lock_kinds_behave_as_glibcs() {
    holds("kinds");
}

/// A writer's update under the write lock is seen whole under the read lock, and the
/// readers' own writes under it (each to its own persistent slot) are all kept.
#[test]
fn readers_writing_their_own_slots_under_the_read_lock_keep_every_write() {
    holds("persistent");
}
