//! `open_memstream(3)` whose buffer is the program's memory (`docs/nvthreads.md` §3.6).
//!
//! glibc grows a memory stream's buffer with its own allocator, private to each
//! thread-process, so a string one thread built with `open_memstream` and handed to another
//! would be another process's pointer. Here the stream is a `fopencookie` stream (a `FILE`
//! private to the thread that opened it, as every `FILE` is) whose writes go into a buffer
//! of the program's arena, and `*bufp` / `*sizep` are set at every flush and at `fclose`
//! as glibc sets them: the buffer, NUL-terminated, and the current position. With the
//! runtime dormant, or `NVT_MALLOC=private`, glibc's own `open_memstream` is used.

use crate::heap::{program_arena, realloc_from};
use crate::{next, set_errno};
use libc::{FILE, c_char, c_int, c_void, size_t, ssize_t};

/// glibc's `cookie_io_functions_t`.
#[repr(C)]
struct CookieIo {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut i64, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

unsafe extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut FILE;
}

/// A memory stream's state, kept as glibc keeps it: `buffer` holds `capacity` bytes, every
/// byte never written is zero (so a write past the end after a seek finds the gap
/// zero-filled), and the end of the data, where `SEEK_END` counts from, is the position:
/// every write and seek publishes it as the size — a write after a seek back shortens the
/// data without clearing what follows; `fclose` then cuts the string there with a NUL.
struct MemStream {
    buffer: *mut u8,
    capacity: usize,
    position: usize,
    bufp: *mut *mut c_char,
    sizep: *mut size_t,
}

impl MemStream {
    /// Makes room for `needed` bytes and the NUL after them; false on `ENOMEM`.
    fn reserve(&mut self, needed: usize) -> bool {
        let Some(wanted) = needed.checked_add(1) else {
            return false;
        };
        if wanted <= self.capacity {
            return true;
        }
        let capacity = wanted.max(self.capacity.saturating_mul(2)).max(64);
        let grown = realloc_from(self.buffer.cast(), capacity, 0).cast::<u8>();
        if grown.is_null() {
            return false;
        }
        // SAFETY: `grown` holds `capacity` bytes, of which the first `self.capacity` were
        // kept; the rest is cleared to keep the invariant.
        unsafe {
            grown
                .add(self.capacity)
                .write_bytes(0, capacity - self.capacity)
        };
        self.buffer = grown;
        self.capacity = capacity;
        true
    }

    /// Tells the program where its string is, as a flush does: the data ends at the
    /// position. Fails only if the position has no room, which `write` and `seek` make
    /// before they move it: once open, a stream always has room for its position's NUL.
    fn publish(&mut self) -> bool {
        if !self.reserve(self.position) {
            return false;
        }
        // SAFETY: the program's locations, valid while the stream is open (the C contract).
        unsafe {
            *self.bufp = self.buffer.cast();
            *self.sizep = self.position;
        }
        true
    }
}

/// `open_memstream(3)`.
///
/// # Safety
/// As the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn open_memstream(bufp: *mut *mut c_char, sizep: *mut size_t) -> *mut FILE {
    if !program_arena() || bufp.is_null() || sizep.is_null() {
        let real = next!(c"open_memstream" => unsafe extern "C" fn(*mut *mut c_char, *mut size_t) -> *mut FILE);
        // SAFETY: forwarded (glibc refuses null locations with EINVAL).
        return unsafe { real(bufp, sizep) };
    }
    let mut stream = Box::new(MemStream {
        buffer: std::ptr::null_mut(),
        capacity: 0,
        position: 0,
        bufp,
        sizep,
    });
    // Published at once, as glibc's stream is at its first flush: a `fflush` before any
    // output (which calls no cookie function) finds an empty string.
    if !stream.publish() {
        set_errno(libc::ENOMEM);
        return std::ptr::null_mut();
    }
    let cookie = Box::into_raw(stream);
    let io = CookieIo {
        read: None,
        write: Some(write),
        seek: Some(seek),
        close: Some(close),
    };
    // SAFETY: `cookie` stays valid until `close` takes it back; mode is a C string.
    let file = unsafe { fopencookie(cookie.cast(), c"w".as_ptr(), io) };
    if file.is_null() {
        // SAFETY: not handed to a stream: reclaimed here, its buffer freed.
        let stream = unsafe { Box::from_raw(cookie) };
        // SAFETY: our arena block.
        unsafe { crate::heap::free(stream.buffer.cast()) };
    }
    file
}

/// The stream's write: at the position, zero-filling a gap past the end.
unsafe extern "C" fn write(cookie: *mut c_void, data: *const c_char, size: size_t) -> ssize_t {
    // SAFETY: the cookie `open_memstream` made; stdio calls one function at a time.
    let stream = unsafe { &mut *cookie.cast::<MemStream>() };
    let Some(end) = stream.position.checked_add(size) else {
        set_errno(libc::EFBIG);
        return -1;
    };
    if !stream.reserve(end) {
        set_errno(libc::ENOMEM);
        return -1;
    }
    // SAFETY: `reserve` made `end + 1` bytes; stdio's `data` holds `size`.
    unsafe {
        std::ptr::copy_nonoverlapping(data.cast::<u8>(), stream.buffer.add(stream.position), size)
    };
    stream.position = end;
    if stream.publish() {
        size as ssize_t
    } else {
        -1
    }
}

/// The stream's seek: from the start, the position or the end of the data; never before the
/// start.
unsafe extern "C" fn seek(cookie: *mut c_void, offset: *mut i64, whence: c_int) -> c_int {
    // SAFETY: as in `write`; `offset` is stdio's.
    let (stream, offset) = unsafe { (&mut *cookie.cast::<MemStream>(), &mut *offset) };
    let base = match whence {
        libc::SEEK_SET => 0,
        // The data ends at the position (see `MemStream`).
        libc::SEEK_CUR | libc::SEEK_END => stream.position,
        _ => {
            set_errno(libc::EINVAL);
            return -1;
        }
    };
    let Some(position) = (base as i64)
        .checked_add(*offset)
        .filter(|&at| at >= 0)
        .map(|at| at as usize)
    else {
        set_errno(libc::EINVAL);
        return -1;
    };
    // Room first: a seek that fails (ENOMEM) leaves the stream where it was, so the program's
    // string, later writes and `fclose` still work.
    if !stream.reserve(position) {
        set_errno(libc::ENOMEM);
        return -1;
    }
    stream.position = position;
    *offset = position as i64;
    if stream.publish() { 0 } else { -1 }
}

/// `fclose`: the program's locations get their final values; the buffer is the program's
/// to free.
unsafe extern "C" fn close(cookie: *mut c_void) -> c_int {
    // SAFETY: the cookie `open_memstream` made, taken back once.
    let mut stream = unsafe { Box::from_raw(cookie.cast::<MemStream>()) };
    if !stream.publish() {
        return -1;
    }
    // SAFETY: `publish` reserved the byte after the position.
    unsafe { stream.buffer.add(stream.position).write(0) };
    0
}
