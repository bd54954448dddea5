//! The C functions this library interposes. Each one serves a call on a served path or
//! descriptor through `served.rs` and passes any other call to the next definition (the C
//! library's), found with `dlsym(RTLD_NEXT)`.
//!
//! Every `unsafe` here is the C calling convention: pointers the caller passes are valid
//! for the call's documented use (a NUL-terminated path, a buffer of `count` bytes, a
//! `struct stat`), as the C library's own definition assumes.

use crate::served::{Mapping, Open, Served, config, route, served, served_or_open};
use libc::{c_char, c_int, c_long, c_uint, c_void, mode_t, off_t, size_t, ssize_t};
use pmfs::{Attr, Errno, SetAttr, Whence};
use std::ffi::CStr;

pub(crate) fn set_errno(errno: Errno) {
    // SAFETY: `__errno_location` returns this thread's errno slot.
    unsafe { *libc::__errno_location() = errno.raw() };
}

/// `Ok(v)` as `v`, an error as -1 with errno set.
pub(crate) fn ret<T: From<i8>>(result: Result<T, Errno>) -> T {
    result.unwrap_or_else(|errno| {
        set_errno(errno);
        T::from(-1)
    })
}

/// The served path of C string `path`, if it is under the prefix.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
pub(crate) unsafe fn served_path(path: *const c_char) -> Option<Vec<u8>> {
    let config = config()?;
    if path.is_null() {
        return None;
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    if bytes.first() == Some(&b'/') {
        route(config, bytes)
    } else {
        crate::cwd::served_relative(bytes)
    }
}

/// The served path of `path` relative to directory descriptor `dirfd` (`*at` calls).
///
/// # Safety
/// `path` is null or a NUL-terminated string.
pub(crate) unsafe fn served_path_at(dirfd: c_int, path: *const c_char) -> Option<Vec<u8>> {
    if path.is_null() {
        return None;
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    if bytes.first() == Some(&b'/') || dirfd == libc::AT_FDCWD {
        // SAFETY: as above.
        return unsafe { served_path(path) };
    }
    let dir = served()?.open_of(dirfd)?;
    Some(crate::served::join(&dir.path, bytes))
}

pub(crate) fn served_fs() -> Result<&'static Served, Errno> {
    served_or_open(config().ok_or(Errno::ENOENT)?)
}

/// A kernel descriptor number to stand for a served descriptor: an `O_PATH` descriptor of
/// `/`, on which any call not served here fails with `EBADF`.
/// Without `cloexec` the number survives `exec`, as the served descriptor would
/// (`handover.rs` opens the file again there).
fn reserve_number(cloexec: bool) -> Result<c_int, Errno> {
    let open = next!(
        "open",
        unsafe extern "C" fn(*const c_char, c_int, mode_t) -> c_int
    );
    let flags = libc::O_PATH | if cloexec { libc::O_CLOEXEC } else { 0 };
    // SAFETY: a NUL-terminated path and flags without `O_CREAT`.
    let kfd = unsafe { open(c"/".as_ptr(), flags, 0) };
    if kfd < 0 {
        // SAFETY: errno of this thread, set by the failed `open`.
        return Err(Errno::from_raw(unsafe { *libc::__errno_location() }));
    }
    Ok(kfd)
}

fn release_number(kfd: c_int) {
    let close = next!("close", unsafe extern "C" fn(c_int) -> c_int);
    // SAFETY: `kfd` is the reserved number this library opened.
    unsafe { close(kfd) };
}

pub(crate) fn open_served(path: &[u8], flags: c_int, mode: mode_t) -> Result<c_int, Errno> {
    let fs = served_fs()?;
    let fd = fs
        .px
        .open(path, flags & !libc::O_CLOEXEC, mode & !fs.umask)?;
    let kfd = match reserve_number(flags & libc::O_CLOEXEC != 0) {
        Ok(kfd) => kfd,
        Err(e) => {
            let _ = fs.px.close(fd);
            return Err(e);
        }
    };
    fs.fds.write().insert(
        kfd,
        Open {
            fd,
            path: path.to_vec(),
            flags: flags & !libc::O_CLOEXEC,
        },
    );
    crate::stdio::serve_std_stream(kfd);
    Ok(kfd)
}

// ------------------------------------------------------------------------------ open, close

/// # Safety
/// C `open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: C `open`'s path argument.
    match unsafe { served_path(path) } {
        Some(p) => ret(open_served(&p, flags, mode)),
        None => {
            let real = next!(
                "open",
                unsafe extern "C" fn(*const c_char, c_int, mode_t) -> c_int
            );
            // SAFETY: forwarded as received.
            unsafe { real(path, flags, mode) }
        }
    }
}

/// # Safety
/// C `open64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: C `open64`'s path argument.
    match unsafe { served_path(path) } {
        Some(p) => ret(open_served(&p, flags, mode)),
        None => {
            let real = next!(
                "open64",
                unsafe extern "C" fn(*const c_char, c_int, mode_t) -> c_int
            );
            // SAFETY: forwarded as received.
            unsafe { real(path, flags, mode) }
        }
    }
}

/// # Safety
/// C `openat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    // SAFETY: C `openat`'s path argument.
    match unsafe { served_path_at(dirfd, path) } {
        Some(p) => ret(open_served(&p, flags, mode)),
        None => {
            let real = next!(
                "openat",
                unsafe extern "C" fn(c_int, *const c_char, c_int, mode_t) -> c_int
            );
            // SAFETY: forwarded as received.
            unsafe { real(dirfd, path, flags, mode) }
        }
    }
}

/// # Safety
/// C `openat64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    // SAFETY: C `openat64`'s path argument.
    match unsafe { served_path_at(dirfd, path) } {
        Some(p) => ret(open_served(&p, flags, mode)),
        None => {
            let real = next!(
                "openat64",
                unsafe extern "C" fn(c_int, *const c_char, c_int, mode_t) -> c_int
            );
            // SAFETY: forwarded as received.
            unsafe { real(dirfd, path, flags, mode) }
        }
    }
}

/// # Safety
/// C `__open_2` (what `_FORTIFY_SOURCE` programs call when the compiler cannot check
/// `open`'s flags; it has no mode: a creating `open` is never routed here).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: `open` without a mode, which the flags then do not use.
    unsafe { open(path, flags, 0) }
}

/// # Safety
/// C `__open64_2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: as `__open_2`.
    unsafe { open64(path, flags, 0) }
}

/// # Safety
/// C `__openat_2` (fortified `openat` without a mode).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: as `__open_2`.
    unsafe { openat(dirfd, path, flags, 0) }
}

