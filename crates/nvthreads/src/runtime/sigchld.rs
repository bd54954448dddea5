//! `SIGCHLD` as a pthreads program sees it (`docs/nvthreads.md` §3.1). A thread-process is a
//! child of its creator, so the kernel raises `SIGCHLD` there whenever a thread ends. A
//! program's `SIGCHLD` handler (installed through the library's `sigaction`, `signal` or
//! `bsd_signal`) is therefore not installed as it is: [`on_sigchld`] stands in front of it and
//! calls it only for the program's own children.
//!
//! Signals of one kind merge while pending: one delivery may stand for a thread's end and a
//! child of the program that changed state meanwhile, and the kernel reports only the first.
//! So a delivery about a thread-process looks for a child of the program with a state change
//! to report (`waitid` with `WNOWAIT`, which leaves it to the program's own wait) and calls the
//! handler with that child's report if there is one. A delivery is never dropped while a child
//! of the program has a report waiting; the handler may be called for a report a second time
//! (as when two deliveries race one `waitpid` loop under glibc), never for a thread.
//!
//! Everything here runs in a signal handler: atomics, system calls and stack buffers only.

use super::threads::{is_or_was_thread_process, is_thread_process};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};

/// The program's handler (a `sa_handler` or `sa_sigaction` address), 0 when none is
/// installed behind [`on_sigchld`].
static HANDLER: AtomicUsize = AtomicUsize::new(0);
/// The program's `sa_flags` for it.
static FLAGS: AtomicI32 = AtomicI32::new(0);
/// glibc's `sigaction`, for [`on_sigchld`]'s reset of a one-shot handler.
static REAL_SIGACTION: AtomicUsize = AtomicUsize::new(0);
/// The thread of this process has ended (it only waits for the threads it made): nothing of
/// the program may run here any more.
static ENDED: AtomicBool = AtomicBool::new(false);

/// `sigaction(2)`'s C signature.
pub type SigactionFn =
    unsafe extern "C" fn(i32, *const libc::sigaction, *mut libc::sigaction) -> i32;

/// Marks the end of this process's thread: later deliveries are not passed on.
pub(super) fn thread_ended() {
    ENDED.store(true, Ordering::Relaxed);
}

/// Whether this process's thread has ended ([`thread_ended`]).
pub(super) fn has_ended() -> bool {
    ENDED.load(Ordering::Relaxed)
}

/// What the program sees as its `SIGCHLD` action: the one it installed, with its own handler
/// in place of [`on_sigchld`] (`installed` is what the kernel has).
pub fn program_view(installed: &libc::sigaction) -> libc::sigaction {
    let mut view = *installed;
    if installed.sa_sigaction == filter_address() {
        view.sa_sigaction = HANDLER.load(Ordering::Relaxed);
        view.sa_flags = FLAGS.load(Ordering::Relaxed);
    }
    view
}

/// Puts back the record of the program's handler after a failed install: `view` is what
/// [`program_view`] made of `installed`, the action the kernel kept.
pub fn restore(view: &libc::sigaction, installed: &libc::sigaction) {
    if installed.sa_sigaction == filter_address() {
        HANDLER.store(view.sa_sigaction, Ordering::Relaxed);
        FLAGS.store(view.sa_flags, Ordering::Relaxed);
    } else {
        HANDLER.store(0, Ordering::Relaxed);
    }
}

/// The action to give the kernel for the program's `wanted` one: a handler goes behind
/// [`on_sigchld`] (recorded here, with `SIGCHLD` blocked by the caller), `SIG_DFL` and
/// `SIG_IGN` go to the kernel as they are. `real` is glibc's `sigaction`.
///
/// # Safety
/// `SIGCHLD` is blocked in the calling process until the returned action is installed, so
/// [`on_sigchld`] never sees the handler and its flags half written.
pub unsafe fn to_install(wanted: &libc::sigaction, real: SigactionFn) -> libc::sigaction {
    if wanted.sa_sigaction == libc::SIG_DFL || wanted.sa_sigaction == libc::SIG_IGN {
        HANDLER.store(0, Ordering::Relaxed);
        return *wanted;
    }
    REAL_SIGACTION.store(real as usize, Ordering::Relaxed);
    HANDLER.store(wanted.sa_sigaction, Ordering::Relaxed);
    FLAGS.store(wanted.sa_flags, Ordering::Relaxed);
    let mut installed = *wanted;
    installed.sa_sigaction = filter_address();
    // A one-shot handler is reset by `on_sigchld` when it passes a delivery on: the kernel
    // would reset it on a delivery about a thread.
    installed.sa_flags = (wanted.sa_flags | libc::SA_SIGINFO) & !libc::SA_RESETHAND;
    installed
}

