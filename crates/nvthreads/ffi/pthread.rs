//! The interposed pthread functions. Each forwards to libc's when the runtime is dormant;
//! otherwise threads are processes and synchronisation objects are slots in shared memory,
//! keyed by the object's address (its bytes are never used, so static initialisers and
//! `*_init` both work; a mutex's static initialiser is read once for its kind).
//!
//! Thread handles are small integers (slot + 1). Every function of the pthread API that
//! takes a handle is interposed here, so none of glibc's dereferences a handle that is not
//! its own; `pthread_cancel` is not supported (`ENOTSUP`).

use crate::next;
use libc::{c_char, c_int, c_uint, c_void, pthread_t, size_t, timespec};
use nvthreads::runtime::rwlock::Mode as RwMode;
use nvthreads::runtime::{JoinWait, Runtime, fork};
use nvthreads::shared::{Clock, mutex_kind};

type StartRoutine = extern "C" fn(*mut c_void) -> *mut c_void;

// Attribute getters of libc (not interposed), missing from the `libc` crate.
unsafe extern "C" {
    fn pthread_attr_getdetachstate(attr: *const libc::pthread_attr_t, state: *mut c_int) -> c_int;
    fn pthread_mutexattr_gettype(attr: *const libc::pthread_mutexattr_t, kind: *mut c_int)
    -> c_int;
    fn pthread_rwlockattr_getkind_np(
        attr: *const libc::pthread_rwlockattr_t,
        kind: *mut c_int,
    ) -> c_int;
}

fn key<T>(object: *const T) -> u64 {
    object as u64
}

/// The running runtime, or `None` when dormant; ends a child of `fork()` outside
/// `pthread_create` (`runtime::fork`).
fn active() -> Option<Active> {
    nvthreads::runtime::fork::refuse_if_forked("a pthread call");
    crate::active().map(Active::new)
}

/// The runtime for the length of one interposed call, which leaves `errno` as the caller had
/// it. glibc's pthread functions report errors by their result and never change `errno`, and
/// programs rely on that (`if (write(...) < 0) { lock; report strerror(errno); }`); the
/// runtime's own system calls would change it (a futex wait that finds its word changed
/// sets `EAGAIN`, a merge's `mprotect`s and `madvise`s).
struct Active {
    runtime: &'static Runtime,
    errno: c_int,
}

impl Active {
    fn new(runtime: &'static Runtime) -> Self {
        // SAFETY: `__errno_location` returns this thread's errno, valid for its life.
        let errno = unsafe { *libc::__errno_location() };
        Self { runtime, errno }
    }
}

impl std::ops::Deref for Active {
    type Target = Runtime;

    fn deref(&self) -> &Runtime {
        self.runtime
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        crate::set_errno(self.errno);
    }
}

/// A deadline the runtime can wait for, or `EINVAL`.
fn deadline(at: *const timespec) -> Result<&'static timespec, c_int> {
    // SAFETY: the C contract: `at` is null or a valid timespec that outlives the call (the
    // 'static is confined to the call that uses it).
    match unsafe { at.as_ref() } {
        Some(at) if (0..1_000_000_000).contains(&at.tv_nsec) => Ok(at),
        _ => Err(libc::EINVAL),
    }
}

/// The kind a mutex's static initialiser stored in the object (glibc's `__kind`, the fifth
/// `int` of `pthread_mutex_t`).
fn static_kind(mutex: *const libc::pthread_mutex_t) -> u32 {
    // SAFETY: `mutex` points to a pthread_mutex_t (40 bytes), always readable.
    let kind = unsafe { mutex.cast::<c_int>().add(4).read_volatile() };
    match kind & 3 {
        1 => mutex_kind::RECURSIVE,
        2 => mutex_kind::ERRORCHECK,
        _ => mutex_kind::NORMAL,
    }
}

// ---------------------------------------------------------------------------------------
// Threads

/// Creates a thread — a process sharing the heap. `attr` may ask for a detached thread;
/// its other attributes (stack size, scheduling) do not apply to a process and are ignored.
///
/// # Safety
/// `thread` is valid for a write; `attr` is null or initialised; `start` is a valid start
/// routine.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_create(
    thread: *mut pthread_t,
    attr: *const libc::pthread_attr_t,
    start: Option<StartRoutine>,
    arg: *mut c_void,
) -> c_int {
    let Some(runtime) = active() else {
        let real = next!(c"pthread_create" => unsafe extern "C" fn(*mut pthread_t, *const libc::pthread_attr_t, Option<StartRoutine>, *mut c_void) -> c_int);
        // SAFETY: forwarded from the caller's contract.
        return unsafe { real(thread, attr, start, arg) };
    };
    let Some(start) = start else {
        return libc::EINVAL;
    };
    let mut state = libc::PTHREAD_CREATE_JOINABLE;
    // SAFETY: a non-null attr is initialised (C contract); libc's getter reads it.
    if !attr.is_null() && unsafe { pthread_attr_getdetachstate(attr, &mut state) } != 0 {
        return libc::EINVAL;
    }
    let detached = state == libc::PTHREAD_CREATE_DETACHED;
    match fork::creating_thread(|| runtime.spawn(start, arg as usize, detached)) {
        Ok(handle) => {
            // SAFETY: the caller passes a writable pthread_t.
            unsafe { thread.write(handle as pthread_t) };
            0
        }
        Err(errno) => errno,
    }
}

