//! C11 `<threads.h>` on the runtime's pthreads. glibc implements `thrd_*`, `mtx_*`, `cnd_*`,
//! `tss_*` and `call_once` by calling its own pthreads internally, never through the PLT,
//! so without these definitions a C11 program would run its threads as real threads in one
//! process, outside the runtime, with nothing logged. Each function here calls the
//! interposed pthread function of this library (which forwards to glibc's when the runtime
//! is dormant) and maps its error number to the C11 result codes.
//!
//! The C11 types have the layout of their pthread counterparts in glibc: `thrd_t` is a
//! `pthread_t`, `mtx_t` a `pthread_mutex_t`, `cnd_t` a `pthread_cond_t`, `tss_t` a
//! `pthread_key_t` and `once_flag` a `pthread_once_t`.

use crate::pthread;
use libc::{c_int, c_void, pthread_t, timespec};

/// `thrd_success`, `thrd_busy`, `thrd_error`, `thrd_nomem`, `thrd_timedout` (C11 7.26.1).
pub const THRD_SUCCESS: c_int = 0;
pub const THRD_BUSY: c_int = 1;
pub const THRD_ERROR: c_int = 2;
pub const THRD_NOMEM: c_int = 3;
pub const THRD_TIMEDOUT: c_int = 4;
/// `mtx_recursive`: the bit of `mtx_init`'s type asking for a recursive mutex.
const MTX_RECURSIVE: c_int = 1;

/// A C11 thread's start routine: `int (*)(void *)`.
type ThrdStart = extern "C" fn(*mut c_void) -> c_int;

/// The C11 result code of a pthread error number.
fn code(errno: c_int) -> c_int {
    match errno {
        0 => THRD_SUCCESS,
        libc::EBUSY => THRD_BUSY,
        libc::ENOMEM => THRD_NOMEM,
        libc::ETIMEDOUT => THRD_TIMEDOUT,
        _ => THRD_ERROR,
    }
}

/// What a C11 thread starts with: its `int`-returning routine and argument.
struct C11Start {
    start: ThrdStart,
    arg: *mut c_void,
}

/// The pthread start routine of a C11 thread: runs the C11 routine and returns its `int`
/// as the thread's result (`thrd_join` reads it back).
extern "C" fn run_c11_thread(boxed: *mut c_void) -> *mut c_void {
    // SAFETY: `thrd_create` passed a `Box<C11Start>` leaked for this thread (its own copy
    // of the creator's memory when the thread is a process).
    let start = unsafe { Box::from_raw(boxed.cast::<C11Start>()) };
    let result = (start.start)(start.arg);
    result as isize as *mut c_void
}

/// Creates a C11 thread (a thread-process when the runtime runs).
///
/// # Safety
/// `thread` is valid for a write; `start` is a valid start routine.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thrd_create(
    thread: *mut pthread_t,
    start: Option<ThrdStart>,
    arg: *mut c_void,
) -> c_int {
    let Some(start) = start else {
        return THRD_ERROR;
    };
    let boxed = Box::into_raw(Box::new(C11Start { start, arg }));
    let as_process = crate::active().is_some();
    // SAFETY: forwarded from the caller's contract; the routine takes the box.
    let errno = unsafe {
        pthread::pthread_create(thread, std::ptr::null(), Some(run_c11_thread), boxed.cast())
    };
    if errno != 0 || as_process {
        // Not started, or started as a process with its own copy of the box: this one is
        // the creator's to free.
        // SAFETY: made by `Box::into_raw` above and not used by a thread in this process.
        drop(unsafe { Box::from_raw(boxed) });
    }
    code(errno)
}

