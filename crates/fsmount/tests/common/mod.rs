//! Shared by the mount tests: a fresh file system in a pool of its own on `/dev/shm`.

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