/// # Safety
/// C `__openat64_2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: as `__open_2`.
    unsafe { openat64(dirfd, path, flags, 0) }
}

/// # Safety
/// C `creat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: forwarded to `open` with `creat`'s flags.
    unsafe { open(path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode) }
}

/// # Safety
/// C `creat64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: as `creat`.
    unsafe { creat(path, mode) }
}

/// # Safety
/// C `close` (a served file is closed when its last descriptor is).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn close(kfd: c_int) -> c_int {
    if let Some(fs) = served() {
        if (0..3).contains(&kfd) && fs.open_of(kfd).is_some() {
            // Output buffered for the served file goes there before it closes.
            crate::stdio::unserve_std_stream(kfd);
        }
        let mut fds = fs.fds.write();
        if let Some(open) = fds.remove(&kfd) {
            let last = !fds.values().any(|other| other.fd == open.fd);
            drop(fds);
            release_number(kfd);
            return if last {
                ret(fs.px.close(open.fd).map(|()| 0))
            } else {
                0
            };
        }
    }
    let real = next!("close", unsafe extern "C" fn(c_int) -> c_int);
    // SAFETY: forwarded as received.
    unsafe { real(kfd) }
}

/// Records `new` (a number the kernel gave for a copy of `kfd`'s reserved number) as
/// another descriptor of `kfd`'s served file (same position, as `dup` shares it).
fn record_dup(fs: &Served, open: Open, new: c_int) -> c_int {
    if new >= 0 {
        crate::stdio::serve_std_stream(new);
        let replaced = fs.fds.write().insert(new, open);
        if let Some(old) = replaced
            && !fs.fds.read().values().any(|other| other.fd == old.fd)
        {
            let _ = fs.px.close(old.fd);
        }
    }
    new
}

/// # Safety
/// C `dup`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup(kfd: c_int) -> c_int {
    let real = next!("dup", unsafe extern "C" fn(c_int) -> c_int);
    // SAFETY: forwarded as received (for a served descriptor: its reserved number).
    let new = unsafe { real(kfd) };
    match served_fd(kfd) {
        Some((fs, open)) => record_dup(fs, open, new),
        None => new,
    }
}

/// # Safety
/// C `dup2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup2(kfd: c_int, target: c_int) -> c_int {
    let source = served_fd(kfd);
    if source.is_none() && served_fd(target).is_some() {
        // The target's served file loses this descriptor first.
        // SAFETY: closing the target is what `dup2` does.
        unsafe { close(target) };
    }
    if source.is_some() && kfd != target {
        // Output the standard stream buffered so far goes where it was going.
        crate::stdio::flush_std_stream(target);
    }
    let real = next!("dup2", unsafe extern "C" fn(c_int, c_int) -> c_int);
    // SAFETY: forwarded as received.
    let new = unsafe { real(kfd, target) };
    match source {
        Some((fs, open)) if kfd != target => record_dup(fs, open, new),
        _ => new,
    }
}

/// # Safety
/// C `dup3`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup3(kfd: c_int, target: c_int, flags: c_int) -> c_int {
    let source = served_fd(kfd);
    if source.is_none() && served_fd(target).is_some() {
        // SAFETY: closing the target is what `dup3` does.
        unsafe { close(target) };
    }
    if source.is_some() {
        crate::stdio::flush_std_stream(target);
    }
    let real = next!("dup3", unsafe extern "C" fn(c_int, c_int, c_int) -> c_int);
    // SAFETY: forwarded as received.
    let new = unsafe { real(kfd, target, flags) };
    match source {
        Some((fs, open)) => record_dup(fs, open, new),
        None => new,
    }
}

// ---------------------------------------------------------------------------- data calls

/// The served file system and descriptor of `kfd`, if it is served.
pub(crate) fn served_fd(kfd: c_int) -> Option<(&'static Served, Open)> {
    let fs = served()?;
    Some((fs, fs.open_of(kfd)?))
}

/// `buf` as a slice of `count` bytes.
///
/// # Safety
/// `buf` points to `count` writable bytes (or `count` is 0).
pub(crate) unsafe fn out_slice<'a>(buf: *mut c_void, count: size_t) -> &'a mut [u8] {
    if count == 0 {
        return &mut [];
    }
    // SAFETY: the caller's buffer of `count` bytes.
    unsafe { std::slice::from_raw_parts_mut(buf.cast(), count) }
}

/// `buf` as a slice of `count` bytes.
///
/// # Safety
/// `buf` points to `count` readable bytes (or `count` is 0).
pub(crate) unsafe fn in_slice<'a>(buf: *const c_void, count: size_t) -> &'a [u8] {
    if count == 0 {
        return &[];
    }
    // SAFETY: the caller's buffer of `count` bytes.
    unsafe { std::slice::from_raw_parts(buf.cast(), count) }
}

pub(crate) fn size_ret(result: Result<usize, Errno>) -> ssize_t {
    ret(result.map(|n| n as ssize_t))
}

/// # Safety
/// C `read`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(kfd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    if let Some((fs, open)) = served_fd(kfd) {
        // SAFETY: `read`'s buffer.
        return size_ret(fs.px.read(open.fd, unsafe { out_slice(buf, count) }));
    }
    let real = next!(
        "read",
        unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t
    );
    // SAFETY: forwarded as received.
    unsafe { real(kfd, buf, count) }
}

/// # Safety
/// C `write`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(kfd: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    if let Some((fs, open)) = served_fd(kfd) {
        // SAFETY: `write`'s buffer.
        return size_ret(fs.px.write(open.fd, unsafe { in_slice(buf, count) }));
    }
    let real = next!(
        "write",
        unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t
    );
    // SAFETY: forwarded as received.
    unsafe { real(kfd, buf, count) }
}

pub(crate) fn offset(off: off_t) -> Result<u64, Errno> {
    u64::try_from(off).map_err(|_| Errno::EINVAL)
}

/// # Safety
/// C `pread`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread(kfd: c_int, buf: *mut c_void, count: size_t, off: off_t) -> ssize_t {
    if let Some((fs, open)) = served_fd(kfd) {
        // SAFETY: `pread`'s buffer.
        let out = unsafe { out_slice(buf, count) };
        return size_ret(offset(off).and_then(|off| fs.px.pread(open.fd, out, off)));
    }
    let real = next!(
        "pread",
        unsafe extern "C" fn(c_int, *mut c_void, size_t, off_t) -> ssize_t
    );
    // SAFETY: forwarded as received.
    unsafe { real(kfd, buf, count, off) }
}

