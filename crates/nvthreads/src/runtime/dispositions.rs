//! Signal actions set after threads exist (`docs/nvthreads.md` §3.1). Under pthreads a
//! signal's action (handler, ignored, default) belongs to the process, so every thread has
//! the one set last, whoever set it. A thread-process has its own, copied from its creator at
//! `pthread_create`: a handler main installed (or a signal it ignored) once threads ran was
//! unknown to them, and a signal to the process group (Ctrl-C, `kill(0, …)`) killed those
//! thread-processes with the default action — the whole run ended (killed by `SIGKILL`)
//! where pthreads ran the handler; a `SIGPIPE` main ignored killed a thread that wrote to a
//! closed pipe.
//!
//! So every action the program sets through the library's `sigaction` or `signal` while
//! threads exist is published in the shared control block ([`Dispositions`]), and every
//! other thread-process is told with [`notify_signal`] (`SIGRTMAX`), whose handler installs
//! the published actions it has not installed yet ([`apply_pending`]); the caller waits, at
//! most [`ACK_WAIT`], until each has done so, so that a signal sent after `sigaction`
//! returns finds the new action everywhere. A new thread-process applies what was published
//! while it was being made. Everything on the receiving side is async-signal-safe: atomics,
//! `sigaction` and `sigprocmask`. The same signal tells main that a thread called `exit`
//! (`super::signals::end_run_with_status`).

use super::commit::shared_block;
use crate::shared::{MAX_THREADS, thread_state};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const WORDS: usize = std::mem::size_of::<libc::sigaction>() / 8;
const _: () = assert!(std::mem::size_of::<libc::sigaction>().is_multiple_of(8));
/// Signals 1 to 64 (index 0 unused).
const SIGNALS: usize = 65;

/// How long a `sigaction` waits for every other thread-process to install its action
/// before it looks at those that have not: one that blocks [`notify_signal`] (which the
/// library's `sigprocmask` and `pthread_sigmask` keep unblocked, so only inside a handler
/// whose mask holds it) or is stopped installs it later, and is not waited for.
pub const ACK_WAIT: std::time::Duration = std::time::Duration::from_millis(50);
/// The longest a `sigaction` waits for a thread-process that will take the notification as
/// soon as it runs: on a loaded machine it may wait for a processor far longer than
/// [`ACK_WAIT`]. A bound against a hang only.
pub const RUNNABLE_ACK_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// The actions published by the program's `sigaction` calls (in the shared control block;
/// all zeroes is the empty table).
#[repr(C)]
#[derive(Debug)]
pub struct Dispositions {
    /// Serialises publishers and appliers (held for a copy of a few words).
    lock: AtomicU32,
    /// The number of actions published so far.
    generation: AtomicU64,
    /// Per signal: the generation of its last published action (0: none).
    changed: [AtomicU64; SIGNALS],
    /// Per signal: the last published action, as words.
    actions: [[AtomicU64; WORDS]; SIGNALS],
    /// Per thread slot: the generation that thread-process has applied.
    acked: [AtomicU64; MAX_THREADS],
}

/// The generation this process has applied (per process; a new thread-process starts with
/// its creator's, matching the actions it inherits).
static APPLIED: AtomicU64 = AtomicU64::new(0);

/// The signal that tells a thread-process to apply published actions: `SIGRTMAX`, reserved
/// by the runtime (the library's `sigaction` refuses it with `EINVAL` while it runs).
pub fn notify_signal() -> i32 {
    libc::SIGRTMAX()
}

impl Dispositions {
    /// Runs `section` holding the table's lock, every asynchronous signal blocked meanwhile
    /// ([`Blocked`]): the lock is not reentrant, and the handlers that take it (the
    /// notification's, a one-shot handler's reset, a program handler calling `sigaction`)
    /// must not run in this process while it holds it.
    fn locked<R>(&self, section: impl FnOnce() -> R) -> R {
        let _blocked = Blocked::asynchronous();
        self.lock();
        let result = section();
        self.unlock();
        result
    }

    fn lock(&self) {
        // Held only for a copy of a few words by a process that blocks the notification
        // meanwhile; a holder killed inside is not waited for more than a moment.
        for _ in 0..100_000 {
            if self
                .lock
                .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
            // SAFETY: sched_yield has no preconditions (async-signal-safe).
            unsafe { libc::sched_yield() };
        }
    }

    fn unlock(&self) {
        self.lock.store(0, Ordering::Release);
    }
}

/// Installs the handler of [`notify_signal`] (when the runtime starts, before any thread:
/// every thread-process inherits it).
pub(super) fn install_handler() {
    let handler: extern "C" fn(i32) = on_notify;
    // SAFETY: a zeroed sigaction is a valid value; the mask is filled below.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler as usize;
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: `action.sa_mask` is a valid sigset_t. SIGCHLD is blocked while the handler
    // installs a SIGCHLD action (`super::sigchld::to_install`'s contract).
    unsafe {
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaddset(&mut action.sa_mask, libc::SIGCHLD);
    }
    crate::pages::glibc_sigaction(notify_signal(), &action, std::ptr::null_mut());
}

