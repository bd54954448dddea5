//! Regression test: the private copy a write fault makes is a snapshot of the shared page,
//! even while another process publishes into that page.
//!
//! The fault handler used to force the kernel's copy-on-write with a read of the page's
//! first byte followed by a write back of it. When another thread-process published a new
//! value into the page's first word between the two, the write stored the byte read before
//! into the fresh copy: this process saw (and kept, since its twin held the same bytes) a
//! word half old and half new. In the NVthreads page benchmark that word was a GOT slot of
//! the program (lazy binding rewrites them in every thread-process), and a thread-process
//! jumped to the torn address and died of `SIGSEGV` (or `SIGTRAP` on `int3` padding).
//!
//! Here a second thread stands for the other process: it keeps storing values whose eight
//! bytes are all equal into the first word of the shared view (its own `MAP_SHARED` mapping
//! of the heap file), while this thread writes elsewhere in the page (a tracked fault),
//! checks the word its private copy holds, and drops the copy again. One test function,
//! because the tracker and its signal handler are per process.

use nvthreads::pages::{PAGE, Tracker};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long the race is stressed at most (it fails within milliseconds without the fix
/// whenever both threads run at once).
const BUDGET: Duration = Duration::from_secs(15);
/// Fault-and-drop rounds after which the test stops early.
const ROUNDS: u64 = 200_000;

/// A word whose bytes are all equal (`k` in 1..=255): a torn mix of two is recognisable.
fn pattern(k: u64) -> u64 {
    (k % 255 + 1) * 0x0101_0101_0101_0101
}

fn consistent(word: u64) -> bool {
    word.to_le_bytes().iter().all(|&b| b == word as u8)
}

#[test]
fn fault_copy_is_a_snapshot_while_another_process_publishes() {
    let tracker = Tracker::install(2 * PAGE, None).expect("install the tracker");
    // SAFETY: a second shared mapping of the tracker's heap file (2 pages), kept for the
    // whole test; only the first word is accessed, atomically.
    let shared = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            2 * PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            tracker.fd(),
            0,
        )
    };
    assert_ne!(shared, libc::MAP_FAILED, "mapping the heap file");
    let shared_addr = shared as usize;
    // SAFETY: the page-aligned start of the mapping above, never unmapped.
    unsafe { AtomicU64::from_ptr(shared.cast::<u64>()) }.store(pattern(0), Ordering::Relaxed);

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            // SAFETY: as above; the mapping outlives this thread (joined below).
            let word = unsafe { AtomicU64::from_ptr(shared_addr as *mut u64) };
            let mut k = 0u64;
            while !stop.load(Ordering::Relaxed) {
                k += 1;
                word.store(pattern(k), Ordering::Relaxed);
            }
            k
        })
    };

    let private = tracker.private_base();
    let started = Instant::now();
    let mut rounds = 0u64;
    let mut torn = Vec::new();
    while rounds < ROUNDS && started.elapsed() < BUDGET && torn.len() < 3 {
        rounds += 1;
        // SAFETY: in bounds of the private view; the write faults into the tracker, which
        // copies the page (this is the fault under test). Only this thread touches the
        // private view.
        let seen = unsafe {
            private.add(512).write_volatile(rounds as u8);
            private.cast::<u64>().read_volatile()
        };
        if !consistent(seen) {
            torn.push(seen);
        }
        // Write-protect the page again and drop the private copy, so the next write faults.
        tracker.reset(true).expect("reset");
    }
    stop.store(true, Ordering::Relaxed);
    let stores = writer.join().expect("writer thread");
    // SAFETY: unmapping the mapping made above; the writer has ended.
    unsafe { libc::munmap(shared, 2 * PAGE) };
    assert!(
        torn.is_empty(),
        "the private copy of a faulted page held torn words {torn:#018x?} (after {rounds} \
         rounds, {stores} concurrent stores): the fault handler wrote back a stale byte"
    );
    assert!(rounds > 0 && stores > 0, "the race did not run");
}