/// # Safety
/// C `pread64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread64(
    kfd: c_int,
    buf: *mut c_void,
    count: size_t,
    off: off_t,
) -> ssize_t {
    if served_fd(kfd).is_some() {
        // SAFETY: the same call as `pread` (64-bit offsets on x86-64).
        return unsafe { pread(kfd, buf, count, off) };
    }
    let real = next!(
        "pread64",
        unsafe extern "C" fn(c_int, *mut c_void, size_t, off_t) -> ssize_t
    );
    // SAFETY: forwarded as received.
    unsafe { real(kfd, buf, count, off) }
}

/// # Safety
/// C `pwrite`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite(
    kfd: c_int,
    buf: *const c_void,
    count: size_t,
    off: off_t,
) -> ssize_t {
    if let Some((fs, open)) = served_fd(kfd) {
        // SAFETY: `pwrite`'s buffer.
        let data = unsafe { in_slice(buf, count) };
        return size_ret(offset(off).and_then(|off| fs.px.pwrite(open.fd, data, off)));
    }
    let real = next!(
        "pwrite",
        unsafe extern "C" fn(c_int, *const c_void, size_t, off_t) -> ssize_t
    );
    // SAFETY: forwarded as received.
    unsafe { real(kfd, buf, count, off) }
}

/// # Safety
/// C `pwrite64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pwrite64(
    kfd: c_int,
    buf: *const c_void,
    count: size_t,
    off: off_t,
) -> ssize_t {
    if served_fd(kfd).is_some() {
        // SAFETY: the same call as `pwrite` (64-bit offsets on x86-64).
        return unsafe { pwrite(kfd, buf, count, off) };
    }
    let real = next!(
        "pwrite64",
        unsafe extern "C" fn(c_int, *const c_void, size_t, off_t) -> ssize_t
    );
    // SAFETY: forwarded as received.
    unsafe { real(kfd, buf, count, off) }
}

fn lseek_served(fs: &Served, open: &Open, off: off_t, whence: c_int) -> Result<off_t, Errno> {
    let whence = match whence {
        libc::SEEK_SET => Whence::Set,
        libc::SEEK_CUR => Whence::Cur,
        libc::SEEK_END => Whence::End,
        _ => return Err(Errno::EINVAL),
    };
    let pos = fs.px.lseek(open.fd, off, whence)?;
    off_t::try_from(pos).map_err(|_| Errno::EOVERFLOW)
}

/// # Safety
/// C `lseek`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lseek(kfd: c_int, off: off_t, whence: c_int) -> off_t {
    if let Some((fs, open)) = served_fd(kfd) {
        return ret(lseek_served(fs, &open, off, whence));
    }
    let real = next!("lseek", unsafe extern "C" fn(c_int, off_t, c_int) -> off_t);
    // SAFETY: forwarded as received.
    unsafe { real(kfd, off, whence) }
}

/// # Safety
/// C `lseek64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lseek64(kfd: c_int, off: off_t, whence: c_int) -> off_t {
    // SAFETY: the same call as `lseek` on x86-64.
    unsafe { lseek(kfd, off, whence) }
}

fn fsync_served(fs: &Served, open: &Open) -> Result<c_int, Errno> {
    let ino = fs.px.fstat(open.fd)?.ino;
    fs.persist_maps_of(ino)?;
    fs.px.fsync(open.fd).map(|()| 0)
}

/// # Safety
/// C `fsync`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fsync(kfd: c_int) -> c_int {
    if let Some((fs, open)) = served_fd(kfd) {
        return ret(fsync_served(fs, &open));
    }
    let real = next!("fsync", unsafe extern "C" fn(c_int) -> c_int);
    // SAFETY: forwarded as received.
    unsafe { real(kfd) }
}

/// # Safety
/// C `fdatasync`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdatasync(kfd: c_int) -> c_int {
    if let Some((fs, open)) = served_fd(kfd) {
        return ret(fsync_served(fs, &open));
    }
    let real = next!("fdatasync", unsafe extern "C" fn(c_int) -> c_int);
    // SAFETY: forwarded as received.
    unsafe { real(kfd) }
}

/// # Safety
/// C `ftruncate`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ftruncate(kfd: c_int, len: off_t) -> c_int {
    if let Some((fs, open)) = served_fd(kfd) {
        return ret(offset(len).and_then(|len| fs.px.ftruncate(open.fd, len).map(|()| 0)));
    }
    let real = next!("ftruncate", unsafe extern "C" fn(c_int, off_t) -> c_int);
    // SAFETY: forwarded as received.
    unsafe { real(kfd, len) }
}

/// # Safety
/// C `ftruncate64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ftruncate64(kfd: c_int, len: off_t) -> c_int {
    // SAFETY: the same call as `ftruncate` on x86-64.
    unsafe { ftruncate(kfd, len) }
}

/// Allocates `[off, off + len)` (growing the file unless `keep`); the error number, or 0.
fn fallocate_served(fs: &Served, open: &Open, off: off_t, len: off_t, keep: bool) -> c_int {
    let result = offset(off)
        .and_then(|off| Ok((off, offset(len)?)))
        .and_then(|(off, len)| fs.px.fallocate(open.fd, off, len, keep));
    match result {
        Ok(()) => 0,
        Err(e) => e.raw(),
    }
}

/// # Safety
/// C `posix_fallocate` (returns the error number).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_fallocate(kfd: c_int, off: off_t, len: off_t) -> c_int {
    if let Some((fs, open)) = served_fd(kfd) {
        return fallocate_served(fs, &open, off, len, false);
    }
    let real = next!(
        "posix_fallocate",
        unsafe extern "C" fn(c_int, off_t, off_t) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(kfd, off, len) }
}

/// # Safety
/// C `posix_fallocate64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_fallocate64(kfd: c_int, off: off_t, len: off_t) -> c_int {
    // SAFETY: the same call as `posix_fallocate` on x86-64.
    unsafe { posix_fallocate(kfd, off, len) }
}

/// # Safety
/// C `fallocate` (modes 0 and `FALLOC_FL_KEEP_SIZE`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fallocate(kfd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int {
    if let Some((fs, open)) = served_fd(kfd) {
        let keep = match mode {
            0 => false,
            libc::FALLOC_FL_KEEP_SIZE => true,
            _ => {
                set_errno(Errno::EOPNOTSUPP);
                return -1;
            }
        };
        return match fallocate_served(fs, &open, off, len, keep) {
            0 => 0,
            e => {
                set_errno(Errno::from_raw(e));
                -1
            }
        };
    }
    let real = next!(
        "fallocate",
        unsafe extern "C" fn(c_int, c_int, off_t, off_t) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(kfd, mode, off, len) }
}

