//! Ferrite PMFS through the kernel: the FUSE adapter over `pmfs::Fs` ([`FuseFs`]), mounting
//! in the background ([`spawn`]) or in the foreground with a clean unmount on signals
//! ([`serve`]), the offline checker ([`check_offline`]), and pool helpers for
//! `ferrite fs mkfs` and `ferrite fs mount`.

#![forbid(unsafe_code)]

mod adapter;
mod check;
mod damage;
mod memory;
mod mount;
mod null;

pub use adapter::{FuseFs, errno, file_attr};
pub use check::{CheckError, CheckReport, RepairReport, check_offline, repair_offline};
pub use memory::OverlayPm;
pub use mount::{
    Ended, MAX_THREADS, MountConfig, MountError, Mounted, check_mount_point, serve, spawn,
    spawn_null,
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
    Fs::mount(pool, options).map_err(|error| match error {
        // The mount refuses any damage it meets (one bad bit in an unused inode is enough);
        // the user is told how to see all of it and how to repair it.
        FsError::Corrupted(what) => {
            let pool = shell_word(path);
            FsError::Corrupted(format!(
                "{what} (`ferrite fs fsck {pool}` lists the damage; \
                 `ferrite fs fsck --repair {pool}` repairs what it can, removing what it cannot trust)"
            ))
        }
        other => other,
    })
}

/// How long [`unmount_and_wait`] waits for the server to close its pool.
pub const RELEASE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What [`unmount_and_wait`] saw after the unmount.
#[derive(Debug, PartialEq, Eq)]
pub enum Released {
    /// The server closed the pool and exited: `fs fsck` or another mount may open the pool
    /// now.
    Pool(PathBuf),
    /// The server still held the pool after [`RELEASE_TIMEOUT`].
    StillHeld(PathBuf),
    /// The server closed the pool but was still running after [`RELEASE_TIMEOUT`].
    ServerRunning {
        /// The pool it served.
        pool: PathBuf,
        /// The server's process id.
        pid: u32,
    },
}

/// Unmounts the ferrite mount at `dir` like [`unmount`], then waits until the serving process
/// has closed the pool it named in the mount table and exited, so that the pool can be
/// checked or mounted again as soon as this returns (the kernel detaches the mount before the
/// server has finished closing), and nothing the server does at its end can meet what the
/// caller does next. Anything else at `dir` is left alone with an `InvalidInput` error that
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
    // The server is whoever holds the pool's lock; a mount served by this very process
    // (a test) cannot be waited for.
    let servers: Vec<u32> = pmem::flock_holders(&pool)
        .into_iter()
        .filter(|&pid| pid != std::process::id())
        .collect();
    unmount(dir)?;
    let deadline = std::time::Instant::now() + RELEASE_TIMEOUT;
    let pause = || std::thread::sleep(std::time::Duration::from_millis(10));
    while pmem::inspect(&pool).is_ok_and(|report| report.in_use) {
        if std::time::Instant::now() >= deadline {
            return Ok(Released::StillHeld(pool));
        }
        pause();
    }
    while let Some(&pid) = servers.iter().find(|&&pid| is_running(pid)) {
        if std::time::Instant::now() >= deadline {
            return Ok(Released::ServerRunning { pool, pid });
        }
        pause();
    }
    Ok(Released::Pool(pool))
}

/// Whether process `pid` exists and has not exited (a zombie has).
fn is_running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `PID (COMMAND) STATE …`: the command may hold spaces and parentheses.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    state != Some("Z") && state != Some("X")
}

fn not_unmounted(why: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, why)
}

/// One line of the mount table, as far as this crate needs it.
#[derive(Debug, PartialEq, Eq)]
struct MountEntry {
    /// The mount's id: unique among the mounts that exist at the same time.
    id: u64,
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
    top_mount_at(&canonical_mount_point(dir)?)
}

/// The topmost mount at canonical path `dir`.
fn top_mount_at(dir: &Path) -> Option<MountEntry> {
    mounts_at(dir).pop()
}

/// The mounts at canonical path `dir`, bottom first (the table lists a mount after the one
/// it covers).
fn mounts_at(dir: &Path) -> Vec<MountEntry> {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    table
        .lines()
        .filter_map(parse_mountinfo_line)
        .filter(|entry| entry.mount_point == dir)
        .collect()
}