fn join_result(result: Result<u64, c_int>, retval: *mut *mut c_void) -> c_int {
    match result {
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

/// Waits for a thread and reaps it.
///
/// # Safety
/// `retval` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_join(thread: pthread_t, retval: *mut *mut c_void) -> c_int {
    match active() {
        Some(runtime) => join_result(runtime.join(thread), retval),
        None => {
            let real = next!(c"pthread_join" => unsafe extern "C" fn(pthread_t, *mut *mut c_void) -> c_int);
            // SAFETY: forwarded.
            unsafe { real(thread, retval) }
        }
    }
}

/// Joins a thread that has ended; `EBUSY` if it still runs.
///
/// # Safety
/// `retval` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_tryjoin_np(thread: pthread_t, retval: *mut *mut c_void) -> c_int {
    match active() {
        Some(runtime) => join_result(runtime.join_until(thread, JoinWait::Try), retval),
        None => {
            let real = next!(c"pthread_tryjoin_np" => unsafe extern "C" fn(pthread_t, *mut *mut c_void) -> c_int);
            // SAFETY: forwarded.
            unsafe { real(thread, retval) }
        }
    }
}

/// Joins a thread, waiting until an absolute `CLOCK_REALTIME` deadline.
///
/// # Safety
/// `retval` is null or valid for a write; `abstime` is a valid timespec.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_timedjoin_np(
    thread: pthread_t,
    retval: *mut *mut c_void,
    abstime: *const timespec,
) -> c_int {
    let Some(runtime) = active() else {
        let real = next!(c"pthread_timedjoin_np" => unsafe extern "C" fn(pthread_t, *mut *mut c_void, *const timespec) -> c_int);
        // SAFETY: forwarded.
        return unsafe { real(thread, retval, abstime) };
    };
    match deadline(abstime) {
        Ok(at) => join_result(runtime.join_until(thread, JoinWait::Until(at)), retval),
        Err(errno) => errno,
    }
}

/// Ends the calling thread (the main thread: waits for all others, then exits with 0).
#[unsafe(no_mangle)]
pub extern "C" fn pthread_exit(retval: *mut c_void) -> ! {
    let Some(runtime) = active() else {
        let real = next!(c"pthread_exit" => unsafe extern "C" fn(*mut c_void) -> !);
        // SAFETY: forwarded.
        unsafe { real(retval) }
    };
    if runtime.is_child() {
        runtime.exit_thread(retval as u64);
    }
    runtime.join_all();
    std::process::exit(0)
}

/// This thread's handle.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_self() -> pthread_t {
    match active() {
        Some(runtime) => runtime.self_handle() as pthread_t,
        None => {
            let real = next!(c"pthread_self" => unsafe extern "C" fn() -> pthread_t);
            // SAFETY: no arguments.
            unsafe { real() }
        }
    }
}

/// Detaches a thread: it frees its own slot when it ends.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_detach(thread: pthread_t) -> c_int {
    match active() {
        Some(runtime) => runtime.detach(thread),
        None => {
            let real = next!(c"pthread_detach" => unsafe extern "C" fn(pthread_t) -> c_int);
            // SAFETY: forwarded.
            unsafe { real(thread) }
        }
    }
}

/// Sends a signal to a thread-process (0: only checks that it exists).
#[unsafe(no_mangle)]
pub extern "C" fn pthread_kill(thread: pthread_t, signal: c_int) -> c_int {
    match active() {
        Some(runtime) => runtime.kill_thread(thread, signal),
        None => {
            let real = next!(c"pthread_kill" => unsafe extern "C" fn(pthread_t, c_int) -> c_int);
            // SAFETY: forwarded.
            unsafe { real(thread, signal) }
        }
    }
}

