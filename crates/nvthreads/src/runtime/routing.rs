//! Signals to the program as a whole (`docs/nvthreads.md` §3.1, "Signals to the program").
//!
//! Under pthreads a signal sent to the process (a shell's `kill PID`, a terminal's Ctrl-C
//! to the foreground process group, `kill(0, …)`) is delivered once, to one thread that
//! does not block it, and one-shot handlers are reset for the process. Here every thread is
//! a process: a signal to the process group reaches every thread-process (each ran the
//! handler: N calls), a signal to the program's id from outside reaches main only (blocked
//! there, it stayed pending while a thread waited for it), and the kernel reset a one-shot
//! handler in the thread-process that took it only.
//!
//! So the program's handlers (every signal but `SIGCHLD` and `SIGSEGV`, which have their
//! own filters, and the runtime's `SIGRTMAX`) are installed behind [`trampoline`], which
//! tells a copy of a process-directed signal from a signal to this thread:
//! - process-directed: `SI_KERNEL` for the terminal's signals (`SIGINT`, `SIGQUIT`,
//!   `SIGTSTP`, `SIGHUP`, `SIGWINCH`, `SIGTTIN`, `SIGTTOU`), and `SI_USER`/`SI_QUEUE` from a
//!   process outside the program, or from a process of the program that is sending this
//!   signal to a process group (`process::kill` marks it in [`Routing::group_senders`]);
//! - everything else (`pthread_kill`, `raise`, faults, timers, a child's `kill` of the
//!   program, routed by `process::kill`) is the receiving thread's, as before.
//!
//! A copy of a process-directed signal runs the handler only in the thread the kernel would
//! pick ([`pick`]: main unless it blocks the signal, else the first running thread that
//! does not), and only once: the pick *claims* it in [`Routing::claims`] by its sender's key
//! (code, pid, uid), and a second copy with the same key within [`WINDOW_MS`] is a copy of
//! the same group signal, unless the thread that takes it took a copy of the claimed one
//! already ([`Routing::seen`]: each thread gets one copy of a group signal, so that is the
//! next one, a second Ctrl-C). A thread that is not the pick drops its copy when the pick has
//! one too (pending there, or claimed); a lone copy (sent from outside to the
//! thread-process's own id, which under pthreads names the process) is forwarded to the
//! pick. A pick other than main takes main's blocked copy of the same signal away
//! ([`Routing::discards`], done by main in its notification handler), so that main does not
//! run it again when it unblocks the signal.
//!
//! A thread waiting for a signal (`sigwait`, `sigwaitinfo`, `sigtimedwait`: [`wait`]) that
//! main holds pending because main blocks it asks main for it ([`Routing::pulls`]): main
//! takes it out of its pending set in its notification handler and forwards it. The waiter
//! looks every [`PULL_PERIOD`] while it waits. A thread that does not block such a signal
//! gets it when main's watchdog looks ([`release_held_in_main`], while main waits in a
//! join, a lock or a condition variable).
//!
//! What cannot be told apart: a copy taken more than [`WINDOW_MS`] late (a thread stopped,
//! or blocking the signal and unblocking it later) from a new signal (it runs again), and a
//! signal sent from outside to a thread-process's own id within [`WINDOW_MS`] after a group
//! signal of the same number from the same sender from a copy of that one (it is dropped).
//! A terminal's
//! `SIGINT` and a `kill -INT -PGID` are both process-directed; `SIGALRM`, `SIGXCPU`,
//! `SIGPROF`, `SIGVTALRM` (`SI_KERNEL` from a thread-process's own timers) stay the
//! thread's. A signal main holds pending reaches a thread that merely leaves it unblocked,
//! or reads it from a `signalfd`, only while main waits in the runtime (its watchdog:
//! [`release_held_in_main`]); the `signalfd` reader sees the forwarded code.
//!
//! Forwarded copies carry [`FORWARDED`] as their code and the original code in `si_errno`
//! (the system call refuses non-negative codes from user space to another process); the
//! receiving trampoline or [`wait`] restores them before the program sees them.

