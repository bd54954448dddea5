//! A working directory inside the prefix: `chdir` to a served directory (or `fchdir` to a
//! served descriptor) makes it this process's served working directory, and relative paths
//! then resolve from it through the library (as `mkdir -p`, `df` and `find` walk a tree);
//! `getcwd` names it. `chdir` anywhere else ends it.
//!
//! The kernel cannot enter a served directory, and a relative path the kernel resolves —
//! a call this library does not serve, a program started from here without the library
//! or unable to serve — must never reach the files of the directory the process was in
//! before (`rm -f a` there would delete a file outside the pool). So while the working
//! directory is served, the kernel's is **parked**: an empty directory removed as soon as
//! the process entered it, where every lookup fails with `ENOENT` and nothing can be
//! created. `exec` hands the served working directory to the new program in [`VAR`], with
//! the parked directory it belongs to; the new program's copy of this library takes it
//! over when it loads and serves its relative paths from there (mounting the pool at its
//! first use, or failing them with the pool's error, `EBUSY` while another process holds
//! it). `realpath` and `canonicalize_file_name` of served paths resolve through the
//! library (glibc's own would ask the kernel about each component).

use crate::abi::{ret, served_fd, served_fs, set_errno};
use crate::served::{config, route};
use libc::{c_char, c_int, size_t};
use parking_lot::Mutex;
use pmfs::{Errno, FileType};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Whether [`CWD`] holds a served working directory (read without the lock by every
/// relative path).
static SERVED_CWD: AtomicBool = AtomicBool::new(false);
/// The served working directory, a path inside the file system.
static CWD: Mutex<Vec<u8>> = Mutex::new(Vec::new());
/// The parked kernel working directory (device, inode) while [`SERVED_CWD`] is set.
static PARKED: Mutex<Option<DirId>> = Mutex::new(None);

/// The environment variable that hands the served working directory to the program
/// `exec` starts: `DEVICE:INODE:hex(path)`, the parked directory (which `exec` keeps as
/// the kernel's working directory) and the path inside the file system. A copy left in
/// the environment of a process whose kernel working directory is another one is ignored.
pub(crate) const VAR: &str = "PMFS_PRELOAD_CWD";

/// A directory's device and inode numbers.
type DirId = (u64, u64);

/// The served path of relative path `rel` when the working directory is served. A `..`
/// at the file system's root stays there, as `..` of `/` does.
pub(crate) fn served_relative(rel: &[u8]) -> Option<Vec<u8>> {
    if !SERVED_CWD.load(Ordering::Acquire) || rel.is_empty() {
        return None;
    }
    Some(crate::served::join(&CWD.lock(), rel))
}

/// Makes served directory `p` the working directory (`ENOTDIR` for another file), the
/// kernel's parked.
fn enter(p: Vec<u8>) -> Result<c_int, Errno> {
    if served_fs()?.px.stat(&p)?.kind != FileType::Directory {
        return Err(Errno::ENOTDIR);
    }
    park()?;
    *CWD.lock() = p;
    SERVED_CWD.store(true, Ordering::Release);
    Ok(0)
}

/// Whether the working directory is a served one.
pub(crate) fn is_served() -> bool {
    SERVED_CWD.load(Ordering::Acquire)
}

/// After a `chdir` the kernel made: the working directory is the kernel's again.
fn leave() {
    SERVED_CWD.store(false, Ordering::Release);
    *PARKED.lock() = None;
}

/// The kernel's working directory (followed through `/proc`, which works for a removed
/// directory too).
fn kernel_cwd() -> Option<DirId> {
    let meta = std::fs::metadata("/proc/self/cwd").ok()?;
    Some((meta.dev(), meta.ino()))
}

/// Parks the kernel's working directory unless it is parked already.
fn park() -> Result<(), Errno> {
    let mut parked = PARKED.lock();
    if parked.is_some() && *parked == kernel_cwd() {
        return Ok(());
    }
    let mut last = Errno::ENOENT;
    for base in park_bases() {
        match park_in(&base) {
            Ok(id) => {
                *parked = Some(id);
                return Ok(());
            }
            Err(e) => last = e,
        }
    }
    let _ = writeln!(
        std::io::stderr(),
        "pmfs-preload: cannot enter a served directory: no directory to park the kernel's \
         working directory in ({last}; tried $TMPDIR, /tmp, /dev/shm)"
    );
    Err(last)
}

/// Where a parked directory may be made: `$TMPDIR`, `/tmp`, `/dev/shm` (never under the
/// prefix, which the kernel does not see).
fn park_bases() -> Vec<PathBuf> {
    let tmpdir = std::env::var_os("TMPDIR").map(PathBuf::from);
    tmpdir
        .into_iter()
        .chain([PathBuf::from("/tmp"), PathBuf::from("/dev/shm")])
        .filter(|base| base.is_absolute())
        .filter(|base| {
            let bytes = base.as_os_str().as_encoded_bytes();
            config().is_none_or(|config| route(config, bytes).is_none())
        })
        .collect()
}

/// Makes an empty directory in `base`, opens it, removes it, and moves the kernel's
/// working directory into it through the descriptor: at no moment is the working directory
/// one that exists.
fn park_in(base: &Path) -> Result<DirId, Errno> {
    static MADE: AtomicU64 = AtomicU64::new(0);
    let errno = |e: std::io::Error| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO));
    let made = MADE.fetch_add(1, Ordering::Relaxed);
    let dir = base.join(format!(".pmfs-preload-cwd-{}-{made}", std::process::id()));
    std::fs::create_dir(&dir).map_err(errno)?;
    let opened = std::fs::File::open(&dir);
    std::fs::remove_dir(&dir).map_err(errno)?;
    let opened = opened.map_err(errno)?;
    let meta = opened.metadata().map_err(errno)?;
    let fchdir = next!("fchdir", unsafe extern "C" fn(c_int) -> c_int);
    // SAFETY: a descriptor this function owns, open until the end of it.
    if unsafe { fchdir(std::os::fd::AsRawFd::as_raw_fd(&opened)) } != 0 {
        return Err(errno(std::io::Error::last_os_error()));
    }
    Ok((meta.dev(), meta.ino()))
}

