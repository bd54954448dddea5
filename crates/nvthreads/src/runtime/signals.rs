//! Fatal signals, deaths and exits (`docs/nvthreads.md` §3.7): a fatal signal in any
//! process of the run, or a fault that is not a tracked write, prints which thread died of
//! which signal and ends every process of the run, as one crashing thread ends a pthreads
//! process. A thread-process that died without ending (killed from outside, or of a signal
//! no handler sees) is found by the watchdog of every long wait, which ends the run too.

use super::env::{FailAction, FailPoint, env};
use super::{RUNTIME, commit};
use crate::shared::thread_state;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Says on stderr which thread dies of which signal (async-signal-safe: no allocation,
/// one `write`): "nvthreads: thread 13 died of signal 6; ending the program".
fn report_fatal_signal(signal: i32) {
    let mut message = [0u8; 96];
    let mut len = 0;
    let mut put = |bytes: &[u8]| {
        message[len..len + bytes.len()].copy_from_slice(bytes);
        len += bytes.len();
    };
    put(b"nvthreads: thread ");
    put(decimal(&mut [0; 20], u64::from(super::me()) + 1));
    put(b" died of signal ");
    put(decimal(&mut [0; 20], signal.unsigned_abs().into()));
    put(b"; ending the program\n");
    // SAFETY: write(2) of a stack buffer is async-signal-safe.
    unsafe { libc::write(2, message.as_ptr().cast(), len) };
}

/// `value` in decimal, without leading zeros, in the end of `buffer` (async-signal-safe).
pub(super) fn decimal(buffer: &mut [u8; 20], mut value: u64) -> &[u8] {
    let mut at = buffer.len();
    loop {
        at -= 1;
        buffer[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return &buffer[at..];
        }
    }
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
    let me = super::process::real_pid();
    for slot in &shared.threads {
        let pid = slot.pid.load(Ordering::Relaxed);
        if pid > 0 && pid != me && slot.state.load(Ordering::Relaxed) == thread_state::RUNNING {
            // SAFETY: signalling a process of this run.
            unsafe { libc::syscall(libc::SYS_kill, pid, libc::SIGKILL) };
        }
    }
}

/// Whether this process is the first to end the run (a thread died): only the first says
/// why, once. Async-signal-safe (one atomic operation).
fn first_to_end(shared: &crate::shared::Shared) -> bool {
    shared
        .ending
        .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
}

extern "C" fn on_fatal_signal(signal: i32) {
    // The dying thread says what it died of even if another process ended the run first
    // (its death may be why); it only keeps the watchdogs from adding a second line.
    if let Some(shared) = commit::shared_block() {
        first_to_end(shared);
    }
    report_fatal_signal(signal);
    kill_other_processes();
    // Restoring the default action (glibc's sigaction: the library's own would publish it to
    // every thread) and re-raising is async-signal-safe; the process then dies of the signal
    // as it would without the runtime.
    // SAFETY: a zeroed sigaction is SIG_DFL with an empty mask.
    let default: libc::sigaction = unsafe { std::mem::zeroed() };
    crate::pages::glibc_sigaction(signal, &default, std::ptr::null_mut());
    // SAFETY: raise is async-signal-safe.
    unsafe { libc::raise(signal) };
}

/// The watchdog of every long wait (`shared::WATCHDOG_PERIOD`): ends the run if one of its
/// thread-processes died without ending. Its slot says `RUNNING` until it ends (an ending
/// thread marks it `DONE` before its process exits), so a `RUNNING` slot whose process is
/// gone or a zombie, seen so after the process was found dead, is a thread that died
/// without ending: whatever it held (a mutex, a lane, the log's gate, a group it was
/// closing) stays held, and the others would wait for it forever.
pub(super) fn check_run() {
    if super::fork::forked() {
        // Not a process of the run (a child of fork() outside pthread_create).
        return;
    }
    let Some(shared) = commit::shared_block() else {
        return;
    };
    super::routing::release_held_in_main();
    let me = super::process::real_pid();
    for (index, slot) in shared.threads.iter().enumerate() {
        let pid = slot.pid.load(Ordering::SeqCst);
        if pid <= 0 || pid == me || slot.state.load(Ordering::SeqCst) != thread_state::RUNNING {
            continue;
        }
        if super::threads::process_alive(pid) {
            continue;
        }
        if slot.state.load(Ordering::SeqCst) == thread_state::RUNNING
            && slot.pid.load(Ordering::SeqCst) == pid
        {
            end_run(shared, index, pid);
        }
    }
}

/// Ends the run because the thread of slot `index` (process `pid`) died without ending: one
/// line on stderr, then every process of the run is killed with `SIGKILL` (this one last),
/// as a crash would end it. The pool keeps every committed section; the next run recovers.
fn end_run(shared: &crate::shared::Shared, index: usize, pid: i32) -> ! {
    // The threads found dead may be the ones a thread's `exit` killed: main then ends with
    // that status, not `SIGKILL`.
    exit_if_asked();
    let who = if index == 0 {
        format!("the main thread (process {pid})")
    } else {
        format!(
            "thread {} (numbered from 1, the main thread; process {pid})",
            index + 1
        )
    };
    if first_to_end(shared) {
        super::warn(&format!(
            "{who} died without ending; ending the program (killed by SIGKILL; the next run \
             recovers every committed section)"
        ));
    } else {
        // Another process is ending the run and saying why: killing it now could cut its
        // line short. It kills this one within a moment; only if it does not (it died
        // too) does this one end the run.
        std::thread::sleep(crate::shared::WATCHDOG_PERIOD);
    }
    kill_other_processes();
    // SAFETY: killing this process; SIGKILL cannot be caught, so kill does not return.
    unsafe { libc::syscall(libc::SYS_kill, super::process::real_pid(), libc::SIGKILL) };
    // SAFETY: _exit has no preconditions (reached only if the kill above failed).
    unsafe { libc::_exit(137) }
}

/// A failure injected by `NVT_FAIL_AT` (tests only) at `point`, in thread-processes only.
pub(super) fn fail_point(point: FailPoint) {
    let Some(fail) = env().fail_at else {
        return;
    };
    if fail.point != point || !super::get(&super::LOCAL.child) {
        return;
    }
    let thread = u64::from(super::me()) + 1;
    match fail.action {
        FailAction::Panic => panic!("NVT_FAIL_AT: thread {thread} panics at {}", point.name()),
        // SAFETY: abort has no preconditions.
        FailAction::Abort => unsafe { libc::abort() },
        FailAction::Stall => {
            let pid = super::process::real_pid();
            super::warn(&format!(
                "NVT_FAIL_AT: thread {thread} (process {pid}) stalls at {}",
                point.name()
            ));
            loop {
                // SAFETY: pause has no preconditions; it returns after a caught signal.
                unsafe { libc::pause() };
            }
        }
    }
}

/// A fixed buffer a line is formatted into without allocating (the rest is cut).
struct StackLine {
    bytes: [u8; 512],
    len: usize,
}

impl std::fmt::Write for StackLine {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        for &byte in text.as_bytes() {
            if self.len < self.bytes.len() - 1 {
                self.bytes[self.len] = if byte == b'\n' { b' ' } else { byte };
                self.len += 1;
            }
        }
        Ok(())
    }
}