/// Cancellation is not supported with threads as processes: `ENOTSUP`.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_cancel(thread: pthread_t) -> c_int {
    match active() {
        Some(_) => libc::ENOTSUP,
        None => {
            let real = next!(c"pthread_cancel" => unsafe extern "C" fn(pthread_t) -> c_int);
            // SAFETY: forwarded.
            unsafe { real(thread) }
        }
    }
}

fn comm_path(runtime: &Runtime, thread: pthread_t) -> Result<String, c_int> {
    runtime
        .thread_pid(thread)
        .map(|pid| format!("/proc/{pid}/comm"))
        .ok_or(libc::ESRCH)
}

/// Names a thread-process (at most 15 bytes; another thread takes the name at its next
/// synchronisation point).
///
/// # Safety
/// `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_setname_np(thread: pthread_t, name: *const c_char) -> c_int {
    let Some(runtime) = active() else {
        let real =
            next!(c"pthread_setname_np" => unsafe extern "C" fn(pthread_t, *const c_char) -> c_int);
        // SAFETY: forwarded.
        return unsafe { real(thread, name) };
    };
    // SAFETY: the C contract.
    let text = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
    if text.len() > 15 {
        return libc::ERANGE;
    }
    runtime.set_thread_name(thread, text)
}

/// A thread-process's name.
///
/// # Safety
/// `buf` is valid for `len` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_getname_np(
    thread: pthread_t,
    buf: *mut c_char,
    len: size_t,
) -> c_int {
    let Some(runtime) = active() else {
        let real = next!(c"pthread_getname_np" => unsafe extern "C" fn(pthread_t, *mut c_char, size_t) -> c_int);
        // SAFETY: forwarded.
        return unsafe { real(thread, buf, len) };
    };
    let text = match runtime.pending_thread_name(thread) {
        Some(pending) => {
            let len = pending.iter().position(|&b| b == 0).unwrap_or(15);
            pending[..len].to_vec()
        }
        None => match comm_path(&runtime, thread).map(std::fs::read) {
            Ok(Ok(text)) => text,
            Ok(Err(error)) => return error.raw_os_error().unwrap_or(libc::EIO),
            Err(errno) => return errno,
        },
    };
    let name = text.strip_suffix(b"\n").unwrap_or(&text);
    if name.len() >= len {
        return libc::ERANGE;
    }
    // SAFETY: `buf` has `len > name.len()` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(name.as_ptr(), buf.cast::<u8>(), name.len());
        buf.add(name.len()).write(0);
    }
    0
}

/// Sets a thread-process's CPU affinity.
///
/// # Safety
/// `set` is valid for `size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_setaffinity_np(
    thread: pthread_t,
    size: size_t,
    set: *const libc::cpu_set_t,
) -> c_int {
    let Some(runtime) = active() else {
        let real = next!(c"pthread_setaffinity_np" => unsafe extern "C" fn(pthread_t, size_t, *const libc::cpu_set_t) -> c_int);
        // SAFETY: forwarded.
        return unsafe { real(thread, size, set) };
    };
    let Some(pid) = runtime.thread_pid(thread) else {
        return libc::ESRCH;
    };
    // SAFETY: forwarded from the caller's contract.
    match unsafe { libc::sched_setaffinity(pid, size, set) } {
        0 => 0,
        _ => errno(),
    }
}

/// A thread-process's CPU affinity.
///
/// # Safety
/// `set` is valid for `size` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_getaffinity_np(
    thread: pthread_t,
    size: size_t,
    set: *mut libc::cpu_set_t,
) -> c_int {
    let Some(runtime) = active() else {
        let real = next!(c"pthread_getaffinity_np" => unsafe extern "C" fn(pthread_t, size_t, *mut libc::cpu_set_t) -> c_int);
        // SAFETY: forwarded.
        return unsafe { real(thread, size, set) };
    };
    let Some(pid) = runtime.thread_pid(thread) else {
        return libc::ESRCH;
    };
    // SAFETY: forwarded from the caller's contract.
    match unsafe { libc::sched_getaffinity(pid, size, set) } {
        0 => 0,
        _ => errno(),
    }
}

/// The attributes of the calling process's thread (every thread-process has the same
/// layout: it was forked from the main thread).
///
/// # Safety
/// `attr` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_getattr_np(
    thread: pthread_t,
    attr: *mut libc::pthread_attr_t,
) -> c_int {
    let real = next!(c"pthread_getattr_np" => unsafe extern "C" fn(pthread_t, *mut libc::pthread_attr_t) -> c_int);
    let real_self = next!(c"pthread_self" => unsafe extern "C" fn() -> pthread_t);
    let thread = match active() {
        Some(runtime) if runtime.thread_pid(thread).is_none() => return libc::ESRCH,
        // SAFETY: no arguments.
        Some(_) => unsafe { real_self() },
        None => thread,
    };
    // SAFETY: forwarded from the caller's contract with a handle libc knows.
    unsafe { real(thread, attr) }
}

fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EINVAL)
}

// ---------------------------------------------------------------------------------------
// Mutexes

/// A fresh mutex of the attribute's kind (normal, recursive or error-checking).
///
/// # Safety
/// `attr` is null or initialised.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_init(
    mutex: *mut libc::pthread_mutex_t,
    attr: *const libc::pthread_mutexattr_t,
) -> c_int {
    let Some(runtime) = active() else {
        let real = next!(c"pthread_mutex_init" => unsafe extern "C" fn(*mut libc::pthread_mutex_t, *const libc::pthread_mutexattr_t) -> c_int);
        // SAFETY: forwarded.
        return unsafe { real(mutex, attr) };
    };
    let mut kind = libc::PTHREAD_MUTEX_DEFAULT;
    // SAFETY: a non-null attr is initialised (C contract); libc's getter reads it.
    if !attr.is_null() && unsafe { pthread_mutexattr_gettype(attr, &mut kind) } != 0 {
        return libc::EINVAL;
    }
    let kind = match kind {
        libc::PTHREAD_MUTEX_RECURSIVE => mutex_kind::RECURSIVE,
        libc::PTHREAD_MUTEX_ERRORCHECK => mutex_kind::ERRORCHECK,
        _ => mutex_kind::NORMAL,
    };
    runtime.mutex_init(key(mutex), kind)
}

/// Frees the mutex's slot (`EBUSY` while it is held).
#[unsafe(no_mangle)]
pub extern "C" fn pthread_mutex_destroy(mutex: *mut libc::pthread_mutex_t) -> c_int {
    match active() {
        Some(runtime) => runtime.mutex_destroy(key(mutex)),
        None => {
            let real = next!(c"pthread_mutex_destroy" => unsafe extern "C" fn(*mut libc::pthread_mutex_t) -> c_int);
            // SAFETY: forwarded.
            unsafe { real(mutex) }
        }
    }
}

/// Acquires; at lock depth 0 → 1 this begins a durable section.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_mutex_lock(mutex: *mut libc::pthread_mutex_t) -> c_int {
    match active() {
        Some(runtime) => runtime.mutex_lock(key(mutex), static_kind(mutex)),
        None => {
            let real = next!(c"pthread_mutex_lock" => unsafe extern "C" fn(*mut libc::pthread_mutex_t) -> c_int);
            // SAFETY: forwarded.
            unsafe { real(mutex) }
        }
    }
}

/// A real trylock: `EBUSY` if the mutex is held.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_mutex_trylock(mutex: *mut libc::pthread_mutex_t) -> c_int {
    match active() {
        Some(runtime) => runtime.mutex_trylock(key(mutex), static_kind(mutex)),
        None => {
            let real = next!(c"pthread_mutex_trylock" => unsafe extern "C" fn(*mut libc::pthread_mutex_t) -> c_int);
            // SAFETY: forwarded.
            unsafe { real(mutex) }
        }
    }
}

/// Acquires, waiting until an absolute `CLOCK_REALTIME` deadline (`ETIMEDOUT`).
///
/// # Safety
/// `abstime` is a valid timespec.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_timedlock(
    mutex: *mut libc::pthread_mutex_t,
    abstime: *const timespec,
) -> c_int {
    let Some(runtime) = active() else {
        let real = next!(c"pthread_mutex_timedlock" => unsafe extern "C" fn(*mut libc::pthread_mutex_t, *const timespec) -> c_int);
        // SAFETY: forwarded.
        return unsafe { real(mutex, abstime) };
    };
    mutex_lock_by(&runtime, mutex, Clock::Realtime, abstime)
}

/// Acquires, waiting until an absolute deadline on `clock` (`ETIMEDOUT`).
///
/// # Safety
/// `abstime` is a valid timespec.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_clocklock(
    mutex: *mut libc::pthread_mutex_t,
    clock: libc::clockid_t,
    abstime: *const timespec,
) -> c_int {
    let Some(runtime) = active() else {
        let real = next!(c"pthread_mutex_clocklock" => unsafe extern "C" fn(*mut libc::pthread_mutex_t, libc::clockid_t, *const timespec) -> c_int);
        // SAFETY: forwarded.
        return unsafe { real(mutex, clock, abstime) };
    };
    match Clock::from_id(clock) {
        Some(clock) => mutex_lock_by(&runtime, mutex, clock, abstime),
        None => libc::EINVAL,
    }
}

