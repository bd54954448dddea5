//! The pool's state word through a crash: an open must make "not clean" durable before it
//! returns, so a crash at any later point — before the next fence of any layer above —
//! reads as a crash at the next open. (NVthreads' `crashed()` and every engine's recovery
//! report rely on `Pool::was_clean`; docs/crash-model.md §15, mutation pmem-43.)

use crashsim::{SimConfig, SimPm};
use pmem::{CreateOptions, Pool};

const LAYOUT: &str = "pool-state";
const SIZE: u64 = 64 * 1024;

/// A formatted pool closed cleanly: the durable image of a pool the last user shut down.
fn cleanly_closed() -> Vec<u8> {
    let pm = SimPm::new(SIZE, SimConfig::default());
    let pool = Pool::format(pm.clone(), &CreateOptions::new(LAYOUT, SIZE)).expect("format");
    pool.close().expect("close");
    pm.durable_image()
}

#[test]
fn a_crash_right_after_an_open_reads_as_a_crash() {
    let pm = SimPm::from_image(cleanly_closed(), SimConfig::default());
    let pool = Pool::attach(pm.clone(), LAYOUT).expect("open");
    assert!(pool.was_clean(), "a cleanly closed pool opens as clean");
    // The crash: nothing after the open's own stores, not even a fence of a layer above.
    let image = pm.durable_image();
    std::mem::forget(pool);
    let reopened = Pool::attach(SimPm::from_image(image, SimConfig::default()), LAYOUT)
        .expect("reopen after the crash");
    assert!(
        !reopened.was_clean(),
        "a pool that crashed while open must not read as cleanly closed"
    );
}

#[test]
fn a_clean_close_reads_as_clean() {
    let pm = SimPm::from_image(cleanly_closed(), SimConfig::default());
    let pool = Pool::attach(pm.clone(), LAYOUT).expect("open");
    pool.close().expect("close");
    let reopened = Pool::attach(
        SimPm::from_image(pm.durable_image(), SimConfig::default()),
        LAYOUT,
    )
    .expect("reopen");
    assert!(reopened.was_clean(), "closed cleanly, read as clean");
}
