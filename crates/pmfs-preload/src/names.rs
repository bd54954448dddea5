//! Attribute changes by path (`fchmodat`, `chown`, `lchown`, `fchownat`, `utimensat`,
//! `utimes`, `utime`) and links (`link`, `linkat`, `symlink`, `symlinkat`, `readlinkat`)
//! on served paths; anything else goes to the C library.

use crate::abi::{
    name_bytes, ret, served_fd, served_fs, served_path, served_path_at, set_served, size_ret,
};
use libc::{c_char, c_int, gid_t, mode_t, size_t, ssize_t, uid_t};
use pmfs::{Errno, FileType, SetAttr, TimeSet};

/// Symbolic links followed at most by `linkat(AT_SYMLINK_FOLLOW)` (Linux' limit).
const MAX_SYMLINKS: usize = 40;

/// Changes `set` of served path `p` (`follow`: through a final symbolic link).
fn setattr_path(p: &[u8], follow: bool, set: SetAttr) -> c_int {
    ret(served_fs()
        .and_then(|fs| fs.px.setattr(p, follow, set))
        .map(|()| 0))
}

/// The target of an `*at` call: the descriptor itself (`AT_EMPTY_PATH` with an empty
/// path) or a path.
enum AtTarget {
    Fd(c_int),
    Path(Vec<u8>),
}

/// The served target of `(dirfd, path)`, if it is served.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn at_target(dirfd: c_int, path: *const c_char, flags: c_int) -> Option<AtTarget> {
    let empty = path.is_null()
        // SAFETY: a non-null path is NUL-terminated.
        || unsafe { *path } == 0;
    if empty {
        let wants_fd = path.is_null() || flags & libc::AT_EMPTY_PATH != 0;
        return (wants_fd && served_fd(dirfd).is_some()).then_some(AtTarget::Fd(dirfd));
    }
    // SAFETY: as above.
    unsafe { served_path_at(dirfd, path) }.map(AtTarget::Path)
}

fn set_at(target: AtTarget, follow: bool, set: SetAttr) -> c_int {
    match target {
        AtTarget::Fd(kfd) => set_served(kfd, set).unwrap_or_else(|| ret(Err(Errno::EBADF))),
        AtTarget::Path(p) => setattr_path(&p, follow, set),
    }
}

/// `fchmodat` on a served path: with `AT_SYMLINK_NOFOLLOW` a symbolic link's mode cannot
/// change (`EOPNOTSUPP`, as on Linux); any other file changes as `chmod`.
fn fchmodat_served(p: &[u8], mode: mode_t, flags: c_int) -> Result<(), Errno> {
    let fs = served_fs()?;
    if flags & !libc::AT_SYMLINK_NOFOLLOW != 0 {
        return Err(Errno::EINVAL);
    }
    if flags & libc::AT_SYMLINK_NOFOLLOW != 0 && fs.px.lstat(p)?.kind == FileType::Symlink {
        return Err(Errno::EOPNOTSUPP);
    }
    fs.px.chmod(p, mode & 0o7777)
}

/// # Safety
/// C `fchmodat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fchmodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    flags: c_int,
) -> c_int {
    // SAFETY: `fchmodat`'s path.
    if let Some(p) = unsafe { served_path_at(dirfd, path) } {
        return ret(fchmodat_served(&p, mode, flags).map(|()| 0));
    }
    let real = next!(
        "fchmodat",
        unsafe extern "C" fn(c_int, *const c_char, mode_t, c_int) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(dirfd, path, mode, flags) }
}

/// The change of owner `uid`/`gid` (`-1`: unchanged).
fn owner(uid: uid_t, gid: gid_t) -> SetAttr {
    SetAttr {
        uid: (uid != uid_t::MAX).then_some(uid),
        gid: (gid != gid_t::MAX).then_some(gid),
        ..SetAttr::default()
    }
}

