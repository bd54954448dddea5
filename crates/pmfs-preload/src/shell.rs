//! `system` and `popen` from a served working directory. The C library's own versions start
//! `/bin/sh` through its internal `posix_spawn`, which no preload sees, so the served working
//! directory would not be handed over (`cwd`): the shell would start in the parked, empty
//! directory and find nothing. While the working directory is served, these versions start
//! the shell with the C library's `posix_spawn` and an environment that hands the directory
//! over, keeping what POSIX asks of the two calls (below); otherwise the C library's own
//! versions run.

use crate::handover::with_variables;
use libc::{FILE, c_char, c_int, pid_t};
use parking_lot::Mutex;
use std::ffi::CStr;

/// The shell `system` and `popen` start.
const SHELL: &CStr = c"/bin/sh";

/// `SIGINT` and `SIGQUIT` are ignored while any `system` waits (POSIX): the callers waiting
/// now, and the actions to restore when the last one returns.
static WAITING: Mutex<(usize, Option<[libc::sigaction; 2]>)> = Mutex::new((0, None));

/// The streams [`popen`] opened here: stream address (for `pclose`), child, descriptor (kept
/// here, never read from a stream that may have been closed since).
static STREAMS: Mutex<Vec<(usize, pid_t, c_int)>> = Mutex::new(Vec::new());

fn errno() -> c_int {
    // SAFETY: this thread's errno location.
    unsafe { *libc::__errno_location() }
}

fn set_errno(value: c_int) {
    // SAFETY: this thread's errno location.
    unsafe { *libc::__errno_location() = value };
}

/// Starts `sh -c command` with `actions` and `attr` (null for none), the environment
/// extended by `vars`; the child's pid, or the `posix_spawn` error number.
///
/// # Safety
/// `command` is a NUL-terminated string; `actions` and `attr` are null or initialised.
unsafe fn spawn_shell(
    command: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    vars: &[(&str, String)],
) -> Result<pid_t, c_int> {
    let real = next!(
        "posix_spawn",
        unsafe extern "C" fn(
            *mut pid_t,
            *const c_char,
            *const libc::posix_spawn_file_actions_t,
            *const libc::posix_spawnattr_t,
            *const *mut c_char,
            *const *mut c_char,
        ) -> c_int
    );
    let argv: [*const c_char; 4] = [c"sh".as_ptr(), c"-c".as_ptr(), command, std::ptr::null()];
    let mut pid: pid_t = 0;
    // SAFETY: the process's environment array, extended; argv is null-terminated; the
    // caller's file actions and attributes.
    let error = unsafe {
        with_variables((*std::ptr::addr_of!(environ)).cast(), vars, |env| {
            real(
                &mut pid,
                SHELL.as_ptr(),
                actions,
                attr,
                argv.as_ptr().cast(),
                env.cast(),
            )
        })
    };
    if error == 0 { Ok(pid) } else { Err(error) }
}

unsafe extern "C" {
    static environ: *const *const c_char;
}

/// Waits for `pid` (through interrupted waits); its status, or -1.
fn wait_for(pid: pid_t) -> c_int {
    let mut status = 0;
    loop {
        // SAFETY: a child of this process and a status word.
        if unsafe { libc::waitpid(pid, &mut status, 0) } == pid {
            return status;
        }
        if errno() != libc::EINTR {
            return -1;
        }
    }
}

/// An action that ignores a signal.
fn ignoring() -> libc::sigaction {
    // SAFETY: an all-zero `sigaction` is a valid value (no flags, empty mask).
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = libc::SIG_IGN;
    action
}

