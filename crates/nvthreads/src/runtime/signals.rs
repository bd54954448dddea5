//! Fatal signals and exits (`docs/nvthreads.md` §3.7): a fatal signal in any process of
//! the run, or a fault that is not a tracked write, prints which thread died of which signal
//! and ends every process of the run, as one crashing thread ends a pthreads process.

use super::{RUNTIME, commit};
use crate::shared::thread_state;
use std::sync::atomic::Ordering;

/// Says on stderr which thread dies of which signal (async-signal-safe: no allocation,
/// one `write`).
fn report_fatal_signal(signal: i32) {
    let mut message = *b"nvthreads: thread ### died of signal ##; ending the program\n";
    let mut put = |at: usize, width: usize, mut value: u64| {
        for i in (0..width).rev() {
            message[at + i] = b'0' + (value % 10) as u8;
            value /= 10;
        }
    };
    put(18, 3, u64::from(super::me()) + 1);
    put(37, 2, signal.unsigned_abs().into());
    // SAFETY: write(2) of a stack buffer is async-signal-safe.
    unsafe { libc::write(2, message.as_ptr().cast(), message.len()) };
}

/// The fatal hook of the page tracker: a fault that is not a tracked write.
fn on_foreign_fault() {
    report_fatal_signal(libc::SIGSEGV);
    kill_other_processes();
}

/// Ends every other process of the run (async-signal-safe: atomics and `kill`): a thread
/// that dies of a signal, or calls `exit`, ends the whole program as with pthreads.
pub(super) fn kill_other_processes() {
    let Some(shared) = commit::shared_block() else {
        return;
    };
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    for slot in &shared.threads {
        let pid = slot.pid.load(Ordering::Relaxed);
        if pid > 0 && pid != me && slot.state.load(Ordering::Relaxed) == thread_state::RUNNING {
            // SAFETY: signalling a process of this run.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

extern "C" fn on_fatal_signal(signal: i32) {
    report_fatal_signal(signal);
    kill_other_processes();
    // SAFETY: restoring the default action and re-raising is async-signal-safe; the process
    // then dies of the signal as it would without the runtime.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
}

/// A fatal signal in any process of the run ends every process of it.
pub(super) fn install_fatal_handlers() {
    crate::pages::set_fatal_hook(on_foreign_fault);
    for signal in [
        libc::SIGBUS,
        libc::SIGFPE,
        libc::SIGILL,
        libc::SIGABRT,
        libc::SIGTRAP,
    ] {
        let handler: extern "C" fn(i32) = on_fatal_signal;
        // SAFETY: installing a handler with the plain one-argument signature; it only uses
        // async-signal-safe calls.
        unsafe { libc::signal(signal, handler as libc::sighandler_t) };
    }
}

pub(super) extern "C" fn at_exit() {
    if super::fork::forked() {
        // The pool belongs to the process this one was forked from.
        return;
    }
    if let Some(runtime) = RUNTIME.get() {
        runtime.finish();
    }
}
