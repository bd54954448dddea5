//! `libnvthreads_rt.so`: the C ABI of the NVthreads runtime (`include/nvthreads.h`).
//!
//! Exports the interposed pthread functions, the `malloc` family and the persistence API.
//! Link a program with `-lnvthreads_rt` (before libc, which is the default order) or load it
//! with `LD_PRELOAD`; either way these definitions come first in symbol lookup and replace
//! libc's. A constructor starts the runtime before `main` (so `main`'s own allocations are
//! shared), unless the runtime must stay dormant (`NVT_DISABLE=1`; a process that neither
//! creates threads nor uses the persistence API, such as a wrapper started with
//! `LD_PRELOAD`; or a process of a running program on the same pool, which is told so on
//! stderr): every export then forwards to the next definition (libc's), found with
//! `dlsym(RTLD_NEXT)`, and the persistence API works on ordinary memory.
//!
//! - [`pthread`]: threads, mutexes (with their kinds), condition variables, barriers,
//!   once-controls, read-write and spin locks (both as exclusive locks), detach, kill,
//!   names and affinity of thread-processes.
//! - [`heap`]: `malloc`, `calloc`, `realloc`, `reallocarray`, `free`, `posix_memalign`,
//!   `aligned_alloc`, `memalign`, `valloc`, `pvalloc`, `malloc_usable_size`, `strdup`,
//!   `strndup`. Calls made by libc or the dynamic loader themselves (stdio buffers, `DIR`
//!   streams, locale data, `dlerror` strings) stay with glibc: that state is private to each
//!   thread-process like libc's globals, and the kernel writes some of it (`read` into a
//!   stream buffer) where a write-protected page would fail with `EFAULT`. The caller is
//!   told apart by the return address, which small assembly entry points pass on.
//! - [`c11`]: C11 `<threads.h>` (`thrd_*`, `mtx_*`, `cnd_*`, `tss_*`, `call_once`) on the
//!   pthread functions above.
//! - the persistence API and the `read`/`pread`/`fread` wrappers (below).
//!
//! The Rust side of the library allocates from glibc directly (`__libc_malloc`, the global
//! allocator below), so the runtime never calls its own `malloc`.

mod c11;
mod heap;
mod libc_allocs;
mod memstream;
mod process;
mod pthread;
mod signal;
mod wait;

use libc::{c_char, c_int, c_void, size_t, ssize_t};
use nvthreads::pages::Tracker;
use nvthreads::runtime::{Dormancy, Runtime, runtime};
use std::ffi::CStr;
use std::sync::atomic::{AtomicPtr, AtomicU8, Ordering};

unsafe extern "C" {
    fn __libc_malloc(size: size_t) -> *mut c_void;
    fn __libc_calloc(count: size_t, size: size_t) -> *mut c_void;
    fn __libc_realloc(ptr: *mut c_void, size: size_t) -> *mut c_void;
    fn __libc_free(ptr: *mut c_void);
    fn __libc_memalign(align: size_t, size: size_t) -> *mut c_void;
}

/// The runtime's own allocations: glibc's allocator, called directly.
struct LibcAllocator;

// SAFETY: each method forwards to glibc's allocator with a size and alignment that satisfy
// `Layout` (alignments above 16 go through `__libc_memalign`, whose blocks `__libc_free`
// releases); glibc's functions are thread-safe.
unsafe impl std::alloc::GlobalAlloc for LibcAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: forwarding a valid layout to glibc.
        unsafe {
            if layout.align() <= 16 {
                __libc_malloc(layout.size()).cast()
            } else {
                __libc_memalign(layout.align(), layout.size()).cast()
            }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        if layout.align() <= 16 {
            // SAFETY: forwarding a valid layout to glibc.
            unsafe { __libc_calloc(1, layout.size()).cast() }
        } else {
            // SAFETY: a fresh block of `layout.size()` bytes (or null).
            unsafe {
                let block = self.alloc(layout);
                if !block.is_null() {
                    std::ptr::write_bytes(block, 0, layout.size());
                }
                block
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: std::alloc::Layout) {
        // SAFETY: `ptr` came from this allocator, i.e. from glibc.
        unsafe { __libc_free(ptr.cast()) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        if layout.align() <= 16 {
            // SAFETY: `ptr` came from `__libc_malloc`/`__libc_calloc`.
            return unsafe { __libc_realloc(ptr.cast(), size).cast() };
        }
        // SAFETY: a new aligned block, the old contents copied, the old block released.
        unsafe {
            let layout_new = std::alloc::Layout::from_size_align_unchecked(size, layout.align());
            let fresh = self.alloc(layout_new);
            if !fresh.is_null() {
                std::ptr::copy_nonoverlapping(ptr, fresh, layout.size().min(size));
                self.dealloc(ptr, layout);
            }
            fresh
        }
    }
}

#[global_allocator]
static ALLOCATOR: LibcAllocator = LibcAllocator;

const UNDECIDED: u8 = 0;
const ACTIVE: u8 = 1;
const DORMANT: u8 = 2;
static MODE: AtomicU8 = AtomicU8::new(UNDECIDED);

/// Whether the runtime stays dormant in this process (decided once).
fn dormant() -> bool {
    match MODE.load(Ordering::Acquire) {
        ACTIVE => false,
        DORMANT => true,
        _ => {
            let mode = match nvthreads::runtime::dormancy() {
                Dormancy::Active => ACTIVE,
                Dormancy::PoolInUse => {
                    nvthreads::runtime::warn_pool_in_use();
                    DORMANT
                }
                Dormancy::Disabled | Dormancy::NotUsed => DORMANT,
            };
            MODE.store(mode, Ordering::Release);
            mode == DORMANT
        }
    }
}

/// The running runtime, or `None` when dormant.
fn active() -> Option<&'static Runtime> {
    (!dormant()).then(runtime)
}

/// The running runtime for a call of the persistence API, or `None` when dormant; ends a
/// child of `fork()` outside `pthread_create` (`runtime::fork`).
fn api() -> Option<&'static Runtime> {
    nvthreads::runtime::fork::refuse_if_forked("a call of the persistence API");
    active()
}

