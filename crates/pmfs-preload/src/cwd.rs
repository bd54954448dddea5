//! A working directory inside the prefix: `chdir` to a served directory (or `fchdir` to a
//! served descriptor) makes it this process's served working directory, and relative paths
//! then resolve from it through the library (as `mkdir -p`, `df` and `find` walk a tree);
//! `getcwd` names it. The kernel's working directory does not move, so a program started
//! from there (`exec`) starts where the kernel's is. `chdir` anywhere else ends it.

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
