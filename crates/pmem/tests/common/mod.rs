//! What the pool-file test binaries share: a scratch directory in /dev/shm and a closed pool
//! of one layout and size in it.
// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

use pmem::{CreateOptions, NativeOptions, Pool, PoolError};
use std::path::{Path, PathBuf};

pub const LAYOUT: &str = "pool-file-test";
pub const SIZE: u64 = 1 << 20;

pub fn shm_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ferrite-test")
        .tempdir_in("/dev/shm")
        .expect("tempdir")
}

/// A pool of [`LAYOUT`] and [`SIZE`], created and closed, in `dir`.
pub fn create(dir: &Path) -> PathBuf {
    let path = dir.join("p.pool");
    Pool::create(&path, &CreateOptions::new(LAYOUT, SIZE))
        .expect("create")
        .close()
        .expect("close");
    path
}

pub fn open(path: &Path) -> Result<Pool<pmem::Native>, PoolError> {
    Pool::open(path, LAYOUT, &NativeOptions::default())
}
