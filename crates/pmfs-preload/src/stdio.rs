//! C stdio on served files. A `FILE` the C library makes over a descriptor reads and
//! writes it through internal entry points this library cannot interpose, so a served
//! file gets a `FILE` made with glibc's `fopencookie` whose callbacks are this library's
//! `read`, `write`, `lseek` and `close`: `fopen`, `fopen64`, `fdopen` and `freopen` (of a
//! standard stream) return one for a served path or descriptor. When a served file
//! becomes descriptor 0, 1 or 2 (`dup2` of it, as `sort -o` and a shell's redirection of a
//! built-in do), the matching standard stream (`stdin`, `stdout`, `stderr`) is switched to
//! such a `FILE` over that descriptor, and back when the descriptor stops being served.
//! `mkstemp` and its relatives create served temporary files (`sed -i` writes its output
//! into one next to the file, then renames it).

use crate::abi::{open_served, ret, served_fd, served_path, set_errno};
use libc::{FILE, c_char, c_int, c_void, size_t, ssize_t};
use parking_lot::Mutex;
use pmfs::Errno;

/// glibc's `cookie_io_functions_t`.
#[repr(C)]
struct CookieIo {
    read: unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t,
    write: unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t,
    seek: unsafe extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int,
    close: unsafe extern "C" fn(*mut c_void) -> c_int,
}

unsafe extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut FILE;
    static mut stdin: *mut FILE;
    static mut stdout: *mut FILE;
    static mut stderr: *mut FILE;
}

/// Byte offset of `_fileno` in glibc's `struct _IO_FILE` on x86-64 (`int _flags`, eleven
/// buffer pointers, `_markers`, `_chain`), a public, stable layout.
const FILENO_OFFSET: usize = 112;
/// What `fopencookie` stores there: "open, but no descriptor".
const COOKIE_FILENO: c_int = -2;

/// The descriptor a cookie `FILE` reads and writes.
#[derive(Debug)]
struct Cookie {
    kfd: c_int,
}

/// The descriptor of a callback's cookie.
///
/// # Safety
/// `cookie` is a `Cookie` made by [`cookie_file`] and not yet closed.
unsafe fn kfd_of(cookie: *mut c_void) -> c_int {
    // SAFETY: the caller's live cookie.
    unsafe { (*cookie.cast::<Cookie>()).kfd }
}

unsafe extern "C" fn cookie_read(cookie: *mut c_void, buf: *mut c_char, size: size_t) -> ssize_t {
    // SAFETY: glibc passes the cookie it was given and a buffer of `size` bytes.
    unsafe { crate::abi::read(kfd_of(cookie), buf.cast(), size) }
}

/// Returns the bytes written; 0 on an error (glibc's convention for cookie writes; errno
/// says which).
unsafe extern "C" fn cookie_write(
    cookie: *mut c_void,
    buf: *const c_char,
    size: size_t,
) -> ssize_t {
    // SAFETY: glibc passes the cookie it was given and `size` bytes.
    let n = unsafe { crate::abi::write(kfd_of(cookie), buf.cast(), size) };
    n.max(0)
}

unsafe extern "C" fn cookie_seek(cookie: *mut c_void, off: *mut i64, whence: c_int) -> c_int {
    // SAFETY: glibc passes the cookie it was given and the offset to seek to.
    let pos = unsafe { crate::abi::lseek(kfd_of(cookie), *off, whence) };
    if pos < 0 {
        return -1;
    }
    // SAFETY: as above; the new position goes back through `off`.
    unsafe { *off = pos };
    0
}

unsafe extern "C" fn cookie_close(cookie: *mut c_void) -> c_int {
    // SAFETY: glibc closes a cookie once; it came from `Box::into_raw` in `cookie_file`.
    let cookie = unsafe { Box::from_raw(cookie.cast::<Cookie>()) };
    forget_std_cookie(cookie.kfd);
    // SAFETY: the descriptor this `FILE` owned.
    unsafe { crate::abi::close(cookie.kfd) }
}

