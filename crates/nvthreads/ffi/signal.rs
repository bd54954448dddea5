//! `sigaction`, `signal` and `bsd_signal` (and the System V `sysv_signal`, `sigset`,
//! `sigignore` and `siginterrupt`, which go through `sigaction` here, where glibc's
//! installed their action directly) for `SIGCHLD`: a handler the program installs goes
//! behind the runtime's filter (`runtime::sigchld`), so it is not called when a thread
//! ends (a thread-process's end raises `SIGCHLD` in its creator). For `SIGSEGV`: the
//! program's action is recorded for the page tracker's handler, which stays installed and
//! passes on the faults that are not tracked writes (`nvthreads::pages`). Every other
//! signal, the default and ignored actions of `SIGCHLD`, and every call of a dormant runtime
//! are glibc's. `sigaltstack` keeps the program's alternate stack beside the runtime's
//! (`nvthreads::pages::program_alt_stack`).
//!
//! An action set while threads exist is published to every thread-process
//! (`runtime::dispositions`), as pthreads share one set of actions; `sigprocmask` and
//! `pthread_sigmask` keep the signal that tells them (`SIGRTMAX`) unblocked, and
//! `sigaction` refuses to change it.

use crate::next;
use libc::{c_int, sighandler_t};
use nvthreads::pages::{self, Tracker};
use nvthreads::runtime::dispositions::{self, notify_signal};
use nvthreads::runtime::routing;
use nvthreads::runtime::sigchld::{self, SigactionFn, SigchldBlocked};

fn real_sigaction() -> SigactionFn {
    next!(c"sigaction" => SigactionFn)
}

/// Whether `signal`'s action goes through the filter here: `SIGCHLD`, and `SIGSEGV` while
/// the page tracker's handler is installed.
fn filtered(signal: c_int) -> bool {
    match signal {
        libc::SIGCHLD => crate::active().is_some(),
        libc::SIGSEGV => crate::active().is_some() && Tracker::active().is_some(),
        _ => false,
    }
}

/// `sigaction` for `SIGSEGV` while the tracker's handler is installed: the program's action
/// is recorded, not installed (`nvthreads::pages::program_segv_action`), and the tracker's
/// handler passes every fault that is not a tracked write on to it.
///
/// # Safety
/// As `sigaction`: `act` and `old` are null or valid.
unsafe fn segv_action(act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    let before = pages::program_segv_action();
    if !act.is_null() {
        // SAFETY: `act` is valid (the caller's contract).
        pages::set_program_segv_action(unsafe { &*act });
    }
    if !old.is_null() {
        // SAFETY: `old` is writable (the caller's contract).
        unsafe { old.write(before) };
    }
    0
}

/// `sigaction(2)`: installed in this process, then, while the runtime runs, published to
/// every thread-process.
///
/// # Safety
/// As the C function: `act` and `old` are null or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaction(
    signal: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let active = crate::active().is_some();
    if active && !act.is_null() && signal == notify_signal() {
        // SAFETY: `__errno_location` returns this thread's errno.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return -1;
    }
    // SAFETY: the caller's contract.
    let result = unsafe { install_here(signal, act, old) };
    if result == 0 && active && !act.is_null() {
        // SAFETY: `act` is valid (the caller's contract).
        dispositions::publish(signal, unsafe { &*act });
    }
    result
}

