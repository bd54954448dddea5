//! Objects destroyed right after they woke their waiters (`tests/c/destroy.c`): POSIX lets a
//! program destroy a condition variable once every thread blocked on it has been woken, and
//! a barrier once the waits have been released, before those threads have run. A slot reset
//! for the destroyed object must not hide the wake-up from them (its sequence used to go back
//! to 0, the value a first-generation waiter slept on, and that waiter slept for ever).

mod common;

use common::*;
use std::time::{Duration, Instant};

/// Runs `destroy <mode>` under the runtime and fails if it does not end within a minute (a
/// waiter that never returns) or prints anything but `<mode> ok`.
fn destroyed_objects_release_their_waiters(mode: &str) {
    let built = program("destroy");
    let (_dir, pool) = pool_path("destroy");
    let mut child = command(&built.linked, &pool, &[mode])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn destroy");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for destroy") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("destroy {mode}: a waiter never returned (killed after 60 s)");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut out)
        .expect("read stdout");
    assert!(status.success(), "destroy {mode}: {status:?}\n{out}");
    assert_eq!(out.trim(), format!("{mode} ok"));
}

#[test]
fn a_condition_variable_destroyed_after_its_broadcast_lets_its_waiters_return() {
    destroyed_objects_release_their_waiters("cond");
}

#[test]
fn a_barrier_destroyed_after_its_wait_lets_the_other_threads_return() {
    destroyed_objects_release_their_waiters("barrier");
}