use super::commit::shared_block;
use super::process::real_pid;
use crate::shared::thread_state;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

/// Signals 1 to 64 (index 0 unused).
const SIGNALS: usize = 65;
const WORDS: usize = std::mem::size_of::<libc::sigaction>() / 8;
const SEEN_WORDS: usize = crate::shared::MAX_THREADS.div_ceil(64);

/// The code of a copy the runtime forwarded (negative: from user space; no kernel or glibc
/// code has this value).
pub const FORWARDED: i32 = -0x4e56;

/// How long a claim of a process-directed signal stands. The copies of one group signal
/// are queued by one system call and taken within microseconds, or a time slice of a loaded
/// machine later (a copy taken later still, after a thread unblocked the signal, runs
/// again).
pub const WINDOW_MS: u64 = 1000;

/// How often a thread waiting for a signal looks for it pending in main.
pub const PULL_PERIOD: std::time::Duration = std::time::Duration::from_millis(10);

/// How long a thread that is not the pick looks for the pick's copy before it takes its
/// copy for a lone one and forwards it.
/// (The pick may be preempted between the kernel's delivery and its claim: on the loaded
/// 2-core machine, 5 ms let 1 to 3 % of group signals run twice.)
const COPY_WAIT_MS: u32 = 100;

/// Process-directed signals, in the shared control block (all zeroes: nothing claimed).
#[repr(C)]
#[derive(Debug)]
pub struct Routing {
    /// Per signal: the last claim, `key << 32 | milliseconds`.
    claims: [AtomicU64; SIGNALS],
    /// Per signal: the thread slots that took a copy of the last claimed signal (a bit
    /// each): a thread takes one copy of a group signal, so its second copy with the same
    /// key is the next signal (a second Ctrl-C), not a copy of the first.
    seen: [[AtomicU64; SEEN_WORDS]; SIGNALS],
    /// Per signal: serialises claims (held for a few loads and stores).
    locks: [AtomicU32; SIGNALS],
    /// Per signal: a process of the program sending it to a process group, `pid << 32 |
    /// milliseconds`.
    group_senders: [AtomicU64; SIGNALS],
    /// Per signal: the process (its pid) waiting for it while main holds it pending.
    pulls: [AtomicI32; SIGNALS],
    /// Per thread slot: the signals it made a `signalfd` for (bit `signal - 1`; kept until
    /// the slot is reused).
    signalfds: [AtomicU64; crate::shared::MAX_THREADS],
    /// Per signal: the key of a copy main holds pending that another thread took (0: none).
    discards: [AtomicU64; SIGNALS],
}

/// Per process: the program's action for each signal installed behind [`trampoline`].
static PROGRAM: [[AtomicU64; WORDS]; SIGNALS] =
    [const { [const { AtomicU64::new(0) }; WORDS] }; SIGNALS];

fn index(signal: i32) -> Option<usize> {
    usize::try_from(signal)
        .ok()
        .filter(|&i| i > 0 && i < SIGNALS)
}

fn to_words(action: &libc::sigaction) -> [u64; WORDS] {
    // SAFETY: sigaction is WORDS plain 8-byte words.
    unsafe { std::mem::transmute_copy(action) }
}

fn from_words(words: [u64; WORDS]) -> libc::sigaction {
    // SAFETY: sigaction is WORDS plain 8-byte words; any value of them is a valid sigaction.
    unsafe { std::mem::transmute(words) }
}

/// Whether the runtime puts `signal`'s handler behind [`trampoline`].
fn routed(signal: i32) -> bool {
    index(signal).is_some()
        && ![
            libc::SIGCHLD,
            libc::SIGSEGV,
            libc::SIGKILL,
            libc::SIGSTOP,
            super::dispositions::notify_signal(),
        ]
        .contains(&signal)
}