/// # Safety
/// C `chown`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn chown(path: *const c_char, uid: uid_t, gid: gid_t) -> c_int {
    // SAFETY: `chown`'s path.
    if let Some(p) = unsafe { served_path(path) } {
        return setattr_path(&p, true, owner(uid, gid));
    }
    let real = next!(
        "chown",
        unsafe extern "C" fn(*const c_char, uid_t, gid_t) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(path, uid, gid) }
}

/// # Safety
/// C `lchown`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lchown(path: *const c_char, uid: uid_t, gid: gid_t) -> c_int {
    // SAFETY: `lchown`'s path.
    if let Some(p) = unsafe { served_path(path) } {
        return setattr_path(&p, false, owner(uid, gid));
    }
    let real = next!(
        "lchown",
        unsafe extern "C" fn(*const c_char, uid_t, gid_t) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(path, uid, gid) }
}

/// # Safety
/// C `fchownat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fchownat(
    dirfd: c_int,
    path: *const c_char,
    uid: uid_t,
    gid: gid_t,
    flags: c_int,
) -> c_int {
    // SAFETY: `fchownat`'s path.
    if let Some(target) = unsafe { at_target(dirfd, path, flags) } {
        let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
        return set_at(target, follow, owner(uid, gid));
    }
    let real = next!(
        "fchownat",
        unsafe extern "C" fn(c_int, *const c_char, uid_t, gid_t, c_int) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(dirfd, path, uid, gid, flags) }
}

/// The access and modification times of a `utimensat`/`futimens` array (null: both now;
/// `UTIME_OMIT`: unchanged; `UTIME_NOW`: now); `EINVAL` for nanoseconds out of range.
///
/// # Safety
/// `times` is null or points to two `timespec`s.
pub(crate) unsafe fn time_sets(
    times: *const libc::timespec,
) -> Result<(Option<TimeSet>, Option<TimeSet>), Errno> {
    if times.is_null() {
        return Ok((Some(TimeSet::Now), Some(TimeSet::Now)));
    }
    let one = |i: usize| -> Result<Option<TimeSet>, Errno> {
        // SAFETY: the caller's array of two `timespec`s.
        let t = unsafe { *times.add(i) };
        match t.tv_nsec {
            libc::UTIME_OMIT => Ok(None),
            libc::UTIME_NOW => Ok(Some(TimeSet::Now)),
            ns if (0..1_000_000_000).contains(&ns) => {
                let secs = u64::try_from(t.tv_sec).map_err(|_| Errno::EINVAL)?;
                let at = secs
                    .checked_mul(1_000_000_000)
                    .and_then(|s| s.checked_add(ns as u64))
                    .ok_or(Errno::EINVAL)?;
                Ok(Some(TimeSet::At(at)))
            }
            _ => Err(Errno::EINVAL),
        }
    };
    Ok((one(0)?, one(1)?))
}

fn times_set((atime, mtime): (Option<TimeSet>, Option<TimeSet>)) -> SetAttr {
    SetAttr {
        atime,
        mtime,
        ..SetAttr::default()
    }
}

/// # Safety
/// C `utimensat` (a null path means `dirfd` itself, as the system call allows).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn utimensat(
    dirfd: c_int,
    path: *const c_char,
    times: *const libc::timespec,
    flags: c_int,
) -> c_int {
    // SAFETY: `utimensat`'s path.
    if let Some(target) = unsafe { at_target(dirfd, path, flags) } {
        let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
        // SAFETY: `utimensat`'s times.
        return match unsafe { time_sets(times) } {
            Ok(sets) => set_at(target, follow, times_set(sets)),
            Err(e) => ret(Err(e)),
        };
    }
    let real = next!(
        "utimensat",
        unsafe extern "C" fn(c_int, *const c_char, *const libc::timespec, c_int) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(dirfd, path, times, flags) }
}

/// The time of a `timeval`, in nanoseconds; `EINVAL` out of range.
fn timeval_ns(t: libc::timeval) -> Result<TimeSet, Errno> {
    let secs = u64::try_from(t.tv_sec).map_err(|_| Errno::EINVAL)?;
    let micros = u64::try_from(t.tv_usec)
        .ok()
        .filter(|&us| us < 1_000_000)
        .ok_or(Errno::EINVAL)?;
    secs.checked_mul(1_000_000_000)
        .and_then(|s| s.checked_add(micros * 1000))
        .map(TimeSet::At)
        .ok_or(Errno::EINVAL)
}

