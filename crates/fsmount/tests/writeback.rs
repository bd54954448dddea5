//! The kernel's write-back cache (`ferrite fs mount --writeback-cache`): a write returns once
//! in the page cache, and `fsync` either makes it durable or fails. Where the pool ran out of
//! space for part of a request the kernel sent from its cache, the server used to answer
//! with a short count; the kernel has no writer to return a short count to, took it for the
//! whole request, and `fsync` succeeded with the rest of the file lost (300,000 bytes
//! written and `fsync`ed, 57,344 found after a remount).

mod common;

use fsmount::MountConfig;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

#[test]
fn fsync_under_the_write_back_cache_fails_when_the_pool_is_full_never_loses_data() {
    let (pool, fs) = common::fresh_fs("writeback", 16 << 20);
    let free = fs.statfs().free_blocks * 4096;
    let dir = tempfile::tempdir().expect("mount point");
    let config = MountConfig {
        writeback_cache: true,
        fsname: "ferrite-fs:writeback-test".to_owned(),
        ..MountConfig::default()
    };
    let Some(mounted) = common::spawn_or_skip(fs, dir.path(), &config, &pool) else {
        return;
    };
    // Leave about 60 KiB free (less the fill's tree nodes), durably.
    let fill_len = free - (60 << 10);
    let mut fill = std::fs::File::create(dir.path().join("fill")).expect("fill");
    fill.write_all(&vec![7u8; fill_len as usize])
        .expect("fill write");
    fill.sync_all().expect("fill fsync");
    drop(fill);
    // One write of 300,000 bytes: the kernel sends it from its cache as one request, of
    // which about 56 KiB fits.
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 31 % 251) as u8).collect();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(dir.path().join("x"))
        .expect("create x");
    file.write_all(&data).expect("write into the page cache");
    let fsynced = file.sync_all();
    drop(file);
    mounted.unmount().expect("unmount");

    let stored = common::stored_after_remount(&pool, "/x");
    let n = stored.len();
    assert!(
        fsynced.is_err(),
        "fsync succeeded, but 300,000 bytes cannot fit: the pool holds {n} of them"
    );
    assert_eq!(
        fsynced.unwrap_err().raw_os_error(),
        Some(libc::ENOSPC),
        "the failure says why"
    );
    assert_eq!(
        &stored[..],
        &data[..n],
        "what was stored is the file's prefix"
    );
}

/// The same in the default mode, through a shared mapping: the kernel writes a mapping's
/// pages from its page cache too, so `msync` of pages the pool has no room for must fail
/// rather than succeed with the data lost. Python does the mapping (no `unsafe` here);
/// skipped without it.
#[test]
fn msync_of_a_shared_mapping_fails_when_the_pool_is_full_never_loses_data() {
    let have_python = std::process::Command::new("python3")
        .arg("-c")
        .arg("import mmap")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_python {
        eprintln!("SKIPPED: python3 is not installed");
        return;
    }
    let (pool, fs) = common::fresh_fs("msync", 16 << 20);
    let free = fs.statfs().free_blocks * 4096;
    let dir = tempfile::tempdir().expect("mount point");
    let config = MountConfig {
        fsname: "ferrite-fs:msync-test".to_owned(),
        ..MountConfig::default()
    };
    let Some(mounted) = common::spawn_or_skip(fs, dir.path(), &config, &pool) else {
        return;
    };
    std::fs::write(
        dir.path().join("fill"),
        vec![7u8; (free - (60 << 10)) as usize],
    )
    .expect("fill");
    // A 300,000-byte file with no blocks (a hole), every byte stored through a mapping.
    let script = "import mmap, os, sys\n\
                  fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o644)\n\
                  os.ftruncate(fd, 300000)\n\
                  m = mmap.mmap(fd, 300000)\n\
                  m[:] = bytes([5]) * 300000\n\
                  try:\n    m.flush()\n    print('ok')\n\
                  except OSError as e:\n    print(e.errno)\n";
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(dir.path().join("x"))
        .output()
        .expect("python3");
    let verdict = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    mounted.unmount().expect("unmount");
    let stored = common::stored_after_remount(&pool, "/x");
    let fives = stored.iter().filter(|&&b| b == 5).count();
    assert_eq!(
        verdict,
        libc::ENOSPC.to_string(),
        "msync must fail with ENOSPC: {fives} of 300,000 bytes were stored ({})",
        String::from_utf8_lossy(&out.stderr)
    );
}