/// The action to give the kernel for the program's `wanted` action of `signal`, in a
/// process of the running runtime: a handler goes behind [`trampoline`] (the program's
/// flags and mask, with `SA_SIGINFO`), recorded for it; `SIG_DFL` and `SIG_IGN` as they
/// are. Async-signal-safe.
pub fn to_install(signal: i32, wanted: &libc::sigaction) -> libc::sigaction {
    let Some(i) = index(signal) else {
        return *wanted;
    };
    let handler = wanted.sa_sigaction;
    if !routed(signal) || handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        return *wanted;
    }
    for (slot, word) in PROGRAM[i].iter().zip(to_words(wanted)) {
        slot.store(word, Ordering::Relaxed);
    }
    let mut installed = *wanted;
    let trampoline: extern "C" fn(i32, *mut libc::siginfo_t, *mut libc::c_void) = trampoline;
    installed.sa_sigaction = trampoline as usize;
    installed.sa_flags |= libc::SA_SIGINFO;
    installed
}

/// Runs `update` with `signal` blocked in this process (the system call: the library's
/// `sigprocmask` is the program's), the mask before restored afterwards. The library's
/// `sigaction` records the program's action for [`trampoline`] ([`to_install`]) and then
/// gives the kernel the new action: a delivery between the two ran the trampoline under the
/// kernel's old action (its mask and flags) with the new handler recorded, or with a record
/// written in part (the handler new, the flags old), so a `SA_SIGINFO` handler could be
/// called without its siginfo, and a handler ran without the signals its action blocks.
/// Blocked, such a delivery waits until both are done, and runs the new action whole, as
/// if it came a moment later.
pub fn with_blocked<R>(signal: i32, update: impl FnOnce() -> R) -> R {
    let before = super::mask::change(libc::SIG_BLOCK, &super::mask::set_of([signal]));
    let result = update();
    super::mask::restore(&before);
    result
}

/// What the program sees as `signal`'s action when the kernel has `installed`: its own
/// handler in place of [`trampoline`].
pub fn program_view(signal: i32, installed: &libc::sigaction) -> libc::sigaction {
    let trampoline: extern "C" fn(i32, *mut libc::siginfo_t, *mut libc::c_void) = trampoline;
    match index(signal) {
        Some(i) if installed.sa_sigaction == trampoline as usize => {
            from_words(std::array::from_fn(|w| {
                PROGRAM[i][w].load(Ordering::Relaxed)
            }))
        }
        _ => *installed,
    }
}

fn now_ms() -> u64 {
    // SAFETY: a zeroed timespec is valid; clock_gettime is async-signal-safe.
    let mut now: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `now` is writable.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    (now.tv_sec as u64) * 1000 + (now.tv_nsec as u64) / 1_000_000
}

fn stamp(high: u32) -> u64 {
    (u64::from(high) << 32) | (now_ms() & 0xffff_ffff)
}

/// Whether `stamped` (from [`stamp`]) holds `high` and is younger than [`WINDOW_MS`].
fn fresh(stamped: u64, high: u32) -> bool {
    let age = (now_ms() & 0xffff_ffff).wrapping_sub(stamped & 0xffff_ffff) & 0xffff_ffff;
    stamped != 0 && (stamped >> 32) as u32 == high && age < WINDOW_MS
}

