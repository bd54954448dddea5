//! The page tracker in a real process: faults, twins, diffs, publishing into the shared
//! view, dropping and keeping private copies, a forked "thread-process" merging into the
//! parent's view, and foreign faults still killing the process. One test function, because
//! the tracker and its signal handler are per process.

mod tracker_util;

use nvthreads::diff::Span;
use nvthreads::pages::{PAGE, Tracker};
use tracker_util::{merge, read, shared, write};

/// Two pages of ordinary anonymous memory holding a pattern, to be adopted by the tracker.
fn adoptable() -> usize {
    // SAFETY: a fresh anonymous mapping, filled and then handed to the tracker for good.
    unsafe {
        let at = libc::mmap(
            std::ptr::null_mut(),
            2 * PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(at, libc::MAP_FAILED);
        for i in 0..2 * PAGE {
            at.cast::<u8>().add(i).write((i % 251) as u8);
        }
        at as usize
    }
}

fn adopted_byte(at: usize) -> u8 {
    // SAFETY: `at` lies in the adopted (always readable) range.
    unsafe { (at as *const u8).read_volatile() }
}

fn write_adopted(at: usize, byte: u8) {
    // SAFETY: `at` lies in the adopted range; the fault handler makes the page writable.
    unsafe { (at as *mut u8).write_volatile(byte) };
}

#[test]
fn tracker_end_to_end() {
    let globals = adoptable();
    let tracker = Tracker::install_with(16 * PAGE, None, &[(globals, 2 * PAGE)]).expect("install");
    assert_eq!(tracker.heap_pages(), 16);
    assert_eq!(
        adopted_byte(globals + 300),
        (300 % 251) as u8,
        "adoption keeps contents"
    );
    assert!(
        Tracker::install(PAGE, None).is_err(),
        "second tracker must be refused"
    );

    // Writes fault once per page and are found as exact runs.
    write(tracker, 10, &[1, 2, 3]);
    write(tracker, 3 * PAGE + 100, &[9]);
    write(tracker, 3 * PAGE + 102, &[9]);
    assert_eq!(tracker.faults(), 2);
    assert_eq!(tracker.dirty_pages(), vec![0, 3]);
    assert_eq!(
        shared(tracker, 10),
        0,
        "private writes are invisible before a merge"
    );
    let merged = merge(tracker);
    assert_eq!(
        merged,
        vec![
            (0, Span { start: 10, len: 3 }),
            (3, Span { start: 100, len: 1 }),
            (3, Span { start: 102, len: 1 }),
        ]
    );
    assert_eq!(shared(tracker, 11), 2);
    tracker.reset(true).expect("reset");
    assert!(tracker.dirty_pages().is_empty());

    // A clean page follows the shared view; a dirty one does not until it is dropped.
    tracker.load_shared(5 * PAGE, &[42]);
    assert_eq!(read(tracker, 5 * PAGE), 42);
    write(tracker, 6 * PAGE, &[1]);
    tracker.load_shared(6 * PAGE + 1, &[77]);
    assert_eq!(
        read(tracker, 6 * PAGE + 1),
        0,
        "dirty page is a private copy"
    );
    merge(tracker);
    tracker.reset(true).expect("reset");
    assert_eq!(
        read(tracker, 6 * PAGE + 1),
        77,
        "dropped copy re-reads the shared view"
    );
    assert_eq!(read(tracker, 6 * PAGE), 1);

    // Hot pages: a page published in an interval stays writable with its twin refreshed,
    // so the next write takes no fault and diffs as only itself.
    write(tracker, 7 * PAGE, &[5, 5]);
    merge(tracker);
    tracker.reset(false).expect("reset keep");
    let faults = tracker.faults();
    write(tracker, 7 * PAGE + 1, &[6]);
    assert_eq!(tracker.faults(), faults, "a hot page takes no fault");
    let merged = merge(tracker);
    assert_eq!(merged, vec![(7, Span { start: 1, len: 1 })]);
    tracker.reset(false).expect("reset keep");
    // Unchanged for HOT_IDLE intervals, it cools down into a kept, write-protected copy.
    for _ in 0..nvthreads::pages::HOT_IDLE {
        // (Page 8 came with page 7 in a fault window, unwritten: it cools down too.)
        assert!(tracker.dirty_pages().contains(&7), "still hot");
        assert!(merge(tracker).is_empty());
        tracker.reset(false).expect("reset keep");
    }
    assert!(tracker.dirty_pages().is_empty(), "cooled down");
    tracker.load_shared(7 * PAGE + 2, &[8]);
    assert_eq!(read(tracker, 7 * PAGE + 2), 0, "kept copy is private");
    tracker.drop_kept().expect("drop kept");
    assert_eq!(read(tracker, 7 * PAGE + 2), 8);
    write(tracker, 7 * PAGE + 3, &[1]);
    assert_eq!(tracker.faults(), faults + 1, "a cooled page faults again");
    assert_eq!(merge(tracker), vec![(7, Span { start: 3, len: 1 })]);
    tracker.reset(true).expect("reset");

    // A kept page written again is not discarded by drop_kept: its new bytes are unmerged.
    write(tracker, 8 * PAGE, &[3]);
    merge(tracker);
    tracker.reset(false).expect("reset keep");
    write(tracker, 8 * PAGE + 1, &[4]);
    tracker.drop_kept().expect("drop kept");
    assert_eq!(
        read(tracker, 8 * PAGE + 1),
        4,
        "unmerged write survives drop_kept"
    );
    assert_eq!(merge(tracker), vec![(8, Span { start: 1, len: 1 })]);
    tracker.reset(true).expect("reset");
    assert_eq!(
        (read(tracker, 8 * PAGE), read(tracker, 8 * PAGE + 1)),
        (3, 4)
    );

    // A forked child writes and merges; the parent sees it (clean page) at once.
    // SAFETY: the child only touches the heap, the tracker's state and its own allocations,
    // then leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        write(tracker, 9 * PAGE + 7, &[0xaa, 0xbb]);
        // Page 9 follows page 8's fault: a sequential writer, so the fault made a window of
        // pages writable at once (pages 9 and 10); only page 9 has changes.
        let ok = merge(tracker).len() == 1 && tracker.dirty_pages().first() == Some(&9);
        // SAFETY: ends the child without running the test harness's exit path.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    assert_eq!(wait(pid), Ok(0), "child failed");
    assert_eq!(read(tracker, 9 * PAGE + 8), 0xbb);
    assert!(
        tracker.dirty_pages().is_empty(),
        "child's dirty state is its own"
    );

    // Two processes writing disjoint bytes of one page both keep their bytes.
    write(tracker, 11 * PAGE, &[1]);
    // SAFETY: as above.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        write(tracker, 11 * PAGE + 1, &[2]);
        merge(tracker);
        // SAFETY: as above.
        unsafe { libc::_exit(0) };
    }
    assert_eq!(wait(pid), Ok(0));
    merge(tracker);
    tracker.reset(true).expect("reset");
    assert_eq!(
        (read(tracker, 11 * PAGE), read(tracker, 11 * PAGE + 1)),
        (1, 2)
    );

    // Adopted memory: page 16 in the global numbering; a child's write reaches the parent.
    write_adopted(globals + 5, 0xee);
    assert_eq!(tracker.dirty_pages(), vec![16]);
    assert_eq!(merge(tracker), vec![(16, Span { start: 5, len: 1 })]);
    tracker.reset(true).expect("reset");
    assert_eq!(adopted_byte(globals + 5), 0xee);
    // SAFETY: as above.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        write_adopted(globals + PAGE + 9, 0x42);
        let ok = merge(tracker) == vec![(17, Span { start: 9, len: 1 })];
        // SAFETY: as above.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    assert_eq!(wait(pid), Ok(0), "child merge into the adopted range");
    assert_eq!(adopted_byte(globals + PAGE + 9), 0x42);
    assert_eq!(adopted_byte(globals + PAGE + 10), ((PAGE + 10) % 251) as u8);

    // A fault outside the heap still kills with SIGSEGV.
    // SAFETY: as above; the child dies on its write to a read-only page.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: a fresh read-only mapping; writing to it is the point of the test.
        unsafe {
            let page = libc::mmap(
                std::ptr::null_mut(),
                PAGE,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            page.cast::<u8>().write_volatile(1);
            libc::_exit(0);
        }
    }
    assert_eq!(wait(pid), Err(libc::SIGSEGV));

    // A sequential writer takes one fault per window of pages (1, 2, 4, … pages): pages 1
    // to 7 in three faults; the unwritten pages of a window merge nothing.
    merge(tracker);
    tracker.reset(true).expect("reset");
    let before = tracker.faults();
    for page in 1..8 {
        write(tracker, page * PAGE + 20, &[page as u8]);
    }
    assert_eq!(tracker.faults() - before, 3, "windows of 1, 2 and 4 pages");
    assert_eq!(tracker.dirty_pages(), (1..8).collect::<Vec<_>>());
    assert_eq!(merge(tracker).len(), 7);
    tracker.reset(true).expect("reset");

    kept_copies_follow_the_publish_log(tracker);
}

