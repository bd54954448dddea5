//! One process id for the program (`runtime::process`, `docs/nvthreads.md` §3.1): `getpid`
//! and `getppid` answer the main process's ids in every thread, and `kill` and `sigqueue`
//! of the program's id give the signal to the thread-process that takes it, as the kernel
//! gives a process-directed signal to one of a process's threads. None of them starts the
//! runtime; before it runs, dormant, and in a child of the program's `fork()` they are the
//! system's (the child's `kill` of the program's id is routed too: it is the program's).

use libc::{c_int, pid_t};
use nvthreads::runtime::process;

/// The program's process id: the main process's, in every thread.
#[unsafe(no_mangle)]
pub extern "C" fn getpid() -> pid_t {
    process::program_pid()
}

/// The program's parent's process id, in every thread.
#[unsafe(no_mangle)]
pub extern "C" fn getppid() -> pid_t {
    process::program_parent_pid()
}

/// `kill(2)`; a signal to the program's id goes to the thread-process that takes it
/// (`SIGSTOP` and `SIGCONT` to all of them).
#[unsafe(no_mangle)]
pub extern "C" fn kill(pid: pid_t, signal: c_int) -> c_int {
    process::kill(pid, signal)
}

/// `sigqueue(3)`; a signal to the program's id goes to the thread-process that takes it.
#[unsafe(no_mangle)]
pub extern "C" fn sigqueue(pid: pid_t, signal: c_int, value: libc::sigval) -> c_int {
    let target = process::signal_target(pid, signal);
    let real =
        crate::next!(c"sigqueue" => unsafe extern "C" fn(pid_t, c_int, libc::sigval) -> c_int);
    // SAFETY: forwarded to glibc's sigqueue, which fills the sender's ids itself.
    unsafe { real(target, signal, value) }
}