/// Starts the runtime before `main` (and before the program's own constructors): its
/// allocations are then shared, and the program's globals are adopted before anything
/// writes them.
extern "C" fn start_before_main() {
    heap::find_libc_text();
    let _ = active();
    heap::enable();
}

#[used]
#[unsafe(link_section = ".init_array")]
static START_BEFORE_MAIN: extern "C" fn() = start_before_main;

/// The next definition of `name` after this library (libc's), looked up once.
fn real(cache: &AtomicPtr<c_void>, name: &CStr) -> *mut c_void {
    let mut found = cache.load(Ordering::Acquire);
    if found.is_null() {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name.
        found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        if found.is_null() {
            nvthreads::runtime::fatal(&format!("no next definition of {name:?}"));
        }
        cache.store(found, Ordering::Release);
    }
    found
}

/// The next definition of a function, typed: `next!(c"name" => fn(args) -> ret)`.
macro_rules! next {
    ($name:expr => $ty:ty) => {{
        static CACHE: std::sync::atomic::AtomicPtr<libc::c_void> =
            std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
        let found = $crate::real(&CACHE, $name);
        // SAFETY: dlsym returned the libc function of this name, whose C signature is `$ty`.
        unsafe { std::mem::transmute::<*mut libc::c_void, $ty>(found) }
    }};
}
pub(crate) use next;

/// Starts the runtime (opens or creates the pool, recovers it). It also starts before
/// `main` on its own.
#[unsafe(no_mangle)]
pub extern "C" fn nvt_init() {
    let _ = api();
}

/// 1 if the runtime runs in this process (its threads are processes), 0 if it is dormant:
/// for a library whose state cannot be shared by thread-processes (PMFS's preload) to
/// refuse with a message instead of misbehaving.
#[unsafe(no_mangle)]
pub extern "C" fn nvt_active() -> c_int {
    c_int::from(active().is_some())
}

/// Whether the previous run of the program did not exit cleanly.
#[unsafe(no_mangle)]
pub extern "C" fn crashed() -> c_int {
    api().map_or(0, |runtime| c_int::from(runtime.crashed()))
}

/// The original NVthreads name of [`crashed`].
#[unsafe(no_mangle)]
pub extern "C" fn isCrashed() -> c_int {
    crashed()
}

/// The last committed epoch (grows by one per global commit point).
#[unsafe(no_mangle)]
pub extern "C" fn nvt_durable_epoch() -> u64 {
    api().map_or(0, Runtime::durable_epoch)
}

/// The epoch that makes the calling thread's writes up to its last synchronisation point
/// durable.
#[unsafe(no_mangle)]
pub extern "C" fn nvt_section_epoch() -> u64 {
    api().map_or(0, Runtime::section_epoch)
}

/// Commits the calling thread's writes made outside critical sections.
#[unsafe(no_mangle)]
pub extern "C" fn nvcheckpoint() {
    if let Some(runtime) = api() {
        runtime.sync_point();
    }
}

fn name_of<'a>(name: *const c_char) -> Option<&'a [u8]> {
    if name.is_null() {
        return None;
    }
    // SAFETY: the C contract (header): a non-null name is a NUL-terminated string.
    Some(unsafe { CStr::from_ptr(name) }.to_bytes())
}