/// # Safety
/// C `utimes` (null `times`: now).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn utimes(path: *const c_char, times: *const libc::timeval) -> c_int {
    // SAFETY: `utimes`' path.
    if let Some(p) = unsafe { served_path(path) } {
        let sets = if times.is_null() {
            Ok((Some(TimeSet::Now), Some(TimeSet::Now)))
        } else {
            // SAFETY: `utimes`' array of two `timeval`s.
            let (a, m) = unsafe { (*times, *times.add(1)) };
            timeval_ns(a).and_then(|a| Ok((Some(a), Some(timeval_ns(m)?))))
        };
        return match sets {
            Ok(sets) => setattr_path(&p, true, times_set(sets)),
            Err(e) => ret(Err(e)),
        };
    }
    let real = next!(
        "utimes",
        unsafe extern "C" fn(*const c_char, *const libc::timeval) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(path, times) }
}

/// # Safety
/// C `utime` (null `times`: now).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn utime(path: *const c_char, times: *const libc::utimbuf) -> c_int {
    // SAFETY: `utime`'s path.
    if let Some(p) = unsafe { served_path(path) } {
        let at = |secs: libc::time_t| {
            u64::try_from(secs)
                .ok()
                .and_then(|s| s.checked_mul(1_000_000_000))
                .map(TimeSet::At)
                .ok_or(Errno::EINVAL)
        };
        let sets = if times.is_null() {
            Ok((Some(TimeSet::Now), Some(TimeSet::Now)))
        } else {
            // SAFETY: `utime`'s `struct utimbuf`.
            let t = unsafe { *times };
            at(t.actime).and_then(|a| Ok((Some(a), Some(at(t.modtime)?))))
        };
        return match sets {
            Ok(sets) => setattr_path(&p, true, times_set(sets)),
            Err(e) => ret(Err(e)),
        };
    }
    let real = next!(
        "utime",
        unsafe extern "C" fn(*const c_char, *const libc::utimbuf) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(path, times) }
}

// ---------------------------------------------------------------------------- links

/// Where the chain of symbolic links starting at served path `p` ends (`linkat` with
/// `AT_SYMLINK_FOLLOW`): a relative target is taken from the link's directory.
fn follow_links(p: &[u8]) -> Result<Vec<u8>, Errno> {
    let fs = served_fs()?;
    let mut path = p.to_vec();
    for _ in 0..MAX_SYMLINKS {
        if fs.px.lstat(&path)?.kind != FileType::Symlink {
            return Ok(path);
        }
        let target = fs.px.readlink(&path)?;
        path = if target.first() == Some(&b'/') {
            target
        } else {
            let dir = path
                .iter()
                .rposition(|&b| b == b'/')
                .map_or(&[][..], |i| &path[..i]);
            crate::served::join(dir, &target)
        };
    }
    Err(Errno::ELOOP)
}

/// A hard link between two paths: both served, or `EXDEV` when only one is (a link
/// cannot cross file systems); `None` when neither is.
fn link_served(old: Option<Vec<u8>>, new: Option<Vec<u8>>, follow: bool) -> Option<c_int> {
    let result = match (old, new) {
        (None, None) => return None,
        (Some(old), Some(new)) => {
            let old = if follow { follow_links(&old) } else { Ok(old) };
            old.and_then(|old| served_fs()?.px.link(&old, &new))
        }
        _ => Err(Errno::EXDEV),
    };
    Some(ret(result.map(|()| 0)))
}

/// # Safety
/// C `link` (the final symbolic link of `old` is not followed, as on Linux).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn link(old: *const c_char, new: *const c_char) -> c_int {
    // SAFETY: `link`'s paths.
    let (a, b) = unsafe { (served_path(old), served_path(new)) };
    if let Some(r) = link_served(a, b, false) {
        return r;
    }
    let real = next!(
        "link",
        unsafe extern "C" fn(*const c_char, *const c_char) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(old, new) }
}

