//! A `fork()` by the program outside `pthread_create` (`docs/nvthreads.md` §3.7). The child
//! of such a fork inherits the run's shared mappings, locks and pool as if it were one of
//! its threads, but no thread slot and no log lane is its: if it went on (a server that
//! daemonises with `if (fork()) exit(0);` before creating its threads), two processes would
//! use one pool unprotected. So a `pthread_atfork` child handler marks such a child, and the
//! runtime's entry points end it with [`EXIT_FORKED`] and a message; a child that calls
//! `exec` (the supported use) never reaches them. At `exit` it leaves the pool alone: the
//! pool belongs to the process that forked it.
//!
//! The runtime's own forks (one per `pthread_create`) are told apart by a flag the C ABI
//! raises around them ([`creating_thread`]).

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The exit status of a child of `fork()` outside `pthread_create` that uses the runtime
/// without calling `exec` (`EX_SOFTWARE` of `sysexits.h`), documented in
/// `include/nvthreads.h`.
pub const EXIT_FORKED: i32 = 70;

/// Per process (`fork` copies it): whether the runtime itself is forking (a thread).
static CREATING: AtomicBool = AtomicBool::new(false);
/// Per process: whether this process is the child of a fork outside `pthread_create`.
static FORKED: AtomicBool = AtomicBool::new(false);
/// Per process: the pid of the process that forked this one (for the message).
static FORKED_FROM: AtomicI32 = AtomicI32::new(0);
/// The pid of the process running the runtime before a fork (the handler's prepare step).
static BEFORE_FORK: AtomicI32 = AtomicI32::new(0);

extern "C" fn prepare() {
    BEFORE_FORK.store(super::process::real_pid(), Ordering::Relaxed);
}

extern "C" fn in_child() {
    if CREATING.load(Ordering::Relaxed) {
        // A thread-process: it creates threads of its own with the flag raised again.
        CREATING.store(false, Ordering::Relaxed);
    } else {
        FORKED_FROM.store(BEFORE_FORK.load(Ordering::Relaxed), Ordering::Relaxed);
        FORKED.store(true, Ordering::Relaxed);
    }
}

/// Registers the fork handlers (once, when the runtime starts in the main process).
pub fn watch_forks() {
    // SAFETY: registering plain extern "C" functions without arguments.
    let status = unsafe { libc::pthread_atfork(Some(prepare), None, Some(in_child)) };
    if status != 0 {
        super::fatal("registering the fork handlers failed");
    }
}

/// Runs `create` (which forks a thread-process) with the runtime's own forks marked.
pub fn creating_thread<T>(create: impl FnOnce() -> T) -> T {
    CREATING.store(true, Ordering::Relaxed);
    let result = create();
    CREATING.store(false, Ordering::Relaxed);
    result
}

/// Marks a new thread-process made without glibc's `fork` (no fork handler ran in it): it
/// creates threads of its own with the flag raised again.
pub(super) fn in_thread_process() {
    CREATING.store(false, Ordering::Relaxed);
}

/// Whether this process is the child of a `fork()` outside `pthread_create`.
pub fn forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}

/// Ends this process if it is the child of a `fork()` outside `pthread_create`: it must not
/// use the runtime (called by the runtime's entry points).
pub fn refuse_if_forked(what: &str) {
    if forked() {
        refuse(what);
    }
}

fn refuse(what: &str) -> ! {
    use std::io::Write;
    let me = super::process::real_pid();
    let _ = writeln!(
        std::io::stderr(),
        "nvthreads: {what} in process {me}, made by fork() in process {} outside \
         pthread_create and not followed by exec: its pool is not this process's; exiting \
         with status {EXIT_FORKED} (daemonise before the runtime starts, e.g. with a service \
         manager, or exec after fork)",
        FORKED_FROM.load(Ordering::Relaxed)
    );
    // SAFETY: _exit ends this process at once, without the parent's atexit handlers (which
    // would close the parent's pool).
    unsafe { libc::_exit(EXIT_FORKED) }
}