/// A timed acquire. As glibc does (POSIX allows it), the deadline is checked only if the
/// call has to wait: a free mutex (or a recursive one the caller holds) is taken even with
/// an invalid `abstime`, and a held one then gives `EINVAL` instead of waiting.
fn mutex_lock_by(
    runtime: &Runtime,
    mutex: *mut libc::pthread_mutex_t,
    clock: Clock,
    abstime: *const timespec,
) -> c_int {
    let (key, kind) = (key(mutex), static_kind(mutex));
    match deadline(abstime) {
        Ok(at) => runtime.mutex_lock_until(key, kind, Some((clock, at))),
        Err(invalid) => {
            const LONG_PAST: timespec = timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            match runtime.mutex_lock_until(key, kind, Some((clock, &LONG_PAST))) {
                libc::ETIMEDOUT => invalid,
                taken_or_refused => taken_or_refused,
            }
        }
    }
}

/// Releases; at lock depth 1 → 0 the section ends and is committed.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_mutex_unlock(mutex: *mut libc::pthread_mutex_t) -> c_int {
    match active() {
        Some(runtime) => runtime.mutex_unlock(key(mutex), static_kind(mutex)),
        None => {
            let real = next!(c"pthread_mutex_unlock" => unsafe extern "C" fn(*mut libc::pthread_mutex_t) -> c_int);
            // SAFETY: forwarded.
            unsafe { real(mutex) }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Condition variables

/// A fresh condition variable; its deadlines use the attribute's clock.
///
/// # Safety
/// `attr` is null or initialised.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_init(
    cond: *mut libc::pthread_cond_t,
    attr: *const libc::pthread_condattr_t,
) -> c_int {
    let Some(runtime) = active() else {
        let real = next!(c"pthread_cond_init" => unsafe extern "C" fn(*mut libc::pthread_cond_t, *const libc::pthread_condattr_t) -> c_int);
        // SAFETY: forwarded.
        return unsafe { real(cond, attr) };
    };
    let mut clock = libc::CLOCK_REALTIME;
    // SAFETY: a non-null attr is initialised (C contract); libc's getter reads it.
    if !attr.is_null() && unsafe { libc::pthread_condattr_getclock(attr, &mut clock) } != 0 {
        return libc::EINVAL;
    }
    match Clock::from_id(clock) {
        Some(clock) => runtime.cond_init(key(cond), clock),
        None => libc::EINVAL,
    }
}

/// Frees the condition variable's slot.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_cond_destroy(cond: *mut libc::pthread_cond_t) -> c_int {
    match active() {
        Some(runtime) => runtime.cond_destroy(key(cond)),
        None => {
            let real = next!(c"pthread_cond_destroy" => unsafe extern "C" fn(*mut libc::pthread_cond_t) -> c_int);
            // SAFETY: forwarded.
            unsafe { real(cond) }
        }
    }
}

/// Waits; the mutex is released (and the section ends if it was the last lock).
#[unsafe(no_mangle)]
pub extern "C" fn pthread_cond_wait(
    cond: *mut libc::pthread_cond_t,
    mutex: *mut libc::pthread_mutex_t,
) -> c_int {
    match active() {
        Some(runtime) => runtime.cond_wait(key(cond), key(mutex)),
        None => {
            let real = next!(c"pthread_cond_wait" => unsafe extern "C" fn(*mut libc::pthread_cond_t, *mut libc::pthread_mutex_t) -> c_int);
            // SAFETY: forwarded.
            unsafe { real(cond, mutex) }
        }
    }
}

/// Waits until an absolute deadline on the condition variable's clock (`ETIMEDOUT`, with
/// the mutex held again).
///
/// # Safety
/// `abstime` is a valid timespec.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_timedwait(
    cond: *mut libc::pthread_cond_t,
    mutex: *mut libc::pthread_mutex_t,
    abstime: *const timespec,
) -> c_int {
    let Some(runtime) = active() else {
        let real = next!(c"pthread_cond_timedwait" => unsafe extern "C" fn(*mut libc::pthread_cond_t, *mut libc::pthread_mutex_t, *const timespec) -> c_int);
        // SAFETY: forwarded.
        return unsafe { real(cond, mutex, abstime) };
    };
    match deadline(abstime) {
        Ok(at) => runtime.cond_wait_until(key(cond), key(mutex), Some((None, at))),
        Err(errno) => errno,
    }
}

