//! The offline checker: a crash image with a transaction in flight is consistent after the
//! recovery it runs on its in-memory copy (which it reports), the file is never written,
//! and damage is reported as such.

use crashsim::{SimConfig, SimPm, SnapshotKind};
use fsmount::{CheckError, check_offline};
use pmem::Pool;
use pmfs::{Fs, MkfsOptions, MountOptions, Posix};
use std::path::Path;

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

/// Peak resident memory of this process, in bytes (`VmHWM`).
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .expect("value")
        .parse()
        .expect("kB");
    kb * 1024
}

/// Run in a child process by the test below (alone, so its peak memory is the check's).
#[test]
#[ignore = "run by fsck_memory_is_a_small_fraction_of_the_pool"]
fn fsck_memory_child() {
    let Ok(path) = std::env::var("FERRITE_FSCK_MEMORY_POOL") else {
        return;
    };
    let report = check_offline(Path::new(&path)).expect("consistent");
    println!("peak={} files={}", peak_rss(), report.files);
}

#[test]
fn fsck_memory_is_a_small_fraction_of_the_pool() {
    let size: u64 = 256 << 20;
    let path = std::path::PathBuf::from(format!(
        "/dev/shm/ferrite-fsck-memory-{}.pool",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(&path, &pmfs::pool_options(size)).expect("pool");
    let px =
        Posix::new(Fs::mkfs(pool, &MkfsOptions::default(), MountOptions::default()).expect("mkfs"));
    let fd = px
        .open("/big", pmfs::posix::O_CREAT | pmfs::posix::O_RDWR, 0o644)
        .expect("create");
    let chunk = vec![3u8; 1 << 20];
    for i in 0..200u64 {
        px.pwrite(fd, &chunk, i << 20).expect("fill");
    }
    px.close(fd).expect("close");
    for d in 0..20 {
        px.mkdir(&format!("/d{d}"), 0o755).expect("mkdir");
        for f in 0..50 {
            let fd = px
                .open(
                    &format!("/d{d}/f{f}"),
                    pmfs::posix::O_CREAT | pmfs::posix::O_RDWR,
                    0o644,
                )
                .expect("create");
            px.write(fd, b"small").expect("write");
            px.close(fd).expect("close");
        }
    }
    // Left as a crash leaves it: the check must recover on its view.
    px.into_fs().abandon();
    let output = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "fsck_memory_child", "--ignored", "--nocapture"])
        .env("FERRITE_FSCK_MEMORY_POOL", &path)
        .output()
        .expect("child");
    let _ = std::fs::remove_file(&path);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    let peak: u64 = text
        .split("peak=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no peak in {text}"));
    assert!(text.contains("files=1001"), "{text}");
    assert!(
        peak <= size / 4,
        "fsck of a {} MiB pool peaked at {} MiB",
        size >> 20,
        peak >> 20
    );
}

#[test]
fn a_damaged_primary_superblock_is_reported_not_hidden() {
    let fs = formatted();
    let mut image = fs.pool().pm().durable_image();
    let primary = (fs.superblock().root_offset + pmfs::layout::SB_PRIMARY) as usize;
    image[primary + 0x30] ^= 0x40;
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("p.pool");
    std::fs::write(&path, &image).expect("write");
    let report = check_offline(&path).expect("repairable");
    assert_eq!(report.repairs.len(), 1, "{report:?}");
    assert!(
        report.repairs[0].contains("primary superblock"),
        "{report:?}"
    );
    assert_eq!(
        std::fs::read(&path).expect("read"),
        image,
        "the file is untouched"
    );
    let healthy = dir.path().join("q.pool");
    std::fs::write(&healthy, fs.pool().pm().durable_image()).expect("write");
    assert!(
        check_offline(&healthy)
            .expect("consistent")
            .repairs
            .is_empty()
    );
}