/// Writes `text` and a newline to stderr in one `write`, without allocating (cut to the
/// buffer's length).
fn write_stderr_line(text: std::fmt::Arguments<'_>) {
    use std::fmt::Write;
    let mut line = StackLine {
        bytes: [0; 512],
        len: 0,
    };
    let _ = line.write_fmt(text);
    line.bytes[line.len] = b'\n';
    // SAFETY: write(2) of a stack buffer of `len + 1` initialised bytes.
    unsafe { libc::write(2, line.bytes.as_ptr().cast(), line.len + 1) };
}

/// A panic while the runtime starts (before [`install_fatal_handlers`]) ends the program as
/// every other start-up failure does: one line and [`super::EXIT_CANNOT_START`]. It must not
/// unwind: the unwinder calls `pthread_once`, which this library interposes, and which would
/// wait forever for the runtime whose start is the one panicking. No thread-process exists
/// yet, so `_exit` of this process ends the run.
fn on_start_panic(info: &std::panic::PanicHookInfo<'_>) {
    write_stderr_line(format_args!(
        "nvthreads: cannot start: internal error: {info} (exit status {})",
        super::EXIT_CANNOT_START
    ));
    // SAFETY: _exit has no preconditions.
    unsafe { libc::_exit(super::EXIT_CANNOT_START) }
}