/// `SIGCHLD` blocked in this process until dropped (the mask before restored).
pub struct SigchldBlocked(libc::sigset_t);

impl SigchldBlocked {
    /// Blocks `SIGCHLD`.
    pub fn block() -> Self {
        // SAFETY: sigset_t is plain data, filled by sigemptyset/sigaddset and sigprocmask.
        unsafe {
            let mut block: libc::sigset_t = std::mem::zeroed();
            let mut before: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut block);
            libc::sigaddset(&mut block, libc::SIGCHLD);
            libc::sigprocmask(libc::SIG_BLOCK, &block, &mut before);
            Self(before)
        }
    }
}

impl Drop for SigchldBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask read by `new`.
        unsafe { libc::sigprocmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
    }
}

impl std::fmt::Debug for SigchldBlocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigchldBlocked")
    }
}

/// [`on_sigchld`]'s address, as a `sigaction` holds it.
fn filter_address() -> usize {
    on_sigchld as *const () as usize
}

/// The handler the kernel calls for `SIGCHLD` while the program has one of its own.
extern "C" fn on_sigchld(signal: i32, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    if ENDED.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: `__errno_location` returns this thread's errno; saved for the interrupted code.
    let errno = unsafe { *libc::__errno_location() };
    if super::signals::defer_if_held_off(signal, info, context) {
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
        return;
    }
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let about_thread = !info.is_null() && is_or_was_thread_process(unsafe { (*info).si_pid() });
    if !about_thread {
        pass_on(signal, info, context);
    } else {
        let stops = FLAGS.load(Ordering::Relaxed) & libc::SA_NOCLDSTOP == 0;
        // SAFETY: siginfo_t is plain data; zero is a valid value.
        let mut report: libc::siginfo_t = unsafe { std::mem::zeroed() };
        if program_child_report(stops, &mut report) {
            pass_on(signal, &mut report, context);
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Calls the program's handler (resetting a one-shot one first, as the kernel would have).
fn pass_on(signal: i32, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let handler = HANDLER.load(Ordering::Relaxed);
    let flags = FLAGS.load(Ordering::Relaxed);
    if handler == 0 {
        return;
    }
    if flags & libc::SA_RESETHAND != 0 {
        reset_to_default(signal);
    }
    crate::pages::call_program_handler(handler, flags, signal, info, context);
}

/// Puts `SIGCHLD` back to its default action (a one-shot handler's delivery) as the kernel
/// does: only the handler changes; the program's flags (`SA_NOCLDSTOP`, `SA_NOCLDWAIT`, ...)
/// and mask stay, and `sigaction` reports them. (A zeroed action dropped them: children
/// stopping raised `SIGCHLD` again, and `SA_NOCLDWAIT`'s children became zombies.)
fn reset_to_default(signal: i32) {
    let flags = FLAGS.load(Ordering::Relaxed);
    HANDLER.store(0, Ordering::Relaxed);
    let real = REAL_SIGACTION.load(Ordering::Relaxed);
    if real == 0 {
        return;
    }
    // SAFETY: `real` is glibc's sigaction, recorded when the handler was installed.
    let real: SigactionFn = unsafe { std::mem::transmute(real) };
    // SAFETY: a zeroed sigaction is a valid value, overwritten with the installed action.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: sigaction is async-signal-safe; reading the installed action into `action`.
    if unsafe { real(signal, std::ptr::null(), &mut action) } != 0 {
        // SAFETY: a zeroed sigaction is SIG_DFL with an empty mask and no flags.
        action = unsafe { std::mem::zeroed() };
    }
    action.sa_sigaction = libc::SIG_DFL;
    action.sa_flags = flags;
    // SAFETY: sigaction is async-signal-safe; `action` is a valid action.
    unsafe { real(signal, &action, std::ptr::null_mut()) };
}

/// Looks for a child of the program (not a thread-process) with a state change to report —
/// an exit, and with `stops` a stop or a continue — and fills `report` with it, leaving it
/// to the program's wait. Reads the kernel's list of this task's children; a list too long
/// for the buffer reports a delivery anyway (a handler called once too often, rather than a
/// child's exit lost).
fn program_child_report(stops: bool, report: &mut libc::siginfo_t) -> bool {
    let mut list = [0u8; 4096];
    let Some(len) = read_children(&mut list) else {
        return true;
    };
    if len == list.len() {
        return true;
    }
    let flags = libc::WEXITED
        | libc::WNOHANG
        | libc::WNOWAIT
        | if stops {
            libc::WSTOPPED | libc::WCONTINUED
        } else {
            0
        };
    list[..len]
        .split(|&b| b == b' ' || b == b'\n')
        .filter_map(parse_pid)
        // Every child not in the set of unreaped thread-processes is the program's: a
        // reaped thread-process is no longer a child, so an id it had, reused by a child of
        // the program, is the program's child here.
        .filter(|&pid| !is_thread_process(pid))
        .any(|pid| {
            // SAFETY: siginfo_t is plain data; zero is a valid value.
            *report = unsafe { std::mem::zeroed() };
            // SAFETY: the waitid system call (async-signal-safe) with a writable report and
            // no rusage; WNOWAIT leaves the child's state to the program's wait.
            let done = unsafe {
                libc::syscall(
                    libc::SYS_waitid,
                    libc::c_long::from(libc::P_PID),
                    libc::c_long::from(pid),
                    report as *mut libc::siginfo_t,
                    libc::c_long::from(flags),
                    std::ptr::null_mut::<libc::rusage>(),
                )
            };
            // SAFETY: waitid filled `report` (si_pid 0 when nothing was ready).
            done == 0 && unsafe { report.si_pid() } == pid
        })
}

/// Reads `/proc/self/task/<tid>/children` into `buffer`: its length, or `None` if the file
/// cannot be read.
fn read_children(buffer: &mut [u8]) -> Option<usize> {
    let mut path = [0u8; 64];
    let prefix = b"/proc/self/task/";
    let suffix = b"/children\0";
    path[..prefix.len()].copy_from_slice(prefix);
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let mut digits = [0u8; 20];
    let number = super::signals::decimal(&mut digits, u64::from(tid.unsigned_abs()));
    let end = prefix.len() + number.len();
    path[prefix.len()..end].copy_from_slice(number);
    path[end..end + suffix.len()].copy_from_slice(suffix);
    read_file(&path, buffer)
}

/// Reads the file at the NUL-terminated `path` (a `/proc` file) into `buffer`: its length,
/// or `None` if it cannot be opened. Async-signal-safe.
pub(super) fn read_file(path: &[u8], buffer: &mut [u8]) -> Option<usize> {
    assert!(path.contains(&0), "the path is NUL-terminated");
    // System calls, not the C library's functions: `read` called from this library reaches
    // the library's own interposed `read` (`ffi/lib.rs`), whose first call looks glibc's up
    // with `dlsym`, which is not async-signal-safe.
    // SAFETY: `path` is NUL-terminated; the openat, read and close system calls are
    // async-signal-safe; `buffer[len..]` is writable for the length passed.
    unsafe {
        let fd = libc::syscall(
            libc::SYS_openat,
            libc::c_long::from(libc::AT_FDCWD),
            path.as_ptr(),
            libc::c_long::from(libc::O_RDONLY | libc::O_CLOEXEC),
        );
        if fd < 0 {
            return None;
        }
        let mut len = 0;
        while len < buffer.len() {
            let n = libc::syscall(
                libc::SYS_read,
                fd,
                buffer[len..].as_mut_ptr(),
                buffer.len() - len,
            );
            if n <= 0 {
                break;
            }
            len += n as usize;
        }
        libc::syscall(libc::SYS_close, fd);
        Some(len)
    }
}

/// A decimal pid, `None` for anything else (the empty pieces between separators).
fn parse_pid(text: &[u8]) -> Option<i32> {
    if text.is_empty() || text.len() > 9 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        text.iter()
            .fold(0i32, |value, digit| value * 10 + i32::from(digit - b'0')),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_are_decimal_numbers() {
        assert_eq!(parse_pid(b"4242"), Some(4242));
        assert_eq!(parse_pid(b""), None);
        assert_eq!(parse_pid(b"12a"), None);
        assert_eq!(parse_pid(b"1234567890"), None);
    }

    #[test]
    fn the_children_list_of_this_task_is_readable() {
        let mut list = [0u8; 4096];
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("spawn sleep");
        let len = read_children(&mut list).expect("read the children list");
        let pids: Vec<i32> = list[..len]
            .split(|&b| b == b' ' || b == b'\n')
            .filter_map(parse_pid)
            .collect();
        child.kill().expect("kill sleep");
        child.wait().expect("wait for sleep");
        assert!(pids.contains(&(child.id() as i32)), "{pids:?}");
    }
}
