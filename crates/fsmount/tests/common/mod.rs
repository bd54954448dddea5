//! Shared by the mount tests: a fresh file system in a pool of its own on `/dev/shm`, its
//! FUSE mount (skipped where FUSE cannot run), and its bytes read back after a remount.
// Each test file uses a part of this module.
#![allow(dead_code)]

use pmem::{Native, NativeOptions};
use pmfs::{Fs, MkfsOptions};
use std::path::PathBuf;

/// A new file system of `size` bytes in `/dev/shm/ferrite-fsmount-<tag>-<pid>.pool` (an
/// earlier one of that name removed first), and its path.
pub fn fresh_fs(tag: &str, size: u64) -> (PathBuf, Fs<Native>) {
    let pool = PathBuf::from(format!(
        "/dev/shm/ferrite-fsmount-{tag}-{}.pool",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&pool);
    let fs = fsmount::mkfs(
        &pool,
        size,
        &MkfsOptions::default(),
        NativeOptions::default(),
    )
    .expect("mkfs");
    (pool, fs)
}

/// Mounts `fs` on `dir` with FUSE, or `None` (the pool removed, the reason printed) where
/// FUSE mounts cannot run here.
pub fn spawn_or_skip(
    fs: Fs<Native>,
    dir: &std::path::Path,
    config: &fsmount::MountConfig,
    pool: &std::path::Path,
) -> Option<fsmount::Mounted> {
    match fsmount::spawn(fs, dir, config) {
        Ok(mounted) => Some(mounted),
        Err(error @ (fsmount::MountError::Device { .. } | fsmount::MountError::Fuse(_))) => {
            eprintln!("SKIPPED: cannot mount FUSE file systems here: {error}");
            let _ = std::fs::remove_file(pool);
            None
        }
        Err(error) => panic!("mount: {error}"),
    }
}

/// The bytes of `path` on the file system in `pool`, opened again after an unmount and
/// checked consistent; the pool is removed afterwards.
pub fn stored_after_remount(pool: &std::path::Path, path: &str) -> Vec<u8> {
    use pmfs::Posix;
    let fs = fsmount::open(
        pool,
        pmfs::MountOptions::default(),
        &NativeOptions::default(),
        pmem::Protection::None,
    )
    .expect("mount again");
    fs.fsck().expect("consistent");
    let px = Posix::new(fs);
    let fd = px.open(path, pmfs::posix::O_RDONLY, 0).expect("open");
    let size = px.fstat(fd).expect("fstat").size as usize;
    let mut stored = vec![0u8; size];
    let n = px.pread(fd, &mut stored, 0).expect("read");
    stored.truncate(n);
    px.close(fd).expect("close");
    px.into_fs().unmount().expect("unmount");
    let _ = std::fs::remove_file(pool);
    stored
}
