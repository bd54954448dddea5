//! One process id for the whole program (`docs/nvthreads.md` §3.1, "One process id"):
//! under pthreads every thread's `getpid()` is the process's, and a signal sent to that pid
//! is the process's, taken by one thread that does not block it. Here every thread is a
//! process of its own, so the library's `getpid` returns the main process's id in every
//! thread-process ([`program_pid`]), and its `kill` and `sigqueue` of that id choose the
//! thread-process that takes the signal ([`signal_target`]).
//!
//! The runtime itself needs each process's own id (its thread slots, the power-failure
//! table's flushing process, telling a `fork()` child from its parent, killing a dead run):
//! it asks the kernel ([`real_pid`]), never the name `getpid`, which in this library is the
//! interposed one; and it signals its processes with the `kill` system call, never the
//! name `kill`, which routes the main process's id.

use crate::shared::thread_state;
use std::sync::atomic::{AtomicI32, Ordering};

/// The main process's id, once the runtime runs (0 before, and when dormant).
static PROGRAM_PID: AtomicI32 = AtomicI32::new(0);
/// This process's own id if it is a thread-process of the program (0 in main and in every
/// other process: a child of the program's own `fork()` has another id, so it never
/// matches).
static THREAD_PID: AtomicI32 = AtomicI32::new(0);

/// This process's id, from the kernel.
pub fn real_pid() -> i32 {
    // SAFETY: the getpid system call has no preconditions and cannot fail.
    unsafe { libc::syscall(libc::SYS_getpid) as i32 }
}

/// This process's parent's id, from the kernel.
pub fn real_parent_pid() -> i32 {
    // SAFETY: the getppid system call has no preconditions and cannot fail.
    unsafe { libc::syscall(libc::SYS_getppid) as i32 }
}

/// At start-up, in the main process.
pub(super) fn set_program(pid: i32) {
    PROGRAM_PID.store(pid, Ordering::Relaxed);
}

/// In a new thread-process, right after the `fork`.
pub(super) fn became_thread(pid: i32) {
    THREAD_PID.store(pid, Ordering::Relaxed);
}

/// What `getpid()` returns: the main process's id in a thread-process of the program, the
/// process's own id everywhere else (main, a dormant runtime, a child of `fork()`).
/// Async-signal-safe.
pub fn program_pid() -> i32 {
    let real = real_pid();
    let thread = THREAD_PID.load(Ordering::Relaxed);
    if thread != 0 && thread == real {
        PROGRAM_PID.load(Ordering::Relaxed)
    } else {
        real
    }
}

/// What `getppid()` returns: in a thread-process, the main process's parent (read from
/// `/proc`, as another process's parent can only be), otherwise the process's own.
pub fn program_parent_pid() -> i32 {
    let thread = THREAD_PID.load(Ordering::Relaxed);
    if thread == 0 || thread != real_pid() {
        return real_parent_pid();
    }
    let main = PROGRAM_PID.load(Ordering::Relaxed);
    parent_of(main).unwrap_or_else(real_parent_pid)
}

/// The parent of process `pid`: the fourth field of `/proc/<pid>/stat` (after the command
/// name in parentheses, which may itself hold spaces and parentheses).
fn parent_of(pid: i32) -> Option<i32> {
    let mut path = [0u8; 40];
    let mut buffer = [0u8; 512];
    let len = super::sigchld::read_file(proc_path(&mut path, pid, b"/stat"), &mut buffer)?;
    let text = &buffer[..len];
    let after_name = text.iter().rposition(|&b| b == b')')? + 1;
    let mut fields = text[after_name..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty());
    let _state = fields.next()?;
    parse_decimal(fields.next()?)
}

/// `/proc/<pid><file>` NUL-terminated in `buffer`.
pub(super) fn proc_path<'b>(buffer: &'b mut [u8; 40], pid: i32, file: &[u8]) -> &'b [u8] {
    let prefix = b"/proc/";
    let mut digits = [0u8; 20];
    let number = super::signals::decimal(&mut digits, u64::from(pid.unsigned_abs()));
    let mut end = 0;
    for piece in [&prefix[..], number, file, b"\0"] {
        buffer[end..end + piece.len()].copy_from_slice(piece);
        end += piece.len();
    }
    &buffer[..end]
}

fn parse_decimal(text: &[u8]) -> Option<i32> {
    if text.is_empty() || text.len() > 9 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(text.iter().fold(0, |v, d| v * 10 + i32::from(d - b'0')))
}