/// Makes a panic during start-up end the program with the start-up failure's status.
pub(super) fn install_start_panic_hook() {
    std::panic::set_hook(Box::new(on_start_panic));
}

/// A panic in the runtime says where on stderr in one `write` and aborts at once: the
/// `SIGABRT` handler then ends every process of the run. The default hook would format a
/// backtrace, allocating and taking locks, inside a thread-process that may hold a lane,
/// the log's gate or a lock of the program: a panicking thread-process stalled there forever
/// and every other one waited for it.
fn on_panic(info: &std::panic::PanicHookInfo<'_>) {
    write_stderr_line(format_args!(
        "nvthreads: internal error in thread {}: {info}",
        u64::from(super::me()) + 1
    ));
    // SAFETY: abort has no preconditions.
    unsafe { libc::abort() }
}

/// A fatal signal in any process of the run ends every process of it; a long wait ends it
/// if one of its processes died without ending; a panic in the runtime aborts at once.
pub(super) fn install_fatal_handlers() {
    std::panic::set_hook(Box::new(on_panic));
    crate::shared::set_watchdog(check_run);
    crate::pages::set_fatal_hook(on_foreign_fault);
    for signal in [
        libc::SIGBUS,
        libc::SIGFPE,
        libc::SIGILL,
        libc::SIGABRT,
        libc::SIGTRAP,
    ] {
        let handler: extern "C" fn(i32) = on_fatal_signal;
        // SAFETY: a zeroed sigaction is a valid value (empty mask, no flags: the handler
        // has the plain one-argument signature and only uses async-signal-safe calls).
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = handler as usize;
        action.sa_flags = libc::SA_RESTART;
        // glibc's sigaction: the library's own would start the runtime being started.
        crate::pages::glibc_sigaction(signal, &action, std::ptr::null_mut());
    }
}

pub(super) extern "C" fn at_exit(status: i32, _arg: *mut libc::c_void) {
    if super::fork::forked() {
        // The pool belongs to the process this one was forked from.
        return;
    }
    if let Some(runtime) = RUNTIME.get() {
        runtime.finish(status);
    }
}

/// Ends the run because a thread other than main called `exit(status)` (its exit handlers
/// have run): every other thread-process is killed, and main ends with `_exit(status)` in
/// its handler of the runtime's notification signal ([`exit_if_asked`]), so the program's
/// status is `status`, as a pthreads program's is. (Main was killed too: the status was
/// 137 whatever the thread passed.) Main's own unflushed stdio buffers are lost, as they
/// were. If main does not end within a moment (stopped, or the signal blocked), it is
/// killed.
pub(super) fn end_run_with_status(status: i32) {
    let Some(shared) = commit::shared_block() else {
        return;
    };
    // No watchdog of another process reports the threads killed here as deaths.
    first_to_end(shared);
    shared
        .exit_status
        .store((status & 0xff) as u32 + 1, Ordering::SeqCst);
    let me = super::process::real_pid();
    let main = shared.threads[0].pid.load(Ordering::SeqCst);
    // Main first: killing the others first could kill this process's creator, and this
    // process with it (`die_with_creator`), before main was told.
    if main > 0 && main != me {
        // SAFETY: signalling the main process of this run; its handler was installed at
        // start.
        unsafe { libc::syscall(libc::SYS_kill, main, super::dispositions::notify_signal()) };
    }
    for slot in &shared.threads[1..] {
        let pid = slot.pid.load(Ordering::Relaxed);
        if pid > 0 && pid != me && slot.state.load(Ordering::Relaxed) == thread_state::RUNNING {
            // SAFETY: signalling a process of this run.
            unsafe { libc::syscall(libc::SYS_kill, pid, libc::SIGKILL) };
        }
    }
    if main <= 0 || main == me {
        return;
    }
    for _ in 0..100 {
        if !super::threads::process_alive(main) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_kill, main, libc::SIGKILL) };
}

/// In the main process, in the handler of the runtime's notification signal: ends it with
/// the status a thread called `exit` with, if one did ([`end_run_with_status`]).
/// Async-signal-safe.
pub(super) fn exit_if_asked() {
    if super::me() != 0 || super::get(&super::LOCAL.child) {
        return;
    }
    let Some(shared) = commit::shared_block() else {
        return;
    };
    let asked = shared.exit_status.load(Ordering::SeqCst);
    if asked != 0 {
        // SAFETY: _exit is async-signal-safe; the run ends as a crash would, with the
        // thread's status.
        unsafe { libc::_exit((asked - 1) as i32) };
    }
}