/// # Safety
/// C `fallocate64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fallocate64(kfd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int {
    // SAFETY: the same call as `fallocate` on x86-64.
    unsafe { fallocate(kfd, mode, off, len) }
}

/// # Safety
/// C `posix_fadvise` (advice on a served file is taken and ignored: there is no cache).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_fadvise(kfd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int {
    if served_fd(kfd).is_some() {
        return 0;
    }
    let real = next!(
        "posix_fadvise",
        unsafe extern "C" fn(c_int, off_t, off_t, c_int) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(kfd, off, len, advice) }
}

/// # Safety
/// C `posix_fadvise64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_fadvise64(
    kfd: c_int,
    off: off_t,
    len: off_t,
    advice: c_int,
) -> c_int {
    // SAFETY: the same call as `posix_fadvise` on x86-64.
    unsafe { posix_fadvise(kfd, off, len, advice) }
}

/// # Safety
/// C `fcntl`: on a served descriptor, flags and record locks (which always succeed: one
/// process owns the pool); the close-on-exec flag is the reserved number's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl(kfd: c_int, cmd: c_int, arg: c_long) -> c_int {
    if let Some((_, open)) = served_fd(kfd) {
        match cmd {
            libc::F_SETLK | libc::F_SETLKW | libc::F_OFD_SETLK | libc::F_OFD_SETLKW => return 0,
            libc::F_GETLK | libc::F_OFD_GETLK => {
                let lock = arg as *mut libc::flock;
                if !lock.is_null() {
                    // SAFETY: F_GETLK's argument is the caller's `struct flock`.
                    unsafe { (*lock).l_type = libc::F_UNLCK as i16 };
                }
                return 0;
            }
            libc::F_GETFL => {
                let kept = libc::O_ACCMODE | libc::O_APPEND | libc::O_NONBLOCK | libc::O_SYNC;
                return open.flags & kept;
            }
            libc::F_SETFL => return 0,
            libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
                let real = next!("fcntl", unsafe extern "C" fn(c_int, c_int, c_long) -> c_int);
                // SAFETY: duplicates the reserved number, as asked.
                let new = unsafe { real(kfd, cmd, arg) };
                let (fs, open) = served_fd(kfd).expect("checked above");
                return record_dup(fs, open, new);
            }
            _ => {}
        }
    }
    let real = next!("fcntl", unsafe extern "C" fn(c_int, c_int, c_long) -> c_int);
    // SAFETY: forwarded as received.
    unsafe { real(kfd, cmd, arg) }
}

/// # Safety
/// C `fcntl64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl64(kfd: c_int, cmd: c_int, arg: c_long) -> c_int {
    // SAFETY: the same call as `fcntl` on x86-64.
    unsafe { fcntl(kfd, cmd, arg) }
}

// ---------------------------------------------------------------------------- attributes

/// The device number of served files: major 0 (the kernel's anonymous devices, such as
/// tmpfs mounts), minor `0xffffe`, near the end of the 20-bit range the kernel hands out
/// from the bottom, so no real mount of the machine has it. A device number of a real
/// disk would make tools that compare device and inode numbers (`rm`'s guard against
/// removing `/`, `find`'s cycle check) take a served file for another.
pub(crate) const DEV_MAJOR: u32 = 0;
pub(crate) const DEV_MINOR: u32 = 0xffffe;

/// Fills `st` from `attr`.
///
/// # Safety
/// `st` points to a writable `struct stat`.
unsafe fn fill_stat(st: *mut libc::stat, attr: &Attr) {
    // SAFETY: an all-zero `struct stat` is valid.
    let mut out: libc::stat = unsafe { std::mem::zeroed() };
    out.st_dev = libc::makedev(DEV_MAJOR, DEV_MINOR);
    out.st_ino = attr.ino;
    out.st_mode = attr.mode();
    out.st_nlink = u64::from(attr.nlink);
    out.st_uid = attr.uid;
    out.st_gid = attr.gid;
    out.st_rdev = attr.rdev;
    out.st_size = attr.size as i64;
    out.st_blksize = i64::from(attr.blksize);
    out.st_blocks = attr.blocks as i64;
    let split = |ns: u64| ((ns / 1_000_000_000) as i64, (ns % 1_000_000_000) as i64);
    (out.st_atime, out.st_atime_nsec) = split(attr.atime);
    (out.st_mtime, out.st_mtime_nsec) = split(attr.mtime);
    (out.st_ctime, out.st_ctime_nsec) = split(attr.ctime);
    // SAFETY: the caller's `struct stat`.
    unsafe { st.write(out) };
}

pub(crate) fn stat_ret(st: *mut libc::stat, result: Result<Attr, Errno>) -> c_int {
    ret(result.map(|attr| {
        // SAFETY: the caller's `struct stat`.
        unsafe { fill_stat(st, &attr) };
        0
    }))
}

/// # Safety
/// C `stat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn stat(path: *const c_char, st: *mut libc::stat) -> c_int {
    // SAFETY: `stat`'s path.
    if let Some(p) = unsafe { served_path(path) } {
        return stat_ret(st, served_fs().and_then(|fs| fs.px.stat(&p)));
    }
    let real = next!(
        "stat",
        unsafe extern "C" fn(*const c_char, *mut libc::stat) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(path, st) }
}

/// # Safety
/// C `stat64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn stat64(path: *const c_char, st: *mut libc::stat) -> c_int {
    // SAFETY: `stat64`'s path.
    if unsafe { served_path(path) }.is_some() {
        // SAFETY: the same call as `stat` on x86-64.
        return unsafe { stat(path, st) };
    }
    let real = next!(
        "stat64",
        unsafe extern "C" fn(*const c_char, *mut libc::stat) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(path, st) }
}

/// # Safety
/// C `lstat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lstat(path: *const c_char, st: *mut libc::stat) -> c_int {
    // SAFETY: `lstat`'s path.
    if let Some(p) = unsafe { served_path(path) } {
        return stat_ret(st, served_fs().and_then(|fs| fs.px.lstat(&p)));
    }
    let real = next!(
        "lstat",
        unsafe extern "C" fn(*const c_char, *mut libc::stat) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(path, st) }
}

/// # Safety
/// C `lstat64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lstat64(path: *const c_char, st: *mut libc::stat) -> c_int {
    // SAFETY: `lstat64`'s path.
    if unsafe { served_path(path) }.is_some() {
        // SAFETY: the same call as `lstat` on x86-64.
        return unsafe { lstat(path, st) };
    }
    let real = next!(
        "lstat64",
        unsafe extern "C" fn(*const c_char, *mut libc::stat) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(path, st) }
}