/// `sigaction` in this process only.
///
/// # Safety
/// As `sigaction`: `act` and `old` are null or valid.
unsafe fn install_here(
    signal: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let real = real_sigaction();
    if !filtered(signal) {
        if crate::active().is_none() {
            // SAFETY: forwarded.
            return unsafe { real(signal, act, old) };
        }
        // A handler goes behind the runtime's trampoline (`runtime::routing`), and the
        // program reads back its own. The record and the kernel's action change together:
        // the signal waits meanwhile (`routing::with_blocked`).
        return routing::with_blocked(signal, || {
            // SAFETY: a zeroed sigaction is a valid value to be overwritten.
            let mut before: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: reading the current action into `before`.
            if unsafe { real(signal, std::ptr::null(), &mut before) } != 0 {
                return -1;
            }
            let view = routing::program_view(signal, &before);
            if !act.is_null() {
                // SAFETY: `act` is valid (the caller's contract).
                let install = routing::to_install(signal, unsafe { &*act });
                // SAFETY: a valid action.
                if unsafe { real(signal, &install, std::ptr::null_mut()) } != 0 {
                    return -1;
                }
            }
            if !old.is_null() {
                // SAFETY: `old` is writable (the caller's contract).
                unsafe { old.write(view) };
            }
            0
        });
    }
    if signal == libc::SIGSEGV {
        // SAFETY: the caller's contract.
        return unsafe { segv_action(act, old) };
    }
    let _blocked = SigchldBlocked::block();
    // SAFETY: a zeroed sigaction is a valid value to be overwritten.
    let mut before: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: reading the current action into `before`.
    if unsafe { real(signal, std::ptr::null(), &mut before) } != 0 {
        return -1;
    }
    // The program's view of the old action, before a new one replaces what it refers to.
    let view = sigchld::program_view(&before);
    if !act.is_null() {
        // SAFETY: `act` is valid (the caller's contract); SIGCHLD is blocked until the
        // action is installed.
        let install = unsafe { sigchld::to_install(&*act, real) };
        // SAFETY: a valid action.
        if unsafe { real(signal, &install, std::ptr::null_mut()) } != 0 {
            sigchld::restore(&view, &before);
            return -1;
        }
    }
    if !old.is_null() {
        // SAFETY: `old` is writable (the caller's contract).
        unsafe { old.write(view) };
    }
    0
}

/// `signal(3)` with glibc's (BSD) semantics: the handler stays installed, interrupted
/// system calls restart, the signal is blocked while its handler runs. While the runtime
/// runs, through [`sigaction`] (filtered and published like it).
///
/// # Safety
/// As the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn signal(signal: c_int, handler: sighandler_t) -> sighandler_t {
    if crate::active().is_none() {
        let real = next!(c"signal" => unsafe extern "C" fn(c_int, sighandler_t) -> sighandler_t);
        // SAFETY: forwarded.
        return unsafe { real(signal, handler) };
    }
    // SAFETY: the caller's contract (`signal`'s).
    unsafe { install_handler(signal, handler, libc::SA_RESTART, true) }
}

/// `bsd_signal(3)`: `signal`.
///
/// # Safety
/// As the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bsd_signal(sig: c_int, handler: sighandler_t) -> sighandler_t {
    // SAFETY: forwarded.
    unsafe { signal(sig, handler) }
}

/// `set` without the runtime's notification signal when it would block it (`SIG_BLOCK`,
/// `SIG_SETMASK`) while the runtime runs, as glibc keeps its own internal signals unblocked:
/// a thread-process that blocked it would take a signal action another thread sets only
/// later (`runtime::dispositions`).
fn keep_notify_unblocked(
    how: c_int,
    set: *const libc::sigset_t,
    copy: &mut libc::sigset_t,
) -> *const libc::sigset_t {
    if set.is_null() || how == libc::SIG_UNBLOCK || crate::active().is_none() {
        return set;
    }
    // SAFETY: `set` is valid (the caller's contract); `copy` is a sigset_t.
    unsafe {
        *copy = *set;
        libc::sigdelset(copy, notify_signal());
    }
    copy
}

/// `sigprocmask(2)`, keeping the runtime's notification signal unblocked.
///
/// # Safety
/// As the C function: `set` and `old` are null or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigprocmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    let real = next!(c"sigprocmask" => unsafe extern "C" fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int);
    // SAFETY: a zeroed sigset_t is a valid value.
    let mut copy: libc::sigset_t = unsafe { std::mem::zeroed() };
    let set = keep_notify_unblocked(how, set, &mut copy);
    // SAFETY: forwarded; `set` is the caller's or the copy.
    unsafe { real(how, set, old) }
}