/// Per process: how many [`HandlersHeldOff`] guards are alive (nested merges).
static HELD_OFF: AtomicU32 = AtomicU32::new(0);
/// Per process: the signals (bit `signal - 1`) whose delivery a handler held off while a
/// guard was alive: queued again to this thread and blocked, until the last guard goes.
static DEFERRED: AtomicU64 = AtomicU64::new(0);

/// The program's handlers held off in this process while alive: a delivery of a signal the
/// program handles (through `routing::trampoline` or `sigchld`'s filter) is deferred
/// ([`defer_if_held_off`]) and runs when the last guard is dropped, as if the signal had
/// come a moment later.
///
/// Alive across a merge and a catch-up, which change this process's dirty list,
/// protections, twins and kept copies. A handler that wrote a tracked page in the middle
/// (as a handler may write to a `volatile sig_atomic_t` or a lock-free atomic there) took
/// its write fault on a page already write-protected but still marked dirty, which the
/// tracker took for the program's own fault (the thread died of `SIGSEGV`), or dirtied a
/// page that the end of the interval then dropped from its dirty list or discarded (the
/// write lost).
///
/// A flag rather than a blocked mask: blocking costs two system calls per merge and
/// catch-up (eval/bank.c, 2 workers, 32 Ki transfers: median 0.117 s became 0.161 s); the
/// flag costs two atomic operations (0.120 s), and system calls only when a signal came
/// meanwhile.
#[derive(Debug)]
pub(crate) struct HandlersHeldOff(());

impl HandlersHeldOff {
    pub(crate) fn new() -> Self {
        HELD_OFF.fetch_add(1, Ordering::SeqCst);
        Self(())
    }
}

impl Drop for HandlersHeldOff {
    fn drop(&mut self) {
        if HELD_OFF.fetch_sub(1, Ordering::SeqCst) != 1 {
            return;
        }
        // A handler that runs from here on sees no guard and runs at once; the signals
        // deferred before are unblocked (each was unblocked when it came: its handler ran)
        // and delivered as the system call returns.
        let deferred = DEFERRED.swap(0, Ordering::SeqCst);
        if deferred == 0 {
            return;
        }
        let set =
            super::mask::set_of((1..=64).filter(|signal| deferred & (1u64 << (signal - 1)) != 0));
        super::mask::change(libc::SIG_UNBLOCK, &set);
    }
}

