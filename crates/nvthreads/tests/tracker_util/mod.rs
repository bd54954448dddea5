//! Helpers for the tests that drive a page tracker in their own process (`pages.rs`,
//! `hot_pages.rs`: one tracker, and its signal handler, per process).

use nvthreads::diff::Span;
use nvthreads::pages::Tracker;

/// Writes `bytes` at `offset` of the private view, byte by byte (faults included).
pub fn write(tracker: &Tracker, offset: usize, bytes: &[u8]) {
    assert!(offset + bytes.len() <= tracker.len());
    for (i, &byte) in bytes.iter().enumerate() {
        // SAFETY: in bounds of the private view; the fault handler makes the page writable.
        unsafe { tracker.private_base().add(offset + i).write_volatile(byte) };
    }
}

/// The byte at `offset` of the private view.
pub fn read(tracker: &Tracker, offset: usize) -> u8 {
    // SAFETY: in bounds of the always-readable private view.
    unsafe { tracker.private_base().add(offset).read_volatile() }
}

/// Diffs and publishes every dirty page, as the runtime's merge does; returns the runs.
pub fn merge(tracker: &Tracker) -> Vec<(usize, Span)> {
    let mut all = Vec::new();
    for page in tracker.dirty_pages() {
        let mut spans = Vec::new();
        tracker.diff_page(page, &mut spans);
        tracker.publish_spans(page, &spans);
        all.extend(spans.into_iter().map(|span| (page, span)));
    }
    all
}

/// The byte at `offset` of the shared view.
pub fn shared(tracker: &Tracker, offset: usize) -> u8 {
    let mut byte = [0u8];
    tracker.read_shared(offset, &mut byte);
    byte[0]
}