/// The mount a server made, as the mount table named it then. A server unmounts this mount
/// only, and only while it is the topmost one at its directory: `umount(2)` takes a path,
/// and once the server's mount is gone (unmounted from outside) or covered, that path names
/// another file system — the tmpfs the mount was stacked on, another ferrite mount — which
/// an unmount would take away with its files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OwnMount {
    /// The mount point, canonical (as the mount table writes it).
    dir: PathBuf,
    /// The mount's id. Ids are reused once a mount is gone, so the source is compared too.
    id: u64,
    /// `ferrite-fs:<pool>`: while the server runs it holds the pool's lock, so no other
    /// mount can serve that pool.
    source: String,
}

impl OwnMount {
    /// The topmost mount at canonical `dir` when it is a FUSE mount of `source`: called
    /// right after mounting, it is the mount just made.
    pub(crate) fn find(dir: &Path, source: &str) -> Option<OwnMount> {
        let top = top_mount_at(dir)?;
        (top.fs_type.starts_with("fuse") && top.source == source).then(|| OwnMount {
            dir: dir.to_owned(),
            id: top.id,
            source: top.source,
        })
    }

    fn is(&self, entry: &MountEntry) -> bool {
        entry.id == self.id && entry.source == self.source
    }

    /// Unmounts this mount as [`unmount`] does if it is the topmost at its directory;
    /// otherwise leaves every mount there as it is and says why.
    pub(crate) fn unmount(&self) -> std::io::Result<()> {
        let mounts = mounts_at(&self.dir);
        match mounts.last() {
            Some(top) if self.is(top) => unmount(&self.dir),
            Some(top) if mounts.iter().any(|entry| self.is(entry)) => Err(not_unmounted(&format!(
                "this server's mount is covered by a {} mount of {}; unmount that first",
                top.fs_type, top.source
            ))),
            _ => Err(not_unmounted(
                "this server's mount is no longer in the mount table; nothing unmounted",
            )),
        }
    }
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
    let id = fields.first()?.parse().ok()?;
    let mount_point = PathBuf::from(unescape_mountinfo(fields.get(4)?));
    let separator = fields.iter().position(|field| *field == "-")?;
    let fs_type = (*fields.get(separator + 1)?).to_owned();
    let source = unescape_mountinfo(fields.get(separator + 2)?);
    Some(MountEntry {
        id,
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

/// `path` as one shell word, for a command the user is told to run: as it is when every
/// character is safe, else in single quotes (a `'` inside written `'\''`).
pub fn shell_word(path: &Path) -> String {
    let text = path.display().to_string();
    let safe = |c: char| c.is_ascii_alphanumeric() || "/._-+,:@%=".contains(c);
    if !text.is_empty() && text.chars().all(safe) {
        text
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
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
        // The kernel's "Device or resource busy" says nothing of the cause nor of the way out.
        Err(nix::errno::Errno::EBUSY) => Err(std::io::Error::new(
            std::io::ErrorKind::ResourceBusy,
            format!(
                "the mount is busy: a process has a file or its working directory under it; \
                 end it (`fuser -vm {0}` or `lsof {0}` names it), then unmount again",
                shell_word(dir)
            ),
        )),
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
    fn this_process_runs_and_a_pid_past_the_limit_does_not() {
        assert!(is_running(std::process::id()));
        assert!(!is_running(u32::MAX));
    }

    /// The unmount hint is one word to the shell whatever the mount point's name holds.
    #[test]
    fn the_unmount_hint_is_one_shell_word() {
        assert_eq!(shell_word(Path::new("/tmp/mnt-1")), "/tmp/mnt-1");
        for name in [
            "/tmp/m sp",
            "/tmp/it's",
            "/tmp/$HOME;x",
            "/tmp/a\\b",
            "/tmp/`q`",
            "",
        ] {
            let word = shell_word(Path::new(name));
            let output = std::process::Command::new("sh")
                .args(["-c", &format!("printf %s {word}")])
                .output()
                .expect("run sh");
            assert_eq!(String::from_utf8_lossy(&output.stdout), name, "{word}");
        }
    }

    #[test]
    fn octal_escapes_and_plain_backslashes() {
        assert_eq!(unescape_mountinfo("a\\040b\\011c\\134d"), "a b\tc\\d");
        assert_eq!(unescape_mountinfo("tail\\04"), "tail\\04");
        assert_eq!(unescape_mountinfo("\\999"), "\\999");
    }
}