extern "C" fn on_notify(_signal: i32) {
    super::signals::exit_if_asked();
    if super::sigchld::has_ended() {
        // The thread of this process has ended; it only waits for the threads it made.
        return;
    }
    // SAFETY: `__errno_location` returns this thread's errno; saved for the interrupted code.
    let errno = unsafe { *libc::__errno_location() };
    apply_pending();
    super::routing::serve_main();
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Installs every action published since this process last applied, and acknowledges.
/// Async-signal-safe.
pub(super) fn apply_pending() {
    let Some(shared) = shared_block() else {
        return;
    };
    let table = &shared.dispositions;
    let mut generation = table.generation.load(Ordering::SeqCst);
    let applied = APPLIED.load(Ordering::Relaxed);
    if generation != applied {
        generation = table.locked(|| {
            let generation = table.generation.load(Ordering::Relaxed);
            for signal in 1..SIGNALS {
                if table.changed[signal].load(Ordering::Relaxed) > applied {
                    // SAFETY: a zeroed sigaction is a valid value, overwritten word by word.
                    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
                    // SAFETY: sigaction is WORDS plain 8-byte words.
                    let words: &mut [u64; WORDS] = unsafe { &mut *(&raw mut action).cast() };
                    for (word, published) in words.iter_mut().zip(&table.actions[signal]) {
                        *word = published.load(Ordering::Relaxed);
                    }
                    install(signal as i32, &action);
                }
            }
            APPLIED.store(generation, Ordering::Relaxed);
            generation
        });
    }
    table.acked[super::me() as usize].fetch_max(generation, Ordering::Release);
}

/// Installs `action` for `signal` in this process as the library's `sigaction` would:
/// `SIGSEGV`'s is recorded for the page tracker, `SIGCHLD`'s goes behind its filter.
/// `SIGCHLD` is blocked by the caller (as every asynchronous signal, [`Dispositions::locked`]).
fn install(signal: i32, action: &libc::sigaction) {
    if signal == libc::SIGSEGV && crate::pages::Tracker::active().is_some() {
        crate::pages::set_program_segv_action(action);
    } else if signal == libc::SIGCHLD {
        // SAFETY: SIGCHLD is blocked (the caller's contract) until it is installed.
        let installed = unsafe { super::sigchld::to_install(action, via_glibc) };
        crate::pages::glibc_sigaction(signal, &installed, std::ptr::null_mut());
    } else {
        let installed = super::routing::to_install(signal, action);
        crate::pages::glibc_sigaction(signal, &installed, std::ptr::null_mut());
    }
}

extern "C" fn via_glibc(
    signal: i32,
    action: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> i32 {
    crate::pages::glibc_sigaction(signal, action, old)
}

/// Publishes `action`, which the program has just installed for `signal` in this process,
/// to every other thread-process of the run, and waits until each has installed it: at
/// most [`ACK_WAIT`] for one that blocks the notification, is stopped, or took it out of
/// its queue in a `sigwait`; for one that is yet to run its handler (pending, or running,
/// perhaps waiting for a processor) until it has ([`RUNNABLE_ACK_WAIT`] at most). Returning
/// after 50 ms whatever the others' state let a signal sent right after `sigaction` find a
/// thread-process that had not run yet with the old action: `signals.c ttyint`'s `^C`
/// killed such a thread (`SIG_DFL`), ending the run, on a loaded machine. Nothing to do
/// while no thread exists besides main.
pub fn publish(signal: i32, action: &libc::sigaction) {
    let Some(shared) = shared_block() else {
        return;
    };
    let Ok(index) = usize::try_from(signal) else {
        return;
    };
    if index == 0 || index >= SIGNALS || shared.live_threads.load(Ordering::SeqCst) <= 1 {
        return;
    }
    let table = &shared.dispositions;
    let generation = table.locked(|| {
        // SAFETY: sigaction is WORDS plain 8-byte words.
        let words: &[u64; WORDS] = unsafe { &*(action as *const libc::sigaction).cast() };
        for (word, published) in words.iter().zip(&table.actions[index]) {
            published.store(*word, Ordering::Relaxed);
        }
        let generation = table.generation.load(Ordering::Relaxed) + 1;
        table.changed[index].store(generation, Ordering::Relaxed);
        table.generation.store(generation, Ordering::SeqCst);
        generation
    });
    // This process has the action; it applies the others' it may not have yet.
    apply_pending();
    let me = super::me() as usize;
    let mut told = [false; MAX_THREADS];
    for (slot, thread) in shared.threads.iter().enumerate() {
        let pid = thread.pid.load(Ordering::SeqCst);
        if slot != me
            && pid > 0
            && thread.state.load(Ordering::SeqCst) == thread_state::RUNNING
            && table.acked[slot].load(Ordering::Acquire) < generation
        {
            // SAFETY: signalling a process of this run; its handler was installed at start.
            told[slot] = unsafe { libc::syscall(libc::SYS_kill, pid, notify_signal()) } == 0;
        }
    }
    let started = std::time::Instant::now();
    loop {
        let waited = started.elapsed();
        if waited >= RUNNABLE_ACK_WAIT {
            return;
        }
        let waiting = told.iter().enumerate().any(|(slot, &told)| {
            told && table.acked[slot].load(Ordering::Acquire) < generation
                && shared.threads[slot].state.load(Ordering::SeqCst) == thread_state::RUNNING
                && (waited < ACK_WAIT
                    || super::process::yet_to_take(
                        shared.threads[slot].pid.load(Ordering::SeqCst),
                        notify_signal(),
                    ))
        });
        if !waiting {
            return;
        }
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

/// A new thread-process, once its slot holds its pid: applies what was published while it
/// was made (a publisher that read the slot before the pid was there did not tell it).
pub(super) fn thread_started(slot: &crate::shared::ThreadSlot) {
    slot.pid.store(super::process::real_pid(), Ordering::SeqCst);
    apply_pending();
}

/// Every signal but the synchronous ones blocked in this process until dropped (the mask
/// before restored), with the system call: the library's `sigprocmask` keeps the
/// notification unblocked. Held around the table's lock, which is not reentrant: a handler
/// that ran while this process held it and reached it again (the notification's
/// [`apply_pending`], a one-shot handler's reset in `routing::trampoline`, or the program's
/// own handler calling `sigaction`, which is async-signal-safe) spun for the lock its own
/// process held, then took it and released it under the interrupted code. The faults
/// (`SIGSEGV`, `SIGBUS`, `SIGILL`, `SIGFPE`, `SIGTRAP`, `SIGSYS`) stay unblocked: one raised
/// by the code holding the lock would otherwise kill the process, and the section holding
/// the lock writes nothing the page tracker faults on (the table and this module's statics
/// only). glibc's internal signals (32 and 33) stay unblocked, as `sigfillset` leaves them.
struct Blocked(libc::sigset_t);

impl Blocked {
    fn asynchronous() -> Self {
        // SAFETY: a zeroed sigset_t is a valid value, filled by `asynchronous_signals`.
        let mut block: libc::sigset_t = unsafe { std::mem::zeroed() };
        crate::pages::asynchronous_signals(&mut block);
        Self(super::mask::change(libc::SIG_BLOCK, &block))
    }
}

impl Drop for Blocked {
    fn drop(&mut self) {
        super::mask::restore(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    // SAFETY: the table is atomics only, for which all zeroes is a valid (the empty) value.
    static TABLE: Dispositions = unsafe { std::mem::zeroed() };
    static CALLS: AtomicU32 = AtomicU32::new(0);
    static SAW_HELD: AtomicBool = AtomicBool::new(false);

    /// Stands for a handler that takes the table's lock (the notification's, a one-shot
    /// reset, a program handler calling `sigaction`): records whether the lock was held
    /// when it ran, where its own `lock` would spin for the interrupted code's.
    extern "C" fn takes_the_lock(_signal: i32) {
        SAW_HELD.store(TABLE.lock.load(Ordering::SeqCst) != 0, Ordering::SeqCst);
        CALLS.fetch_add(1, Ordering::SeqCst);
    }

    /// A signal raised while this process holds the table's lock runs its handler after the
    /// lock is released, not inside (before, only the notification and `SIGCHLD` were
    /// blocked: a handler calling `sigaction` spun 100,000 `sched_yield` calls for the lock
    /// its own process held, then took it).
    #[test]
    fn a_handler_never_runs_while_its_process_holds_the_table_lock() {
        let signal = libc::SIGRTMIN() + 4;
        let handler: extern "C" fn(i32) = takes_the_lock;
        // SAFETY: a zeroed sigaction is a valid value; the handler is async-signal-safe
        // (atomics only), installed for a signal nothing else in this test binary uses.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler as usize;
            libc::sigemptyset(&mut action.sa_mask);
            assert_eq!(libc::sigaction(signal, &action, std::ptr::null_mut()), 0);
        }
        let inside = TABLE.locked(|| {
            // SAFETY: raise sends the signal to this thread; its handler is installed.
            unsafe { libc::raise(signal) };
            CALLS.load(Ordering::SeqCst)
        });
        assert_eq!(inside, 0, "the handler ran while the lock was held");
        assert_eq!(CALLS.load(Ordering::SeqCst), 1, "the signal was lost");
        assert!(!SAW_HELD.load(Ordering::SeqCst));
        assert_eq!(TABLE.lock.load(Ordering::SeqCst), 0);
    }
}
