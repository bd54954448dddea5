//! `libnvthreads_rt.so`: the C ABI of the NVthreads runtime (`include/nvthreads.h`).
//!
//! Exports the interposed pthread functions and the persistence API. Link a program with
//! `-lnvthreads_rt` (before libc, which is the default order) or load it with `LD_PRELOAD`;
//! either way these definitions come first in symbol lookup and replace libc's. The runtime
//! implements every interposed pthread function itself (threads are processes, locks are
//! futexes in shared memory). `read`, `pread` and `fread` are wrapped: they make the tracked
//! pages of the destination writable first (a kernel write into a write-protected page would
//! fail with `EFAULT` instead of faulting), then call the real function found with
//! `dlsym(RTLD_NEXT)`. Everything here is a thin shell over `nvthreads::runtime`.

use libc::{c_char, c_int, c_uint, c_void, pthread_t, size_t, ssize_t};
use nvthreads::pages::Tracker;
use nvthreads::runtime::runtime;
use std::ffi::CStr;
use std::sync::atomic::{AtomicPtr, Ordering};

type StartRoutine = extern "C" fn(*mut c_void) -> *mut c_void;

fn key<T>(object: *const T) -> u64 {
    object as u64
}

/// Starts the runtime (opens or creates the pool, recovers it). Other entry points do it on
/// first use too.
#[unsafe(no_mangle)]
pub extern "C" fn nvt_init() {
    runtime();
}

/// Whether the previous run of the program did not exit cleanly.
#[unsafe(no_mangle)]
pub extern "C" fn crashed() -> c_int {
    c_int::from(runtime().crashed())
}

/// The original NVthreads name of [`crashed`].
#[unsafe(no_mangle)]
pub extern "C" fn isCrashed() -> c_int {
    crashed()
}

/// The last committed epoch (grows by one per global commit point).
#[unsafe(no_mangle)]
pub extern "C" fn nvt_durable_epoch() -> u64 {
    runtime().durable_epoch()
}

/// Commits the calling thread's writes made outside critical sections.
#[unsafe(no_mangle)]
pub extern "C" fn nvcheckpoint() {
    runtime().sync_point();
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
    runtime().nvmalloc(size as u64, name_of(name)).cast()
}

/// Copies at most `size` recovered bytes of the object `name` into `dest`.
///
/// # Safety
/// `dest` is valid for `size` bytes of writes; `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvrecover(dest: *mut c_void, size: size_t, name: *const c_char) -> size_t {
    let Some(name) = name_of(name) else {
        return 0;
    };
    // SAFETY: forwarded from the caller's contract.
    unsafe { runtime().nvrecover(dest.cast(), size as u64, name) as size_t }
}

/// Mutexes need no initialisation: the runtime keys them by address.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_mutex_init(
    mutex: *mut libc::pthread_mutex_t,
    _attr: *const libc::pthread_mutexattr_t,
) -> c_int {
    runtime();
    let _ = key(mutex);
    0
}

/// Kept for symmetry; the slot stays reserved for the address.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_mutex_destroy(_mutex: *mut libc::pthread_mutex_t) -> c_int {
    0
}

/// Acquires; at lock depth 0 → 1 this begins a durable section.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_mutex_lock(mutex: *mut libc::pthread_mutex_t) -> c_int {
    runtime().mutex_lock(key(mutex))
}

/// A real trylock: `EBUSY` if the mutex is held.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_mutex_trylock(mutex: *mut libc::pthread_mutex_t) -> c_int {
    runtime().mutex_trylock(key(mutex))
}

/// Releases; at lock depth 1 → 0 the section ends and is committed.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_mutex_unlock(mutex: *mut libc::pthread_mutex_t) -> c_int {
    runtime().mutex_unlock(key(mutex))
}

/// Condition variables need no initialisation.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_cond_init(
    _cond: *mut libc::pthread_cond_t,
    _attr: *const libc::pthread_condattr_t,
) -> c_int {
    runtime();
    0
}

/// Kept for symmetry.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_cond_destroy(_cond: *mut libc::pthread_cond_t) -> c_int {
    0
}