/// A `FILE` over descriptor `kfd` with C mode string `mode` whose I/O goes through this
/// library; `fileno` of it is `kfd` (for `fstat`, `fchmod`, `fsync` of the stream).
///
/// # Safety
/// `mode` is a NUL-terminated string.
unsafe fn cookie_file(kfd: c_int, mode: *const c_char) -> Result<*mut FILE, Errno> {
    let cookie = Box::into_raw(Box::new(Cookie { kfd })).cast::<c_void>();
    let io = CookieIo {
        read: cookie_read,
        write: cookie_write,
        seek: cookie_seek,
        close: cookie_close,
    };
    // SAFETY: a cookie and callbacks of the types glibc documents; `mode` as received.
    let file = unsafe { fopencookie(cookie, mode, io) };
    if file.is_null() {
        // SAFETY: glibc did not take the cookie.
        drop(unsafe { Box::from_raw(cookie.cast::<Cookie>()) });
        return Err(Errno::from_raw(libc::ENOMEM));
    }
    // SAFETY: `file` is a live `struct _IO_FILE`, at least `FILENO_OFFSET + 4` bytes.
    let fileno = unsafe { file.cast::<u8>().add(FILENO_OFFSET).cast::<c_int>() };
    // Only where the layout is the one expected: fopencookie marks the field so.
    // SAFETY: as above.
    if unsafe { fileno.read() } == COOKIE_FILENO {
        // SAFETY: as above.
        unsafe { fileno.write(kfd) };
    }
    Ok(file)
}

/// The `open` flags of C mode string `mode` (`r`, `w`, `a`, then any of `+`, `x`, `e`,
/// `b`, `m`, `c`, `t`, and `,ccs=...`).
fn mode_flags(mode: &[u8]) -> Result<c_int, Errno> {
    let (first, rest) = mode.split_first().ok_or(Errno::EINVAL)?;
    let rest = rest.split(|&b| b == b',').next().unwrap_or(&[]);
    let plus = rest.contains(&b'+');
    let access = if plus { libc::O_RDWR } else { 0 };
    let mut flags = match (first, plus) {
        (b'r', false) => libc::O_RDONLY,
        (b'r', true) => access,
        (b'w', false) => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        (b'w', true) => access | libc::O_CREAT | libc::O_TRUNC,
        (b'a', false) => libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
        (b'a', true) => access | libc::O_CREAT | libc::O_APPEND,
        _ => return Err(Errno::EINVAL),
    };
    if rest.contains(&b'x') {
        flags |= libc::O_EXCL;
    }
    if rest.contains(&b'e') {
        flags |= libc::O_CLOEXEC;
    }
    Ok(flags)
}

/// Opens served path `p` as a cookie `FILE`.
///
/// # Safety
/// `mode` is a NUL-terminated string.
unsafe fn fopen_served(p: &[u8], mode: *const c_char) -> Result<*mut FILE, Errno> {
    if mode.is_null() {
        return Err(Errno::EINVAL);
    }
    // SAFETY: the caller's mode string.
    let flags = mode_flags(unsafe { crate::abi::name_bytes(mode) })?;
    let kfd = open_served(p, flags, 0o666)?;
    // SAFETY: as above.
    unsafe { cookie_file(kfd, mode) }.inspect_err(|_| {
        // SAFETY: the descriptor opened just above, not yet shared.
        unsafe { crate::abi::close(kfd) };
    })
}

fn file_ret(result: Result<*mut FILE, Errno>) -> *mut FILE {
    result.unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

/// # Safety
/// C `fopen`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut FILE {
    // SAFETY: `fopen`'s path.
    if let Some(p) = unsafe { served_path(path) } {
        // SAFETY: `fopen`'s mode.
        return file_ret(unsafe { fopen_served(&p, mode) });
    }
    let real = next!(
        "fopen",
        unsafe extern "C" fn(*const c_char, *const c_char) -> *mut FILE
    );
    // SAFETY: forwarded as received.
    unsafe { real(path, mode) }
}

/// # Safety
/// C `fopen64`: on x86-64 glibc the same function as `fopen` (offsets are 64-bit either way).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE {
    // SAFETY: `fopen64`'s arguments, which `fopen` takes as they are.
    unsafe { fopen(path, mode) }
}

