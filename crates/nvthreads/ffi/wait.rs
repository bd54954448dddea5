//! `wait`, `waitpid`, `wait3`, `wait4` and `waitid` that do not see thread-processes
//! (`docs/nvthreads.md` §3.1). Threads are child processes of their creator, so glibc's
//! `wait()` would return a thread's process (status 0) to a program reaping its own children,
//! and would block, rather than fail with `ECHILD`, while threads run and the program has no
//! child of its own. A wait for any child (pid -1, 0 or a negative group) first looks at
//! which child is ready without reaping it (`WNOWAIT`): a thread-process is reaped by the
//! runtime and the wait goes on; a child of the program is then waited for by its pid, with
//! the caller's options. A wait for one pid, and every wait of a dormant runtime, is glibc's.

use crate::{next, set_errno};
use libc::{c_int, idtype_t, pid_t, rusage, siginfo_t};
use nvthreads::runtime::threads::{has_program_children, is_thread_process, reap_thread_process};

type Wait4 = unsafe extern "C" fn(pid_t, *mut c_int, c_int, *mut rusage) -> pid_t;
type WaitId = unsafe extern "C" fn(idtype_t, libc::id_t, *mut siginfo_t, c_int) -> c_int;

fn real_wait4() -> Wait4 {
    next!(c"wait4" => Wait4)
}

fn real_waitid() -> WaitId {
    next!(c"waitid" => WaitId)
}

/// Whether waits for any child must skip thread-processes here.
fn skipping() -> bool {
    crate::active().is_some()
}

/// The child of the program that `waitid(idtype, id, .., flags)` would report, reaping the
/// thread-processes met on the way: `Ok(Some(pid))`, `Ok(None)` when `WNOHANG` finds none
/// ready, or an errno (`ECHILD` when only threads are left).
fn next_program_child(
    idtype: idtype_t,
    id: libc::id_t,
    flags: c_int,
) -> Result<Option<pid_t>, c_int> {
    loop {
        if !has_program_children() {
            return Err(libc::ECHILD);
        }
        // SAFETY: siginfo_t is plain data; zero is a valid value (si_pid 0: nothing ready).
        let mut info: siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is writable; WNOWAIT leaves the child to the wait that follows.
        if unsafe { real_waitid()(idtype, id, &mut info, flags | libc::WNOWAIT) } < 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::ECHILD));
        }
        // SAFETY: waitid filled `info` (or left it zero under WNOHANG).
        let pid = unsafe { info.si_pid() };
        if pid == 0 {
            return Ok(None);
        }
        if !is_thread_process(pid) {
            return Ok(Some(pid));
        }
        if flags & libc::WEXITED != 0
            && matches!(
                info.si_code,
                libc::CLD_EXITED | libc::CLD_KILLED | libc::CLD_DUMPED
            )
        {
            reap_thread_process(pid);
        } else {
            // A thread-process stopped or continued: consume that report so the next look
            // moves on.
            // SAFETY: as above, for that one child.
            unsafe {
                real_waitid()(
                    libc::P_PID,
                    pid as libc::id_t,
                    &mut info,
                    flags & !libc::WEXITED | libc::WNOHANG,
                )
            };
        }
    }
}

/// The `waitid` selector of a `wait4` pid argument of -1, 0 or -group.
fn selector(pid: pid_t) -> (idtype_t, libc::id_t) {
    match pid {
        -1 => (libc::P_ALL, 0),
        // SAFETY: getpgrp has no preconditions.
        0 => (libc::P_PGID, unsafe { libc::getpgrp() } as libc::id_t),
        group => (libc::P_PGID, group.unsigned_abs()),
    }
}

/// `waitid` flags of `wait4` options: exits always, stops with `WUNTRACED`, and the options
/// both share.
fn waitid_flags(options: c_int) -> c_int {
    let stops = if options & libc::WUNTRACED != 0 {
        libc::WSTOPPED
    } else {
        0
    };
    libc::WEXITED
        | stops
        | (options & (libc::WNOHANG | libc::WCONTINUED | libc::__WALL | libc::__WCLONE))
}

/// `wait4(2)`.
///
/// # Safety
/// As the C function: `status` and `usage` are null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wait4(
    pid: pid_t,
    status: *mut c_int,
    options: c_int,
    usage: *mut rusage,
) -> pid_t {
    if pid > 0 || !skipping() {
        // SAFETY: forwarded.
        return unsafe { real_wait4()(pid, status, options, usage) };
    }
    let (idtype, id) = selector(pid);
    match next_program_child(idtype, id, waitid_flags(options)) {
        // SAFETY: forwarded, for the child found ready.
        Ok(Some(child)) => unsafe { real_wait4()(child, status, options, usage) },
        Ok(None) => 0,
        Err(errno) => {
            set_errno(errno);
            -1
        }
    }
}

/// `wait(2)`.
///
/// # Safety
/// `status` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wait(status: *mut c_int) -> pid_t {
    // SAFETY: forwarded.
    unsafe { wait4(-1, status, 0, std::ptr::null_mut()) }
}

/// `waitpid(2)`.
///
/// # Safety
/// `status` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn waitpid(pid: pid_t, status: *mut c_int, options: c_int) -> pid_t {
    // SAFETY: forwarded.
    unsafe { wait4(pid, status, options, std::ptr::null_mut()) }
}

/// `wait3(2)`.
///
/// # Safety
/// `status` and `usage` are null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wait3(status: *mut c_int, options: c_int, usage: *mut rusage) -> pid_t {
    // SAFETY: forwarded.
    unsafe { wait4(-1, status, options, usage) }
}

/// `waitid(2)`.
///
/// # Safety
/// `info` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn waitid(
    idtype: idtype_t,
    id: libc::id_t,
    info: *mut siginfo_t,
    options: c_int,
) -> c_int {
    if idtype == libc::P_PID || idtype == libc::P_PIDFD || !skipping() {
        // SAFETY: forwarded.
        return unsafe { real_waitid()(idtype, id, info, options) };
    }
    match next_program_child(idtype, id, options & !libc::WNOWAIT) {
        // SAFETY: forwarded, for the child found ready.
        Ok(Some(child)) => unsafe {
            real_waitid()(libc::P_PID, child as libc::id_t, info, options)
        },
        Ok(None) => {
            // SAFETY: `info` is writable: WNOHANG with nothing ready reports si_pid 0.
            unsafe { info.write(std::mem::zeroed()) };
            0
        }
        Err(errno) => {
            set_errno(errno);
            -1
        }
    }
}
