//! Ferrite PMFS through the kernel: the FUSE adapter over `pmfs::Fs` ([`FuseFs`]), mounting
//! in the background ([`spawn`]) or in the foreground with a clean unmount on signals
//! ([`serve`]), the offline checker ([`check_offline`]), and pool helpers for
//! `ferrite fs mkfs` and `ferrite fs mount`.

#![forbid(unsafe_code)]

mod adapter;
mod check;
mod memory;
mod mount;

pub use adapter::{FuseFs, errno, file_attr};
pub use check::{CheckError, CheckReport, check_offline};
pub use memory::OverlayPm;
pub use mount::{Ended, MountConfig, MountError, Mounted, serve, spawn};

use pmem::{Native, NativeOptions, Pool, Protection};
use pmfs::{Fs, FsError, MkfsOptions, MountOptions};
use std::path::Path;

/// The real user and group of this process: the owner `ferrite fs mkfs` gives the root
/// directory by default.
pub fn invoking_user() -> (u32, u32) {
    (
        nix::unistd::getuid().as_raw(),
        nix::unistd::getgid().as_raw(),
    )
}

/// Creates the pool file `path` of `size` bytes and formats a file system on it.
pub fn mkfs(
    path: &Path,
    size: u64,
    mkfs: &MkfsOptions,
    native: NativeOptions,
) -> Result<Fs<Native>, FsError> {
    let mut options = pmfs::pool_options(size);
    options.native = native;
    let pool = Pool::create(path, &options)?;
    Fs::mkfs(pool, mkfs, MountOptions::default())
}

/// Opens the pool file `path` and mounts its file system (recovering from a crash).
/// Opens the pool file `path`, installs `protection` (read-only mapping with write windows,
/// `pmem::protect`), and mounts its file system (recovering from a crash).
pub fn open(
    path: &Path,
    options: MountOptions,
    native: &NativeOptions,
    protection: Protection,
) -> Result<Fs<Native>, FsError> {
    let pool = Pool::open(path, pmfs::LAYOUT, native)?;
    pool.pm()
        .protect(protection)
        .map_err(|e| FsError::Pool(pmem::PoolError::from(e)))?;
    Fs::mount(pool, options)
}

/// Unmounts the FUSE mount at `dir`: `umount(2)` as root, `fusermount3 -u` otherwise. The
/// serving process then closes its pool cleanly.
pub fn unmount(dir: &Path) -> std::io::Result<()> {
    match nix::mount::umount(dir) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EPERM) => {
            let status = std::process::Command::new("fusermount3")
                .arg("-u")
                .arg(dir)
                .status()?;
            if status.success() {
                Ok(())
            } else {
                Err(std::io::Error::other(format!("fusermount3 -u: {status}")))
            }
        }
        Err(errno) => Err(errno.into()),
    }
}