/// # Safety
/// C `fstat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fstat(kfd: c_int, st: *mut libc::stat) -> c_int {
    if let Some((fs, open)) = served_fd(kfd) {
        return stat_ret(st, fs.px.fstat(open.fd));
    }
    let real = next!(
        "fstat",
        unsafe extern "C" fn(c_int, *mut libc::stat) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(kfd, st) }
}

/// # Safety
/// C `fstat64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fstat64(kfd: c_int, st: *mut libc::stat) -> c_int {
    if served_fd(kfd).is_some() {
        // SAFETY: the same call as `fstat` on x86-64.
        return unsafe { fstat(kfd, st) };
    }
    let real = next!(
        "fstat64",
        unsafe extern "C" fn(c_int, *mut libc::stat) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(kfd, st) }
}

/// # Safety
/// C `fstatat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fstatat(
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat,
    flags: c_int,
) -> c_int {
    if !path.is_null()
        // SAFETY: `fstatat`'s path.
        && unsafe { *path } == 0
        && flags & libc::AT_EMPTY_PATH != 0
        && served_fd(dirfd).is_some()
    {
        // SAFETY: an empty path with AT_EMPTY_PATH is `fstat` of `dirfd`.
        return unsafe { fstat(dirfd, st) };
    }
    // SAFETY: `fstatat`'s path.
    if let Some(p) = unsafe { served_path_at(dirfd, path) } {
        let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
        let result = served_fs().and_then(|fs| {
            if follow {
                fs.px.stat(&p)
            } else {
                fs.px.lstat(&p)
            }
        });
        return stat_ret(st, result);
    }
    let real = next!(
        "fstatat",
        unsafe extern "C" fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(dirfd, path, st, flags) }
}

/// # Safety
/// C `fstatat64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fstatat64(
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat,
    flags: c_int,
) -> c_int {
    // SAFETY: the same call as `fstatat` on x86-64.
    unsafe { fstatat(dirfd, path, st, flags) }
}

/// Fills `out` from `attr`.
///
/// # Safety
/// `out` points to a writable `struct statx`.
unsafe fn fill_statx(out: *mut libc::statx, attr: &Attr) {
    // SAFETY: an all-zero `struct statx` is valid.
    let mut x: libc::statx = unsafe { std::mem::zeroed() };
    x.stx_mask = libc::STATX_BASIC_STATS | libc::STATX_BTIME;
    x.stx_blksize = attr.blksize;
    x.stx_nlink = attr.nlink;
    x.stx_uid = attr.uid;
    x.stx_gid = attr.gid;
    x.stx_mode = attr.mode() as u16;
    x.stx_ino = attr.ino;
    x.stx_size = attr.size;
    x.stx_blocks = attr.blocks;
    let time = |ns: u64| {
        let mut t = x.stx_atime;
        t.tv_sec = (ns / 1_000_000_000) as i64;
        t.tv_nsec = (ns % 1_000_000_000) as u32;
        t
    };
    (x.stx_atime, x.stx_mtime, x.stx_ctime, x.stx_btime) = (
        time(attr.atime),
        time(attr.mtime),
        time(attr.ctime),
        time(attr.btime),
    );
    x.stx_rdev_major = (attr.rdev >> 8) as u32;
    x.stx_rdev_minor = (attr.rdev & 0xff) as u32;
    x.stx_dev_major = DEV_MAJOR;
    x.stx_dev_minor = DEV_MINOR;
    // SAFETY: the caller's `struct statx`.
    unsafe { out.write(x) };
}

/// # Safety
/// C `statx`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: libc::c_uint,
    out: *mut libc::statx,
) -> c_int {
    let empty = !path.is_null()
        // SAFETY: `statx`'s path.
        && unsafe { *path } == 0
        && flags & libc::AT_EMPTY_PATH != 0;
    let result = if empty {
        served_fd(dirfd).map(|(fs, open)| fs.px.fstat(open.fd))
    } else {
        // SAFETY: `statx`'s path.
        unsafe { served_path_at(dirfd, path) }.map(|p| {
            served_fs().and_then(|fs| {
                if flags & libc::AT_SYMLINK_NOFOLLOW == 0 {
                    fs.px.stat(&p)
                } else {
                    fs.px.lstat(&p)
                }
            })
        })
    };
    if let Some(result) = result {
        return ret(result.map(|attr| {
            // SAFETY: the caller's `struct statx`.
            unsafe { fill_statx(out, &attr) };
            0
        }));
    }
    let real = next!(
        "statx",
        unsafe extern "C" fn(c_int, *const c_char, c_int, libc::c_uint, *mut libc::statx) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(dirfd, path, flags, mask, out) }
}

fn access_served(path: &[u8]) -> Result<c_int, Errno> {
    served_fs()?.px.stat(path).map(|_| 0)
}

/// # Safety
/// C `access` (a served path exists: the program acts with the pool owner's rights).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: `access`'s path.
    if let Some(p) = unsafe { served_path(path) } {
        return ret(access_served(&p));
    }
    let real = next!(
        "access",
        unsafe extern "C" fn(*const c_char, c_int) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(path, mode) }
}

/// # Safety
/// C `euidaccess` (as `access`: the program acts with the pool owner's rights).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn euidaccess(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: `euidaccess`' path.
    if let Some(p) = unsafe { served_path(path) } {
        return ret(access_served(&p));
    }
    let real = next!(
        "euidaccess",
        unsafe extern "C" fn(*const c_char, c_int) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(path, mode) }
}

/// # Safety
/// C `eaccess` (another name of `euidaccess`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn eaccess(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: the same call.
    unsafe { euidaccess(path, mode) }
}

/// # Safety
/// C `faccessat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: `faccessat`'s path.
    if let Some(p) = unsafe { served_path_at(dirfd, path) } {
        return ret(access_served(&p));
    }
    let real = next!(
        "faccessat",
        unsafe extern "C" fn(c_int, *const c_char, c_int, c_int) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(dirfd, path, mode, flags) }
}

pub(crate) fn set_served(kfd: c_int, set: SetAttr) -> Option<c_int> {
    let (fs, open) = served_fd(kfd)?;
    Some(ret(fs.px.fsetattr(open.fd, set).map(|_| 0)))
}

/// # Safety
/// C `fchmod`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fchmod(kfd: c_int, mode: mode_t) -> c_int {
    let set = SetAttr {
        perm: Some(mode & 0o7777),
        ..SetAttr::default()
    };
    if let Some(r) = set_served(kfd, set) {
        return r;
    }
    let real = next!("fchmod", unsafe extern "C" fn(c_int, mode_t) -> c_int);
    // SAFETY: forwarded as received.
    unsafe { real(kfd, mode) }
}

