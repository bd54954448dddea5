//! Catch-up rebases a dirty page only in the 64-byte lines other processes published into:
//! every line a publish wrote comes in (a run across a line boundary, lines named by
//! several entries), a line no entry names is left alone, and "every page" entries or a
//! ring overrun fall back to the whole page. The bytes written into the shared view behind
//! the publish log's back (`load_shared`) stand for a line no entry names: they show
//! whether catch-up touched that line. One test function: one tracker per process.

mod tracker_util;

use nvthreads::diff::Span;
use nvthreads::pages::{LINE, PAGE, Tracker};
use tracker_util::{merge, read, shared, write};

/// The dirty page every check looks at.
const DIRTY: usize = PAGE;

#[test]
fn catch_up_rebases_exactly_the_published_lines() {
    let tracker = Tracker::install(8 * PAGE, None).expect("install");
    // Our own change: byte 1 of line 0, dirty and unmerged throughout.
    write(tracker, DIRTY + 1, &[0x11]);
    assert_eq!(tracker.dirty_pages(), vec![1]);

    in_child(1, || {
        // A run across the boundary of lines 0 and 1, and a byte of line 40: one publish.
        write(tracker, DIRTY + 62, &[1, 2, 3, 4]);
        write(tracker, DIRTY + 40 * LINE + 5, &[5]);
        assert!(tracker.publish_page(1));
        // A second entry for the same page names line 50 only.
        write(tracker, DIRTY + 50 * LINE + 3, &[6]);
        assert!(tracker.publish_page(1));
    });
    // Line 20 changes in the shared view with no entry naming it.
    tracker.load_shared(DIRTY + 20 * LINE, &[0xab]);
    tracker.catch_up().expect("catch up");

    let run: Vec<u8> = (62..66).map(|at| read(tracker, DIRTY + at)).collect();
    assert_eq!(run, vec![1, 2, 3, 4], "both lines of the run rebased");
    assert_eq!(read(tracker, DIRTY + 40 * LINE + 5), 5, "line 40 rebased");
    assert_eq!(
        read(tracker, DIRTY + 50 * LINE + 3),
        6,
        "second entry's line rebased"
    );
    assert_eq!(read(tracker, DIRTY + 1), 0x11, "our own byte kept");
    assert_eq!(
        read(tracker, DIRTY + 20 * LINE),
        0,
        "a line no entry names is not touched"
    );
    assert_eq!(own_diff(tracker), vec![Span { start: 1, len: 1 }]);

    // A publish of everything rebases the whole page: line 20 comes in.
    in_child(2, || tracker.publish_everything());
    tracker.catch_up().expect("catch up");
    assert_eq!(read(tracker, DIRTY + 20 * LINE), 0xab, "every line rebased");
    assert_eq!(own_diff(tracker), vec![Span { start: 1, len: 1 }]);

    // A ring overrun rebases the whole page too, whatever lines its entries named: the
    // child publishes line 0 of page 3 more often than its ring holds.
    tracker.load_shared(DIRTY + 30 * LINE, &[0xcd]);
    in_child(3, || {
        for round in 0..10_000u32 {
            write(tracker, 3 * PAGE, &round.to_le_bytes());
            tracker.publish_page(3);
        }
    });
    tracker.catch_up().expect("catch up");
    assert_eq!(
        read(tracker, DIRTY + 30 * LINE),
        0xcd,
        "overrun: whole page"
    );
    assert_eq!(read(tracker, DIRTY + 1), 0x11);
    assert_eq!(own_diff(tracker), vec![Span { start: 1, len: 1 }]);

    // Merging publishes only our byte, over the others' merged ones.
    assert_eq!(merge(tracker), vec![(1, Span { start: 1, len: 1 })]);
    assert_eq!(shared(tracker, DIRTY + 1), 0x11);
    assert_eq!(shared(tracker, DIRTY + 62), 1);
}

/// The runs of the dirty page: still exactly our own change after every rebase.
fn own_diff(tracker: &Tracker) -> Vec<Span> {
    let mut spans = Vec::new();
    tracker.diff_page(1, &mut spans);
    spans
}

/// Runs `body` in a forked child publishing into ring `slot` (as a thread-process does),
/// and waits for it to exit cleanly.
fn in_child(slot: usize, body: impl FnOnce()) {
    // SAFETY: the test process is single-threaded at this point (one test function); the
    // child only touches the tracker and exits without running the harness.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        tracker_ring(slot);
        body();
        // SAFETY: ends the child without running the test harness's exit path.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child in ring {slot} failed: status {status:#x}"
    );
}

/// Makes this (child) process publish into ring `slot`, starting from the shared view as a
/// fresh thread-process does (the parent's unmerged change is not the child's to publish).
fn tracker_ring(slot: usize) {
    let tracker = Tracker::active().expect("installed");
    tracker.set_writer(slot);
    tracker.reset(true).expect("drop the inherited copies");
    tracker.catch_up().expect("catch up");
}
