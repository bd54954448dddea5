//! The pool lock against processes forked by other threads: a child holds copies of its
//! parent's descriptors from its fork until its exec closes them, and a `flock` belongs to
//! the open file description those copies share. Closing a pool must release its lock even
//! while such a child exists, so that the pool can be opened again at once.

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