/// # Safety
/// C `fchown` (`-1` leaves a field unchanged).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fchown(kfd: c_int, uid: libc::uid_t, gid: libc::gid_t) -> c_int {
    let set = SetAttr {
        uid: (uid != u32::MAX).then_some(uid),
        gid: (gid != u32::MAX).then_some(gid),
        ..SetAttr::default()
    };
    if let Some(r) = set_served(kfd, set) {
        return r;
    }
    let real = next!(
        "fchown",
        unsafe extern "C" fn(c_int, libc::uid_t, libc::gid_t) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(kfd, uid, gid) }
}

/// # Safety
/// C `chmod`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn chmod(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: `chmod`'s path.
    if let Some(p) = unsafe { served_path(path) } {
        return ret(served_fs().and_then(|fs| fs.px.chmod(&p, mode & 0o7777).map(|()| 0)));
    }
    let real = next!(
        "chmod",
        unsafe extern "C" fn(*const c_char, mode_t) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(path, mode) }
}

/// # Safety
/// C `futimens` (on a served descriptor: `UTIME_NOW`, `UTIME_OMIT` or a time).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn futimens(kfd: c_int, times: *const libc::timespec) -> c_int {
    if served_fd(kfd).is_some() {
        // SAFETY: `futimens`' times.
        let set = unsafe { crate::names::time_sets(times) }.map(|(atime, mtime)| SetAttr {
            atime,
            mtime,
            ..SetAttr::default()
        });
        return match set {
            Ok(set) => set_served(kfd, set).unwrap_or(-1),
            Err(e) => ret(Err(e)),
        };
    }
    let real = next!(
        "futimens",
        unsafe extern "C" fn(c_int, *const libc::timespec) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(kfd, times) }
}

// ---------------------------------------------------------------------------- namespace

/// # Safety
/// C `truncate`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn truncate(path: *const c_char, len: off_t) -> c_int {
    // SAFETY: `truncate`'s path.
    if let Some(p) = unsafe { served_path(path) } {
        let result = offset(len).and_then(|len| served_fs()?.px.truncate(&p, len));
        return ret(result.map(|()| 0));
    }
    let real = next!(
        "truncate",
        unsafe extern "C" fn(*const c_char, off_t) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(path, len) }
}

/// # Safety
/// C `truncate64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn truncate64(path: *const c_char, len: off_t) -> c_int {
    // SAFETY: the same call as `truncate` on x86-64.
    unsafe { truncate(path, len) }
}

/// # Safety
/// C `unlink`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    // SAFETY: `unlink`'s path.
    if let Some(p) = unsafe { served_path(path) } {
        return ret(served_fs().and_then(|fs| fs.px.unlink(&p)).map(|()| 0));
    }
    let real = next!("unlink", unsafe extern "C" fn(*const c_char) -> c_int);
    // SAFETY: forwarded as received.
    unsafe { real(path) }
}

/// # Safety
/// C `unlinkat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: `unlinkat`'s path.
    if let Some(p) = unsafe { served_path_at(dirfd, path) } {
        let result = served_fs().and_then(|fs| {
            if flags & libc::AT_REMOVEDIR != 0 {
                fs.px.rmdir(&p)
            } else {
                fs.px.unlink(&p)
            }
        });
        return ret(result.map(|()| 0));
    }
    let real = next!(
        "unlinkat",
        unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(dirfd, path, flags) }
}

/// # Safety
/// C `rmdir`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    // SAFETY: `rmdir`'s path.
    if let Some(p) = unsafe { served_path(path) } {
        return ret(served_fs().and_then(|fs| fs.px.rmdir(&p)).map(|()| 0));
    }
    let real = next!("rmdir", unsafe extern "C" fn(*const c_char) -> c_int);
    // SAFETY: forwarded as received.
    unsafe { real(path) }
}

/// # Safety
/// C `mkdir`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mkdir(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: `mkdir`'s path.
    if let Some(p) = unsafe { served_path(path) } {
        let made = served_fs().and_then(|fs| fs.px.mkdir(&p, mode & !fs.umask));
        return ret(made.map(|()| 0));
    }
    let real = next!(
        "mkdir",
        unsafe extern "C" fn(*const c_char, mode_t) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(path, mode) }
}

/// # Safety
/// C `mkdirat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: `mkdirat`'s path.
    if let Some(p) = unsafe { served_path_at(dirfd, path) } {
        let made = served_fs().and_then(|fs| fs.px.mkdir(&p, mode & !fs.umask));
        return ret(made.map(|()| 0));
    }
    let real = next!(
        "mkdirat",
        unsafe extern "C" fn(c_int, *const c_char, mode_t) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(dirfd, path, mode) }
}

pub(crate) fn rename_served(
    from: Option<Vec<u8>>,
    to: Option<Vec<u8>>,
) -> Option<Result<(), Errno>> {
    match (from, to) {
        (None, None) => None,
        (Some(a), Some(b)) => Some(served_fs().and_then(|fs| fs.px.rename(&a, &b))),
        _ => Some(Err(Errno::EXDEV)),
    }
}

/// # Safety
/// C `rename` (between a served and another path: `EXDEV`, as across file systems).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rename(from: *const c_char, to: *const c_char) -> c_int {
    // SAFETY: `rename`'s paths.
    let routed = unsafe { rename_served(served_path(from), served_path(to)) };
    if let Some(result) = routed {
        return ret(result.map(|()| 0));
    }
    let real = next!(
        "rename",
        unsafe extern "C" fn(*const c_char, *const c_char) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(from, to) }
}

/// # Safety
/// C `renameat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn renameat(
    olddir: c_int,
    from: *const c_char,
    newdir: c_int,
    to: *const c_char,
) -> c_int {
    // SAFETY: `renameat`'s paths.
    let routed = unsafe { rename_served(served_path_at(olddir, from), served_path_at(newdir, to)) };
    if let Some(result) = routed {
        return ret(result.map(|()| 0));
    }
    let real = next!(
        "renameat",
        unsafe extern "C" fn(c_int, *const c_char, c_int, *const c_char) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(olddir, from, newdir, to) }
}