/// Waits until an absolute deadline on `clock`.
///
/// # Safety
/// `abstime` is a valid timespec.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_clockwait(
    cond: *mut libc::pthread_cond_t,
    mutex: *mut libc::pthread_mutex_t,
    clock: libc::clockid_t,
    abstime: *const timespec,
) -> c_int {
    let Some(runtime) = active() else {
        let real = next!(c"pthread_cond_clockwait" => unsafe extern "C" fn(*mut libc::pthread_cond_t, *mut libc::pthread_mutex_t, libc::clockid_t, *const timespec) -> c_int);
        // SAFETY: forwarded.
        return unsafe { real(cond, mutex, clock, abstime) };
    };
    match (Clock::from_id(clock), deadline(abstime)) {
        (Some(clock), Ok(at)) => {
            runtime.cond_wait_until(key(cond), key(mutex), Some((Some(clock), at)))
        }
        _ => libc::EINVAL,
    }
}

/// Wakes one waiter.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_cond_signal(cond: *mut libc::pthread_cond_t) -> c_int {
    match active() {
        Some(runtime) => runtime.cond_signal(key(cond), false),
        None => {
            let real = next!(c"pthread_cond_signal" => unsafe extern "C" fn(*mut libc::pthread_cond_t) -> c_int);
            // SAFETY: forwarded.
            unsafe { real(cond) }
        }
    }
}

/// Wakes every waiter.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_cond_broadcast(cond: *mut libc::pthread_cond_t) -> c_int {
    match active() {
        Some(runtime) => runtime.cond_signal(key(cond), true),
        None => {
            let real = next!(c"pthread_cond_broadcast" => unsafe extern "C" fn(*mut libc::pthread_cond_t) -> c_int);
            // SAFETY: forwarded.
            unsafe { real(cond) }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Barriers and once-controls

/// Sets the barrier's thread count.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_barrier_init(
    barrier: *mut libc::pthread_barrier_t,
    attr: *const libc::pthread_barrierattr_t,
    count: c_uint,
) -> c_int {
    match active() {
        Some(runtime) => runtime.barrier_init(key(barrier), count),
        None => {
            let real = next!(c"pthread_barrier_init" => unsafe extern "C" fn(*mut libc::pthread_barrier_t, *const libc::pthread_barrierattr_t, c_uint) -> c_int);
            // SAFETY: forwarded.
            unsafe { real(barrier, attr, count) }
        }
    }
}

/// Frees the barrier's slot.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_barrier_destroy(barrier: *mut libc::pthread_barrier_t) -> c_int {
    match active() {
        Some(runtime) => runtime.barrier_destroy(key(barrier)),
        None => {
            let real = next!(c"pthread_barrier_destroy" => unsafe extern "C" fn(*mut libc::pthread_barrier_t) -> c_int);
            // SAFETY: forwarded.
            unsafe { real(barrier) }
        }
    }
}

/// A synchronisation point, then waits for the other threads.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_barrier_wait(barrier: *mut libc::pthread_barrier_t) -> c_int {
    match active() {
        Some(runtime) => runtime.barrier_wait(key(barrier)),
        None => {
            let real = next!(c"pthread_barrier_wait" => unsafe extern "C" fn(*mut libc::pthread_barrier_t) -> c_int);
            // SAFETY: forwarded.
            unsafe { real(barrier) }
        }
    }
}

/// Runs `init` once across all threads.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_once(
    once: *mut libc::pthread_once_t,
    init: Option<extern "C" fn()>,
) -> c_int {
    let Some(runtime) = active() else {
        let real = next!(c"pthread_once" => unsafe extern "C" fn(*mut libc::pthread_once_t, Option<extern "C" fn()>) -> c_int);
        // SAFETY: forwarded.
        return unsafe { real(once, init) };
    };
    match init {
        Some(init) => runtime.once(key(once), init),
        None => libc::EINVAL,
    }
}

// ---------------------------------------------------------------------------------------
// Read-write locks (readers share them; `runtime::rwlock`) and spin locks (mutexes).
// Sections and commits are as for mutexes.

