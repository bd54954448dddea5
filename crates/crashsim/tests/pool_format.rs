//! Formatting and reopening pools under the crash simulator: an interrupted format or
//! re-format never leaves a file that looks like a pool with a bad checksum, and an open
//! (which clears the clean-shutdown flag) is failure-atomic.

use crashsim::{SimConfig, SimPm, SnapshotKind};
use pmem::{CreateOptions, Pool, PoolError};

const SIZE: u64 = 64 * 1024;

/// Every crash image of every crash point of `program` must satisfy `judge`.
fn every_image(
    pm: &SimPm,
    program: impl FnOnce(),
    judge: impl Fn(Result<Pool<SimPm>, PoolError>, SnapshotKind),
) {
    pm.set_capture(true);
    program();
    let mut snapshots = pm.take_snapshots();
    snapshots.push(pm.crash_now());
    for snapshot in snapshots {
        for choice in crashsim::image::choices(&snapshot, &crashsim::Budget::default(), 1) {
            let image = SimPm::from_image(snapshot.image(&choice), SimConfig::default());
            judge(Pool::attach(image, "layout-b"), snapshot.kind);
        }
    }
}

#[test]
fn interrupted_reformat_is_the_old_pool_or_not_a_pool() {
    let pm = SimPm::new(SIZE, SimConfig::default());
    Pool::format(pm.clone(), &CreateOptions::new("layout-a", SIZE))
        .expect("first format")
        .close()
        .expect("close");
    every_image(
        &pm,
        || {
            Pool::format(pm.clone(), &CreateOptions::new("layout-b", SIZE))
                .expect("re-format")
                .abandon();
        },
        |opened, kind| match opened {
            Ok(_) | Err(PoolError::NotAPool { .. } | PoolError::WrongLayout { .. }) => {}
            Err(other) => panic!("at {kind}: an interrupted re-format reads as {other}"),
        },
    );
}

#[test]
fn opening_is_failure_atomic() {
    let pm = SimPm::new(SIZE, SimConfig::default());
    Pool::format(pm.clone(), &CreateOptions::new("layout-b", SIZE))
        .expect("format")
        .close()
        .expect("close");
    every_image(
        &pm,
        || {
            Pool::attach(pm.clone(), "layout-b")
                .expect("attach")
                .abandon()
        },
        |opened, kind| {
            opened.unwrap_or_else(|e| panic!("at {kind}: reopening failed: {e}"));
        },
    );
}