/// Waits for a C11 thread; stores its `int` result in `result` if not null.
///
/// # Safety
/// `result` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thrd_join(thread: pthread_t, result: *mut c_int) -> c_int {
    let mut value: *mut c_void = std::ptr::null_mut();
    // SAFETY: `value` is a valid place for the thread's result.
    let errno = unsafe { pthread::pthread_join(thread, &mut value) };
    if errno == 0 && !result.is_null() {
        // The routine's `int`, widened by `run_c11_thread` or `thrd_exit`.
        // SAFETY: non-null, writable per the caller's contract.
        unsafe { result.write(value as isize as c_int) };
    }
    code(errno)
}

/// Ends the calling C11 thread with `result`.
#[unsafe(no_mangle)]
pub extern "C" fn thrd_exit(result: c_int) -> ! {
    pthread::pthread_exit(result as isize as *mut c_void)
}

/// Detaches a C11 thread.
#[unsafe(no_mangle)]
pub extern "C" fn thrd_detach(thread: pthread_t) -> c_int {
    code(pthread::pthread_detach(thread))
}

/// The calling thread's handle.
#[unsafe(no_mangle)]
pub extern "C" fn thrd_current() -> pthread_t {
    pthread::pthread_self()
}

/// Whether two handles name the same thread (non-zero if so).
#[unsafe(no_mangle)]
pub extern "C" fn thrd_equal(left: pthread_t, right: pthread_t) -> c_int {
    c_int::from(left == right)
}

/// Gives up the processor.
#[unsafe(no_mangle)]
pub extern "C" fn thrd_yield() {
    // SAFETY: sched_yield has no preconditions.
    unsafe { libc::sched_yield() };
}

/// Sleeps for `duration`: 0, -1 if a signal interrupted it (the time left in `remaining`
/// if not null), another negative value on error.
///
/// # Safety
/// `duration` is a valid timespec; `remaining` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thrd_sleep(duration: *const timespec, remaining: *mut timespec) -> c_int {
    // SAFETY: forwarded from the caller's contract.
    let errno = unsafe { libc::clock_nanosleep(libc::CLOCK_REALTIME, 0, duration, remaining) };
    match errno {
        0 => 0,
        libc::EINTR => -1,
        _ => -2,
    }
}

/// Initialises a mutex of C11 type `kind` (`mtx_plain` or `mtx_timed`, optionally with
/// `mtx_recursive`).
///
/// # Safety
/// `mutex` points to a `mtx_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mtx_init(mutex: *mut libc::pthread_mutex_t, kind: c_int) -> c_int {
    let mut attr = std::mem::MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
    let pthread_kind = if kind & MTX_RECURSIVE != 0 {
        libc::PTHREAD_MUTEX_RECURSIVE
    } else {
        libc::PTHREAD_MUTEX_NORMAL
    };
    // SAFETY: glibc's attribute functions on a local attribute object, initialised first;
    // `mutex` per the caller's contract.
    unsafe {
        if libc::pthread_mutexattr_init(attr.as_mut_ptr()) != 0 {
            return THRD_ERROR;
        }
        libc::pthread_mutexattr_settype(attr.as_mut_ptr(), pthread_kind);
        let errno = pthread::pthread_mutex_init(mutex, attr.as_ptr());
        libc::pthread_mutexattr_destroy(attr.as_mut_ptr());
        code(errno)
    }
}

/// Locks a mutex.
#[unsafe(no_mangle)]
pub extern "C" fn mtx_lock(mutex: *mut libc::pthread_mutex_t) -> c_int {
    code(pthread::pthread_mutex_lock(mutex))
}

/// Locks a mutex, waiting until an absolute `TIME_UTC` (`CLOCK_REALTIME`) deadline.
///
/// # Safety
/// `at` is a valid timespec.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mtx_timedlock(
    mutex: *mut libc::pthread_mutex_t,
    at: *const timespec,
) -> c_int {
    // SAFETY: forwarded from the caller's contract.
    code(unsafe { pthread::pthread_mutex_timedlock(mutex, at) })
}

/// Locks a mutex if it is free: `thrd_busy` if not.
#[unsafe(no_mangle)]
pub extern "C" fn mtx_trylock(mutex: *mut libc::pthread_mutex_t) -> c_int {
    code(pthread::pthread_mutex_trylock(mutex))
}

