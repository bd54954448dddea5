//! `system` from a served working directory. The C library's own version starts `/bin/sh`
//! through its internal `posix_spawn`, which no preload sees, so the served working
//! directory would not be handed over (`cwd`): the shell would start in the parked, empty
//! directory and find nothing. While the working directory is served, this version starts
//! the shell with the C library's `posix_spawn` and an environment that hands the directory
//! over, keeping what POSIX asks of `system` (below); otherwise the C library's own runs.

use crate::handover::with_variables;
use libc::{c_char, c_int, pid_t};
use parking_lot::Mutex;
use std::ffi::CStr;

/// The shell `system` starts.
const SHELL: &CStr = c"/bin/sh";

/// `SIGINT` and `SIGQUIT` are ignored while any `system` waits (POSIX): the callers waiting
/// now, and the actions to restore when the last one returns.
static WAITING: Mutex<(usize, Option<[libc::sigaction; 2]>)> = Mutex::new((0, None));

/// This thread's `errno`.
fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Starts `sh -c command` with `attr`, the environment extended by `vars`; the child's pid,
/// or the `posix_spawn` error number.
///
/// # Safety
/// `command` is a NUL-terminated string; `attr` is initialised.
unsafe fn spawn_shell(
    command: *const c_char,
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
    // SAFETY: the process's environment array, extended; argv is null-terminated; no file
    // actions; the caller's attributes.
    let error = unsafe {
        with_variables((*std::ptr::addr_of!(environ)).cast(), vars, |env| {
            real(
                &mut pid,
                SHELL.as_ptr(),
                std::ptr::null(),
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

/// Waits for `pid` (through interrupted waits); its status, or -1. The system call itself,
/// not the C library's `waitpid`, which is a cancellation point: a cancelled wait would
/// unwind through Rust frames and leave `SIGINT`/`SIGQUIT` ignored (the C library installs
/// a cleanup handler instead).
fn wait_for(pid: pid_t) -> c_int {
    let mut status: c_int = 0;
    loop {
        // SAFETY: `wait4` of a child of this process, a status word, no resource usage.
        let waited = unsafe {
            libc::syscall(
                libc::SYS_wait4,
                pid,
                &mut status as *mut c_int,
                0,
                std::ptr::null_mut::<libc::rusage>(),
            )
        };
        if waited == pid as libc::c_long {
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
        let started = spawn_shell(command, &attr, vars);
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
    crate::abi::set_errno(pmfs::Errno::from_raw(kept));
    status
}