/// Ignores `SIGINT` and `SIGQUIT` for the first waiting caller; the actions to restore.
fn ignore_interrupts() -> [libc::sigaction; 2] {
    let mut waiting = WAITING.lock();
    if waiting.0 == 0 {
        // SAFETY: all-zero `sigaction`s, filled by the calls.
        let mut old: [libc::sigaction; 2] = unsafe { std::mem::zeroed() };
        let ignore = ignoring();
        for (signal, old) in [libc::SIGINT, libc::SIGQUIT].into_iter().zip(&mut old) {
            // SAFETY: a valid signal and action; `old` receives the previous one.
            unsafe { libc::sigaction(signal, &ignore, old) };
        }
        waiting.1 = Some(old);
    }
    waiting.0 += 1;
    waiting.1.expect("saved by the first caller")
}

/// Restores `SIGINT` and `SIGQUIT` when the last waiting caller returns.
fn restore_interrupts() {
    let mut waiting = WAITING.lock();
    waiting.0 -= 1;
    if waiting.0 == 0
        && let Some(old) = waiting.1.take()
    {
        for (signal, old) in [libc::SIGINT, libc::SIGQUIT].into_iter().zip(&old) {
            // SAFETY: a valid signal and the action saved for it.
            unsafe { libc::sigaction(signal, old, std::ptr::null_mut()) };
        }
    }
}

/// `system(command)` from a served working directory, as POSIX specifies it: `SIGCHLD`
/// blocked and `SIGINT`/`SIGQUIT` ignored in the caller while it waits, the shell started
/// with the caller's signal mask and with `SIGINT`/`SIGQUIT` at their default unless the
/// caller ignored them; the shell's status, 127 in the exit status when it cannot start.
///
/// # Safety
/// `command` is a NUL-terminated string.
pub(crate) unsafe fn system(command: *const c_char, vars: &[(&str, String)]) -> c_int {
    let saved = ignore_interrupts();
    // SAFETY: zeroed sets, filled by the calls below.
    let (mut chld, mut mask): (libc::sigset_t, libc::sigset_t) = unsafe { std::mem::zeroed() };
    // SAFETY: valid sets and signal numbers.
    unsafe {
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        libc::pthread_sigmask(libc::SIG_BLOCK, &chld, &mut mask);
    }
    // SAFETY: an attribute object initialised here and destroyed below.
    let mut attr: libc::posix_spawnattr_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the default set holds what the caller did not ignore.
    let result = unsafe {
        libc::posix_spawnattr_init(&mut attr);
        let mut defaults: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut defaults);
        for (signal, old) in [libc::SIGINT, libc::SIGQUIT].into_iter().zip(&saved) {
            if old.sa_sigaction != libc::SIG_IGN {
                libc::sigaddset(&mut defaults, signal);
            }
        }
        libc::posix_spawnattr_setsigdefault(&mut attr, &defaults);
        libc::posix_spawnattr_setsigmask(&mut attr, &mask);
        libc::posix_spawnattr_setflags(
            &mut attr,
            (libc::POSIX_SPAWN_SETSIGDEF | libc::POSIX_SPAWN_SETSIGMASK) as libc::c_short,
        );
        let started = spawn_shell(command, std::ptr::null(), &attr, vars);
        libc::posix_spawnattr_destroy(&mut attr);
        started
    };
    let status = match result {
        Ok(pid) => wait_for(pid),
        // As the C library: the status of a shell that exited with 127.
        Err(_) => 127 << 8,
    };
    let kept = errno();
    restore_interrupts();
    // SAFETY: the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut()) };
    set_errno(kept);
    status
}