/// # Safety
/// C `fdopen` (on success the `FILE` owns `kfd`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdopen(kfd: c_int, mode: *const c_char) -> *mut FILE {
    if served_fd(kfd).is_some() {
        let checked = if mode.is_null() {
            Err(Errno::EINVAL)
        } else {
            // SAFETY: `fdopen`'s mode string.
            mode_flags(unsafe { crate::abi::name_bytes(mode) })
        };
        // SAFETY: `fdopen`'s mode string, checked.
        return file_ret(checked.and_then(|_| unsafe { cookie_file(kfd, mode) }));
    }
    let real = next!(
        "fdopen",
        unsafe extern "C" fn(c_int, *const c_char) -> *mut FILE
    );
    // SAFETY: forwarded as received.
    unsafe { real(kfd, mode) }
}

/// The standard stream variable of descriptor `fd` (0, 1 or 2).
fn std_var(fd: c_int) -> Option<*mut *mut FILE> {
    match fd {
        0 => Some(&raw mut stdin),
        1 => Some(&raw mut stdout),
        2 => Some(&raw mut stderr),
        _ => None,
    }
}

/// `freopen` of served path `p` onto `stream`: only a standard stream can be reopened
/// (it is flushed and closed, the served file becomes its descriptor and the stream
/// variable names a `FILE` over it); another `FILE` cannot be turned into a served one
/// in place (`EINVAL`).
///
/// # Safety
/// `mode` is a NUL-terminated string; `stream` is a live `FILE`.
unsafe fn freopen_served(
    p: &[u8],
    mode: *const c_char,
    stream: *mut FILE,
) -> Result<*mut FILE, Errno> {
    let Some(fd) = (0..3).find(|&fd| {
        std_var(fd).is_some_and(|v| {
            // SAFETY: reads a standard stream variable.
            (unsafe { v.read() }) == stream
        })
    }) else {
        return Err(Errno::EINVAL);
    };
    if mode.is_null() {
        return Err(Errno::EINVAL);
    }
    // SAFETY: the caller's mode string.
    let flags = mode_flags(unsafe { crate::abi::name_bytes(mode) })?;
    // SAFETY: the caller's live stream: its pending output goes where it was going.
    unsafe { libc::fflush(stream) };
    let kfd = open_served(p, flags, 0o666)?;
    // SAFETY: moves the served file onto the standard descriptor, which switches the
    // standard stream variable to a `FILE` over it.
    let moved = unsafe { crate::abi::dup2(kfd, fd) };
    // SAFETY: the temporary descriptor opened above.
    unsafe { crate::abi::close(kfd) };
    if moved < 0 {
        return Err(Errno::from_raw(
            // SAFETY: errno of this thread.
            unsafe { *libc::__errno_location() },
        ));
    }
    let var = std_var(fd).expect("a standard descriptor");
    // SAFETY: reads the standard stream variable `dup2` switched.
    Ok(unsafe { var.read() })
}

/// # Safety
/// C `freopen`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn freopen(
    path: *const c_char,
    mode: *const c_char,
    stream: *mut FILE,
) -> *mut FILE {
    // SAFETY: `freopen`'s path.
    if let Some(p) = unsafe { served_path(path) } {
        // SAFETY: `freopen`'s mode and stream.
        return file_ret(unsafe { freopen_served(&p, mode, stream) });
    }
    let real = next!(
        "freopen",
        unsafe extern "C" fn(*const c_char, *const c_char, *mut FILE) -> *mut FILE
    );
    // SAFETY: forwarded as received.
    unsafe { real(path, mode, stream) }
}

/// # Safety
/// C `freopen64`: on x86-64 glibc the same function as `freopen`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn freopen64(
    path: *const c_char,
    mode: *const c_char,
    stream: *mut FILE,
) -> *mut FILE {
    // SAFETY: `freopen64`'s arguments, which `freopen` takes as they are.
    unsafe { freopen(path, mode, stream) }
}

// ---------------------------------------------------------------------- standard streams

/// Per standard descriptor: the C library's own `FILE` the variable held before it was
/// switched, and the cookie `FILE` switched in (addresses; 0 when none).
static STD: Mutex<[(usize, usize); 3]> = Mutex::new([(0, 0); 3]);

