//! Signals as a pthreads program uses them (`docs/nvthreads.md` §3.1): each mode of
//! `tests/c/signals.c` prints "MODE ok", linked and preloaded.

mod common;

use common::*;

fn holds(mode: &str) {
    let library = library_dir().join("libnvthreads_rt.so");
    let built = program("signals");
    for (binary, preload) in [(&built.linked, false), (&built.preload, true)] {
        let (_dir, pool) = pool_path("signals");
        let mut signals = command(binary, &pool, &[mode]);
        if preload {
            signals.env("LD_PRELOAD", &library);
        }
        assert_eq!(run(signals), [format!("{mode} ok")], "preloaded: {preload}");
    }
}

/// A `SIGCHLD` handler is not called for threads made and joined while the program blocked
/// the signal, however many (the pending signal names the first thread; the filter forgot
/// it after 64 joins), and is then called for the program's child.
#[test]
fn a_sigchld_handler_ignores_threads_joined_while_it_was_blocked() {
    holds("blockedjoins");
}

/// A `SIGSEGV` handler the program installs (a crash handler, a memory probe) is called for
/// the program's faults only, not for the write faults the runtime tracks: before, it
/// replaced the tracker's handler and was called at the first write to the persistent heap.
#[test]
fn a_sigsegv_handler_sees_the_programs_faults_not_the_runtimes() {
    holds("segvhandler");
}

/// A handler installed and a signal ignored while threads run reach those threads: a signal
/// to the process group runs the handler instead of killing them (the run ended with
/// `SIGKILL`), and `SIGPIPE` ignored by main is ignored in a thread that writes to a pipe
/// without a reader.
#[test]
fn signal_actions_set_while_threads_run_reach_them() {
    holds("lateaction");
}

/// A one-shot `SIGCHLD` handler is reset to `SIG_DFL` keeping its flags and mask, as the
/// kernel resets it.
#[test]
fn a_one_shot_sigchld_handler_keeps_its_flags_when_reset() {
    holds("oneshot");
}

/// The idle process of a thread that ended while a thread it made runs ignores signals: a
/// signal to the process group no longer kills it (and with it the thread it made).
#[test]
fn a_signal_to_the_group_spares_an_ended_threads_process() {
    holds("endedthread");
}

/// `getpid()` and `getppid()` are the program's in every thread, threads made by threads
/// included; `gettid()` stays each thread's own.
#[test]
fn every_thread_has_the_programs_process_id() {
    holds("pids");
}

/// `kill(getpid(), ...)` is a signal to the program: taken by a thread waiting for it in
/// `sigtimedwait` while main blocks it, and by main when the sending thread blocks it.
#[test]
fn a_signal_to_the_programs_pid_reaches_a_thread_that_takes_it() {
    holds("processkill");
}

/// `SIGSTOP` and `SIGCONT` sent to the program's id (here by a child of the program) stop
/// and continue every thread, not only main.
#[test]
fn stop_and_continue_of_the_programs_pid_reach_every_thread() {
    holds("stopcont");
}

/// A `SIGCHLD` handler installed with `sysv_signal` or `sigset` is called for the program's
/// children only, as one installed with `sigaction`.
#[test]
fn a_sigchld_handler_of_sysv_signal_or_sigset_ignores_threads() {
    holds("sysvchld");
}

/// A `SIGSEGV` handler installed with `sigset` or `sysv_signal` sees the program's faults,
/// not the runtime's tracked writes (it replaced the tracker before).
#[test]
fn a_sigsegv_handler_of_sigset_or_sysv_signal_sees_the_programs_faults_only() {
    holds("sysvsegv");
}

/// A thread's small alternate signal stack does not end the run at its first tracked write,
/// and reads back as set.
#[test]
fn a_programs_small_alternate_stack_is_kept_beside_the_runtimes() {
    holds("altstack");
}

/// A signal to the process group (a terminal's Ctrl-C, `kill -INT -PGID`) runs the
/// handler once, in the thread the kernel would pick (main, or a thread when main blocks
/// it), not once in every thread-process; a thread's own signals still reach it.
#[test]
fn a_signal_to_the_process_group_runs_the_handler_once() {
    holds("groupsignal");
}

/// A signal sent from outside to the program's pid reaches a thread waiting for it in
/// `sigwait` or `sigwaitinfo` while every thread blocks it (the server pattern), with the
/// sender's code and pid.
#[test]
fn a_signal_from_outside_reaches_a_thread_in_sigwait() {
    holds("pidsigwait");
}

/// A one-shot handler (`SA_RESETHAND`, `sysv_signal`) is reset in every thread when one
/// thread takes it.
#[test]
fn a_one_shot_handler_is_reset_in_every_thread() {
    holds("oneshotall");
}

/// A terminal's Ctrl-C (`SI_KERNEL`, to the foreground process group) runs the handler
/// once per ^C, in main, as with pthreads: three ^C 100 ms apart (one key: code
/// `SI_KERNEL`, pid and uid 0) are three calls, not one nor twelve.
#[test]
fn a_terminals_ctrl_c_runs_the_handler_once_per_key_press() {
    holds("ttyint");
}

/// A signal sent from outside to the program's pid that main blocks runs its handler in a
/// thread that leaves it unblocked (main's watchdog hands it over while main waits in a
/// join), as the kernel gives it to such a thread.
#[test]
fn a_signal_main_blocks_reaches_a_thread_that_does_not() {
    holds("heldhandler");
}

/// A signal sent from outside to the program's pid reaches a thread reading it from a
/// `signalfd` while every thread blocks it and main joins that thread.
#[test]
fn a_signal_from_outside_reaches_a_threads_signalfd() {
    holds("signalfdthread");
}

/// A signal that arrives while the program changes its action runs the old handler under
/// the old action or the new one under the new action, never the new handler under the
/// old action's mask and flags (the runtime's record of the program's action was updated
/// before the kernel's).
#[test]
fn a_signal_during_sigaction_sees_one_whole_action() {
    holds("tornaction");
}

/// A signal handler's write to the persistent heap that lands in the runtime's merge of its
/// thread's pages is neither taken for a crash nor lost.
#[test]
fn a_handlers_heap_write_during_a_merge_is_kept() {
    holds("handlerwrites");
}
