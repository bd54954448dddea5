//! `system` and `popen` from a served working directory. The C library's own versions
//! start `/bin/sh` through its internal `posix_spawn`, which no preload sees, so the served
//! working directory would not be handed over (`cwd`): the shell would start in the parked,
//! empty directory and find nothing. While the working directory is served, these versions
//! start the shell with the C library's `posix_spawn` and an environment that hands the
//! directory over, keeping what POSIX asks of `system` and `popen` (below); otherwise the C
//! library's own run. `pclose` and `fclose` (as glibc's, whose `fclose` of a `popen` stream
//! is its `pclose`) wait for the shells of the streams opened here; every other stream is
//! the C library's.

use crate::handover::with_variables;
use libc::{c_char, c_int, pid_t};
use parking_lot::Mutex;
use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The shell `system` starts.
const SHELL: &CStr = c"/bin/sh";

/// `SIGINT` and `SIGQUIT` are ignored while any `system` waits (POSIX): the callers waiting
/// now, and the actions to restore when the last one returns.
static WAITING: Mutex<(usize, Option<[libc::sigaction; 2]>)> = Mutex::new((0, None));

/// This thread's `errno`.
pub(crate) fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Streams `popen` opened here, with their shells' process ids: `pclose` and `fclose` wait
/// for those. An entry leaves the list before its `FILE` is freed (`take`), so a stream the
/// C library later makes at the same address is never mistaken for it.
static OPENED: Mutex<Vec<(usize, pid_t)>> = Mutex::new(Vec::new());

/// How many entries `OPENED` holds: every `fclose` asks, and while no `popen` stream is open
/// (most programs, always) it does not lock, so a child forked while another thread held the
/// lock can still close its streams.
static OPENED_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Starts `sh -c command` with `actions` and `attr` (either may be null), the environment
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

/// Waits for `pid` (through interrupted waits); its status, or -1. The system call itself,
/// not the C library's `waitpid`, which is a cancellation point: a cancelled wait would
/// unwind through Rust frames and leave `SIGINT`/`SIGQUIT` ignored (the C library installs
/// a cleanup handler instead).
pub(crate) fn wait_for(pid: pid_t) -> c_int {
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
    crate::abi::set_errno(pmfs::Errno::from_raw(kept));
    status
}

/// Whether `popen`'s `mode` reads (`r`) or writes (`w`), as glibc parses it: any sequence of
/// `r`, `w` and `e` (close-on-exec) holding exactly one of `r` and `w` (`"er"` and `"rr"` are
/// `r`); `None` for anything else.
fn popen_reads(mode: &CStr) -> Option<bool> {
    let (mut reads, mut writes) = (false, false);
    for &c in mode.to_bytes() {
        match c {
            b'r' => reads = true,
            b'w' => writes = true,
            b'e' => {}
            _ => return None,
        }
    }
    (reads != writes).then_some(reads)
}

/// `popen(command, mode)` from a served working directory: `sh -c command` with its standard
/// output (`r`) or input (`w`) on a pipe whose other end is the returned stream. The parent's
/// end is close-on-exec whatever the mode (so no later `popen` shell, nor any program the
/// process starts, inherits it; POSIX asks that of later `popen` shells only). Null with
/// `errno` `EINVAL` for a bad mode, or the error of the pipe, the spawn or the stream.
///
/// # Safety
/// `command` and `mode` are NUL-terminated strings.
pub(crate) unsafe fn popen(
    command: *const c_char,
    mode: *const c_char,
    vars: &[(&str, String)],
) -> *mut libc::FILE {
    // SAFETY: the caller's NUL-terminated mode.
    let Some(reads) = popen_reads(unsafe { CStr::from_ptr(mode) }) else {
        crate::abi::set_errno(pmfs::Errno::from_raw(libc::EINVAL));
        return std::ptr::null_mut();
    };
    let mut fds: [c_int; 2] = [-1; 2];
    // SAFETY: two descriptors written by the call.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return std::ptr::null_mut();
    }
    let (ours, theirs, target) = if reads {
        (fds[0], fds[1], libc::STDOUT_FILENO)
    } else {
        (fds[1], fds[0], libc::STDIN_FILENO)
    };
    // SAFETY: file actions initialised here and destroyed below; `theirs` is open. A
    // `dup2` onto itself (the pipe took descriptor 0 or 1) clears close-on-exec.
    let started = unsafe {
        let mut actions: libc::posix_spawn_file_actions_t = std::mem::zeroed();
        libc::posix_spawn_file_actions_init(&mut actions);
        libc::posix_spawn_file_actions_adddup2(&mut actions, theirs, target);
        let started = spawn_shell(command, &actions, std::ptr::null(), vars);
        libc::posix_spawn_file_actions_destroy(&mut actions);
        started
    };
    // SAFETY: the shell's end, ours no more.
    unsafe { libc::close(theirs) };
    let pid = match started {
        Ok(pid) => pid,
        Err(error) => {
            // SAFETY: our end, unused.
            unsafe { libc::close(ours) };
            crate::abi::set_errno(pmfs::Errno::from_raw(error));
            return std::ptr::null_mut();
        }
    };
    let stream_mode = if reads { c"r" } else { c"w" };
    // SAFETY: an open pipe end and a valid mode.
    let stream = unsafe { libc::fdopen(ours, stream_mode.as_ptr()) };
    if stream.is_null() {
        let kept = errno();
        // SAFETY: our end, not taken by a stream; the shell sees its pipe closed.
        unsafe { libc::close(ours) };
        wait_for(pid);
        crate::abi::set_errno(pmfs::Errno::from_raw(kept));
        return std::ptr::null_mut();
    }
    let mut opened = OPENED.lock();
    opened.push((stream as usize, pid));
    OPENED_COUNT.store(opened.len(), Ordering::Release);
    stream
}

/// Takes `stream` off the streams [`popen`] opened: its shell's process id, `None` for any
/// other stream. The caller closes the stream, then waits for the shell (a shell reading the
/// pipe ends when it is closed).
pub(crate) fn take(stream: *mut libc::FILE) -> Option<pid_t> {
    if OPENED_COUNT.load(Ordering::Acquire) == 0 {
        return None;
    }
    let mut opened = OPENED.lock();
    let at = opened.iter().position(|&(s, _)| s == stream as usize)?;
    let pid = opened.swap_remove(at).1;
    OPENED_COUNT.store(opened.len(), Ordering::Release);
    Some(pid)
}

/// `pclose(stream)` of a stream [`popen`] opened: closes it and waits for its shell (the
/// shell's status, or -1 with `errno` `ECHILD` if it was already waited for, e.g. by a
/// `SIGCHLD` handler). `None` for any other stream, which the C library's `pclose` takes.
///
/// # Safety
/// `stream` is a stream the caller may close.
pub(crate) unsafe fn pclose(stream: *mut libc::FILE) -> Option<c_int> {
    let pid = take(stream)?;
    // SAFETY: a stream `popen` made and the caller gives up.
    unsafe { real_fclose(stream) };
    Some(wait_for(pid))
}

/// The C library's `fclose` of `stream` (the library's own interposes it).
///
/// # Safety
/// `stream` is a stream the caller may close.
pub(crate) unsafe fn real_fclose(stream: *mut libc::FILE) -> c_int {
    let real = next!("fclose", unsafe extern "C" fn(*mut libc::FILE) -> c_int);
    // SAFETY: the caller's stream.
    unsafe { real(stream) }
}