/// The value of [`VAR`] for the program this process starts, when the working directory
/// is served.
pub(crate) fn handed_over() -> Option<String> {
    if !is_served() {
        return None;
    }
    let (dev, ino) = (*PARKED.lock())?;
    let path = crate::handover::hex(&CWD.lock());
    Some(format!("{dev}:{ino}:{path}"))
}

/// The parked directory and served path of a [`VAR`] value.
fn decode(text: &str) -> Option<(DirId, Vec<u8>)> {
    let mut parts = text.splitn(3, ':');
    let dev = parts.next()?.parse().ok()?;
    let ino = parts.next()?.parse().ok()?;
    let path = crate::handover::unhex(parts.next()?)?;
    (path.first() == Some(&b'/')).then_some(((dev, ino), path))
}

/// Runs when the library loads: takes over the served working directory the program that
/// `exec`ed this one handed over, if the kernel's working directory is still the parked
/// directory it belongs to, and removes the variable (it is this program's alone). The
/// pool is mounted at the first served call, not here.
extern "C" fn at_load() {
    let Some(text) = std::env::var_os(VAR) else {
        return;
    };
    // SAFETY: called while the library loads, before the program's threads exist.
    unsafe { std::env::remove_var(VAR) };
    let Some((id, path)) = text.to_str().and_then(decode) else {
        return;
    };
    if config().is_none() || kernel_cwd() != Some(id) {
        return;
    }
    *PARKED.lock() = Some(id);
    *CWD.lock() = path;
    SERVED_CWD.store(true, Ordering::Release);
}

#[used]
#[unsafe(link_section = ".init_array")]
static AT_LOAD: extern "C" fn() = at_load;

/// # Safety
/// C `chdir`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    // SAFETY: `chdir`'s path.
    if let Some(p) = unsafe { crate::abi::served_path(path) } {
        return ret(enter(p));
    }
    let real = next!("chdir", unsafe extern "C" fn(*const c_char) -> c_int);
    // SAFETY: forwarded as received.
    let result = unsafe { real(path) };
    if result == 0 {
        leave();
    }
    result
}