/// A delivery's sender, for telling copies of one signal apart from another signal.
fn key_of(info: &libc::siginfo_t) -> u32 {
    // SAFETY: si_pid and si_uid are read from the kill/rt layout, which every code this is
    // called for (SI_USER, SI_QUEUE, SI_KERNEL: zeroes) has.
    let (pid, uid) = unsafe { (info.si_pid(), info.si_uid()) };
    let mixed = (u64::from(pid as u32) << 32 | u64::from(uid)) ^ (info.si_code as u32 as u64);
    let key = (mixed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as u32;
    key.max(1)
}

/// Whether `pid` is one of the program's processes (main or a thread-process, running or
/// not).
fn is_program_process(shared: &crate::shared::Shared, pid: i32) -> bool {
    pid > 0
        && shared
            .threads
            .iter()
            .any(|slot| slot.pid.load(Ordering::Relaxed) == pid)
}

/// Terminal signals: the kernel sends them (`SI_KERNEL`) to a process group.
fn terminal_signal(signal: i32) -> bool {
    [
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGTSTP,
        libc::SIGHUP,
        libc::SIGWINCH,
        libc::SIGTTIN,
        libc::SIGTTOU,
    ]
    .contains(&signal)
}

/// Whether a delivery of `signal` described by `info` is a copy of a signal to the program
/// as a whole (see the module's documentation).
fn process_directed(shared: &crate::shared::Shared, signal: i32, info: &libc::siginfo_t) -> bool {
    match info.si_code {
        libc::SI_KERNEL => terminal_signal(signal),
        libc::SI_USER | libc::SI_QUEUE => {
            // SAFETY: SI_USER and SI_QUEUE carry the sender's pid.
            let sender = unsafe { info.si_pid() };
            !is_program_process(shared, sender)
                || index(signal).is_some_and(|i| {
                    fresh(
                        shared.routing.group_senders[i].load(Ordering::SeqCst),
                        sender as u32,
                    )
                })
        }
        _ => false,
    }
}

/// `process::kill` is about to send `signal` to a process group or to every process: its
/// copies that reach the program are one signal to the program.
pub fn sending_to_group(signal: i32) {
    if let (Some(shared), Some(i)) = (shared_block(), index(signal)) {
        shared.routing.group_senders[i].store(stamp(real_pid() as u32), Ordering::SeqCst);
    }
}

/// Claims the delivery of the signal keyed `key` for this thread: false if it is a copy of
/// a signal another thread claimed within [`WINDOW_MS`] (this thread took no copy of that
/// one yet), else this thread's delivery starts a new claim.
fn claim(shared: &crate::shared::Shared, i: usize, key: u32) -> bool {
    let routing = &shared.routing;
    let lock = &routing.locks[i];
    // Held for a few loads and stores, by a thread that may be preempted or stopped there:
    // after a moment the claim goes on without it (at worst, one signal runs twice).
    for _ in 0..10_000 {
        if lock
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            break;
        }
        // SAFETY: sched_yield has no preconditions (async-signal-safe).
        unsafe { libc::sched_yield() };
    }
    let me = super::me() as usize;
    let (word, bit) = (me / 64, 1u64 << (me % 64));
    let seen = &routing.seen[i];
    let copy = fresh(routing.claims[i].load(Ordering::SeqCst), key)
        && seen[word].load(Ordering::SeqCst) & bit == 0;
    if copy {
        seen[word].fetch_or(bit, Ordering::SeqCst);
    } else {
        routing.claims[i].store(stamp(key), Ordering::SeqCst);
        for (index, slot) in seen.iter().enumerate() {
            slot.store(if index == word { bit } else { 0 }, Ordering::SeqCst);
        }
    }
    lock.store(0, Ordering::Release);
    !copy
}

/// The signal sets of a process, from `/proc/<pid>/status`.
#[derive(Clone, Copy)]
struct SignalSets {
    /// Pending for its thread (`SigPnd`: `tgkill`, faults): each thread-process has one.
    private: u64,
    /// Pending for the process (`ShdPnd`: `kill`, a process group's signals).
    shared: u64,
    /// Blocked (`SigBlk`).
    blocked: u64,
}

impl SignalSets {
    fn pending(&self) -> u64 {
        self.private | self.shared
    }

    /// Pending for the process and not for its thread, and blocked: held for a thread that
    /// takes it (a signal to main's thread itself stays main's).
    fn held(&self) -> u64 {
        self.shared & !self.private & self.blocked
    }
}

/// The signal sets of process `pid`; `None` if they cannot be read (the process is gone).
fn signal_sets(pid: i32) -> Option<SignalSets> {
    use super::process::{read_status, status_mask};
    let mut buffer = [0u8; 2048];
    let text = read_status(pid, &mut buffer)?;
    Some(SignalSets {
        private: status_mask(text, b"SigPnd:")?,
        shared: status_mask(text, b"ShdPnd:")?,
        blocked: status_mask(text, b"SigBlk:")?,
    })
}

fn bit(signal: i32) -> u64 {
    1u64 << (signal - 1)
}

