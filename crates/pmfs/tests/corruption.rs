//! Damaged media: random bytes of a populated file system's metadata are overwritten, then the
//! pool is mounted, checked and walked. Any error is fine; a panic is a failure ("no panics on
//! input from disk").

use crashsim::{SimConfig, SimPm};
use pmem::{Persist, Pool};
use pmfs::posix::{O_CREAT, O_RDWR};
use pmfs::{Clock, FileType, Fs, MkfsOptions, MountOptions, Posix};
use proptest::prelude::*;

const SIZE: u64 = 1 << 20;

fn populated_image() -> (Vec<u8>, pmfs::Superblock) {
    let pool = Pool::format(
        SimPm::new(SIZE, SimConfig::default()),
        &pmfs::pool_options(SIZE),
    )
    .expect("pool");
    let mkfs = MkfsOptions {
        inodes: Some(64),
        journal_entries: 64,
        ..MkfsOptions::default()
    };
    let options = MountOptions {
        clock: Clock::Fixed(1),
        ..MountOptions::default()
    };
    let fs = Fs::mkfs(pool, &mkfs, options).expect("mkfs");
    let px = Posix::new(fs);
    let fs = px.fs();
    px.mkdir("/d", 0o755).expect("mkdir");
    px.mkdir("/d/e", 0o755).expect("mkdir");
    for (i, len) in [(0, 10), (1, 5000), (2, 70_000)] {
        let fd = px
            .open(&format!("/d/f{i}"), O_CREAT | O_RDWR, 0o644)
            .expect("create");
        px.pwrite(fd, &vec![i as u8 + 1; len], 3_000_000 * (i % 2))
            .expect("write");
        px.close(fd).expect("close");
    }
    px.symlink("d/f0", "/s").expect("symlink");
    px.link("/d/f1", "/h").expect("link");
    // Leave a truncate-list entry and valid journal entries behind.
    let fd = px.open("/o", O_CREAT | O_RDWR, 0o644).expect("create");
    px.pwrite(fd, &[9; 9000], 0).expect("write");
    px.unlink("/o").expect("unlink");
    let sb = fs.superblock().clone();
    let image = fs.pool().pm().volatile_image();
    px.into_fs().abandon();
    (image, sb)
}

/// Mounts, checks and walks everything; returns how far it got.
fn exercise(image: Vec<u8>) -> &'static str {
    let Ok(pool) = Pool::attach(SimPm::from_image(image, SimConfig::default()), pmfs::LAYOUT)
    else {
        return "pool";
    };
    let Ok(fs) = Fs::mount(pool, MountOptions::default()) else {
        return "mount";
    };
    let _ = fs.fsck();
    let px = Posix::new(fs);
    let fs = px.fs();
    let mut dirs = vec!["/".to_owned()];
    let mut steps = 0;
    while let Some(dir) = dirs.pop() {
        steps += 1;
        if steps > 100 {
            break;
        }
        let Ok(entries) = px.readdir(&dir) else {
            continue;
        };
        for e in entries {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let path = format!(
                "{}/{}",
                dir.trim_end_matches('/'),
                String::from_utf8_lossy(&e.name)
            );
            let _ = px.lstat(&path);
            let _ = px.readlink(&path);
            match e.kind {
                FileType::Directory => dirs.push(path),
                _ => {
                    let mut buf = vec![0u8; 8192];
                    let _ = fs.read(e.ino, 0, &mut buf);
                    let _ = fs.write(e.ino, 100, b"x");
                }
            }
        }
    }
    let _ = px.mkdir("/new", 0o755);
    let _ = px.rename("/d", "/new/d");
    let _ = px.unlink("/h");
    "walked"
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn damaged_metadata_never_panics(
        region in 0usize..5,
        hits in prop::collection::vec((any::<u32>(), any::<u8>()), 1..8),
    ) {
        let (mut image, sb) = populated_image();
        // Superblock slots and root words; journal; inode table; data area (nodes, dirs).
        let (start, len) = match region {
            0 => (sb.root_offset, 4096),
            1 => (sb.journal_offset, u64::from(sb.journal_entries) * 64),
            2 => (sb.inode_table_offset, sb.inode_count * 128),
            3 => (sb.data_offset, 64 * 4096),
            _ => (sb.root_offset, SIZE - sb.root_offset),
        };
        for (at, byte) in hits {
            image[(start + u64::from(at) % len) as usize] = byte;
        }
        let result = std::panic::catch_unwind(|| exercise(image));
        prop_assert!(result.is_ok(), "panicked");
    }
}

#[test]
fn undamaged_image_mounts_and_recovers_the_orphan() {
    let (image, _) = populated_image();
    assert_eq!(exercise(image.clone()), "walked");
    let pool =
        Pool::attach(SimPm::from_image(image, SimConfig::default()), pmfs::LAYOUT).expect("attach");
    let fs = Fs::mount(pool, MountOptions::default()).expect("mount");
    let report = fs.fsck().expect("fsck");
    assert_eq!((report.orphans, report.files, report.dirs), (0, 3, 3));
    let _ = fs.pool().pm().len();
}

#[test]
fn damage_reaches_every_stage() {
    // Deterministic sample: how far the exercise gets for damage in each region.
    let (clean, sb) = populated_image();
    let mut reached = std::collections::BTreeMap::new();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for round in 0..300u64 {
        let mut image = clean.clone();
        let (start, len) = match round % 4 {
            0 => (sb.root_offset, 4096),
            1 => (sb.journal_offset, u64::from(sb.journal_entries) * 64),
            2 => (sb.inode_table_offset, sb.inode_count * 128),
            _ => (sb.data_offset, 64 * 4096),
        };
        for _ in 0..3 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            image[(start + x % len) as usize] = (x >> 32) as u8;
        }
        *reached.entry(exercise(image)).or_insert(0) += 1;
    }
    eprintln!("{reached:?}");
    assert!(
        reached.get("walked").copied().unwrap_or(0) > 50,
        "{reached:?}"
    );
    assert!(
        reached.get("mount").copied().unwrap_or(0) > 10,
        "{reached:?}"
    );
}