#[test]
fn repair_makes_a_pool_one_flipped_byte_made_unmountable_mountable_again() {
    use pmfs::posix::{O_CREAT, O_RDWR};
    let px = Posix::new(formatted());
    px.mkdir("/d", 0o755).expect("mkdir");
    for (path, byte) in [("/d/keep", 1u8), ("/d/victim", 2)] {
        let fd = px.open(path, O_CREAT | O_RDWR, 0o644).expect("create");
        px.write(fd, &[byte; 9000]).expect("write");
        px.close(fd).expect("close");
    }
    let victim = px.stat("/d/victim").expect("stat").ino;
    let fs = px.into_fs();
    let at = fs.superblock().inode_offset(victim) as usize + 0x20;
    let mut image = fs.pool().pm().durable_image();
    fs.unmount().expect("unmount");
    // One flipped byte in the victim's mode (its file-type bits).
    image[at + 1] ^= 0x40;
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("p.pool");
    std::fs::write(&path, &image).expect("write");
    // Without --repair: damaged, reported, and the file is not written.
    let error = check_offline(&path).expect_err("damaged");
    assert_eq!(error.exit_code(), 4, "{error}");
    assert_eq!(std::fs::read(&path).expect("read"), image);
    let report = fsmount::repair_offline(&path, &pmem::NativeOptions::default()).expect("repair");
    assert!(
        report
            .repairs
            .iter()
            .any(|r| matches!(r, pmfs::FsckRepair::InodeRemoved { ino, .. } if *ino == victim)),
        "{:?}",
        report.repairs
    );
    assert!(report.check.clean_shutdown);
    assert_eq!(report.check.files, 1);
    // Idempotent: a second repair finds nothing; the kept file reads back whole.
    assert_eq!(
        fsmount::repair_offline(&path, &pmem::NativeOptions::default())
            .expect("again")
            .repairs,
        vec![]
    );
    let pool = Pool::open(&path, pmfs::LAYOUT, &pmem::NativeOptions::default()).expect("open");
    let px = Posix::new(Fs::mount(pool, MountOptions::default()).expect("mounts"));
    let fd = px.open("/d/keep", O_RDWR, 0).expect("kept");
    let mut got = vec![0u8; 9000];
    assert_eq!(px.pread(fd, &mut got, 0).expect("read"), 9000);
    assert!(got.iter().all(|&b| b == 1));
    px.close(fd).expect("close");
    assert!(px.stat("/d/victim").is_err());
    px.into_fs().unmount().expect("unmount");
}

/// `ferrite fs mount` of a damaged pool used to stop at "file system corrupted: inode 2:
/// mode|nlink word … fails its check", leaving the user to find `fsck --repair` alone: a
/// single flipped bit in an inode no file uses makes a pool unmountable. The refusal now
/// names the two commands (with the pool's path).
#[test]
fn a_mount_refused_for_damage_names_fsck_and_its_repair() {
    let fs = formatted();
    // An inode no file uses: every inode's checked words are verified at mount.
    let at = fs.superblock().inode_offset(7) as usize;
    let mut image = fs.pool().pm().durable_image();
    fs.unmount().expect("unmount");
    // The top byte of its mode|nlink word (a checked word, format §3).
    image[at + 0x20 + 7] ^= 0x10;
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("p.pool");
    std::fs::write(&path, &image).expect("write");
    let error = fsmount::open(
        &path,
        MountOptions::default(),
        &pmem::NativeOptions::default(),
        pmem::Protection::None,
    )
    .expect_err("a damaged pool is refused");
    let message = error.to_string();
    assert!(matches!(error, pmfs::FsError::Corrupted(_)), "{message}");
    let pool = path.display();
    assert!(message.contains("inode 7"), "{message}");
    assert!(
        message.contains(&format!("`ferrite fs fsck {pool}`"))
            && message.contains(&format!("`ferrite fs fsck --repair {pool}`")),
        "{message}"
    );
}