/// Unlocks a mutex.
#[unsafe(no_mangle)]
pub extern "C" fn mtx_unlock(mutex: *mut libc::pthread_mutex_t) -> c_int {
    code(pthread::pthread_mutex_unlock(mutex))
}

/// Destroys a mutex.
#[unsafe(no_mangle)]
pub extern "C" fn mtx_destroy(mutex: *mut libc::pthread_mutex_t) {
    pthread::pthread_mutex_destroy(mutex);
}

/// Initialises a condition variable.
///
/// # Safety
/// `cond` points to a `cnd_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cnd_init(cond: *mut libc::pthread_cond_t) -> c_int {
    // SAFETY: forwarded from the caller's contract; default attributes.
    code(unsafe { pthread::pthread_cond_init(cond, std::ptr::null()) })
}

/// Wakes one waiter.
#[unsafe(no_mangle)]
pub extern "C" fn cnd_signal(cond: *mut libc::pthread_cond_t) -> c_int {
    code(pthread::pthread_cond_signal(cond))
}

/// Wakes every waiter.
#[unsafe(no_mangle)]
pub extern "C" fn cnd_broadcast(cond: *mut libc::pthread_cond_t) -> c_int {
    code(pthread::pthread_cond_broadcast(cond))
}

/// Waits on a condition variable, releasing `mutex` meanwhile.
#[unsafe(no_mangle)]
pub extern "C" fn cnd_wait(
    cond: *mut libc::pthread_cond_t,
    mutex: *mut libc::pthread_mutex_t,
) -> c_int {
    code(pthread::pthread_cond_wait(cond, mutex))
}

/// Waits on a condition variable until an absolute `TIME_UTC` deadline.
///
/// # Safety
/// `at` is a valid timespec.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cnd_timedwait(
    cond: *mut libc::pthread_cond_t,
    mutex: *mut libc::pthread_mutex_t,
    at: *const timespec,
) -> c_int {
    // SAFETY: forwarded from the caller's contract.
    code(unsafe { pthread::pthread_cond_timedwait(cond, mutex, at) })
}

/// Destroys a condition variable.
#[unsafe(no_mangle)]
pub extern "C" fn cnd_destroy(cond: *mut libc::pthread_cond_t) {
    pthread::pthread_cond_destroy(cond);
}

/// Runs `routine` once per flag, over all threads.
///
/// # Safety
/// `flag` points to a `once_flag`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn call_once(
    flag: *mut libc::pthread_once_t,
    routine: Option<extern "C" fn()>,
) {
    pthread::pthread_once(flag, routine);
}

/// Creates a thread-specific storage key (thread-local in each thread-process; its
/// destructor does not run at a thread's end when threads are processes).
///
/// # Safety
/// `key` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tss_create(
    key: *mut libc::pthread_key_t,
    destructor: Option<unsafe extern "C" fn(*mut c_void)>,
) -> c_int {
    // SAFETY: forwarded from the caller's contract.
    code(unsafe { libc::pthread_key_create(key, destructor) })
}

/// The calling thread's value of `key`.
#[unsafe(no_mangle)]
pub extern "C" fn tss_get(key: libc::pthread_key_t) -> *mut c_void {
    // SAFETY: glibc checks the key; an unknown key reads as null.
    unsafe { libc::pthread_getspecific(key) }
}

/// Sets the calling thread's value of `key`.
#[unsafe(no_mangle)]
pub extern "C" fn tss_set(key: libc::pthread_key_t, value: *mut c_void) -> c_int {
    // SAFETY: glibc checks the key (EINVAL for an unknown one).
    code(unsafe { libc::pthread_setspecific(key, value) })
}

/// Deletes `key`.
#[unsafe(no_mangle)]
pub extern "C" fn tss_delete(key: libc::pthread_key_t) {
    // SAFETY: glibc checks the key.
    unsafe { libc::pthread_key_delete(key) };
}
