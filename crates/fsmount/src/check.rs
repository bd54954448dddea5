//! The offline checker behind `ferrite fs fsck`: it never writes the pool file.
//!
//! The file is mounted through a private copy-on-write view ([`crate::OverlayPm`]), so
//! recovery (journal rollback, truncate list) runs exactly as the next real mount would run
//! it, but on the view; then `Fs::fsck` checks the recovered state. The result says whether
//! a crash recovery is pending and how many bytes it would rewrite. Memory stays a small
//! fraction of the pool: the view holds only the pages recovery wrote, and the checker's
//! structures are bitmaps and per-inode records.

use crate::memory::OverlayPm;
use pmem::Pool;
use pmfs::{Fs, FsckReport, MountOptions};
use std::path::{Path, PathBuf};

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
    /// Damage the check's recovery repaired on its private view (the next mount repairs
    /// the pool the same way).
    pub repairs: Vec<String>,
}

/// Why a check did not pass.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The file could not be read or is not a pool (nothing was checked).
    #[error(transparent)]
    Pool(pmem::PoolError),
    /// The file could not be read.
    #[error("reading the pool: {0}")]
    Io(#[from] std::io::Error),
    /// A process has the pool open: its image is changing under the check. The field is
    /// the ferrite mount that serves it, if one does.
    #[error("{}", in_use(.0.as_deref()))]
    InUse(Option<PathBuf>),
    /// The pool is not a file system, or recovery or the consistency check failed.
    #[error("{0}")]
    Damaged(String),
}

/// Why a pool in use cannot be checked, and what to do: the mount point to unmount when a
/// ferrite mount serves it.
fn in_use(mounted_on: Option<&Path>) -> String {
    match mounted_on {
        Some(dir) => format!(
            "the pool is in use: mounted on {0}; `ferrite fs unmount {0}` first",
            crate::shell_word(dir)
        ),
        None => "the pool is in use by another process (a mount, or a program using it \
                 through the preload library); end it first"
            .to_owned(),
    }
}

/// [`CheckError::InUse`] for the pool at `path`.
fn in_use_error(path: &Path) -> CheckError {
    CheckError::InUse(crate::mount_point_of_pool(path))
}

impl From<pmem::PoolError> for CheckError {
    /// A pool header that fails its checksum or holds inconsistent fields, with no intact
    /// copy to stand in for it, is damage to this pool, not a file the check cannot read:
    /// e2fsck's "damaged", as for every other structure. It cannot be repaired
    /// (`docs/pool-format.md`; a damaged header whose copy is intact, or a damaged state
    /// word, never gets here: the open repairs them).
    fn from(error: pmem::PoolError) -> Self {
        match error {
            pmem::PoolError::ChecksumMismatch { .. } | pmem::PoolError::Corrupted(_) => {
                CheckError::Damaged(format!(
                    "{error}; the header's copy is damaged too (or the pool predates the copy), so it cannot be repaired"
                ))
            }
            error => CheckError::Pool(error),
        }
    }
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
        return Err(in_use_error(path));
    }
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let pool = Pool::attach(OverlayPm::new(file, len), pmfs::LAYOUT)?;
    let mounted = Fs::mount(pool, MountOptions::default());
    let fs = match mounted {
        Ok(fs) => fs,
        Err(e) => return Err(CheckError::Damaged(format!("mount: {e}"))),
    };
    let checked = fs.fsck();
    if let Some(error) = fs.pool().pm().take_error() {
        fs.abandon();
        return Err(CheckError::Io(error));
    }
    let fsck: FsckReport = match checked {
        Ok(report) => report,
        Err(e) => {
            fs.abandon();
            return Err(CheckError::Damaged(format!("fsck: {}", e.0)));
        }
    };
    let recovery_bytes = fs.pool().pm().changed_bytes(report.header.root_offset);
    // The pool's own repairs (a header restored from its copy, a damaged state word) first:
    // the attach above made them on the overlay, as a mount would on the file.
    let repairs = fs
        .pool()
        .repaired()
        .iter()
        .cloned()
        .chain(fs.repairs().iter().map(ToString::to_string))
        .collect();
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
        repairs,
    })
}

/// What `fsck --repair` changed, and the check of the repaired pool.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RepairReport {
    /// Each change, in the order made (empty: the pool needed none).
    pub repairs: Vec<pmfs::FsckRepair>,
    /// The check after the repair.
    pub check: CheckReport,
}

/// Repairs the pool file at `path` in place (`Fs::repair`: every change journaled), closes
/// it cleanly, then checks it as [`check_offline`] does. The pool is written through the
/// native backend with `native` (the caller applies the environment's overrides).
pub fn repair_offline(
    path: &Path,
    native: &pmem::NativeOptions,
) -> Result<RepairReport, CheckError> {
    if pmem::inspect(path)?.in_use {
        return Err(in_use_error(path));
    }
    let pool = Pool::open(path, pmfs::LAYOUT, native)?;
    let (fs, repairs) = match Fs::repair(pool, MountOptions::default()) {
        Ok(repaired) => repaired,
        Err(pmfs::FsError::Pool(e)) => return Err(e.into()),
        Err(e) => return Err(CheckError::Damaged(format!("repair: {e}"))),
    };
    fs.unmount()?;
    let check = check_offline(path)?;
    Ok(RepairReport { repairs, check })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_damage_is_damage_and_other_pool_errors_are_not() {
        let checksum = pmem::PoolError::ChecksumMismatch {
            what: "pool header",
            stored: 1,
            computed: 2,
        };
        let damaged = CheckError::from(checksum);
        assert_eq!(damaged.exit_code(), 4, "{damaged}");
        assert!(
            damaged
                .to_string()
                .contains("pool header checksum mismatch")
        );
        let corrupt = CheckError::from(pmem::PoolError::Corrupted("bad".into()));
        assert_eq!(corrupt.exit_code(), 4, "{corrupt}");
        let foreign = CheckError::from(pmem::PoolError::NotAPool {
            reason: "bad magic",
        });
        assert_eq!(foreign.exit_code(), 8, "{foreign}");
        assert_eq!(CheckError::from(pmem::PoolError::NotFound).exit_code(), 8);
    }
}
