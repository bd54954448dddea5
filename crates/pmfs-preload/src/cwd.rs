//! A working directory inside the prefix: `chdir` to a served directory (or `fchdir` to a
//! served descriptor) makes it this process's served working directory, and relative paths
//! then resolve from it through the library (as `mkdir -p`, `df` and `find` walk a tree);
//! `getcwd` names it. The kernel's working directory does not move, so a program started
//! from there (`exec`) starts where the kernel's is. `chdir` anywhere else ends it.
//! `realpath` and `canonicalize_file_name` of served paths resolve through the library
//! (glibc's own would ask the kernel about each component).

use crate::abi::{ret, served_fd, served_fs, set_errno};
use crate::served::config;
use libc::{c_char, c_int, size_t};
use parking_lot::Mutex;
use pmfs::{Errno, FileType};
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether [`CWD`] holds a served working directory (read without the lock by every
/// relative path).
static SERVED_CWD: AtomicBool = AtomicBool::new(false);
/// The served working directory, a path inside the file system.
static CWD: Mutex<String> = Mutex::new(String::new());

/// The served path of relative path `rel` when the working directory is served. A `..`
/// at the file system's root stays there, as `..` of `/` does.
pub(crate) fn served_relative(rel: &[u8]) -> Option<String> {
    if !SERVED_CWD.load(Ordering::Acquire) || rel.is_empty() {
        return None;
    }
    let rel = std::str::from_utf8(rel).ok()?;
    let cwd = CWD.lock();
    Some(format!("{}/{rel}", cwd.trim_end_matches('/')))
}

/// Makes served directory `p` the working directory (`ENOTDIR` for another file).
fn enter(p: String) -> Result<c_int, Errno> {
    if served_fs()?.px.stat(&p)?.kind != FileType::Directory {
        return Err(Errno::ENOTDIR);
    }
    *CWD.lock() = p;
    SERVED_CWD.store(true, Ordering::Release);
    Ok(0)
}

/// Whether the working directory is a served one.
pub(crate) fn is_served() -> bool {
    SERVED_CWD.load(Ordering::Acquire)
}

fn leave() {
    SERVED_CWD.store(false, Ordering::Release);
}

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
fn served_cwd() -> Option<String> {
    if !SERVED_CWD.load(Ordering::Acquire) {
        return None;
    }
    let prefix = &config()?.prefix;
    let cwd = CWD.lock();
    Some(if cwd.as_str() == "/" {
        prefix.clone()
    } else {
        format!("{prefix}{cwd}")
    })
}

/// Copies `path` and its NUL into `buf` of `size` bytes, or into a new `malloc`ed buffer
/// when `buf` is null (of `size` bytes if that is enough, as glibc does).
///
/// # Safety
/// `buf` is null or points to `size` writable bytes.
unsafe fn copy_out(path: &str, buf: *mut c_char, size: size_t) -> Result<*mut c_char, Errno> {
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
fn canonical(p: &str) -> Result<String, Errno> {
    let fs = served_fs()?;
    let mut done: Vec<String> = Vec::new();
    let mut todo: std::collections::VecDeque<String> = p
        .split('/')
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect();
    let mut links = 0;
    while let Some(component) = todo.pop_front() {
        match component.as_str() {
            "." => continue,
            ".." => {
                done.pop();
                continue;
            }
            _ => {}
        }
        let candidate = if done.is_empty() {
            format!("/{component}")
        } else {
            format!("/{}/{component}", done.join("/"))
        };
        let attr = fs.px.lstat(&candidate)?;
        match attr.kind {
            FileType::Symlink => {
                links += 1;
                if links > 40 {
                    return Err(Errno::ELOOP);
                }
                let target =
                    String::from_utf8(fs.px.readlink(&candidate)?).map_err(|_| Errno::ENOENT)?;
                if target.starts_with('/') {
                    done.clear();
                }
                for part in target.split('/').filter(|c| !c.is_empty()).rev() {
                    todo.push_front(part.to_owned());
                }
            }
            FileType::Directory => done.push(component),
            _ if todo.is_empty() => done.push(component),
            _ => return Err(Errno::ENOTDIR),
        }
    }
    Ok(format!("/{}", done.join("/")))
}

/// The canonical served path `p` as the program names it (under the prefix).
fn canonical_outside(p: &str) -> Result<String, Errno> {
    let inner = canonical(p)?;
    let prefix = &config().ok_or(Errno::ENOENT)?.prefix;
    Ok(if inner == "/" {
        prefix.clone()
    } else {
        format!("{prefix}{inner}")
    })
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