/// Standard descriptor `fd` now holds a served file: its stream variable is switched to a
/// cookie `FILE` over `fd` (made once, kept while the variable names it). Pending output
/// of the old stream was flushed by the caller before the descriptor changed.
pub(crate) fn serve_std_stream(fd: c_int) {
    let Some(var) = std_var(fd) else { return };
    let mut slots = STD.lock();
    let slot = &mut slots[fd as usize];
    // SAFETY: reads a standard stream variable.
    let current = unsafe { var.read() };
    if slot.1 != 0 && current as usize == slot.1 {
        return;
    }
    let mode: &[u8] = if fd == 0 { b"r\0" } else { b"a\0" };
    // SAFETY: a NUL-terminated mode.
    let Ok(file) = (unsafe { cookie_file(fd, mode.as_ptr().cast()) }) else {
        return;
    };
    if fd == 2 {
        // SAFETY: the new stream, not yet used: unbuffered, as stderr is.
        unsafe { libc::setvbuf(file, std::ptr::null_mut(), libc::_IONBF, 0) };
    }
    *slot = (current as usize, file as usize);
    // SAFETY: the program's standard stream variable, switched to the new stream.
    unsafe { var.write(file) };
}

/// Flushes the standard stream of descriptor `fd` (before the descriptor changes).
pub(crate) fn flush_std_stream(fd: c_int) {
    if let Some(var) = std_var(fd) {
        // SAFETY: reads the standard stream variable; fflush of a live stream (or null,
        // which flushes every stream).
        unsafe {
            let stream = var.read();
            if !stream.is_null() {
                libc::fflush(stream);
            }
        }
    }
}

/// Standard descriptor `fd` stops holding a served file: the cookie stream switched in
/// is flushed and the C library's own stream put back.
pub(crate) fn unserve_std_stream(fd: c_int) {
    let Some(var) = std_var(fd) else { return };
    let mut slots = STD.lock();
    let slot = &mut slots[fd as usize];
    // SAFETY: reads a standard stream variable.
    if slot.1 == 0 || unsafe { var.read() } as usize != slot.1 {
        return;
    }
    let (original, cookie) = std::mem::take(slot);
    drop(slots);
    // SAFETY: the cookie stream is live (glibc has not closed it: its close forgets it).
    unsafe { libc::fflush(cookie as *mut FILE) };
    // SAFETY: puts the C library's stream back in the variable.
    unsafe { var.write(original as *mut FILE) };
}

/// A cookie stream over descriptor `kfd` is being closed: if it is a standard stream's,
/// the slot forgets it (the variable keeps naming the closed stream, as after `fclose`).
fn forget_std_cookie(kfd: c_int) {
    if let Some(slot) = STD.lock().get_mut(kfd as usize)
        && slot.1 != 0
        && std_var(kfd).is_some_and(|v| {
            // SAFETY: reads a standard stream variable.
            (unsafe { v.read() }) as usize == slot.1
        })
    {
        *slot = (0, 0);
    }
}

// ----------------------------------------------------------------------- temporary files

/// The six `X`s of a `mkstemp` template ending `suffix` bytes before its end.
fn placeholder(template: &[u8], suffix: usize) -> Result<std::ops::Range<usize>, Errno> {
    let end = template.len().checked_sub(suffix).ok_or(Errno::EINVAL)?;
    let start = end.checked_sub(6).ok_or(Errno::EINVAL)?;
    if template[start..end].iter().all(|&b| b == b'X') {
        Ok(start..end)
    } else {
        Err(Errno::EINVAL)
    }
}

/// Six letters and digits from the kernel's random source.
fn random_name() -> [u8; 6] {
    const LETTERS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = [0u8; 6];
    // SAFETY: fills the local array of 6 bytes.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if got != 6 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes = (nanos as u64 ^ u64::from(std::process::id())).to_le_bytes()[..6]
            .try_into()
            .expect("six bytes");
    }
    bytes.map(|b| LETTERS[usize::from(b) % LETTERS.len()])
}