/// Waits; the mutex is released (and the section ends if it was the last lock).
#[unsafe(no_mangle)]
pub extern "C" fn pthread_cond_wait(
    cond: *mut libc::pthread_cond_t,
    mutex: *mut libc::pthread_mutex_t,
) -> c_int {
    runtime().cond_wait(key(cond), key(mutex))
}

/// Wakes one waiter.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_cond_signal(cond: *mut libc::pthread_cond_t) -> c_int {
    runtime().cond_signal(key(cond), false)
}

/// Wakes every waiter.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_cond_broadcast(cond: *mut libc::pthread_cond_t) -> c_int {
    runtime().cond_signal(key(cond), true)
}

/// Sets the barrier's thread count.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_barrier_init(
    barrier: *mut libc::pthread_barrier_t,
    _attr: *const libc::pthread_barrierattr_t,
    count: c_uint,
) -> c_int {
    runtime().barrier_init(key(barrier), count)
}

/// Kept for symmetry.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_barrier_destroy(_barrier: *mut libc::pthread_barrier_t) -> c_int {
    0
}

/// A synchronisation point, then waits for the other threads.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_barrier_wait(barrier: *mut libc::pthread_barrier_t) -> c_int {
    runtime().barrier_wait(key(barrier))
}

/// Creates a thread — a process sharing the heap.
///
/// # Safety
/// `thread` is valid for a write; `start` is a valid start routine.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_create(
    thread: *mut pthread_t,
    _attr: *const libc::pthread_attr_t,
    start: Option<StartRoutine>,
    arg: *mut c_void,
) -> c_int {
    let Some(start) = start else {
        return libc::EINVAL;
    };
    match runtime().spawn(start, arg as usize) {
        Ok(handle) => {
            // SAFETY: the caller passes a writable pthread_t.
            unsafe { thread.write(handle as pthread_t) };
            0
        }
        Err(errno) => errno,
    }
}

/// Waits for a thread and reaps it.
///
/// # Safety
/// `retval` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_join(thread: pthread_t, retval: *mut *mut c_void) -> c_int {
    match runtime().join(thread) {
        Ok(value) => {
            if !retval.is_null() {
                // SAFETY: non-null, writable per the caller's contract.
                unsafe { retval.write(value as *mut c_void) };
            }
            0
        }
        Err(errno) => errno,
    }
}

/// Ends the calling thread (the main thread: waits for all others, then exits with 0).
#[unsafe(no_mangle)]
pub extern "C" fn pthread_exit(retval: *mut c_void) -> ! {
    let runtime = runtime();
    if runtime.is_child() {
        runtime.exit_thread(retval as u64);
    }
    runtime.join_all();
    std::process::exit(0)
}

/// This thread's handle.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_self() -> pthread_t {
    runtime().self_handle() as pthread_t
}

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

fn touch(buf: *mut c_void, len: usize) {
    if let Some(tracker) = Tracker::active() {
        tracker.touch_for_kernel(buf as usize, len);
    }
}

type ReadFn = unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t;
type PreadFn = unsafe extern "C" fn(c_int, *mut c_void, size_t, libc::off_t) -> ssize_t;
type FreadFn = unsafe extern "C" fn(*mut c_void, size_t, size_t, *mut libc::FILE) -> size_t;

static REAL_READ: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static REAL_PREAD: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
static REAL_FREAD: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// `read(2)` into tracked memory.
///
/// # Safety
/// As `read(2)`: `buf` is valid for `count` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    touch(buf, count);
    // SAFETY: dlsym returned libc's `read`, which has this signature.
    let real: ReadFn = unsafe { std::mem::transmute(real(&REAL_READ, c"read")) };
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
    // SAFETY: dlsym returned libc's `pread`, which has this signature.
    let real: PreadFn = unsafe { std::mem::transmute(real(&REAL_PREAD, c"pread")) };
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
    // SAFETY: dlsym returned libc's `fread`, which has this signature.
    let real: FreadFn = unsafe { std::mem::transmute(real(&REAL_FREAD, c"fread")) };
    // SAFETY: forwarded from the caller's contract.
    unsafe { real(ptr, size, nmemb, stream) }
}
