//! The calling thread-process's signal mask, changed with the system call: the library's
//! `sigprocmask` and `pthread_sigmask` are the program's, and these run inside signal
//! handlers (every function here is async-signal-safe).

/// The set of `signals` (numbers outside 1..=64 are left out by `sigaddset`).
pub(crate) fn set_of(signals: impl IntoIterator<Item = i32>) -> libc::sigset_t {
    // SAFETY: a zeroed sigset_t is a valid value; sigemptyset and sigaddset write the set
    // they are given.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in signals {
            libc::sigaddset(&mut set, signal);
        }
        set
    }
}

/// Changes the mask (`how`: `SIG_BLOCK`, `SIG_UNBLOCK` or `SIG_SETMASK` with `set`);
/// returns the mask before.
pub(crate) fn change(how: i32, set: &libc::sigset_t) -> libc::sigset_t {
    // SAFETY: rt_sigprocmask with the kernel's sigset size (8 bytes) reads `set` and writes
    // `before`, a valid (zeroed) sigset_t. A signal that cannot be blocked (SIGKILL,
    // SIGSTOP) is left out by the kernel.
    unsafe {
        let mut before: libc::sigset_t = std::mem::zeroed();
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            how,
            set as *const libc::sigset_t,
            &mut before as *mut libc::sigset_t,
            8usize,
        );
        before
    }
}

/// Sets the mask to `mask` (one read by [`change`]).
pub(crate) fn restore(mask: &libc::sigset_t) {
    change(libc::SIG_SETMASK, mask);
}