/// The process the kernel would give a process-directed `signal` to, seen from process
/// `me`, which takes it (a handler runs or it waits for it): main unless main blocks it,
/// else the first running thread (in slot order) that does not, `me` counted as not
/// blocking it (the kernel blocks it while its handler runs).
///
/// `main_may_be_handling`: main blocking the signal with no copy of it pending counts as
/// main taking it. The kernel blocks a signal while its handler runs, and main's copy is no
/// longer pending then: main may be in its handler for this very signal, about to claim it
/// (read as blocking, the copy ran in a thread and main's was dropped as a copy of it). A
/// program that blocks the signal in main holds main's copy pending (see [`takes`]).
fn pick(shared: &crate::shared::Shared, signal: i32, me: i32, main_may_be_handling: bool) -> i32 {
    let main = shared.threads[0].pid.load(Ordering::Acquire);
    for slot in shared.threads.iter() {
        let pid = slot.pid.load(Ordering::Acquire);
        if pid <= 0 || slot.state.load(Ordering::Acquire) != thread_state::RUNNING {
            continue;
        }
        if pid == me {
            return me;
        }
        let takes_it = |sets: SignalSets| {
            sets.blocked & bit(signal) == 0
                || (main_may_be_handling && pid == main && sets.pending() & bit(signal) == 0)
        };
        if signal_sets(pid).is_some_and(takes_it) {
            return pid;
        }
    }
    if main > 0 { main } else { me }
}

/// Forwards the delivery `info` of `signal` to process `to`, marked [`FORWARDED`].
/// Returns whether it was queued.
fn forward(to: i32, signal: i32, info: &libc::siginfo_t) -> bool {
    let mut copy = *info;
    copy.si_errno = info.si_code;
    copy.si_code = FORWARDED;
    // SAFETY: rt_sigqueueinfo reads a full siginfo_t; a negative code is allowed to
    // another process of the same user.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigqueueinfo,
            to,
            signal,
            &copy as *const libc::siginfo_t,
        ) == 0
    }
}

/// Restores a forwarded delivery's code; whether it was one.
fn unforward(info: &mut libc::siginfo_t) -> bool {
    if info.si_code != FORWARDED {
        return false;
    }
    info.si_code = info.si_errno;
    info.si_errno = 0;
    true
}

/// Whether this process takes the delivery `info` of `signal`, run by its handler or
/// returned by a wait (`waiting`): see the module's documentation. Async-signal-safe.
fn takes(signal: i32, info: &mut libc::siginfo_t, waiting: bool) -> bool {
    if unforward(info) || super::fork::forked() {
        return true;
    }
    let (Some(shared), Some(i)) = (shared_block(), index(signal)) else {
        return true;
    };
    if !process_directed(shared, signal, info) {
        return true;
    }
    let key = key_of(info);
    let me = real_pid();
    let main = shared.threads[0].pid.load(Ordering::Acquire);
    if waiting || me == main {
        return take(shared, i, signal, key, me, main);
    }
    let first = pick(shared, signal, me, true);
    if first == me {
        return take(shared, i, signal, key, me, main);
    }
    let found = pick_has(shared, i, signal, key, first, main);
    if let PickHas::Copy = found {
        return false;
    }
    // Main held its copy blocked, or the pick had none: the pick among those that do not
    // block the signal, waited for in turn.
    let target = pick(shared, signal, me, false);
    if target == me {
        return take(shared, i, signal, key, me, main);
    }
    let found = if target == first {
        found
    } else {
        pick_has(shared, i, signal, key, target, main)
    };
    if !matches!(found, PickHas::Nothing) {
        // A copy there (or main's held copy, main being the only one that can take it: it
        // runs when main unblocks the signal).
        return false;
    }
    // A lone copy, sent to this thread-process's own id: the program's, for the pick (which
    // takes a forwarded copy without claiming it).
    !forward(target, signal, info)
}

/// This process is the pick for the delivery keyed `key`: whether it runs it (it claims
/// it, and takes main's blocked copy away), or it is a copy of one claimed already.
fn take(
    shared: &crate::shared::Shared,
    i: usize,
    signal: i32,
    key: u32,
    me: i32,
    main: i32,
) -> bool {
    if !claim(shared, i, key) {
        return false;
    }
    if me != main && main > 0 {
        discard_in_main(shared, i, signal, main, key);
    }
    true
}