/// Allocates `size` bytes of persistent heap, or returns the existing object called `name`.
///
/// # Safety
/// `name` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmalloc(size: size_t, name: *const c_char) -> *mut c_void {
    let result = match api() {
        Some(runtime) => runtime
            .nvmalloc(size as u64, name_of(name))
            .map(<*mut u8>::cast),
        None => heap::dormant_nvmalloc(size, name_of(name)),
    };
    result.unwrap_or_else(|error| {
        let name = name_of(name).map(String::from_utf8_lossy);
        let message = match name {
            Some(name) => format!("nvmalloc({size}, \"{name}\"): {error}"),
            None => format!("nvmalloc({size}, NULL): {error}"),
        };
        fail(error.errno(), &message);
        std::ptr::null_mut()
    })
}

/// The reason of the calling thread's last failed call of the persistence API (empty
/// before any).
static LAST_ERROR: std::sync::Mutex<Option<std::ffi::CString>> = std::sync::Mutex::new(None);

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(code: c_int) {
    // SAFETY: __errno_location returns the calling thread's errno, always valid.
    unsafe { *libc::__errno_location() = code };
}

/// Records a failure of the persistence API: `errno`, the message `nvt_error` returns, and
/// with `NVT_DEBUG=1` a line on stderr.
fn fail(errno: c_int, message: &str) {
    if nvthreads::runtime::env::env().debug {
        nvthreads::runtime::warn_debug(message);
    }
    let text = std::ffi::CString::new(message.replace('\0', " ")).unwrap_or_default();
    *LAST_ERROR.lock().unwrap_or_else(|e| e.into_inner()) = Some(text);
    set_errno(errno);
}

/// Why the calling thread's last failed call of the persistence API failed (a message that
/// stays valid until its next failure), or an empty string.
#[unsafe(no_mangle)]
pub extern "C" fn nvt_error() -> *const c_char {
    let guard = LAST_ERROR.lock().unwrap_or_else(|e| e.into_inner());
    match guard.as_ref() {
        // The string lives in the static until the next failure replaces it.
        Some(text) => text.as_ptr(),
        None => c"".as_ptr(),
    }
}

/// Copies at most `size` recovered bytes of the object `name` into `dest`. A NULL `dest`
/// with a nonzero `size` copies nothing: 0, `EINVAL` and a reason for `nvt_error`.
///
/// # Safety
/// `dest` is NULL or valid for `size` bytes of writes; `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvrecover(dest: *mut c_void, size: size_t, name: *const c_char) -> size_t {
    if dest.is_null() && size > 0 {
        let name = name_of(name).map_or("NULL".into(), |name| {
            format!("\"{}\"", String::from_utf8_lossy(name))
        });
        fail(
            libc::EINVAL,
            &format!("nvrecover(NULL, {size}, {name}): the destination is NULL"),
        );
        return 0;
    }
    let (Some(name), Some(runtime)) = (name_of(name), api()) else {
        return 0;
    };
    // SAFETY: forwarded from the caller's contract.
    unsafe { runtime.nvrecover(dest.cast(), size as u64, name) as size_t }
}

fn touch(buf: *mut c_void, len: usize) {
    if let Some(tracker) = Tracker::active() {
        tracker.touch_for_kernel(buf as usize, len);
    }
}

/// `read(2)` into tracked memory.
///
/// # Safety
/// As `read(2)`: `buf` is valid for `count` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    touch(buf, count);
    let real = next!(c"read" => unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t);
    // SAFETY: forwarded from the caller's contract.
    unsafe { real(fd, buf, count) }
}

/// `pread(2)` into tracked memory.
///
/// # Safety
/// As `pread(2)`: `buf` is valid for `count` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pread(
    fd: c_int,
    buf: *mut c_void,
    count: size_t,
    offset: libc::off_t,
) -> ssize_t {
    touch(buf, count);
    let real =
        next!(c"pread" => unsafe extern "C" fn(c_int, *mut c_void, size_t, libc::off_t) -> ssize_t);
    // SAFETY: forwarded from the caller's contract.
    unsafe { real(fd, buf, count, offset) }
}

/// `fread(3)` into tracked memory (glibc reads large requests straight into the buffer).
///
/// # Safety
/// As `fread(3)`: `ptr` is valid for `size * nmemb` bytes of writes; `stream` is open.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fread(
    ptr: *mut c_void,
    size: size_t,
    nmemb: size_t,
    stream: *mut libc::FILE,
) -> size_t {
    touch(ptr, size.saturating_mul(nmemb));
    let real = next!(c"fread" => unsafe extern "C" fn(*mut c_void, size_t, size_t, *mut libc::FILE) -> size_t);
    // SAFETY: forwarded from the caller's contract.
    unsafe { real(ptr, size, nmemb, stream) }
}