/// Creates a new served file from `template` (its `XXXXXX` replaced in place, `suffix`
/// bytes before the end), opened read-write with `flags` and mode 0600.
///
/// # Safety
/// `template` is a writable NUL-terminated string.
unsafe fn mkstemp_served(template: *mut c_char, suffix: c_int, flags: c_int) -> c_int {
    // SAFETY: the caller's NUL-terminated template.
    let len = unsafe { crate::abi::name_bytes(template) }.len();
    // SAFETY: the template's `len` bytes, written in place as `mkstemp` does.
    let bytes = unsafe { std::slice::from_raw_parts_mut(template.cast::<u8>(), len) };
    let Ok(range) = usize::try_from(suffix)
        .map_err(|_| Errno::EINVAL)
        .and_then(|s| placeholder(bytes, s))
    else {
        return ret(Err(Errno::EINVAL));
    };
    let allowed = libc::O_APPEND | libc::O_CLOEXEC | libc::O_SYNC | libc::O_DSYNC;
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | (flags & allowed);
    for _ in 0..100 {
        bytes[range.clone()].copy_from_slice(&random_name());
        // SAFETY: the template, now a full name.
        let Some(p) = (unsafe { served_path(template) }) else {
            return ret(Err(Errno::EINVAL));
        };
        match open_served(&p, flags, 0o600) {
            Err(Errno::EEXIST) => continue,
            result => return ret(result),
        }
    }
    ret(Err(Errno::EEXIST))
}

/// Defines `mkstemp`-like C function `$name` with the arguments `$suffix` and `$flags`
/// mean for it.
macro_rules! mkstemp_like {
    ($name:ident, ($($arg:ident: $ty:ty),*), $suffix:expr, $flags:expr) => {
        /// # Safety
        /// The C function of this name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(template: *mut c_char, $($arg: $ty),*) -> c_int {
            // SAFETY: the template names a file under the prefix only if it is one.
            if unsafe { served_path(template) }.is_some() {
                // SAFETY: the caller's template.
                return unsafe { mkstemp_served(template, $suffix, $flags) };
            }
            let real = next!(
                stringify!($name),
                unsafe extern "C" fn(*mut c_char, $($ty),*) -> c_int
            );
            // SAFETY: forwarded as received.
            unsafe { real(template, $($arg),*) }
        }
    };
}

mkstemp_like!(mkstemp, (), 0, 0);
mkstemp_like!(mkstemp64, (), 0, 0);
mkstemp_like!(mkostemp, (flags: c_int), 0, flags);
mkstemp_like!(mkostemp64, (flags: c_int), 0, flags);
mkstemp_like!(mkstemps, (suffix: c_int), suffix, 0);
mkstemp_like!(mkstemps64, (suffix: c_int), suffix, 0);
mkstemp_like!(mkostemps, (suffix: c_int, flags: c_int), suffix, flags);
mkstemp_like!(mkostemps64, (suffix: c_int, flags: c_int), suffix, flags);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_strings_map_to_open_flags() {
        use libc::{O_APPEND, O_CLOEXEC, O_CREAT, O_EXCL, O_RDONLY, O_RDWR, O_TRUNC, O_WRONLY};
        assert_eq!(mode_flags(b"r"), Ok(O_RDONLY));
        assert_eq!(mode_flags(b"rb+"), Ok(O_RDWR));
        assert_eq!(mode_flags(b"w"), Ok(O_WRONLY | O_CREAT | O_TRUNC));
        assert_eq!(mode_flags(b"w+x"), Ok(O_RDWR | O_CREAT | O_TRUNC | O_EXCL));
        assert_eq!(
            mode_flags(b"ae"),
            Ok(O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC)
        );
        assert_eq!(mode_flags(b"a+"), Ok(O_RDWR | O_CREAT | O_APPEND));
        assert_eq!(mode_flags(b"r,ccs=UTF-8"), Ok(O_RDONLY));
        assert_eq!(mode_flags(b""), Err(Errno::EINVAL));
        assert_eq!(mode_flags(b"q"), Err(Errno::EINVAL));
    }

    #[test]
    fn the_placeholder_is_six_xs_before_the_suffix() {
        assert_eq!(placeholder(b"/p/sedXXXXXX", 0), Ok(6..12));
        assert_eq!(placeholder(b"/p/aXXXXXX.txt", 4), Ok(4..10));
        assert_eq!(placeholder(b"/p/aXXXXX", 0), Err(Errno::EINVAL));
        assert_eq!(placeholder(b"XXX", 0), Err(Errno::EINVAL));
        assert_eq!(placeholder(b"XXXXXX", 7), Err(Errno::EINVAL));
    }
}