/// `pthread_sigmask(3)`, keeping the runtime's notification signal unblocked.
///
/// # Safety
/// As the C function: `set` and `old` are null or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_sigmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    let real = next!(c"pthread_sigmask" => unsafe extern "C" fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int);
    // SAFETY: a zeroed sigset_t is a valid value.
    let mut copy: libc::sigset_t = unsafe { std::mem::zeroed() };
    let set = keep_notify_unblocked(how, set, &mut copy);
    // SAFETY: forwarded; `set` is the caller's or the copy.
    unsafe { real(how, set, old) }
}

/// `signal` through [`sigaction`] with `flags` and `mask` (the signal's own action
/// otherwise as the caller gives it): the old handler, or `SIG_ERR`.
///
/// # Safety
/// As `signal`.
unsafe fn install_handler(
    signal: c_int,
    handler: sighandler_t,
    flags: c_int,
    block_itself: bool,
) -> sighandler_t {
    // SAFETY: a zeroed sigaction is a valid value; the mask is set up below.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler;
    act.sa_flags = flags;
    // SAFETY: `act.sa_mask` is a valid sigset_t.
    unsafe {
        libc::sigemptyset(&mut act.sa_mask);
        if block_itself {
            libc::sigaddset(&mut act.sa_mask, signal);
        }
    }
    // SAFETY: a zeroed sigaction is a valid value to be overwritten.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid.
    if unsafe { sigaction(signal, &act, &mut old) } != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

/// `sysv_signal(3)` (and `signal` under `_XOPEN_SOURCE` without `_GNU_SOURCE` or
/// `_DEFAULT_SOURCE`): a one-shot handler (`SA_RESETHAND`), not blocked while it runs
/// (`SA_NODEFER`), interrupted system calls not restarted. While the runtime runs, through
/// [`sigaction`], so `SIGCHLD` goes behind its filter, `SIGSEGV` behind the page tracker,
/// and the action reaches every thread (glibc's installed it directly, in one process).
///
/// # Safety
/// As the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sysv_signal(signal: c_int, handler: sighandler_t) -> sighandler_t {
    if crate::active().is_none() {
        let real =
            next!(c"sysv_signal" => unsafe extern "C" fn(c_int, sighandler_t) -> sighandler_t);
        // SAFETY: forwarded.
        return unsafe { real(signal, handler) };
    }
    if handler == libc::SIG_ERR || !(1..libc::SIGRTMAX()).contains(&signal) {
        // SAFETY: `__errno_location` returns this thread's errno.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return libc::SIG_ERR;
    }
    // SAFETY: forwarded.
    unsafe {
        install_handler(
            signal,
            handler,
            libc::SA_RESETHAND | libc::SA_NODEFER,
            false,
        )
    }
}

/// glibc's `SIG_HOLD` (`<signal.h>`, X/Open): the disposition `sigset` takes to block.
const SIG_HOLD: sighandler_t = 2;

/// Whether `signal` is blocked in this thread, after changing the mask with `how` (`None`:
/// only asked). `None` if `sigprocmask` failed.
fn change_mask(signal: c_int, how: Option<c_int>) -> Option<bool> {
    // SAFETY: zeroed sigset_t values are valid; `set` holds `signal`.
    let (mut set, mut old): (libc::sigset_t, libc::sigset_t) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: both are valid sigset_t values.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
    }
    let (how, set) = match how {
        Some(how) => (how, &set as *const libc::sigset_t),
        None => (libc::SIG_BLOCK, std::ptr::null()),
    };
    // SAFETY: the library's sigprocmask with valid sets.
    if unsafe { sigprocmask(how, set, &mut old) } != 0 {
        return None;
    }
    // SAFETY: `old` is a valid sigset_t.
    Some(unsafe { libc::sigismember(&old, signal) } == 1)
}

