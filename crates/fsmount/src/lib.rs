//! Ferrite PMFS through the kernel: the FUSE adapter over `pmfs::Fs` ([`FuseFs`]), mounting
//! in the background ([`spawn`]) or in the foreground with a clean unmount on signals
//! ([`serve`]), the offline checker ([`check_offline`]), and pool helpers for
//! `ferrite fs mkfs` and `ferrite fs mount`.

#![forbid(unsafe_code)]

mod adapter;
mod check;
mod memory;
mod mount;
mod null;

pub use adapter::{FuseFs, errno, file_attr};
pub use check::{CheckError, CheckReport, RepairReport, check_offline, repair_offline};
pub use memory::OverlayPm;
pub use mount::{
    Ended, MountConfig, MountError, Mounted, check_mount_point, serve, spawn, spawn_null,
};
pub use null::NullFs;

use pmem::{Native, NativeOptions, Pool, Protection};
use pmfs::{Fs, FsError, MkfsOptions, MountOptions};
use std::path::{Path, PathBuf};

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
    pool.pm().protect(protection).map_err(|e| match e.kind() {
        // A protection this machine lacks is a wrong choice of option, not a pool problem.
        std::io::ErrorKind::Unsupported => {
            FsError::InvalidArgument(format!("--protect {}: {e}", protection.name()))
        }
        _ => FsError::Pool(pmem::PoolError::from(e)),
    })?;
    Fs::mount(pool, options)
}

/// How long [`unmount_and_wait`] waits for the server to close its pool.
pub const RELEASE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What [`unmount_and_wait`] saw after the unmount.
#[derive(Debug, PartialEq, Eq)]
pub enum Released {
    /// The server closed the pool: `fs fsck` or another mount may open it now.
    Pool(PathBuf),
    /// The server still held the pool after [`RELEASE_TIMEOUT`].
    StillHeld(PathBuf),
}