/// Whether process `pid` blocks `signal` now, from the `SigBlk` line of its
/// `/proc/<pid>/status` (`None` if it cannot be read: the process is gone). A process
/// waiting in `sigwait`, `sigwaitinfo` or `sigtimedwait` does not block the signals it
/// waits for while it waits (the kernel unblocks them for the wait), so it counts as taking
/// them, as pthreads give a process-directed signal to a thread waiting for it.
fn blocks(pid: i32, signal: i32) -> Option<bool> {
    let mut path = [0u8; 40];
    let mut buffer = [0u8; 2048];
    let len = super::sigchld::read_file(proc_path(&mut path, pid, b"/status"), &mut buffer)?;
    let text = &buffer[..len];
    let key = b"SigBlk:";
    let at = text.windows(key.len()).position(|w| w == key)? + key.len();
    let mask = text[at..]
        .iter()
        .skip_while(|b| b.is_ascii_whitespace())
        .take_while(|b| b.is_ascii_hexdigit())
        .try_fold(0u64, |mask, &digit| {
            let value = (digit as char).to_digit(16)?;
            Some(mask.checked_mul(16)? | u64::from(value))
        })?;
    Some((1..=64).contains(&signal) && mask & (1u64 << (signal - 1)) != 0)
}

/// The process that takes `signal` sent to process `pid`: `pid` itself, unless it is the
/// program's (the main process's id, while the runtime runs), which names the program as a
/// whole. Then, as the kernel picks a thread of a process: the main process if it does not
/// block the signal, else the first running thread (in slot order) that does not block it
/// — one waiting for it in `sigwait` included —, else the main process, where it stays
/// pending until main unblocks it (under pthreads, until any thread does). Signal 0 (a
/// check that the program exists) goes to main. Async-signal-safe (system calls, atomics
/// and stack buffers only), as `kill` is.
pub fn signal_target(pid: i32, signal: i32) -> i32 {
    let program = PROGRAM_PID.load(Ordering::Relaxed);
    if pid <= 0 || pid != program || signal == 0 {
        return pid;
    }
    let Some(shared) = super::commit::shared_block() else {
        return pid;
    };
    for slot in shared.threads.iter() {
        if slot.state.load(Ordering::Acquire) != thread_state::RUNNING {
            continue;
        }
        let candidate = slot.pid.load(Ordering::Acquire);
        if candidate > 0 && blocks(candidate, signal) == Some(false) {
            return candidate;
        }
    }
    program
}

/// `kill(pid, signal)`: to [`signal_target`], except that `SIGSTOP` and `SIGCONT` sent to
/// the program stop or continue every thread-process, as they stop or continue every
/// thread of a process. Returns the system call's result (errno set on failure).
pub fn kill(pid: i32, signal: i32) -> i32 {
    let program = PROGRAM_PID.load(Ordering::Relaxed);
    if pid > 0
        && pid == program
        && (signal == libc::SIGSTOP || signal == libc::SIGCONT)
        && let Some(shared) = super::commit::shared_block()
    {
        for slot in shared.threads.iter().skip(1) {
            let candidate = slot.pid.load(Ordering::Acquire);
            if candidate > 0 && slot.state.load(Ordering::Acquire) == thread_state::RUNNING {
                sys_kill(candidate, signal);
            }
        }
        return sys_kill(program, signal);
    }
    if pid <= 0 && signal != 0 {
        // To a process group (or every process): its copies that reach the program's
        // processes are one signal to the program (`super::routing`).
        super::routing::sending_to_group(signal);
    }
    sys_kill(signal_target(pid, signal), signal)
}

/// The `kill` system call.
fn sys_kill(pid: i32, signal: i32) -> i32 {
    // SAFETY: the kill system call has no memory preconditions; it sets errno on failure.
    unsafe { libc::syscall(libc::SYS_kill, pid, signal) as i32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_parent_and_a_signal_mask() {
        assert_eq!(parent_of(real_pid()), Some(real_parent_pid()));
        assert!(blocks(real_pid(), libc::SIGUSR1).is_some());
        assert_eq!(blocks(real_pid(), libc::SIGKILL), Some(false));
    }

    #[test]
    fn a_process_that_is_not_a_thread_has_its_own_pid() {
        assert_eq!(program_pid(), real_pid());
        assert_eq!(program_parent_pid(), real_parent_pid());
    }
}