/// What a thread that is not the pick found about the pick's copy of a signal.
enum PickHas {
    /// The pick has a copy of it (pending, or claimed): this thread's copy is dropped.
    Copy,
    /// Main, picked while it might have been running its handler, holds its copy blocked.
    HeldInMain,
    /// No copy reached the pick within [`COPY_WAIT_MS`].
    Nothing,
}

/// Waits up to [`COPY_WAIT_MS`] for process `target` to have a copy of the signal keyed
/// `key` (pending, or claimed by anyone).
fn pick_has(
    shared: &crate::shared::Shared,
    i: usize,
    signal: i32,
    key: u32,
    target: i32,
    main: i32,
) -> PickHas {
    for _ in 0..=COPY_WAIT_MS {
        if fresh(shared.routing.claims[i].load(Ordering::SeqCst), key) {
            return PickHas::Copy;
        }
        if let Some(sets) = signal_sets(target)
            && sets.pending() & bit(signal) != 0
        {
            if target == main && sets.held() & bit(signal) != 0 {
                return PickHas::HeldInMain;
            }
            return PickHas::Copy;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    PickHas::Nothing
}

/// Main holds a blocked copy of `signal` keyed `key` that this process took: main is told
/// to take it out of its pending set.
fn discard_in_main(shared: &crate::shared::Shared, i: usize, signal: i32, main: i32, key: u32) {
    if signal_sets(main).is_some_and(|sets| sets.held() & bit(signal) != 0) {
        shared.routing.discards[i].store(u64::from(key), Ordering::SeqCst);
        // SAFETY: signalling the main process of this run; its handler was installed at start.
        unsafe { libc::syscall(libc::SYS_kill, main, super::dispositions::notify_signal()) };
    }
}

/// Takes one pending `signal` out of this process's pending set, if there is one.
fn dequeue(signal: i32) -> Option<libc::siginfo_t> {
    // SAFETY: zeroed sigset_t, siginfo_t and timespec are valid values; rt_sigtimedwait with
    // a zero timeout returns at once, with the kernel's sigset size (8 bytes).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let zero: libc::timespec = std::mem::zeroed();
        let got = libc::syscall(
            libc::SYS_rt_sigtimedwait,
            &set as *const libc::sigset_t,
            &mut info as *mut libc::siginfo_t,
            &zero as *const libc::timespec,
            8usize,
        );
        (got == i64::from(signal)).then_some(info)
    }
}

/// Queues `info` of `signal` back to this process (any code may be sent to oneself).
fn requeue(signal: i32, info: &libc::siginfo_t) {
    // SAFETY: rt_sigqueueinfo to this process reads a full siginfo_t.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigqueueinfo,
            real_pid(),
            signal,
            info as *const libc::siginfo_t,
        )
    };
}

/// In main, in the handler of the runtime's notification signal: drops the pending copies
/// other threads took ([`Routing::discards`]) and forwards pending signals threads wait for
/// ([`Routing::pulls`]). Async-signal-safe.
pub(super) fn serve_main() {
    if super::me() != 0 || super::get(&super::LOCAL.child) || super::fork::forked() {
        return;
    }
    let Some(shared) = shared_block() else {
        return;
    };
    for i in 1..SIGNALS {
        let signal = i as i32;
        let discard = shared.routing.discards[i].swap(0, Ordering::SeqCst);
        if discard != 0
            && let Some(info) = dequeue(signal)
            && u64::from(key_of(&info)) != discard
        {
            requeue(signal, &info);
        }
        let waiter = shared.routing.pulls[i].swap(0, Ordering::SeqCst);
        if waiter > 0
            && let Some(mut info) = dequeue(signal)
        {
            // Main claims it for the waiter (which takes a forwarded copy as it is).
            let duplicate = !unforward(&mut info)
                && process_directed(shared, signal, &info)
                && !claim(shared, i, key_of(&info));
            if !duplicate && !forward(waiter, signal, &info) {
                requeue(signal, &info);
            }
        }
    }
}