/// Generates the forwarding or runtime body of a lock function on `$object`.
macro_rules! lock_fn {
    ($(#[$doc:meta])* $name:ident($object:ident: $ty:ty) => $method:ident($kind:expr)) => {
        $(#[$doc])*
        #[unsafe(no_mangle)]
        pub extern "C" fn $name($object: *mut $ty) -> c_int {
            match active() {
                Some(runtime) => runtime.$method(key($object), $kind),
                None => {
                    let real = next!(cstr_of!($name) => unsafe extern "C" fn(*mut $ty) -> c_int);
                    // SAFETY: forwarded.
                    unsafe { real($object) }
                }
            }
        }
    };
}

/// `c"name"` of an identifier.
macro_rules! cstr_of {
    ($name:ident) => {
        // SAFETY: the literal ends with its only NUL.
        unsafe {
            std::ffi::CStr::from_bytes_with_nul_unchecked(
                concat!(stringify!($name), "\0").as_bytes(),
            )
        }
    };
}

/// Generates the forwarding or runtime body of a read-write lock function.
macro_rules! rwlock_fn {
    ($(#[$doc:meta])* $name:ident => |$runtime:ident, $lock:ident| $body:expr) => {
        $(#[$doc])*
        #[unsafe(no_mangle)]
        pub extern "C" fn $name($lock: *mut libc::pthread_rwlock_t) -> c_int {
            match active() {
                Some($runtime) => $body,
                None => {
                    let real = next!(cstr_of!($name) => unsafe extern "C" fn(*mut libc::pthread_rwlock_t) -> c_int);
                    // SAFETY: forwarded.
                    unsafe { real($lock) }
                }
            }
        }
    };
}

rwlock_fn!(
    /// Takes the lock for reading, shared with other readers.
    pthread_rwlock_rdlock => |runtime, lock| runtime.rwlock_lock(
        key(lock), rwlock_static_kind(lock), RwMode::Read, None, false)
);
rwlock_fn!(
    /// Takes the lock for writing.
    pthread_rwlock_wrlock => |runtime, lock| runtime.rwlock_lock(
        key(lock), rwlock_static_kind(lock), RwMode::Write, None, false)
);
rwlock_fn!(
    /// Tries to take the lock for reading.
    pthread_rwlock_tryrdlock => |runtime, lock| runtime.rwlock_trylock(
        key(lock), rwlock_static_kind(lock), RwMode::Read)
);
rwlock_fn!(
    /// Tries to take the lock for writing.
    pthread_rwlock_trywrlock => |runtime, lock| runtime.rwlock_trylock(
        key(lock), rwlock_static_kind(lock), RwMode::Write)
);
rwlock_fn!(
    /// Releases the lock (this thread's write lock, or one of its read locks).
    pthread_rwlock_unlock => |runtime, lock| runtime.rwlock_unlock(key(lock), rwlock_static_kind(lock))
);

/// The kind a read-write lock's static initialiser stored in the object: glibc's `__flags`
/// (`PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP` sets 2), at byte 48 of
/// `pthread_rwlock_t` on x86-64. Elsewhere a static initialiser gives the default kind.
fn rwlock_static_kind(lock: *const libc::pthread_rwlock_t) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `lock` points to a pthread_rwlock_t (56 bytes), always readable.
        let flags = unsafe { lock.cast::<u8>().add(48).cast::<c_uint>().read_volatile() };
        if flags == PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP as c_uint {
            return mutex_kind::RWLOCK_PREFER_WRITER;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = lock;
    mutex_kind::RWLOCK
}

/// glibc's `PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP`.
const PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP: c_int = 2;

lock_fn!(
    /// Takes the spin lock (blocking, like a mutex).
    pthread_spin_lock(lock: libc::pthread_spinlock_t) => mutex_lock(mutex_kind::NORMAL)
);
lock_fn!(
    /// Tries to take the spin lock.
    pthread_spin_trylock(lock: libc::pthread_spinlock_t) => mutex_trylock(mutex_kind::NORMAL)
);
lock_fn!(
    /// Releases the spin lock.
    pthread_spin_unlock(lock: libc::pthread_spinlock_t) => mutex_unlock(mutex_kind::NORMAL)
);
/// Frees the read-write lock's slot.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_rwlock_destroy(lock: *mut libc::pthread_rwlock_t) -> c_int {
    match active() {
        Some(runtime) => runtime.mutex_destroy(key(lock)),
        None => {
            let real = next!(c"pthread_rwlock_destroy" => unsafe extern "C" fn(*mut libc::pthread_rwlock_t) -> c_int);
            // SAFETY: forwarded.
            unsafe { real(lock) }
        }
    }
}

/// Frees the spin lock's slot.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_spin_destroy(lock: *mut libc::pthread_spinlock_t) -> c_int {
    match active() {
        Some(runtime) => runtime.mutex_destroy(key(lock)),
        None => {
            let real = next!(c"pthread_spin_destroy" => unsafe extern "C" fn(*mut libc::pthread_spinlock_t) -> c_int);
            // SAFETY: forwarded.
            unsafe { real(lock) }
        }
    }
}

/// A fresh read-write lock.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_rwlock_init(
    lock: *mut libc::pthread_rwlock_t,
    attr: *const libc::pthread_rwlockattr_t,
) -> c_int {
    match active() {
        Some(runtime) => {
            let mut kind: c_int = 0;
            // SAFETY: a null attribute is the default; otherwise the caller's initialised
            // attribute, read by glibc's getter into `kind`.
            if !attr.is_null() && unsafe { pthread_rwlockattr_getkind_np(attr, &mut kind) } != 0 {
                return libc::EINVAL;
            }
            runtime.rwlock_init(
                key(lock),
                kind == PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP,
            )
        }
        None => {
            let real = next!(c"pthread_rwlock_init" => unsafe extern "C" fn(*mut libc::pthread_rwlock_t, *const libc::pthread_rwlockattr_t) -> c_int);
            // SAFETY: forwarded.
            unsafe { real(lock, attr) }
        }
    }
}

/// A fresh spin lock.
#[unsafe(no_mangle)]
pub extern "C" fn pthread_spin_init(lock: *mut libc::pthread_spinlock_t, shared: c_int) -> c_int {
    match active() {
        Some(runtime) => runtime.mutex_init(key(lock), mutex_kind::NORMAL),
        None => {
            let real = next!(c"pthread_spin_init" => unsafe extern "C" fn(*mut libc::pthread_spinlock_t, c_int) -> c_int);
            // SAFETY: forwarded.
            unsafe { real(lock, shared) }
        }
    }
}

/// Takes the lock for reading before an absolute `CLOCK_REALTIME` deadline.
///
/// # Safety
/// `abstime` is a valid timespec.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_rwlock_timedrdlock(
    lock: *mut libc::pthread_rwlock_t,
    abstime: *const timespec,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { timed_rwlock(lock, None, abstime, RwMode::Read) }
}

