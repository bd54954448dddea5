//! Hot pages beyond [`HOT_MAX`]: the pages changed most recently stay hot and the one idle
//! longest cools down, and a hot page whose twin moves to another slot still diffs as
//! exactly its new writes. One test function, because the tracker and its signal handler
//! are per process.

#[allow(dead_code)] // `read` is used by the other tracker test only.
mod tracker_util;

use nvthreads::diff::Span;
use nvthreads::pages::{HOT_MAX, PAGE, Tracker};
use tracker_util::{merge, shared, write};

#[test]
fn the_pages_changed_most_recently_stay_hot() {
    // Room for page 0, the HOT_MAX fresh pages two apart from page 4, and some to spare.
    let tracker = Tracker::install((8 + 2 * HOT_MAX) * PAGE, None).expect("install");
    // A hot page, unchanged for one interval (well under HOT_IDLE).
    write(tracker, 0, &[1]);
    merge(tracker);
    tracker.reset(false).expect("reset keep");
    // HOT_MAX pages changed now, two apart so that no fault window joins them.
    let fresh: Vec<usize> = (0..HOT_MAX).map(|i| 4 + 2 * i).collect();
    for (i, &page) in fresh.iter().enumerate() {
        write(tracker, page * PAGE + i, &[10 + i as u8]);
    }
    assert_eq!(merge(tracker).len(), HOT_MAX);
    tracker.reset(false).expect("reset keep");
    let dirty = tracker.dirty_pages();
    assert!(!dirty.contains(&0), "the page idle longest cooled down");
    assert!(fresh.iter().all(|page| dirty.contains(page)), "{dirty:?}");

    // Written again: no fault, and each diff holds exactly the new byte (the twins of pages
    // that moved into the cooled page's slot moved with them).
    let faults = tracker.faults();
    for (i, &page) in fresh.iter().enumerate() {
        write(tracker, page * PAGE + 100 + i, &[50 + i as u8]);
    }
    assert_eq!(tracker.faults(), faults, "the fresh pages stayed hot");
    let mut merged = merge(tracker);
    merged.sort_by_key(|&(page, span)| (page, span.start));
    let expected: Vec<(usize, Span)> = fresh
        .iter()
        .enumerate()
        .map(|(i, &page)| {
            (
                page,
                Span {
                    start: 100 + i,
                    len: 1,
                },
            )
        })
        .collect();
    assert_eq!(merged, expected);
    for (i, &page) in fresh.iter().enumerate() {
        assert_eq!(shared(tracker, page * PAGE + i), 10 + i as u8);
        assert_eq!(shared(tracker, page * PAGE + 100 + i), 50 + i as u8);
    }
    assert_eq!(shared(tracker, 0), 1);
    // The cooled page is write-protected again.
    write(tracker, 1, &[2]);
    assert_eq!(tracker.faults(), faults + 1, "a cooled page faults again");
    assert_eq!(merge(tracker).len(), 1);
    tracker.reset(true).expect("reset");
}