/// # Safety
/// C `renameat2` (flags 0 and `RENAME_NOREPLACE`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn renameat2(
    olddir: c_int,
    from: *const c_char,
    newdir: c_int,
    to: *const c_char,
    flags: c_uint,
) -> c_int {
    // SAFETY: `renameat2`'s paths.
    let (a, b) = unsafe { (served_path_at(olddir, from), served_path_at(newdir, to)) };
    if a.is_some() || b.is_some() {
        let result = match (flags, b.clone()) {
            (0, _) => rename_served(a, b).expect("one is served"),
            (libc::RENAME_NOREPLACE, Some(target)) => {
                served_fs().and_then(|fs| match fs.px.lstat(&target) {
                    Ok(_) => Err(Errno::EEXIST),
                    Err(Errno::ENOENT) => rename_served(a, b).expect("one is served"),
                    Err(e) => Err(e),
                })
            }
            (libc::RENAME_NOREPLACE, None) => Err(Errno::EXDEV),
            _ => Err(Errno::EINVAL),
        };
        return ret(result.map(|()| 0));
    }
    let real = next!(
        "renameat2",
        unsafe extern "C" fn(c_int, *const c_char, c_int, *const c_char, c_uint) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(olddir, from, newdir, to, flags) }
}

/// Copies `bytes` into the caller's buffer of `size` bytes, or answers a size probe
/// (`size` 0) with the length; `ERANGE` when they do not fit.
///
/// # Safety
/// `buf` points to `size` writable bytes (or `size` is 0).
unsafe fn xattr_out(bytes: &[u8], buf: *mut c_void, size: size_t) -> Result<usize, Errno> {
    if size == 0 {
        return Ok(bytes.len());
    }
    if bytes.len() > size {
        return Err(Errno::ERANGE);
    }
    // SAFETY: the caller's buffer of `size` bytes.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast(), bytes.len()) };
    Ok(bytes.len())
}

/// The C string `name`.
///
/// # Safety
/// `name` is a NUL-terminated string.
pub(crate) unsafe fn name_bytes<'a>(name: *const c_char) -> &'a [u8] {
    // SAFETY: the caller's NUL-terminated name.
    unsafe { CStr::from_ptr(name) }.to_bytes()
}

/// The served `getxattr` (`follow`) or `lgetxattr`.
///
/// # Safety
/// As C `getxattr`.
unsafe fn getxattr_served(
    p: &[u8],
    name: *const c_char,
    value: *mut c_void,
    size: size_t,
    follow: bool,
) -> ssize_t {
    // SAFETY: `getxattr`'s name.
    let name = unsafe { name_bytes(name) };
    let got = served_fs().and_then(|fs| fs.px.getxattr(p, name, follow));
    // SAFETY: `getxattr`'s buffer.
    size_ret(got.and_then(|v| unsafe { xattr_out(&v, value, size) }))
}

/// The served `listxattr` (`follow`) or `llistxattr`: names, each NUL-terminated.
///
/// # Safety
/// As C `listxattr`.
unsafe fn listxattr_served(p: &[u8], list: *mut c_char, size: size_t, follow: bool) -> ssize_t {
    let names = served_fs().and_then(|fs| fs.px.listxattr(p, follow));
    let joined = names.map(|names| {
        names
            .into_iter()
            .flat_map(|mut n| {
                n.push(0);
                n
            })
            .collect::<Vec<u8>>()
    });
    // SAFETY: `listxattr`'s buffer.
    size_ret(joined.and_then(|b| unsafe { xattr_out(&b, list.cast(), size) }))
}

/// The served `setxattr` (`follow`) or `lsetxattr`.
///
/// # Safety
/// As C `setxattr`.
unsafe fn setxattr_served(
    p: &[u8],
    name: *const c_char,
    value: *const c_void,
    size: size_t,
    flags: c_int,
    follow: bool,
) -> c_int {
    let mode = match flags {
        0 => pmfs::SetMode::Any,
        libc::XATTR_CREATE => pmfs::SetMode::Create,
        libc::XATTR_REPLACE => pmfs::SetMode::Replace,
        _ => return ret(Err(Errno::EINVAL)),
    };
    // SAFETY: `setxattr`'s name and value.
    let (name, value) = unsafe { (name_bytes(name), in_slice(value, size)) };
    ret(served_fs()
        .and_then(|fs| fs.px.setxattr(p, name, value, mode, follow))
        .map(|()| 0))
}

/// Defines the path-based attribute call `$name` (and its served form).
macro_rules! xattr_by_path {
    ($name:ident, $served:ident, $follow:expr, ($($arg:ident: $ty:ty),*), $ret:ty) => {
        /// # Safety
        /// The C function of this name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, $($arg: $ty),*) -> $ret {
            // SAFETY: the call's path.
            if let Some(p) = unsafe { served_path(path) } {
                // SAFETY: the call's arguments, as received.
                return unsafe { $served(&p, $($arg,)* $follow) };
            }
            let real = next!(
                stringify!($name),
                unsafe extern "C" fn(*const c_char, $($ty),*) -> $ret
            );
            // SAFETY: forwarded as received.
            unsafe { real(path, $($arg),*) }
        }
    };
}

xattr_by_path!(getxattr, getxattr_served, true, (name: *const c_char, value: *mut c_void, size: size_t), ssize_t);
xattr_by_path!(lgetxattr, getxattr_served, false, (name: *const c_char, value: *mut c_void, size: size_t), ssize_t);
xattr_by_path!(listxattr, listxattr_served, true, (list: *mut c_char, size: size_t), ssize_t);
xattr_by_path!(llistxattr, listxattr_served, false, (list: *mut c_char, size: size_t), ssize_t);
xattr_by_path!(setxattr, setxattr_served, true, (name: *const c_char, value: *const c_void, size: size_t, flags: c_int), c_int);
xattr_by_path!(lsetxattr, setxattr_served, false, (name: *const c_char, value: *const c_void, size: size_t, flags: c_int), c_int);

/// The served `removexattr` (`follow`) or `lremovexattr`.
///
/// # Safety
/// As C `removexattr`.
unsafe fn removexattr_served(p: &[u8], name: *const c_char, follow: bool) -> c_int {
    // SAFETY: `removexattr`'s name.
    let name = unsafe { name_bytes(name) };
    ret(served_fs()
        .and_then(|fs| fs.px.removexattr(p, name, follow))
        .map(|()| 0))
}

xattr_by_path!(removexattr, removexattr_served, true, (name: *const c_char), c_int);
xattr_by_path!(lremovexattr, removexattr_served, false, (name: *const c_char), c_int);