/// Takes the lock for writing before an absolute `CLOCK_REALTIME` deadline.
///
/// # Safety
/// `abstime` is a valid timespec.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_rwlock_timedwrlock(
    lock: *mut libc::pthread_rwlock_t,
    abstime: *const timespec,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { timed_rwlock(lock, None, abstime, RwMode::Write) }
}

/// Takes the lock for reading before an absolute deadline on `clock` (`CLOCK_REALTIME` or
/// `CLOCK_MONOTONIC`; `EINVAL` otherwise).
///
/// # Safety
/// `abstime` is a valid timespec.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_rwlock_clockrdlock(
    lock: *mut libc::pthread_rwlock_t,
    clock: libc::clockid_t,
    abstime: *const timespec,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { timed_rwlock(lock, Some(clock), abstime, RwMode::Read) }
}

/// Takes the lock for writing before an absolute deadline on `clock`.
///
/// # Safety
/// `abstime` is a valid timespec.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_rwlock_clockwrlock(
    lock: *mut libc::pthread_rwlock_t,
    clock: libc::clockid_t,
    abstime: *const timespec,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { timed_rwlock(lock, Some(clock), abstime, RwMode::Write) }
}

/// The timed lock functions (`clock` `None`: the `timed` ones, on `CLOCK_REALTIME`).
///
/// # Safety
/// `abstime` is a valid timespec.
unsafe fn timed_rwlock(
    lock: *mut libc::pthread_rwlock_t,
    clock: Option<libc::clockid_t>,
    abstime: *const timespec,
    mode: RwMode,
) -> c_int {
    let Some(runtime) = active() else {
        let name = match (clock, mode) {
            (None, RwMode::Read) => c"pthread_rwlock_timedrdlock",
            (None, RwMode::Write) => c"pthread_rwlock_timedwrlock",
            (Some(_), RwMode::Read) => c"pthread_rwlock_clockrdlock",
            (Some(_), RwMode::Write) => c"pthread_rwlock_clockwrlock",
        };
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name.
        let found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        if found.is_null() {
            return libc::ENOSYS;
        }
        return match clock {
            None => {
                // SAFETY: both timed functions have this signature.
                let real: unsafe extern "C" fn(
                    *mut libc::pthread_rwlock_t,
                    *const timespec,
                ) -> c_int = unsafe { std::mem::transmute(found) };
                // SAFETY: forwarded.
                unsafe { real(lock, abstime) }
            }
            Some(id) => {
                // SAFETY: both clock functions have this signature.
                let real: unsafe extern "C" fn(
                    *mut libc::pthread_rwlock_t,
                    libc::clockid_t,
                    *const timespec,
                ) -> c_int = unsafe { std::mem::transmute(found) };
                // SAFETY: forwarded.
                unsafe { real(lock, id, abstime) }
            }
        };
    };
    let clock = match clock {
        None => Clock::Realtime,
        Some(id) => match Clock::from_id(id) {
            Some(clock) => clock,
            None => return libc::EINVAL,
        },
    };
    match deadline(abstime) {
        Ok(at) => runtime.rwlock_lock(
            key(lock),
            rwlock_static_kind(lock),
            mode,
            Some((clock, at)),
            false,
        ),
        Err(errno) => errno,
    }
}