/// In main, from the watchdog of its long waits (a join, a lock, a condition variable,
/// every `shared::WATCHDOG_PERIOD`): the signals to the program that main holds pending
/// because it blocks them go to the first running thread that does not block them, as the
/// kernel would have given them (a thread waiting for one in the `sigwait` family asks
/// for it itself, sooner: [`wait`]). Async-signal-safe.
pub(super) fn release_held_in_main() {
    if super::me() != 0 || super::get(&super::LOCAL.child) || super::fork::forked() {
        return;
    }
    let Some(shared) = shared_block() else {
        return;
    };
    let main = real_pid();
    let Some(sets) = signal_sets(main) else {
        return;
    };
    let held = sets.held();
    if held == 0 {
        return;
    }
    for i in 1..SIGNALS {
        let signal = i as i32;
        if held & bit(signal) == 0 || !routed(signal) {
            continue;
        }
        let running = || {
            shared
                .threads
                .iter()
                .enumerate()
                .skip(1)
                .filter(|(_, slot)| slot.state.load(Ordering::Acquire) == thread_state::RUNNING)
                .map(|(index, slot)| (index, slot.pid.load(Ordering::Acquire)))
                .filter(|&(_, pid)| pid > 0 && pid != main)
        };
        // A thread that does not block it, else one that reads it from a signalfd.
        let Some(taker) = running()
            .find(|&(_, pid)| signal_sets(pid).is_some_and(|sets| sets.blocked & bit(signal) == 0))
            .or_else(|| {
                running().find(|&(index, _)| {
                    shared.routing.signalfds[index].load(Ordering::Acquire) & bit(signal) != 0
                })
            })
            .map(|(_, pid)| pid)
        else {
            continue;
        };
        let Some(mut info) = dequeue(signal) else {
            continue;
        };
        // Main claims it for the taker (which takes a forwarded copy as it is).
        let duplicate = !unforward(&mut info)
            && process_directed(shared, signal, &info)
            && !claim(shared, i, key_of(&info));
        if !duplicate && !forward(taker, signal, &info) {
            requeue(signal, &info);
        }
    }
}

/// The calling thread made a `signalfd` for the signals of `set`: main's watchdog hands it
/// the ones main holds ([`release_held_in_main`]).
pub fn reading_signalfd(set: &libc::sigset_t) {
    let Some(shared) = shared_block() else {
        return;
    };
    let mut bits = 0;
    for signal in 1..SIGNALS as i32 {
        // SAFETY: `set` is a valid sigset_t.
        if unsafe { libc::sigismember(set, signal) } == 1 {
            bits |= bit(signal);
        }
    }
    shared.routing.signalfds[super::me() as usize].fetch_or(bits, Ordering::AcqRel);
}

/// The calling thread ends: its slot's `signalfd` signals are forgotten (a thread made in
/// the slot later has its own).
pub(super) fn forget_signalfds() {
    if let Some(shared) = shared_block() {
        shared.routing.signalfds[super::me() as usize].store(0, Ordering::Release);
    }
}

/// Asks main for the signals of `set` it holds pending and blocks (this process waits for
/// them).
fn pull_from_main(set: &libc::sigset_t) {
    let Some(shared) = shared_block() else {
        return;
    };
    let main = shared.threads[0].pid.load(Ordering::Acquire);
    let me = real_pid();
    if main <= 0 || main == me {
        return;
    }
    let Some(sets) = signal_sets(main) else {
        return;
    };
    let mut asked = false;
    for i in 1..SIGNALS {
        let signal = i as i32;
        // SAFETY: `set` is a valid sigset_t.
        let wanted = unsafe { libc::sigismember(set, signal) } == 1;
        if wanted && sets.held() & bit(signal) != 0 {
            shared.routing.pulls[i].store(me, Ordering::SeqCst);
            asked = true;
        }
    }
    if asked {
        // SAFETY: signalling the main process of this run; its handler was installed at start.
        unsafe { libc::syscall(libc::SYS_kill, main, super::dispositions::notify_signal()) };
    }
}

