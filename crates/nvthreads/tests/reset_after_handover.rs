//! The end of a tracking interval (the reset) runs after a section's mutexes are handed
//! over (`docs/nvthreads.md` §5.5): the next holder must not need it, and a publish the next
//! holder makes before the late reset must still reach this process at its next catch-up,
//! whether the reset keeps the page hot or cools it down. One test function, because the
//! tracker and its signal handler are per process.

#[allow(dead_code)] // `shared` is used by the other tracker tests only.
mod tracker_util;

use nvthreads::pages::{HOT_IDLE, PAGE, Tracker};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use tracker_util::{merge, read, write};

/// A page that stays hot across the late reset.
const HOT: usize = 2;
/// A page whose late reset cools it down (it has been idle for `HOT_IDLE - 1` intervals).
const COOLING: usize = 5;

#[test]
fn the_next_holder_needs_no_reset_and_the_late_reset_loses_no_publish() {
    let tracker = Tracker::install(16 * PAGE, None).expect("install");
    let (mut parent, mut child) = UnixStream::pair().expect("socket pair");
    // SAFETY: the test process forks a child that only uses the tracker, its socket and
    // `_exit`; the parent waits for it.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        drop(parent);
        let ok = next_holder(tracker, &mut child);
        // SAFETY: ends the child without running the test harness's exit path.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    drop(child);

    // A section writes a page and merges; its reset is left for after the handover.
    write(tracker, HOT * PAGE, &[11]);
    assert_eq!(merge(tracker).len(), 1);
    hand_over(&mut parent);
    tracker.reset(false).expect("late reset");
    assert!(tracker.dirty_pages().contains(&HOT), "the page stayed hot");
    tracker.catch_up().expect("catch up");
    assert_eq!(
        (read(tracker, HOT * PAGE), read(tracker, HOT * PAGE + 8)),
        (11, 22),
        "the next holder's byte, published before the late reset, is seen; ours kept"
    );
    assert!(
        merge(tracker).is_empty(),
        "the other's byte is not taken for ours"
    );
    tracker.reset(false).expect("reset");

    // A page written once, then idle until the next reset cools it.
    write(tracker, COOLING * PAGE, &[33]);
    merge(tracker);
    tracker.reset(false).expect("reset");
    for _ in 1..HOT_IDLE {
        merge(tracker);
        tracker.reset(false).expect("reset");
    }
    assert!(tracker.dirty_pages().contains(&COOLING), "still hot");
    merge(tracker);
    hand_over(&mut parent);
    tracker.reset(false).expect("late reset");
    assert!(
        !tracker.dirty_pages().contains(&COOLING),
        "the late reset cooled the page (a kept copy now)"
    );
    tracker.catch_up().expect("catch up");
    assert_eq!(
        (
            read(tracker, COOLING * PAGE),
            read(tracker, COOLING * PAGE + 16)
        ),
        (33, 44),
        "the kept copy taken after the next holder's publish is dropped at the catch-up"
    );

    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the next holder saw every published byte (status {status:#x})"
    );
}

/// Releases the "lock" to the other process and waits until it has released it back.
fn hand_over(socket: &mut UnixStream) {
    socket.write_all(&[1]).expect("hand over");
    let mut byte = [0u8];
    socket.read_exact(&mut byte).expect("handed back");
}

/// The other process: at each handover it acquires (catches up), must read what the first
/// holder published before its reset, writes other bytes of the same page, merges, resets
/// and hands back. Returns whether it read the published bytes both times.
fn next_holder(tracker: &Tracker, socket: &mut UnixStream) -> bool {
    tracker.set_writer(1);
    let mut ok = true;
    for (page, mine, theirs, byte) in [(HOT, 8, 11, 22), (COOLING, 16, 33, 44)] {
        let mut token = [0u8];
        if socket.read_exact(&mut token).is_err() {
            return false;
        }
        tracker.catch_up().expect("catch up");
        ok &= read(tracker, page * PAGE) == theirs;
        write(tracker, page * PAGE + mine, &[byte]);
        ok &= merge(tracker).len() == 1;
        tracker.reset(false).expect("reset");
        if socket.write_all(&[1]).is_err() {
            return false;
        }
    }
    ok
}
