//! The offline checker behind `ferrite fs fsck`: it never writes the pool file.
//!
//! The file is read into memory and mounted there ([`crate::MemPm`]), so recovery (journal
//! rollback, truncate list) runs exactly as the next real mount would run it, but on the
//! copy; then `Fs::fsck` checks the recovered state. The result says whether a crash
//! recovery is pending and how many bytes it would rewrite.

use fs::{Fs, FsckReport, MountOptions};
use pmem::MemPm;
use pmem::Pool;
use std::path::Path;

/// What a successful check found.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CheckReport {
    /// Whether the pool was closed cleanly by its last user.
    pub clean_shutdown: bool,
    /// Bytes (outside the pool header) that recovery rewrote in the copy: 0 unless a crash
    /// left a transaction in flight or an unfinished truncate list.
    pub recovery_bytes: u64,
    /// Live inodes.
    pub inodes: u64,
    /// Regular files, directories, symbolic links.
    pub files: u64,
    /// Directories.
    pub dirs: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// Data blocks in use and free.
    pub used_blocks: u64,
    /// Free data blocks.
    pub free_blocks: u64,
}

/// Why a check did not pass.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The file could not be read or is not a pool (nothing was checked).
    #[error(transparent)]
    Pool(#[from] pmem::PoolError),
    /// The file could not be read.
    #[error("reading the pool: {0}")]
    Io(#[from] std::io::Error),
    /// A process has the pool open (mounted): its image is changing under the check.
    #[error("the pool is in use (mounted?); unmount it first")]
    InUse,
    /// The pool is not a file system, or recovery or the consistency check failed.
    #[error("{0}")]
    Damaged(String),
}

impl CheckError {
    /// The process exit code: 4 for a damaged file system, 8 when the check could not run
    /// (e2fsck's convention).
    pub fn exit_code(&self) -> u8 {
        match self {
            CheckError::Damaged(_) => 4,
            _ => 8,
        }
    }
}

/// Checks the pool file at `path` without modifying it.
pub fn check_offline(path: &Path) -> Result<CheckReport, CheckError> {
    let report = pmem::inspect(path)?;
    if report.in_use {
        return Err(CheckError::InUse);
    }
    let image = std::fs::read(path)?;
    let header_area = report.header.root_offset.min(image.len() as u64) as usize;
    let before = image[header_area..].to_vec();
    let pool = Pool::attach(MemPm::new(image), fs::LAYOUT)?;
    let fs = Fs::mount(pool, MountOptions::default())
        .map_err(|e| CheckError::Damaged(format!("mount: {e}")))?;
    let fsck: FsckReport = fs
        .fsck()
        .map_err(|e| CheckError::Damaged(format!("fsck: {}", e.0)))?;
    let after = fs.pool().pm().image();
    let recovery_bytes = before
        .iter()
        .zip(&after[header_area..])
        .filter(|(a, b)| a != b)
        .count() as u64;
    fs.abandon();
    Ok(CheckReport {
        clean_shutdown: report.clean,
        recovery_bytes,
        inodes: fsck.inodes,
        files: fsck.files,
        dirs: fsck.dirs,
        symlinks: fsck.symlinks,
        used_blocks: fsck.used_blocks,
        free_blocks: fsck.free_blocks,
    })
}
