//! The offline checker: a crash image with a transaction in flight is consistent after the
//! recovery it runs on its in-memory copy (which it reports), the file is never written,
//! and damage is reported as such.

use crashsim::{SimConfig, SimPm, SnapshotKind};
use fsmount::{CheckError, check_offline};
use pmem::Pool;
use pmfs::{Fs, MkfsOptions, MountOptions, Posix};

const SIZE: u64 = 1 << 20;

fn formatted() -> Fs<SimPm> {
    let pool = Pool::format(
        SimPm::new(SIZE, SimConfig::default()),
        &pmfs::pool_options(SIZE),
    )
    .expect("pool");
    let mkfs = MkfsOptions {
        inodes: Some(32),
        journal_entries: 64,
        ..MkfsOptions::default()
    };
    Fs::mkfs(pool, &mkfs, MountOptions::default()).expect("mkfs")
}

#[test]
fn a_crash_image_needs_recovery_and_is_consistent_after_it() {
    let px = Posix::new(formatted());
    px.mkdir("/kept", 0o755).expect("mkdir");
    let pm = px.fs().pool().pm();
    pm.set_capture(true);
    px.mkdir("/in-flight", 0o755).expect("mkdir");
    let snapshots = pm.take_snapshots();
    // Just before the commit word's fence, with the commit word not persisted: the
    // transaction's in-place stores are durable (fenced before it), its generation is not.
    let last_fence = snapshots
        .iter()
        .rev()
        .find(|s| matches!(s.kind, SnapshotKind::Fence(_)))
        .expect("fences");
    let image = last_fence.image(&last_fence.nothing());
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("crashed.pool");
    std::fs::write(&path, &image).expect("write image");
    let report = check_offline(&path).expect("consistent after recovery");
    assert!(!report.clean_shutdown);
    assert!(report.recovery_bytes > 0, "{report:?}");
    assert_eq!(report.dirs, 2, "the root and /kept: /in-flight rolled back");
    assert_eq!(
        std::fs::read(&path).expect("read"),
        image,
        "the file is untouched"
    );
}

#[test]
fn damage_and_foreign_files_are_reported() {
    let fs = formatted();
    let image = fs.pool().pm().durable_image();
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("p.pool");
    let mut damaged = image.clone();
    // The root inode's mode: a type no inode may have.
    let ino1 = fs.superblock().inode_offset(1) as usize + 0x20;
    damaged[ino1..ino1 + 4].copy_from_slice(&0o030_755u32.to_le_bytes());
    std::fs::write(&path, &damaged).expect("write");
    let error = check_offline(&path).expect_err("damaged");
    assert!(matches!(error, CheckError::Damaged(_)), "{error}");
    assert_eq!(error.exit_code(), 4);
    std::fs::write(&path, vec![0u8; 8192]).expect("write");
    let error = check_offline(&path).expect_err("not a pool");
    assert_eq!(error.exit_code(), 8, "{error}");
}