/// `sigtimedwait(set, info, timeout)` (`None`: no timeout) for the program: a copy of a
/// signal to the program that another thread took is not returned (the wait goes on), a
/// forwarded one is returned as it was sent, and in a thread other than main the signals
/// of `set` that main holds pending are asked for every [`PULL_PERIOD`]. Returns the
/// signal, or -1 with errno (`EAGAIN` at the timeout, `EINTR`, `EINVAL`).
pub fn wait(
    set: &libc::sigset_t,
    info_out: Option<&mut libc::siginfo_t>,
    timeout: Option<std::time::Duration>,
) -> i32 {
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    let is_main = shared_block()
        .is_none_or(|shared| shared.threads[0].pid.load(Ordering::Acquire) == real_pid());
    loop {
        let remaining = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
        let slice = match (remaining, is_main) {
            (Some(left), true) => Some(left),
            (Some(left), false) => Some(left.min(PULL_PERIOD)),
            (None, true) => None,
            (None, false) => Some(PULL_PERIOD),
        };
        // SAFETY: zeroed siginfo_t and timespec are valid values.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let spec = slice.map(|s| libc::timespec {
            tv_sec: s.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(s.subsec_nanos() as i32),
        });
        let spec_ptr = spec
            .as_ref()
            .map_or(std::ptr::null(), |s| s as *const libc::timespec);
        // SAFETY: `set` is a valid sigset_t, `info` writable, `spec_ptr` null or valid; the
        // kernel's sigset size is 8 bytes.
        let got = unsafe {
            libc::syscall(
                libc::SYS_rt_sigtimedwait,
                set as *const libc::sigset_t,
                &mut info as *mut libc::siginfo_t,
                spec_ptr,
                8usize,
            )
        } as i32;
        if got > 0 {
            if !takes(got, &mut info, true) {
                continue;
            }
            if let Some(out) = info_out {
                *out = info;
            }
            return got;
        }
        // SAFETY: `__errno_location` returns this thread's errno.
        let errno = unsafe { *libc::__errno_location() };
        if errno != libc::EAGAIN {
            return -1;
        }
        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return -1;
        }
        pull_from_main(set);
    }
}

/// The kernel's handler of every routed signal the program handles (see the module's
/// documentation): runs the program's handler if this thread takes the delivery, resetting
/// a one-shot handler in every thread first.
extern "C" fn trampoline(signal: i32, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let Some(i) = index(signal) else {
        return;
    };
    // SAFETY: `__errno_location` returns this thread's errno; saved for the program.
    let errno = unsafe { *libc::__errno_location() };
    let action = from_words(std::array::from_fn(|w| {
        PROGRAM[i][w].load(Ordering::Relaxed)
    }));
    let one_shot = action.sa_flags & libc::SA_RESETHAND != 0;
    if super::signals::defer_if_held_off(signal, info, context) {
        if one_shot {
            // The kernel reset the action for this delivery, which comes again once the
            // merge is done: it must find the trampoline (and is taken, or not, then).
            let installed = to_install(signal, &action);
            crate::pages::glibc_sigaction(signal, &installed, std::ptr::null_mut());
        }
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
        return;
    }
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let taken = info.is_null() || takes(signal, unsafe { &mut *info }, false);
    if one_shot {
        if taken {
            // The kernel reset it here (flags and mask kept); every other thread too, as
            // pthreads share one action, before the handler (which may install it again).
            let mut reset = action;
            reset.sa_sigaction = libc::SIG_DFL;
            if shared_block().is_some() && !super::fork::forked() {
                super::dispositions::publish(signal, &reset);
            }
        } else {
            // Not taken here: the kernel's reset of this copy is undone.
            let installed = to_install(signal, &action);
            crate::pages::glibc_sigaction(signal, &installed, std::ptr::null_mut());
        }
    }
    if taken {
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
        crate::pages::call_program_handler(
            action.sa_sigaction,
            action.sa_flags,
            signal,
            info,
            context,
        );
    } else {
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = errno };
    }
}