/// `popen(command, mode)` from a served working directory: `mode` is `r` or `w`, with `e`
/// for a close-on-exec stream; the pipe's other end is the shell's standard output or
/// input. Null with `errno` set on failure (`EINVAL` for a bad mode).
///
/// # Safety
/// `command` and `mode` are NUL-terminated strings.
pub(crate) unsafe fn popen(
    command: *const c_char,
    mode: *const c_char,
    vars: &[(&str, String)],
) -> *mut FILE {
    // SAFETY: the caller's NUL-terminated mode.
    let mode_bytes = unsafe { CStr::from_ptr(mode) }.to_bytes();
    let reading = match mode_bytes.first() {
        Some(b'r') => true,
        Some(b'w') => false,
        _ => {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        }
    };
    let cloexec = mode_bytes[1..].contains(&b'e');
    let Some((ours, theirs)) = pipe_ends(reading) else {
        return std::ptr::null_mut();
    };
    let target = if reading { 1 } else { 0 };
    // SAFETY: file actions initialised here and destroyed below; `theirs` is open and not
    // 0 or 1 (`pipe_ends`), so `dup2` gives the shell a descriptor without close-on-exec.
    // The streams of earlier `popen`s still open are closed in the shell (POSIX): a stream
    // opened without `e` would otherwise keep its pipe open there. Closing a number that is
    // no longer open is not an error for `posix_spawn`.
    let started = unsafe {
        let mut actions: libc::posix_spawn_file_actions_t = std::mem::zeroed();
        libc::posix_spawn_file_actions_init(&mut actions);
        for &(_, _, fd) in STREAMS.lock().iter() {
            if fd > 2 && fd != theirs {
                libc::posix_spawn_file_actions_addclose(&mut actions, fd);
            }
        }
        libc::posix_spawn_file_actions_adddup2(&mut actions, theirs, target);
        let started = spawn_shell(command, &actions, std::ptr::null(), vars);
        libc::posix_spawn_file_actions_destroy(&mut actions);
        started
    };
    // SAFETY: the shell's end, now the shell's own copy.
    unsafe { libc::close(theirs) };
    let pid = match started {
        Ok(pid) => pid,
        Err(error) => {
            // SAFETY: our end of the pipe, unused.
            unsafe { libc::close(ours) };
            set_errno(error);
            return std::ptr::null_mut();
        }
    };
    if !cloexec {
        // SAFETY: our open descriptor.
        unsafe { libc::fcntl(ours, libc::F_SETFD, 0) };
    }
    let stream_mode = if reading { c"r" } else { c"w" };
    // SAFETY: our open descriptor and a valid mode.
    let stream = unsafe { libc::fdopen(ours, stream_mode.as_ptr()) };
    if stream.is_null() {
        let kept = errno();
        // SAFETY: our descriptor, which no stream took.
        unsafe { libc::close(ours) };
        wait_for(pid);
        set_errno(kept);
        return std::ptr::null_mut();
    }
    STREAMS.lock().push((stream as usize, pid, ours));
    stream
}

/// The two ends of a close-on-exec pipe for [`popen`]: (ours, the shell's), the shell's
/// never 0 or 1 (a `dup2` onto itself would keep its close-on-exec flag).
fn pipe_ends(reading: bool) -> Option<(c_int, c_int)> {
    let mut fds = [0; 2];
    // SAFETY: a two-descriptor array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    let (ours, mut theirs) = if reading {
        (fds[0], fds[1])
    } else {
        (fds[1], fds[0])
    };
    if theirs <= 1 {
        // SAFETY: an open descriptor, duplicated above 2 with close-on-exec.
        let moved = unsafe { libc::fcntl(theirs, libc::F_DUPFD_CLOEXEC, 3) };
        // SAFETY: the old number, replaced (or unusable).
        unsafe { libc::close(theirs) };
        if moved < 0 {
            // SAFETY: our end.
            unsafe { libc::close(ours) };
            return None;
        }
        theirs = moved;
    }
    Some((ours, theirs))
}

/// The child of `stream` if [`popen`] opened it here (it is forgotten).
pub(crate) fn take_stream(stream: *mut FILE) -> Option<pid_t> {
    let mut streams = STREAMS.lock();
    let at = streams.iter().position(|&(s, _, _)| s == stream as usize)?;
    Some(streams.swap_remove(at).1)
}

/// `pclose` of a stream [`popen`] opened here: closes it and waits for its shell.
///
/// # Safety
/// `stream` is the open stream `pid` belongs to.
pub(crate) unsafe fn pclose(stream: *mut FILE, pid: pid_t) -> c_int {
    // SAFETY: the caller's open stream.
    unsafe { libc::fclose(stream) };
    wait_for(pid)
}
