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

/// A damaged header is rewritten from its copy when the pool is opened; a crash anywhere in
/// that rewrite leaves a pool that opens (from the copy again, or from the rewritten header),
/// and once an open has finished, the header is whole again.
#[test]
fn restoring_a_damaged_header_from_its_copy_is_failure_atomic() {
    use pmem::{Persist, WriteClass};
    let pm = SimPm::new(SIZE, SimConfig::default());
    Pool::format(pm.clone(), &CreateOptions::new("layout-b", SIZE))
        .expect("format")
        .close()
        .expect("close");
    // A flipped bit in every line of the header: no line of the old header decodes.
    for line in 0..4u64 {
        let at = line * 64 + 40;
        let byte = pm.read_u64(at & !7) ^ (1 << ((at % 8) * 8));
        pm.write_u64(at & !7, byte, WriteClass::Meta);
        pm.persist(at & !7, 8);
    }
    assert!(pmem::header::Header::decode(&read(&pm, 0, 256)).is_err());
    every_image(
        &pm,
        || {
            let pool = Pool::attach(pm.clone(), "layout-b").expect("attach");
            assert_eq!(pool.repaired().len(), 1, "{:?}", pool.repaired());
            pool.abandon()
        },
        |opened, kind| {
            let pool = opened.unwrap_or_else(|e| panic!("at {kind}: reopening failed: {e}"));
            let header = read(pool.pm(), 0, 256);
            assert_eq!(
                header,
                read(pool.pm(), pmem::header::COPY_OFFSET, 256),
                "at {kind}: the open did not restore the header"
            );
        },
    );
}

fn read<P: pmem::Persist>(pm: &P, at: u64, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    pm.read(at, &mut bytes);
    bytes
}