/// In the runtime's handler of a signal the program handles, before anything else: while a
/// [`HandlersHeldOff`] guard is alive, queues the delivery again to this thread (with its
/// siginfo, which the kernel accepts from a process for itself), blocks the signal in the
/// interrupted code (its mask in `context`, which the kernel restores on return) and
/// returns true: the handler returns without running the program's. The guard's end
/// unblocks it, and it is delivered again. Async-signal-safe.
///
/// The signal is blocked in this thread before it is queued again: a handler installed
/// with `SA_NODEFER` (as `sysv_signal` installs one) runs with its signal unblocked, so the
/// queued delivery came at once, into this same handler, which deferred it again — until
/// the stack overflowed and the thread died of `SIGSEGV` (`sysvchld` of
/// tests/c/signals.c: 9 of 200 runs on a loaded machine).
pub(super) fn defer_if_held_off(
    signal: i32,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) -> bool {
    if HELD_OFF.load(Ordering::SeqCst) == 0 || info.is_null() || context.is_null() {
        return false;
    }
    let Ok(bit) = u32::try_from(signal - 1).map(|shift| 1u64 << shift.min(63)) else {
        return false;
    };
    let before = super::mask::change(libc::SIG_BLOCK, &super::mask::set_of([signal]));
    // SAFETY: the kernel passes an SA_SIGINFO handler a valid siginfo, copied here for the
    // system call (which reads it); gettid and rt_tgsigqueueinfo are system calls
    // (async-signal-safe).
    let queued = unsafe {
        let mut again = *info;
        libc::syscall(
            libc::SYS_rt_tgsigqueueinfo,
            libc::c_long::from(super::process::real_pid()),
            libc::c_long::from(libc::gettid()),
            libc::c_long::from(signal),
            &mut again as *mut libc::siginfo_t,
        )
    };
    if queued != 0 {
        // Not queued again (the queue of real-time signals is full): run it now, under the
        // mask the handler came with.
        super::mask::restore(&before);
        return false;
    }
    // SAFETY: the kernel passes an SA_SIGINFO handler a valid ucontext_t, whose mask it
    // restores when the handler returns.
    unsafe {
        libc::sigaddset(
            &mut (*context.cast::<libc::ucontext_t>()).uc_sigmask,
            signal,
        );
    }
    DEFERRED.fetch_or(bit, Ordering::SeqCst);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries into [`deferring`], and runs of its body (the program's handler's place).
    static ENTRIES: AtomicU32 = AtomicU32::new(0);
    static RAN: AtomicU32 = AtomicU32::new(0);

    /// The runtime's handler pattern: defer while held off, else run. A deferral that came
    /// back at once into this handler is cut off after 16 entries, so that the test fails
    /// on the counts instead of overflowing the stack.
    extern "C" fn deferring(signal: i32, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
        if ENTRIES.fetch_add(1, Ordering::SeqCst) < 16 && defer_if_held_off(signal, info, context) {
            return;
        }
        RAN.fetch_add(1, Ordering::SeqCst);
    }

    /// A signal whose handler was installed with `SA_NODEFER` (as `sysv_signal` installs
    /// one), delivered while handlers are held off, enters the handler once, is deferred,
    /// and runs once when the guard goes. Before, the deferred delivery came again at once
    /// into the same handler (its signal was not blocked there) and deferred itself again
    /// until the stack overflowed.
    #[test]
    fn a_signal_of_an_sa_nodefer_handler_held_off_runs_once_after_the_guard() {
        // In a child: the counts are per process, and other tests' threads here may hold
        // guards of their own. The child (of a process with threads) makes only system
        // calls and atomic operations before `_exit`.
        // SAFETY: fork has no preconditions; the child below stays async-signal-safe.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork");
        if child == 0 {
            HELD_OFF.store(0, Ordering::SeqCst);
            DEFERRED.store(0, Ordering::SeqCst);
            // SAFETY: a zeroed sigaction is a valid value, filled in here; sigaction,
            // sigprocmask, getpid, gettid, tgkill and _exit are async-signal-safe; the
            // handler only touches atomics and makes system calls.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = deferring as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
                libc::sigemptyset(&mut action.sa_mask);
                let unblock = crate::runtime::mask::set_of([libc::SIGUSR2]);
                if libc::sigaction(libc::SIGUSR2, &action, std::ptr::null_mut()) != 0
                    || libc::sigprocmask(libc::SIG_UNBLOCK, &unblock, std::ptr::null_mut()) != 0
                {
                    libc::_exit(2);
                }
                let guard = HandlersHeldOff::new();
                libc::syscall(
                    libc::SYS_tgkill,
                    libc::c_long::from(libc::getpid()),
                    libc::c_long::from(libc::gettid()),
                    libc::c_long::from(libc::SIGUSR2),
                );
                let held = (ENTRIES.load(Ordering::SeqCst), RAN.load(Ordering::SeqCst));
                drop(guard);
                let after = (ENTRIES.load(Ordering::SeqCst), RAN.load(Ordering::SeqCst));
                libc::_exit(match (held, after) {
                    ((1, 0), (2, 1)) => 0,
                    ((1, 0), _) => 3,
                    ((entries, _), _) => 10 + entries.min(100) as i32,
                });
            }
        }
        let mut status = 0;
        // SAFETY: waits for the child made above; `status` is a valid out-pointer.
        let waited = unsafe { libc::waitpid(child, &mut status, 0) };
        assert_eq!(waited, child, "waitpid");
        assert!(
            libc::WIFEXITED(status),
            "the child died: status {status:#x}"
        );
        let code = libc::WEXITSTATUS(status);
        assert!(
            code != 3,
            "the deferred signal did not run once after the guard"
        );
        assert!(
            code < 10,
            "the held-off signal entered the handler {} times instead of once",
            code - 10
        );
        assert_eq!(code, 0, "setting up the handler failed");
    }
}