/// Defines the descriptor-based attribute call `$name`: on a served descriptor, the call
/// on the path the file was opened with.
macro_rules! xattr_by_fd {
    ($name:ident, $served:ident, ($($arg:ident: $ty:ty),*), $ret:ty) => {
        /// # Safety
        /// The C function of this name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(kfd: c_int, $($arg: $ty),*) -> $ret {
            if let Some((_, open)) = served_fd(kfd) {
                // SAFETY: the call's arguments, as received.
                return unsafe { $served(&open.path, $($arg,)* true) };
            }
            let real = next!(stringify!($name), unsafe extern "C" fn(c_int, $($ty),*) -> $ret);
            // SAFETY: forwarded as received.
            unsafe { real(kfd, $($arg),*) }
        }
    };
}

xattr_by_fd!(fgetxattr, getxattr_served, (name: *const c_char, value: *mut c_void, size: size_t), ssize_t);
xattr_by_fd!(flistxattr, listxattr_served, (list: *mut c_char, size: size_t), ssize_t);
xattr_by_fd!(fsetxattr, setxattr_served, (name: *const c_char, value: *const c_void, size: size_t, flags: c_int), c_int);
xattr_by_fd!(fremovexattr, removexattr_served, (name: *const c_char), c_int);

/// # Safety
/// C `readlink`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readlink(path: *const c_char, buf: *mut c_char, size: size_t) -> ssize_t {
    // SAFETY: `readlink`'s path.
    if let Some(p) = unsafe { served_path(path) } {
        // SAFETY: `readlink`'s buffer.
        return unsafe { crate::names::readlink_served(&p, buf, size) };
    }
    let real = next!(
        "readlink",
        unsafe extern "C" fn(*const c_char, *mut c_char, size_t) -> ssize_t
    );
    // SAFETY: forwarded as received.
    unsafe { real(path, buf, size) }
}

// ---------------------------------------------------------------------------- mappings

/// Maps `[off, off + len)` of a served file: a shared mapping puts the pool's own pages
/// (the blocks that hold the range) at consecutive addresses; a private one is a copy.
fn mmap_served(
    fs: &'static Served,
    open: &Open,
    len: size_t,
    prot: c_int,
    flags: c_int,
    off: off_t,
) -> Result<*mut c_void, Errno> {
    let off = offset(off)?;
    let writable = prot & libc::PROT_WRITE != 0;
    let mmap = next!(
        "mmap",
        unsafe extern "C" fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void
    );
    if flags & libc::MAP_SHARED == 0 {
        let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        // SAFETY: a fresh anonymous mapping.
        let addr = unsafe {
            mmap(
                std::ptr::null_mut(),
                len,
                prot | libc::PROT_WRITE,
                anon,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(Errno::from_raw(libc::ENOMEM));
        }
        // SAFETY: the new mapping of `len` writable bytes.
        let buf = unsafe { std::slice::from_raw_parts_mut(addr.cast::<u8>(), len) };
        fs.px.pread(open.fd, buf, off)?;
        return Ok(addr);
    }
    let map = fs.px.mmap(open.fd, off, len as u64, writable)?;
    let reserve = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    // SAFETY: reserves an address range; nothing is placed there yet.
    let base = unsafe { mmap(std::ptr::null_mut(), len, libc::PROT_NONE, reserve, -1, 0) };
    if base == libc::MAP_FAILED {
        return Err(Errno::from_raw(libc::ENOMEM));
    }
    let pool_fd = std::os::fd::AsRawFd::as_raw_fd(&fs.pool_file);
    for extent in map.extents() {
        let at = base as usize + (extent.file_off - off) as usize;
        // SAFETY: replaces part of the reservation above with the pool file's pages that
        // hold this extent (page-aligned: blocks are 4 KiB-aligned in the pool).
        let placed = unsafe {
            mmap(
                at as *mut c_void,
                extent.len as usize,
                prot,
                libc::MAP_SHARED | libc::MAP_FIXED,
                pool_fd,
                extent.pool_off as off_t,
            )
        };
        if placed == libc::MAP_FAILED {
            let munmap = next!("munmap", unsafe extern "C" fn(*mut c_void, size_t) -> c_int);
            // SAFETY: the reservation made above.
            unsafe { munmap(base, len) };
            return Err(Errno::from_raw(libc::ENOMEM));
        }
    }
    fs.maps.lock().push(Mapping {
        addr: base as usize,
        len,
        map,
    });
    Ok(base)
}

/// # Safety
/// C `mmap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    kfd: c_int,
    off: off_t,
) -> *mut c_void {
    if flags & libc::MAP_ANONYMOUS == 0
        && let Some((fs, open)) = served_fd(kfd)
    {
        if flags & libc::MAP_FIXED != 0 {
            set_errno(Errno::EINVAL);
            return libc::MAP_FAILED;
        }
        return mmap_served(fs, &open, len, prot, flags, off).unwrap_or_else(|e| {
            set_errno(e);
            libc::MAP_FAILED
        });
    }
    let real = next!(
        "mmap",
        unsafe extern "C" fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void
    );
    // SAFETY: forwarded as received.
    unsafe { real(addr, len, prot, flags, kfd, off) }
}

/// # Safety
/// C `mmap64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    kfd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: the same call as `mmap` on x86-64.
    unsafe { mmap(addr, len, prot, flags, kfd, off) }
}

/// The served mapping that starts at `addr`, taken out of the table.
fn take_mapping(addr: *mut c_void) -> Option<Mapping> {
    let fs = served()?;
    let mut maps = fs.maps.lock();
    let i = maps.iter().position(|m| m.addr == addr as usize)?;
    Some(maps.swap_remove(i))
}

/// # Safety
/// C `munmap` (a served mapping is made durable, then its blocks are unpinned).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    let mapping = take_mapping(addr);
    if let Some(mapping) = &mapping {
        let _ = mapping.map.persist_all();
    }
    let real = next!("munmap", unsafe extern "C" fn(*mut c_void, size_t) -> c_int);
    // SAFETY: forwarded as received (the range leaves the address space before the blocks
    // are unpinned below).
    let result = unsafe { real(addr, len) };
    drop(mapping);
    result
}

/// # Safety
/// C `msync`: a served range is written back and fenced (durable on return).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn msync(addr: *mut c_void, len: size_t, flags: c_int) -> c_int {
    if let Some(fs) = served() {
        let maps = fs.maps.lock();
        let start = addr as usize;
        if let Some(m) = maps
            .iter()
            .find(|m| start >= m.addr && start < m.addr + m.len)
        {
            let at = (start - m.addr) as u64;
            let n = (len as u64).min(m.len as u64 - at);
            return ret(m.map.persist(at, n).map(|()| 0));
        }
    }
    let real = next!(
        "msync",
        unsafe extern "C" fn(*mut c_void, size_t, c_int) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(addr, len, flags) }
}
