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
    let mut buffer = [0u8; 2048];
    let mask = status_mask(read_status(pid, &mut buffer)?, b"SigBlk:")?;
    Some((1..=64).contains(&signal) && mask & (1u64 << (signal - 1)) != 0)
}

/// The text of process `pid`'s `/proc/<pid>/status`, read into `buffer`; `None` if it
/// cannot be read (the process is gone). Async-signal-safe (system calls only).
pub(super) fn read_status(pid: i32, buffer: &mut [u8]) -> Option<&[u8]> {
    let mut path = [0u8; 40];
    let len = super::sigchld::read_file(proc_path(&mut path, pid, b"/status"), buffer)?;
    Some(&buffer[..len])
}

/// Whether process `pid` is yet to run the handler of `signal`, sent to it, and will as
/// soon as it runs: it is not stopped (or traced, or gone), does not block the signal, and
/// either still has it pending or is running (inside the handler, on a loaded machine
/// perhaps preempted there). A process that took the signal out of its queue and sleeps —
/// a `sigwait` on a set holding it returned it to the program — is not waited for. From the
/// `State`, `SigPnd`, `ShdPnd` and `SigBlk` lines of its `/proc/<pid>/status`.
/// Async-signal-safe (system calls and stack buffers only).
pub(super) fn yet_to_take(pid: i32, signal: i32) -> bool {
    let mut buffer = [0u8; 2048];
    let Some(text) = read_status(pid, &mut buffer) else {
        return false;
    };
    let Some(at) = text.windows(6).position(|w| w == b"State:") else {
        return false;
    };
    let state = text[at + 6..]
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .copied();
    let bit = match u32::try_from(signal - 1) {
        Ok(shift) if shift < 64 => 1u64 << shift,
        _ => return false,
    };
    let has = |key: &[u8]| status_mask(text, key).is_some_and(|mask| mask & bit != 0);
    let pending = has(b"SigPnd:") || has(b"ShdPnd:");
    let blocked = status_mask(text, b"SigBlk:").is_none_or(|mask| mask & bit != 0);
    // Stopped (T), traced (t), zombie (Z) or dead (X): no handler runs now.
    match state {
        Some(b'R') => !blocked,
        Some(b'S' | b'D' | b'I') => !blocked && pending,
        _ => false,
    }
}

/// The hexadecimal signal mask on the `key` line of a `/proc/<pid>/status` text.
pub(super) fn status_mask(text: &[u8], key: &[u8]) -> Option<u64> {
    let at = text.windows(key.len()).position(|w| w == key)? + key.len();
    text[at..]
        .iter()
        .skip_while(|b| b.is_ascii_whitespace())
        .take_while(|b| b.is_ascii_hexdigit())
        .try_fold(0u64, |mask, &digit| {
            let value = (digit as char).to_digit(16)?;
            Some(mask.checked_mul(16)? | u64::from(value))
        })
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

    /// A signal pending for a sleeping process that does not block it is yet to be taken;
    /// not once the process is stopped, nor once it is gone; and a sleeping process with
    /// nothing pending has nothing to take (`dispositions::publish` stops waiting then).
    #[test]
    fn a_pending_signal_is_yet_to_be_taken_until_stopped_or_gone() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id() as i32;
        let sleeping = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(") ")
                    .is_some_and(|(_, s)| s.starts_with('S'))
            })
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !sleeping() {
            assert!(std::time::Instant::now() < deadline, "sleep never slept");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!yet_to_take(pid, libc::SIGWINCH), "nothing pending");
        let mut status = 0;
        // SAFETY: stops and waits for a child of this test; `status` is a valid out-pointer.
        unsafe {
            assert_eq!(libc::kill(pid, libc::SIGSTOP), 0);
            assert_eq!(libc::waitpid(pid, &mut status, libc::WUNTRACED), pid);
        }
        assert!(libc::WIFSTOPPED(status), "status {status:#x}");
        // SIGWINCH is ignored by default and kept pending while the process is stopped.
        // SAFETY: signals a child of this test.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGWINCH) }, 0);
        assert!(!yet_to_take(pid, libc::SIGWINCH), "stopped");
        child.kill().expect("kill sleep");
        child.wait().expect("reap sleep");
        assert!(!yet_to_take(pid, libc::SIGWINCH), "gone");
        // A process that never sleeps is running (or waits for a processor): a signal it
        // does not block reaches its handler as soon as it runs.
        let mut busy = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .expect("spawn a busy loop");
        // (Looked at until seen running: a fault in its start may hold it in `D` a moment.)
        let taken = (0..1000).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(1));
            yet_to_take(busy.id() as i32, libc::SIGWINCH)
        });
        busy.kill().expect("kill the busy loop");
        busy.wait().expect("reap the busy loop");
        assert!(taken, "a running process");
    }

    #[test]
    fn a_process_that_is_not_a_thread_has_its_own_pid() {
        assert_eq!(program_pid(), real_pid());
        assert_eq!(program_parent_pid(), real_parent_pid());
    }
}