/// # Safety
/// C `fchdir`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fchdir(kfd: c_int) -> c_int {
    if let Some((_, open)) = served_fd(kfd) {
        return ret(enter(open.path));
    }
    let real = next!("fchdir", unsafe extern "C" fn(c_int) -> c_int);
    // SAFETY: forwarded as received.
    let result = unsafe { real(kfd) };
    if result == 0 {
        leave();
    }
    result
}

/// The served working directory as the program sees it (under the prefix).
fn served_cwd() -> Option<Vec<u8>> {
    if !SERVED_CWD.load(Ordering::Acquire) {
        return None;
    }
    let prefix = &config()?.prefix;
    Some(outside(prefix, &CWD.lock()))
}

/// Served path `inner` as the program names it: under `prefix` (the root is the prefix).
fn outside(prefix: &str, inner: &[u8]) -> Vec<u8> {
    let mut path = prefix.as_bytes().to_vec();
    if inner != b"/" {
        path.extend_from_slice(inner);
    }
    path
}

/// Copies `path` and its NUL into `buf` of `size` bytes, or into a new `malloc`ed buffer
/// when `buf` is null (of `size` bytes if that is enough, as glibc does).
///
/// # Safety
/// `buf` is null or points to `size` writable bytes.
unsafe fn copy_out(path: &[u8], buf: *mut c_char, size: size_t) -> Result<*mut c_char, Errno> {
    let needed = path.len() + 1;
    let out = if buf.is_null() {
        // SAFETY: plain allocation; the caller frees it with `free`, as `getcwd` documents.
        let fresh = unsafe { libc::malloc(needed.max(size)) }.cast::<c_char>();
        if fresh.is_null() {
            return Err(Errno::from_raw(libc::ENOMEM));
        }
        fresh
    } else if size < needed {
        return Err(if size == 0 {
            Errno::EINVAL
        } else {
            Errno::ERANGE
        });
    } else {
        buf
    };
    // SAFETY: `out` holds at least `needed` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(path.as_ptr(), out.cast(), path.len());
        *out.add(path.len()) = 0;
    }
    Ok(out)
}

/// # Safety
/// C `getcwd`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getcwd(buf: *mut c_char, size: size_t) -> *mut c_char {
    if let Some(path) = served_cwd() {
        // SAFETY: `getcwd`'s buffer.
        return unsafe { copy_out(&path, buf, size) }.unwrap_or_else(|e| {
            set_errno(e);
            std::ptr::null_mut()
        });
    }
    let real = next!(
        "getcwd",
        unsafe extern "C" fn(*mut c_char, size_t) -> *mut c_char
    );
    // SAFETY: forwarded as received.
    unsafe { real(buf, size) }
}

/// # Safety
/// C `get_current_dir_name` (a `malloc`ed copy of the working directory).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn get_current_dir_name() -> *mut c_char {
    if let Some(path) = served_cwd() {
        // SAFETY: a null buffer asks for a new one.
        return unsafe { copy_out(&path, std::ptr::null_mut(), 0) }.unwrap_or_else(|e| {
            set_errno(e);
            std::ptr::null_mut()
        });
    }
    let real = next!(
        "get_current_dir_name",
        unsafe extern "C" fn() -> *mut c_char
    );
    // SAFETY: forwarded as received.
    unsafe { real() }
}

/// The canonical form of served path `p`: every component exists, `.` and `..` and
/// symbolic links resolved (an absolute target from the pool's root, as the library
/// follows it).
fn canonical(p: &[u8]) -> Result<Vec<u8>, Errno> {
    let fs = served_fs()?;
    let components = |path: &[u8]| -> Vec<Vec<u8>> {
        path.split(|&b| b == b'/')
            .filter(|c| !c.is_empty())
            .map(<[u8]>::to_vec)
            .collect()
    };
    let absolute = |parts: &[Vec<u8>]| -> Vec<u8> {
        let mut path = Vec::new();
        for part in parts {
            path.push(b'/');
            path.extend_from_slice(part);
        }
        if path.is_empty() {
            path.push(b'/');
        }
        path
    };
    let mut done: Vec<Vec<u8>> = Vec::new();
    let mut todo: std::collections::VecDeque<Vec<u8>> = components(p).into();
    let mut links = 0;
    while let Some(component) = todo.pop_front() {
        match component.as_slice() {
            b"." => continue,
            b".." => {
                done.pop();
                continue;
            }
            _ => {}
        }
        done.push(component);
        let candidate = absolute(&done);
        let attr = fs.px.lstat(&candidate)?;
        match attr.kind {
            FileType::Symlink => {
                done.pop();
                links += 1;
                if links > 40 {
                    return Err(Errno::ELOOP);
                }
                let target = fs.px.readlink(&candidate)?;
                if target.first() == Some(&b'/') {
                    done.clear();
                }
                for part in components(&target).into_iter().rev() {
                    todo.push_front(part);
                }
            }
            FileType::Directory => {}
            _ if todo.is_empty() => {}
            _ => return Err(Errno::ENOTDIR),
        }
    }
    Ok(absolute(&done))
}