/// Unmounts the ferrite mount at `dir` like [`unmount`], then waits until the serving process
/// has closed the pool it named in the mount table, so that the pool can be checked or
/// mounted again as soon as this returns (the kernel detaches the mount before the server has
/// finished closing). Anything else at `dir` is left alone with an `InvalidInput` error that
/// says what is there: `umount(2)` as root would unmount any file system (a `tmpfs` such as
/// `/dev/shm`, with every file in it lost).
pub fn unmount_and_wait(dir: &Path) -> std::io::Result<Released> {
    let pool = match mount_at(dir) {
        None => return Err(not_unmounted("nothing is mounted there")),
        Some(entry) => match entry.ferrite_pool() {
            Some(pool) => pool,
            None => {
                return Err(not_unmounted(&format!(
                    "it is a {} mount of {}, not a ferrite file system; left mounted",
                    entry.fs_type, entry.source
                )));
            }
        },
    };
    unmount(dir)?;
    let deadline = std::time::Instant::now() + RELEASE_TIMEOUT;
    while pmem::inspect(&pool).is_ok_and(|report| report.in_use) {
        if std::time::Instant::now() >= deadline {
            return Ok(Released::StillHeld(pool));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Ok(Released::Pool(pool))
}

fn not_unmounted(why: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, why)
}

/// One line of the mount table, as far as this crate needs it.
#[derive(Debug, PartialEq, Eq)]
struct MountEntry {
    /// Where it is mounted.
    mount_point: PathBuf,
    /// `fuse`, `fuse.<subtype>`, `tmpfs`, ...
    fs_type: String,
    /// What is mounted (`ferrite-fs:<pool>` for a ferrite mount).
    source: String,
}

impl MountEntry {
    /// The pool a ferrite mount serves (`ferrite fs mount` names its source so).
    fn ferrite_pool(&self) -> Option<PathBuf> {
        if !self.fs_type.starts_with("fuse") {
            return None;
        }
        self.source.strip_prefix(FSNAME_PREFIX).map(PathBuf::from)
    }
}

/// Where a ferrite mount serves `pool` (the first in the mount table), so that a refused
/// second mount or check can say where the pool is in use.
pub fn mount_point_of_pool(pool: &Path) -> Option<PathBuf> {
    let pool = std::fs::canonicalize(pool).ok()?;
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    table.lines().find_map(|line| {
        let entry = parse_mountinfo_line(line)?;
        let served = std::fs::canonicalize(entry.ferrite_pool()?).ok()?;
        (served == pool).then_some(entry.mount_point)
    })
}

/// The topmost mount at `dir`, from `/proc/self/mountinfo`.
fn mount_at(dir: &Path) -> Option<MountEntry> {
    let dir = canonical_mount_point(dir)?;
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    table
        .lines()
        .rev()
        .filter_map(parse_mountinfo_line)
        .find(|entry| entry.mount_point == dir)
}

/// `dir` with symbolic links resolved. A mount whose server died cannot be looked into
/// ("transport endpoint is not connected"), so its parent is resolved instead.
fn canonical_mount_point(dir: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(dir).ok().or_else(|| {
        let parent = match dir.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        Some(std::fs::canonicalize(parent).ok()?.join(dir.file_name()?))
    })
}

/// One mountinfo line. Fields: id, parent, device, root, mount point, options, optional
/// fields up to `-`, then type, source, options.
fn parse_mountinfo_line(line: &str) -> Option<MountEntry> {
    let fields: Vec<&str> = line.split(' ').collect();
    let mount_point = PathBuf::from(unescape_mountinfo(fields.get(4)?));
    let separator = fields.iter().position(|field| *field == "-")?;
    let fs_type = (*fields.get(separator + 1)?).to_owned();
    let source = unescape_mountinfo(fields.get(separator + 2)?);
    Some(MountEntry {
        mount_point,
        fs_type,
        source,
    })
}

/// The pool of one mountinfo line when it is a ferrite mount at `dir`.
#[cfg(test)]
fn pool_of_mountinfo_line(line: &str, dir: &Path) -> Option<PathBuf> {
    parse_mountinfo_line(line)
        .filter(|entry| entry.mount_point == dir)?
        .ferrite_pool()
}

/// A mountinfo field with the kernel's octal escapes (`\040` for a space) undone.
fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let octal = bytes.get(at + 1..at + 4).filter(|digits| {
            bytes[at] == b'\\' && digits.iter().all(|d| (b'0'..=b'7').contains(d))
        });
        match octal {
            Some(digits) => {
                out.push(
                    digits
                        .iter()
                        .fold(0u8, |value, d| value.wrapping_mul(8) + (d - b'0')),
                );
                at += 4;
            }
            None => {
                out.push(bytes[at]);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The start of a ferrite mount's source in the mount table; the pool's path follows.
pub const FSNAME_PREFIX: &str = "ferrite-fs:";

/// Detaches the mount at `dir` at once even while it is busy (`umount2(MNT_DETACH)` as root,
/// `fusermount3 -u -z` otherwise): for a process about to exit that serves the mount, so it
/// is not left behind as a dead "transport endpoint" by a program still working in it.
pub fn detach(dir: &Path) -> std::io::Result<()> {
    unmount_with(dir, nix::mount::MntFlags::MNT_DETACH, &["-u", "-z"])
}

/// Unmounts the FUSE mount at `dir`: `umount(2)` as root, `fusermount3 -u` otherwise. The
/// serving process then closes its pool cleanly.
pub fn unmount(dir: &Path) -> std::io::Result<()> {
    unmount_with(dir, nix::mount::MntFlags::empty(), &["-u"])
}

/// `umount2(dir, flags)`, or, where that is not permitted (not root), `fusermount3` with
/// `fusermount_args`, the same request for a user's FUSE mount.
fn unmount_with(
    dir: &Path,
    flags: nix::mount::MntFlags,
    fusermount_args: &[&str],
) -> std::io::Result<()> {
    match nix::mount::umount2(dir, flags) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EPERM) => {
            let status = std::process::Command::new("fusermount3")
                .args(fusermount_args)
                .arg(dir)
                .status()?;
            if status.success() {
                Ok(())
            } else {
                Err(std::io::Error::other(format!(
                    "fusermount3 {}: {status}",
                    fusermount_args.join(" ")
                )))
            }
        }
        Err(errno) => Err(errno.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ferrite_mount_line_names_its_pool_with_escapes_undone() {
        let line = "812 30 0:77 / /tmp/a\\040dir/mnt rw,nosuid,nodev,relatime shared:1 - \
                    fuse.ferrite ferrite-fs:/dev/shm/my\\040pool.pool rw,user_id=0,group_id=0";
        assert_eq!(
            pool_of_mountinfo_line(line, Path::new("/tmp/a dir/mnt")),
            Some(PathBuf::from("/dev/shm/my pool.pool"))
        );
        assert_eq!(pool_of_mountinfo_line(line, Path::new("/tmp/other")), None);
    }

    #[test]
    fn other_mounts_name_no_pool() {
        let tmpfs =
            "25 30 0:23 / /dev/shm rw,nosuid,nodev shared:4 - tmpfs tmpfs rw,size=24684084k";
        assert_eq!(pool_of_mountinfo_line(tmpfs, Path::new("/dev/shm")), None);
        let users = "90 30 0:50 / /mnt/x rw - fuse.sshfs host:/dir rw";
        assert_eq!(pool_of_mountinfo_line(users, Path::new("/mnt/x")), None);
        assert_eq!(pool_of_mountinfo_line("garbage", Path::new("/")), None);
    }

    #[test]
    fn octal_escapes_and_plain_backslashes() {
        assert_eq!(unescape_mountinfo("a\\040b\\011c\\134d"), "a b\tc\\d");
        assert_eq!(unescape_mountinfo("tail\\04"), "tail\\04");
        assert_eq!(unescape_mountinfo("\\999"), "\\999");
    }
}