/// `sigset(3)` (System V): `SIG_HOLD` blocks the signal; any other disposition is installed
/// (no flags, an empty mask) and unblocks it. Returns `SIG_HOLD` if the signal was blocked
/// before, else the previous disposition. While the runtime runs, through [`sigaction`]
/// and [`sigprocmask`], as [`sysv_signal`].
///
/// # Safety
/// As the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigset(signal: c_int, handler: sighandler_t) -> sighandler_t {
    if crate::active().is_none() {
        let real = next!(c"sigset" => unsafe extern "C" fn(c_int, sighandler_t) -> sighandler_t);
        // SAFETY: forwarded.
        return unsafe { real(signal, handler) };
    }
    if handler == SIG_HOLD {
        let Some(was_blocked) = change_mask(signal, Some(libc::SIG_BLOCK)) else {
            return libc::SIG_ERR;
        };
        if was_blocked {
            return SIG_HOLD;
        }
        // SAFETY: a zeroed sigaction is a valid value to be overwritten.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: reading the action into `old`.
        if unsafe { sigaction(signal, std::ptr::null(), &mut old) } != 0 {
            return libc::SIG_ERR;
        }
        return old.sa_sigaction;
    }
    // SAFETY: forwarded.
    let old = unsafe { install_handler(signal, handler, 0, false) };
    if old == libc::SIG_ERR {
        return old;
    }
    match change_mask(signal, Some(libc::SIG_UNBLOCK)) {
        None => libc::SIG_ERR,
        Some(true) => SIG_HOLD,
        Some(false) => old,
    }
}

/// `sigignore(3)`: `SIG_IGN` through [`sigaction`] while the runtime runs (glibc's
/// installed it directly, in one process: for `SIGSEGV`, over the page tracker).
///
/// # Safety
/// As the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigignore(signal: c_int) -> c_int {
    if crate::active().is_none() {
        let real = next!(c"sigignore" => unsafe extern "C" fn(c_int) -> c_int);
        // SAFETY: forwarded.
        return unsafe { real(signal) };
    }
    // SAFETY: forwarded.
    match unsafe { install_handler(signal, libc::SIG_IGN, 0, false) } {
        libc::SIG_ERR => -1,
        _ => 0,
    }
}

/// `siginterrupt(3)`: the action's `SA_RESTART` cleared (`interrupt` nonzero) or set,
/// through [`sigaction`] while the runtime runs.
///
/// # Safety
/// As the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn siginterrupt(signal: c_int, interrupt: c_int) -> c_int {
    if crate::active().is_none() {
        let real = next!(c"siginterrupt" => unsafe extern "C" fn(c_int, c_int) -> c_int);
        // SAFETY: forwarded.
        return unsafe { real(signal, interrupt) };
    }
    // SAFETY: a zeroed sigaction is a valid value to be overwritten.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: reading the action into `act`, then installing it changed.
    unsafe {
        if sigaction(signal, std::ptr::null(), &mut act) != 0 {
            return -1;
        }
        if interrupt != 0 {
            act.sa_flags &= !libc::SA_RESTART;
        } else {
            act.sa_flags |= libc::SA_RESTART;
        }
        sigaction(signal, &act, std::ptr::null_mut())
    }
}

/// `sigaltstack(2)`: the program's alternate signal stack is kept beside the runtime's
/// (`nvthreads::pages::program_alt_stack`): installed when it is at least as large as the
/// runtime's, otherwise recorded and reported back while the runtime's stays installed.
///
/// # Safety
/// As the C function: `stack` and `old` are null or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaltstack(
    stack: *const libc::stack_t,
    old: *mut libc::stack_t,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { pages::program_alt_stack(stack.as_ref()) } {
        Ok(view) => {
            if !old.is_null() {
                // SAFETY: `old` is writable (the caller's contract).
                unsafe { old.write(view) };
            }
            0
        }
        Err(errno) => {
            // SAFETY: `__errno_location` returns this thread's errno.
            unsafe { *libc::__errno_location() = errno };
            -1
        }
    }
}