/// # Safety
/// C `linkat` (`AT_SYMLINK_FOLLOW` follows a final symbolic link of `old`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn linkat(
    olddir: c_int,
    old: *const c_char,
    newdir: c_int,
    new: *const c_char,
    flags: c_int,
) -> c_int {
    // SAFETY: `linkat`'s paths.
    let (a, b) = unsafe { (served_path_at(olddir, old), served_path_at(newdir, new)) };
    if a.is_some() || b.is_some() {
        if flags & !libc::AT_SYMLINK_FOLLOW != 0 {
            return ret(Err(Errno::EINVAL));
        }
        let follow = flags & libc::AT_SYMLINK_FOLLOW != 0;
        return link_served(a, b, follow).unwrap_or(-1);
    }
    let real = next!(
        "linkat",
        unsafe extern "C" fn(c_int, *const c_char, c_int, *const c_char, c_int) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(olddir, old, newdir, new, flags) }
}

/// Creates served symbolic link `p` holding `target` verbatim (any string, as on any file
/// system: the target is only read when the link is followed).
///
/// # Safety
/// `target` is a NUL-terminated string.
unsafe fn symlink_served(target: *const c_char, p: &[u8]) -> c_int {
    if target.is_null() {
        return ret(Err(Errno::EFAULT));
    }
    // SAFETY: the caller's NUL-terminated target.
    let target = unsafe { name_bytes(target) };
    if target.is_empty() {
        return ret(Err(Errno::ENOENT));
    }
    ret(served_fs()
        .and_then(|fs| fs.px.symlink(target, p))
        .map(|()| 0))
}

/// # Safety
/// C `symlink`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn symlink(target: *const c_char, path: *const c_char) -> c_int {
    // SAFETY: `symlink`'s link path.
    if let Some(p) = unsafe { served_path(path) } {
        // SAFETY: `symlink`'s target.
        return unsafe { symlink_served(target, &p) };
    }
    let real = next!(
        "symlink",
        unsafe extern "C" fn(*const c_char, *const c_char) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(target, path) }
}

/// # Safety
/// C `symlinkat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn symlinkat(
    target: *const c_char,
    newdir: c_int,
    path: *const c_char,
) -> c_int {
    // SAFETY: `symlinkat`'s link path.
    if let Some(p) = unsafe { served_path_at(newdir, path) } {
        // SAFETY: `symlinkat`'s target.
        return unsafe { symlink_served(target, &p) };
    }
    let real = next!(
        "symlinkat",
        unsafe extern "C" fn(*const c_char, c_int, *const c_char) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(target, newdir, path) }
}

/// Copies the target of served link `p` into `buf` (truncated to `size`, no NUL, as
/// `readlink`).
///
/// # Safety
/// `buf` points to `size` writable bytes.
pub(crate) unsafe fn readlink_served(p: &[u8], buf: *mut c_char, size: size_t) -> ssize_t {
    let result = served_fs().and_then(|fs| fs.px.readlink(p)).map(|target| {
        let n = target.len().min(size);
        // SAFETY: the caller's buffer of `size` bytes.
        unsafe { std::ptr::copy_nonoverlapping(target.as_ptr(), buf.cast(), n) };
        n
    });
    size_ret(result)
}

/// # Safety
/// C `readlinkat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readlinkat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    size: size_t,
) -> ssize_t {
    // SAFETY: `readlinkat`'s path.
    if let Some(p) = unsafe { served_path_at(dirfd, path) } {
        // SAFETY: `readlinkat`'s buffer.
        return unsafe { readlink_served(&p, buf, size) };
    }
    let real = next!(
        "readlinkat",
        unsafe extern "C" fn(c_int, *const c_char, *mut c_char, size_t) -> ssize_t
    );
    // SAFETY: forwarded as received.
    unsafe { real(dirfd, path, buf, size) }
}
