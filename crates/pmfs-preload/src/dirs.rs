//! Directory streams of served directories: `opendir`, `fdopendir`, `readdir`(`64`)(`_r`),
//! `rewinddir`, `telldir`, `seekdir`, `dirfd` and `closedir`. A served stream owns a served
//! descriptor of its directory (`dirfd` returns it, so `fts`-based tools such as `find`
//! and `rm -r` can open entries relative to it) and lists the directory's entries when
//! opened and when rewound.

use crate::abi::{open_served, served_fd, served_path, set_errno};
use libc::{DIR, c_char, c_int, c_long, dirent64};
use pmfs::{Errno, FileType};

/// A directory stream of a served directory.
struct ServedDir {
    /// The served descriptor the stream owns (closed by `closedir`).
    kfd: c_int,
    /// The entries as listed when the stream was opened or last rewound.
    entries: Vec<(Vec<u8>, u64, FileType)>,
    /// Index of the entry the next `readdir` returns (the stream's position).
    next: usize,
    /// The entry the last `readdir` returned.
    current: dirent64,
}

/// The addresses of the live served streams.
static DIRS: parking_lot::Mutex<Vec<usize>> = parking_lot::Mutex::new(Vec::new());

/// Whether no served stream is open.
pub(crate) fn none_open() -> bool {
    DIRS.lock().is_empty()
}

/// The served stream `dir`, if it is one.
///
/// # Safety
/// `dir` is a stream the C library or this module returned, not yet closed, and not used
/// by another thread during the borrow (as for any `DIR`).
unsafe fn served_dir<'a>(dir: *mut DIR) -> Option<&'a mut ServedDir> {
    if !DIRS.lock().contains(&(dir as usize)) {
        return None;
    }
    // SAFETY: a served stream came from `Box::into_raw` in `stream_of` and is not closed.
    Some(unsafe { &mut *dir.cast::<ServedDir>() })
}

fn dirent_type(kind: FileType) -> u8 {
    match kind {
        FileType::Regular => libc::DT_REG,
        FileType::Directory => libc::DT_DIR,
        FileType::Symlink => libc::DT_LNK,
        FileType::Fifo => libc::DT_FIFO,
        FileType::CharDevice => libc::DT_CHR,
        FileType::BlockDevice => libc::DT_BLK,
        FileType::Socket => libc::DT_SOCK,
    }
}

/// The entries of the served directory open as `kfd` (`ENOTDIR` for another file).
fn list(kfd: c_int) -> Result<Vec<(Vec<u8>, u64, FileType)>, Errno> {
    let (fs, open) = served_fd(kfd).ok_or(Errno::EBADF)?;
    if fs.px.fstat(open.fd)?.kind != FileType::Directory {
        return Err(Errno::ENOTDIR);
    }
    let entries = fs.px.readdir(&open.path)?;
    Ok(entries
        .into_iter()
        .map(|e| (e.name, e.ino, e.kind))
        .collect())
}

/// A new served stream owning served descriptor `kfd`.
fn stream_of(kfd: c_int) -> Result<*mut DIR, Errno> {
    let dir = Box::new(ServedDir {
        kfd,
        entries: list(kfd)?,
        next: 0,
        // SAFETY: an all-zero `dirent64` is valid.
        current: unsafe { std::mem::zeroed() },
    });
    let pointer = Box::into_raw(dir).cast::<DIR>();
    DIRS.lock().push(pointer as usize);
    Ok(pointer)
}

fn dir_ret(result: Result<*mut DIR, Errno>) -> *mut DIR {
    result.unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

/// # Safety
/// C `opendir`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut DIR {
    // SAFETY: `opendir`'s path.
    if let Some(p) = unsafe { served_path(path) } {
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
        let opened = open_served(&p, flags, 0).and_then(|kfd| {
            stream_of(kfd).inspect_err(|_| {
                // SAFETY: the served descriptor opened just above, not yet shared.
                unsafe { crate::abi::close(kfd) };
            })
        });
        return dir_ret(opened);
    }
    let real = next!("opendir", unsafe extern "C" fn(*const c_char) -> *mut DIR);
    // SAFETY: forwarded as received.
    unsafe { real(path) }
}

/// # Safety
/// C `fdopendir` (on success the stream owns `kfd`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdopendir(kfd: c_int) -> *mut DIR {
    if served_fd(kfd).is_some() {
        return dir_ret(stream_of(kfd));
    }
    let real = next!("fdopendir", unsafe extern "C" fn(c_int) -> *mut DIR);
    // SAFETY: forwarded as received.
    unsafe { real(kfd) }
}

/// The next entry of a served stream, or null at its end.
fn next_entry(dir: &mut ServedDir) -> *mut dirent64 {
    let Some((name, ino, kind)) = dir.entries.get(dir.next) else {
        return std::ptr::null_mut();
    };
    dir.next += 1;
    let out = &mut dir.current;
    out.d_ino = *ino;
    out.d_off = dir.next as i64;
    out.d_reclen = std::mem::size_of::<dirent64>() as u16;
    out.d_type = dirent_type(*kind);
    let n = name.len().min(out.d_name.len() - 1);
    for (slot, &byte) in out.d_name.iter_mut().zip(&name[..n]) {
        *slot = byte as c_char;
    }
    out.d_name[n] = 0;
    out
}