/// Lazy dropping per page: a kept copy is dropped when another process publishes into its
/// page (and only then), a dirty page another process published into is rebased at once
/// (the other's bytes come in, this process's changes stay and still diff as its own), and a
/// publish of everything (or a process falling a whole ring behind) drops every kept copy.
/// Each child publishes into the ring of its own thread slot, as thread-processes do.
fn kept_copies_follow_the_publish_log(tracker: &Tracker) {
    // Pages 12 and 13 written and kept; page 14 written and still dirty.
    write(tracker, 12 * PAGE, &[1]);
    write(tracker, 13 * PAGE + 64, &[2]);
    for page in tracker.dirty_pages() {
        tracker.publish_page(page);
    }
    tracker.reset(false).expect("reset keep");
    write(tracker, 14 * PAGE, &[3]);
    // A child publishes into pages 12 and 14 (other bytes than ours).
    // SAFETY: as in `tracker_end_to_end`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        tracker.set_writer(1);
        tracker.catch_up().expect("catch up");
        write(tracker, 12 * PAGE + 1, &[7]);
        write(tracker, 14 * PAGE + 1, &[8]);
        let published: Vec<bool> = [12, 14].map(|page| tracker.publish_page(page)).to_vec();
        // SAFETY: ends the child without running the test harness's exit path.
        unsafe { libc::_exit(if published == [true, true] { 0 } else { 1 }) };
    }
    assert_eq!(wait(pid), Ok(0), "child publishes");
    tracker.load_shared(13 * PAGE + 65, &[9]);
    assert_eq!(read(tracker, 12 * PAGE + 1), 0, "kept copy until caught up");
    tracker.catch_up().expect("catch up");
    assert_eq!(
        read(tracker, 12 * PAGE + 1),
        7,
        "page 12 dropped: the child wrote it"
    );
    assert_eq!(read(tracker, 12 * PAGE), 1);
    assert_eq!(
        read(tracker, 13 * PAGE + 65),
        0,
        "page 13 still kept: nobody published"
    );
    assert_eq!(
        (read(tracker, 14 * PAGE), read(tracker, 14 * PAGE + 1)),
        (3, 8),
        "dirty page 14 rebased: the child's byte in, ours kept"
    );
    let mut spans = Vec::new();
    tracker.diff_page(14, &mut spans);
    assert_eq!(
        spans,
        vec![Span { start: 0, len: 1 }],
        "after rebasing, the diff is still only our write"
    );
    for page in tracker.dirty_pages() {
        tracker.publish_page(page);
    }
    tracker.reset(false).expect("reset keep");
    assert_eq!(
        (read(tracker, 14 * PAGE), read(tracker, 14 * PAGE + 1)),
        (3, 8)
    );
    // A publish of everything drops page 13's kept copy.
    // SAFETY: as above.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        tracker.set_writer(2);
        tracker.publish_everything();
        // SAFETY: as above.
        unsafe { libc::_exit(0) };
    }
    assert_eq!(wait(pid), Ok(0));
    tracker.catch_up().expect("catch up");
    assert_eq!(
        read(tracker, 13 * PAGE + 65),
        9,
        "everything published: page 13 dropped"
    );
    // A process a whole ring behind drops every kept copy: page 15 is kept, the child
    // changes and publishes page 2 more often than its ring holds.
    write(tracker, 15 * PAGE, &[4]);
    for page in tracker.dirty_pages() {
        tracker.publish_page(page);
    }
    tracker.reset(false).expect("reset keep");
    tracker.load_shared(15 * PAGE + 1, &[5]);
    // SAFETY: as above.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        tracker.set_writer(3);
        for round in 0..10_000u32 {
            write(tracker, 2 * PAGE, &round.to_le_bytes());
            tracker.publish_page(2);
        }
        // SAFETY: as above.
        unsafe { libc::_exit(0) };
    }
    assert_eq!(wait(pid), Ok(0));
    assert_eq!(read(tracker, 15 * PAGE + 1), 0);
    tracker.catch_up().expect("catch up");
    assert_eq!(
        read(tracker, 15 * PAGE + 1),
        5,
        "ring overrun: every kept copy dropped"
    );
}

/// Exit code, or the signal that killed the child.
fn wait(pid: i32) -> Result<i32, i32> {
    let mut status = 0;
    // SAFETY: waiting for our own child.
    let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(rc, pid);
    if libc::WIFEXITED(status) {
        Ok(libc::WEXITSTATUS(status))
    } else {
        Err(libc::WTERMSIG(status))
    }
}
