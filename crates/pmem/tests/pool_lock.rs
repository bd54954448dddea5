//! The pool lock against processes forked by other threads: a child holds copies of its
//! parent's descriptors from its fork until its exec closes them, and a `flock` belongs to
//! the open file description those copies share. Closing a pool must release its lock even
//! while such a child exists, so that the pool can be opened again at once; and a child that
//! drops its copy of an open pool must neither release its opener's lock nor mark the pool
//! clean.

use pmem::PoolError;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::{create, open, shm_dir};

/// Starts `true` on another thread with a child that, between its fork and its exec, says
/// so on `forked` and then waits `hold` (keeping every descriptor it inherited).
fn spawn_slow_exec(forked: UnixStream, hold: Duration) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut command = Command::new("true");
        command.stdout(Stdio::null()).stderr(Stdio::null());
        // SAFETY: the closure runs in the forked child before exec and only makes two system
        // calls (a write on a socket it owns, and a sleep); it allocates nothing and takes no
        // lock another thread of the parent could have held at the fork.
        unsafe {
            command.pre_exec(move || {
                (&forked).write_all(b"f")?;
                std::thread::sleep(hold);
                Ok(())
            });
        }
        let mut child = command.spawn().expect("spawn true");
        child.wait().expect("wait");
    })
}

#[test]
fn a_closed_pool_reopens_while_a_child_forked_meanwhile_has_not_exec_d() {
    let dir = shm_dir();
    let path = create(dir.path());
    let pool = open(&path).expect("open");
    let (mut parent_end, child_end) = UnixStream::pair().expect("socket pair");
    let spawner = spawn_slow_exec(child_end, Duration::from_millis(500));
    let mut byte = [0u8; 1];
    parent_end.read_exact(&mut byte).expect("the child forked");
    // The child now holds a copy of the pool's descriptor (and sleeps before its exec).
    drop(pool);
    let reopened = open(&path);
    assert!(
        reopened.is_ok(),
        "a child that inherited the descriptor kept the closed pool locked: {reopened:?}"
    );
    drop(reopened);
    spawner.join().expect("spawner");
}

#[test]
fn opening_and_closing_while_other_threads_spawn_processes_is_never_refused() {
    let dir = shm_dir();
    let path = create(dir.path());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spawners: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let status = Command::new("true").status().expect("spawn true");
                    assert!(status.success());
                }
            })
        })
        .collect();
    let refused = (0..300)
        .filter(|_| matches!(open(&path), Err(PoolError::AlreadyOpen)))
        .count();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    spawners
        .into_iter()
        .for_each(|s| s.join().expect("spawner"));
    assert_eq!(
        refused, 0,
        "spurious AlreadyOpen in {refused} of 300 rounds"
    );
}

/// Forks a child that drops its copy of `pool` (as a child forked without `exec` does when it
/// returns through its destructors) and exits; returns once it has.
fn child_drops_its_copy<B: pmem::Persist>(pool: &mut Option<pmem::Pool<B>>) {
    // SAFETY: the child only drops its copy of the pool (a `getpid`, an `munmap`, a `close`
    // and glibc's `free`, which glibc's `fork` keeps usable in the child) and calls `_exit`;
    // the parent only waits for it.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        drop(pool.take());
        // SAFETY: ends the child without running the test harness's exit handlers.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked; `status` is a valid out-pointer.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child did not exit cleanly: {status:#x}"
    );
}

#[test]
fn a_forked_child_dropping_its_copy_leaves_the_pool_to_its_opener() {
    let dir = shm_dir();
    let path = create(dir.path());
    let mut pool = Some(open(&path).expect("open"));
    child_drops_its_copy(&mut pool);
    let second = open(&path);
    assert!(
        matches!(second, Err(PoolError::AlreadyOpen)),
        "the child's drop released its opener's lock: {second:?}"
    );
    // The opener crashes now: the child must not have marked the pool clean for it.
    pool.take().expect("the opener's pool").abandon();
    let reopened = open(&path).expect("reopen after the opener's crash");
    assert!(
        !reopened.was_clean(),
        "the child's drop marked a pool its opener was still using as cleanly closed"
    );
    drop(reopened);
    assert!(
        open(&path).expect("reopen").was_clean(),
        "a clean close still reads as clean"
    );
}