/// # Safety
/// C `readdir64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readdir64(dir: *mut DIR) -> *mut dirent64 {
    // SAFETY: `readdir64`'s stream.
    if let Some(served) = unsafe { served_dir(dir) } {
        return next_entry(served);
    }
    let real = next!("readdir64", unsafe extern "C" fn(*mut DIR) -> *mut dirent64);
    // SAFETY: forwarded as received.
    unsafe { real(dir) }
}

/// # Safety
/// C `readdir` (the same structure as `readdir64` on x86-64).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readdir(dir: *mut DIR) -> *mut dirent64 {
    // SAFETY: `readdir`'s stream.
    if let Some(served) = unsafe { served_dir(dir) } {
        return next_entry(served);
    }
    let real = next!("readdir", unsafe extern "C" fn(*mut DIR) -> *mut dirent64);
    // SAFETY: forwarded as received.
    unsafe { real(dir) }
}

/// # Safety
/// C `readdir64_r` (returns the error number; `*result` is null at the end).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readdir64_r(
    dir: *mut DIR,
    entry: *mut dirent64,
    result: *mut *mut dirent64,
) -> c_int {
    // SAFETY: `readdir64_r`'s stream.
    if let Some(served) = unsafe { served_dir(dir) } {
        let next = next_entry(served);
        // SAFETY: `entry` is the caller's `dirent64`, `result` its result slot; `next`, if
        // not null, is the stream's own entry.
        unsafe {
            if next.is_null() {
                *result = std::ptr::null_mut();
            } else {
                entry.write(next.read());
                *result = entry;
            }
        }
        return 0;
    }
    let real = next!(
        "readdir64_r",
        unsafe extern "C" fn(*mut DIR, *mut dirent64, *mut *mut dirent64) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(dir, entry, result) }
}

/// # Safety
/// C `readdir_r` (the same structure as `readdir64_r` on x86-64).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readdir_r(
    dir: *mut DIR,
    entry: *mut dirent64,
    result: *mut *mut dirent64,
) -> c_int {
    // SAFETY: `readdir_r`'s stream.
    if unsafe { served_dir(dir) }.is_some() {
        // SAFETY: the same call as `readdir64_r`.
        return unsafe { readdir64_r(dir, entry, result) };
    }
    let real = next!(
        "readdir_r",
        unsafe extern "C" fn(*mut DIR, *mut dirent64, *mut *mut dirent64) -> c_int
    );
    // SAFETY: forwarded as received.
    unsafe { real(dir, entry, result) }
}

/// # Safety
/// C `dirfd`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dirfd(dir: *mut DIR) -> c_int {
    // SAFETY: `dirfd`'s stream.
    if let Some(served) = unsafe { served_dir(dir) } {
        return served.kfd;
    }
    let real = next!("dirfd", unsafe extern "C" fn(*mut DIR) -> c_int);
    // SAFETY: forwarded as received.
    unsafe { real(dir) }
}

/// # Safety
/// C `rewinddir` (a served stream lists its directory again, seeing changes since).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rewinddir(dir: *mut DIR) {
    // SAFETY: `rewinddir`'s stream.
    if let Some(served) = unsafe { served_dir(dir) } {
        // `rewinddir` cannot fail: a directory removed meanwhile lists as empty.
        served.entries = list(served.kfd).unwrap_or_default();
        served.next = 0;
        return;
    }
    let real = next!("rewinddir", unsafe extern "C" fn(*mut DIR));
    // SAFETY: forwarded as received.
    unsafe { real(dir) }
}

/// # Safety
/// C `telldir` (a served stream's position is the index of its next entry).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn telldir(dir: *mut DIR) -> c_long {
    // SAFETY: `telldir`'s stream.
    if let Some(served) = unsafe { served_dir(dir) } {
        return served.next as c_long;
    }
    let real = next!("telldir", unsafe extern "C" fn(*mut DIR) -> c_long);
    // SAFETY: forwarded as received.
    unsafe { real(dir) }
}

/// # Safety
/// C `seekdir` (to a position `telldir` returned).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn seekdir(dir: *mut DIR, pos: c_long) {
    // SAFETY: `seekdir`'s stream.
    if let Some(served) = unsafe { served_dir(dir) } {
        served.next = usize::try_from(pos).unwrap_or(0);
        return;
    }
    let real = next!("seekdir", unsafe extern "C" fn(*mut DIR, c_long));
    // SAFETY: forwarded as received.
    unsafe { real(dir, pos) }
}

/// # Safety
/// C `closedir` (a served stream closes the descriptor it owns).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn closedir(dir: *mut DIR) -> c_int {
    let mut dirs = DIRS.lock();
    if let Some(i) = dirs.iter().position(|&d| d == dir as usize) {
        dirs.swap_remove(i);
        drop(dirs);
        // SAFETY: `dir` came from `Box::into_raw` in `stream_of`; it is freed once.
        let served = unsafe { Box::from_raw(dir.cast::<ServedDir>()) };
        // SAFETY: the served descriptor the stream owns.
        return unsafe { crate::abi::close(served.kfd) };
    }
    drop(dirs);
    let real = next!("closedir", unsafe extern "C" fn(*mut DIR) -> c_int);
    // SAFETY: forwarded as received.
    unsafe { real(dir) }
}