/// The canonical served path `p` as the program names it (under the prefix).
fn canonical_outside(p: &[u8]) -> Result<Vec<u8>, Errno> {
    let inner = canonical(p)?;
    let prefix = &config().ok_or(Errno::ENOENT)?.prefix;
    Ok(outside(prefix, &inner))
}

/// # Safety
/// C `realpath` (`resolved`: null, or `PATH_MAX` writable bytes).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    // SAFETY: `realpath`'s path.
    if let Some(p) = unsafe { crate::abi::served_path(path) } {
        let size = if resolved.is_null() {
            0
        } else {
            libc::PATH_MAX as size_t
        };
        let result = canonical_outside(&p).and_then(|name| {
            // SAFETY: `realpath`'s buffer of `PATH_MAX` bytes, or null for a new one.
            unsafe { copy_out(&name, resolved, size) }.map_err(|e| {
                if e == Errno::ERANGE {
                    Errno::ENAMETOOLONG
                } else {
                    e
                }
            })
        });
        return result.unwrap_or_else(|e| {
            set_errno(e);
            std::ptr::null_mut()
        });
    }
    let real = next!(
        "realpath",
        unsafe extern "C" fn(*const c_char, *mut c_char) -> *mut c_char
    );
    // SAFETY: forwarded as received.
    unsafe { real(path, resolved) }
}

/// # Safety
/// C `__realpath_chk` (fortified `realpath`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __realpath_chk(
    path: *const c_char,
    resolved: *mut c_char,
    resolved_len: size_t,
) -> *mut c_char {
    // SAFETY: `__realpath_chk`'s path.
    if unsafe { crate::abi::served_path(path) }.is_some() {
        if !resolved.is_null() && resolved_len < libc::PATH_MAX as size_t {
            set_errno(Errno::from_raw(libc::ERANGE));
            return std::ptr::null_mut();
        }
        // SAFETY: the buffer holds `PATH_MAX` bytes, checked above.
        return unsafe { realpath(path, resolved) };
    }
    let real = next!(
        "__realpath_chk",
        unsafe extern "C" fn(*const c_char, *mut c_char, size_t) -> *mut c_char
    );
    // SAFETY: forwarded as received.
    unsafe { real(path, resolved, resolved_len) }
}

/// # Safety
/// C `canonicalize_file_name` (`realpath` into a new buffer).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    // SAFETY: `canonicalize_file_name`'s path.
    if unsafe { crate::abi::served_path(path) }.is_some() {
        // SAFETY: a null buffer asks for a new one.
        return unsafe { realpath(path, std::ptr::null_mut()) };
    }
    let real = next!(
        "canonicalize_file_name",
        unsafe extern "C" fn(*const c_char) -> *mut c_char
    );
    // SAFETY: forwarded as received.
    unsafe { real(path) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handed_over_directory_survives_its_encoding_and_garbage_is_ignored() {
        let value = format!("12:345:{}", crate::handover::hex(b"/a:b dir"));
        assert_eq!(decode(&value), Some(((12, 345), b"/a:b dir".to_vec())));
        assert_eq!(decode("12:345"), None);
        assert_eq!(decode("x:345:2f"), None);
        assert_eq!(
            decode(&format!("1:2:{}", crate::handover::hex(b"rel"))),
            None
        );
    }
}