/// The wait of `sigtimedwait` for the program while the runtime runs (`runtime::routing`):
/// a copy of a signal to the program that another thread took is not returned, and a signal
/// main holds pending (blocked there) is fetched for a thread waiting for it.
///
/// # Safety
/// As the C function: `set` is valid, `info` and `timeout` are null or valid.
unsafe fn routed_wait(
    set: *const libc::sigset_t,
    info: *mut libc::siginfo_t,
    timeout: *const libc::timespec,
) -> c_int {
    let limit = if timeout.is_null() {
        None
    } else {
        // SAFETY: `timeout` is valid (the caller's contract).
        let spec = unsafe { &*timeout };
        if spec.tv_sec < 0 || !(0..1_000_000_000).contains(&spec.tv_nsec) {
            // SAFETY: `__errno_location` returns this thread's errno.
            unsafe { *libc::__errno_location() = libc::EINVAL };
            return -1;
        }
        Some(std::time::Duration::new(
            spec.tv_sec as u64,
            spec.tv_nsec as u32,
        ))
    };
    // SAFETY: `set` is valid and `info` null or writable (the caller's contract).
    unsafe { routing::wait(&*set, info.as_mut(), limit) }
}

/// `sigtimedwait(2)`, routed while the runtime runs (see [`routed_wait`]).
///
/// # Safety
/// As the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigtimedwait(
    set: *const libc::sigset_t,
    info: *mut libc::siginfo_t,
    timeout: *const libc::timespec,
) -> c_int {
    if crate::active().is_none() || set.is_null() {
        let real = next!(c"sigtimedwait" => unsafe extern "C" fn(*const libc::sigset_t, *mut libc::siginfo_t, *const libc::timespec) -> c_int);
        // SAFETY: forwarded.
        return unsafe { real(set, info, timeout) };
    }
    // SAFETY: the caller's contract.
    unsafe { routed_wait(set, info, timeout) }
}

/// `sigwaitinfo(2)`, routed while the runtime runs (see [`routed_wait`]).
///
/// # Safety
/// As the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigwaitinfo(
    set: *const libc::sigset_t,
    info: *mut libc::siginfo_t,
) -> c_int {
    if crate::active().is_none() || set.is_null() {
        let real = next!(c"sigwaitinfo" => unsafe extern "C" fn(*const libc::sigset_t, *mut libc::siginfo_t) -> c_int);
        // SAFETY: forwarded.
        return unsafe { real(set, info) };
    }
    // SAFETY: the caller's contract.
    unsafe { routed_wait(set, info, std::ptr::null()) }
}

/// `sigwait(3)`: the signal in `*signal` and 0, or an error number; interrupted waits go
/// on, as glibc's do. Routed while the runtime runs (see [`routed_wait`]).
///
/// # Safety
/// As the C function: `set` and `signal` are valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigwait(set: *const libc::sigset_t, signal: *mut c_int) -> c_int {
    if crate::active().is_none() || set.is_null() {
        let real =
            next!(c"sigwait" => unsafe extern "C" fn(*const libc::sigset_t, *mut c_int) -> c_int);
        // SAFETY: forwarded.
        return unsafe { real(set, signal) };
    }
    loop {
        // SAFETY: the caller's contract.
        let got = unsafe { routed_wait(set, std::ptr::null_mut(), std::ptr::null()) };
        if got > 0 {
            // SAFETY: `signal` is writable (the caller's contract).
            unsafe { signal.write(got) };
            return 0;
        }
        // SAFETY: `__errno_location` returns this thread's errno.
        let errno = unsafe { *libc::__errno_location() };
        if errno != libc::EINTR {
            return errno;
        }
    }
}

/// `signalfd(2)`: in a thread other than main, the signals of `mask` that main holds
/// pending (sent to the program's pid from outside, blocked in main) are handed to this
/// thread by main's watchdog while main waits in the runtime (`runtime::routing`).
///
/// # Safety
/// As the C function: `mask` is valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn signalfd(fd: c_int, mask: *const libc::sigset_t, flags: c_int) -> c_int {
    let real =
        next!(c"signalfd" => unsafe extern "C" fn(c_int, *const libc::sigset_t, c_int) -> c_int);
    // SAFETY: forwarded.
    let result = unsafe { real(fd, mask, flags) };
    if result >= 0 && !mask.is_null() && crate::active().is_some() {
        // SAFETY: `mask` is valid (the caller's contract).
        routing::reading_signalfd(unsafe { &*mask });
    }
    result
}
